"""Fit the sim's actuator dynamics (latency, PD gains, damping, friction) to a recorded bag.

Pipeline (pure: no rclpy), a chain of stages (`fit_stages.py`), each returning a dataclass:
1. `prepare`: fit_data.align has put commands and measured positions on the state clock (the last
   `holdout_fraction` of the time held out); the nominal dynamics, the excited joints, the inertia.
2. `fit_fast_model`: search (scipy Nelder-Mead, or differential evolution then Nelder-Mead) over the
   actuation latency [s] and the log of kp, kd, damping per excited joint, on joint_model's per-joint
   transfer functions (`fit_model.py`). The latency start is the best of a grid scan, since the cost
   has a local minimum per period of a periodic command. Identifiability: each parameter moved by
   +/-20 % (latency: +/-10 ms, one control period); one whose move changes the simulated trajectory
   by less than 1 % of the joint's motion (RMS), or that lies mostly in a flat direction of the
   Gauss-Newton Hessian (e.g. kd and damping enter the sim identically unless the effort limit
   saturates: only their sum is determined), is reported as not identifiable. A negligible one is
   kept at its nominal value and the others are re-fitted; one confounded with others keeps its
   fitted value, since together they reproduce what was determined.
3. `fit_friction`: friction (which the fast model lacks) is fitted by replaying in PyBullet
   (sysid/replay.py), and judged identifiable the same way, on PyBullet trajectories.
4. `sim_polish`: optionally, Nelder-Mead on the PyBullet replay cost itself polishes everything
   (`sim_polish_evals`).
5. `validate`: the held-out error before (nominal parameters) and after, from full PyBullet replays.
`fit` times each stage (`FitResult.timings_s`, [s]).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sim.params import SimParams
from .fit_data import FitData
from .fit_options import (
    FIT_CHOICES,
    FLAT_WEIGHT,
    LOG_RANGE,
    METHODS,
    MIN_EFFECT,
    MIN_MOTION_RAD,
    PERTURB_FRACTION,
    PERTURB_LATENCY_S,
    SUM_ONLY,
    UNSTABLE_COST,
    FitOptions,
    ParameterResult,
    parameter_label,
)
from .fit_stages import fit_fast_model, fit_friction, prepare, sim_polish, validate
from .replay import Dynamics, Replayer

__all__ = [
    "FIT_CHOICES", "FLAT_WEIGHT", "LOG_RANGE", "METHODS", "MIN_EFFECT", "MIN_MOTION_RAD", "PERTURB_FRACTION",
    "PERTURB_LATENCY_S", "SUM_ONLY", "UNSTABLE_COST", "FitOptions", "FitResult", "ParameterResult", "StageTimer",
    "fit",
]


@dataclass
class FitResult:
    """Everything `sysid fit` reports."""

    joint_names: tuple[str, ...]
    fitted_joints: tuple[str, ...]
    nominal: Dynamics
    fitted: Dynamics
    parameters: list[ParameterResult]
    errors: dict[str, dict[str, Any]]
    traces: dict[str, np.ndarray]
    data: FitData
    method: str
    evaluations: dict[str, int]
    timings_s: dict[str, float]
    inertia: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def not_identifiable(self) -> list[str]:
        return [parameter_label(p.kind, p.joint) for p in self.parameters if not p.identifiable]

    def to_dict(self) -> dict[str, Any]:
        return {
            "joint_names": list(self.joint_names), "fitted_joints": list(self.fitted_joints),
            "method": self.method,
            "nominal": self.nominal.to_dict(self.joint_names), "fitted": self.fitted.to_dict(self.joint_names),
            "parameters": [vars(p) | {"name": parameter_label(p.kind, p.joint)} for p in self.parameters],
            "not_identifiable": self.not_identifiable, "errors": self.errors,
            "evaluations": self.evaluations, "timings_s": self.timings_s, "inertia": self.inertia,
            "data": {"time_source": self.data.time_source, "time_source_reason": self.data.time_source_reason,
                     "command_time_source": self.data.command_time_source,
                     "duration_s": self.data.duration_s, "split_t_s": self.data.split_t,
                     "transport_delay_s": self.data.transport_delay_s, "commands": len(self.data.command_t),
                     "states": len(self.data.state_t), "dropped_messages": self.data.dropped},
            "notes": list(self.notes),
        }


class StageTimer:
    """Wall-clock seconds [s] per stage, and since the timer started."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = time.perf_counter() - t0

    def since_start(self, name: str) -> None:
        self.timings[name] = time.perf_counter() - self._started


def fit(data: FitData, params: SimParams, robot_description: str, options: FitOptions) -> FitResult:
    """Fit the sim's dynamics to `data` (see the module doc). Raises SysidError when nothing can be fitted."""
    timer = StageTimer()
    replayer = Replayer(params, robot_description, data)
    try:
        prep = prepare(replayer, data, options)
        timer.since_start("prepare")  # the replayer's PyBullet world included
        with timer.stage("model_search"):
            model = fit_fast_model(data, prep, options)
        with timer.stage("friction_sim"):
            friction = fit_friction(replayer, data, model.dynamics, prep, options)
        parameters = model.parameters + friction.parameters
        with timer.stage("sim_polish"):
            dyn = sim_polish(replayer, data, friction.dynamics, parameters, options)
        with timer.stage("validate_sim"):
            checked = validate(replayer, data, prep, dyn, parameters, options)
        timer.since_start("total")
        names = data.joint_names
        return FitResult(
            joint_names=names, fitted_joints=tuple(names[j] for j in prep.fitted_joints), nominal=prep.nominal,
            fitted=dyn, parameters=checked.parameters, errors=checked.errors,
            traces={"before": checked.before, "after": checked.after}, data=data, method=options.method,
            evaluations={"model": model.evaluations, "sim_replays": checked.sim_replays,
                         "sim_steps": checked.sim_steps},
            timings_s=timer.timings, inertia={n: float(prep.inertia[j]) for j, n in enumerate(names)},
            notes=prep.notes,
        )
    finally:
        replayer.close()
