"""Fit the sim's actuator dynamics (latency, PD gains, damping, friction) to a recorded bag.

Pipeline (pure: no rclpy):
1. fit_data.align: commands and measured positions on the state clock; the last `holdout_fraction`
   of the time is held out.
2. Search (scipy Nelder-Mead, or differential evolution then Nelder-Mead) over the actuation latency
   [s] and the log of kp, kd, damping per excited joint, on joint_model's per-joint transfer
   functions (the sim's own PD/Euler recursion and PyBullet's inertia; fast enough for thousands of
   evaluations). The latency start is the best of a grid scan, since the cost has a local minimum
   per period of a periodic command.
3. Identifiability: each parameter moved by +/-20 % (latency: +/-10 ms, one control period); one
   whose move changes the simulated trajectory by less than 1 % of the joint's motion (RMS), or that
   lies mostly in a flat direction of the Gauss-Newton Hessian (e.g. kd and damping enter the sim
   identically unless the effort limit saturates: only their sum is determined), is reported as not
   identifiable. A negligible one is kept at its nominal value and the others are re-fitted; one
   confounded with others keeps its fitted value, since together they reproduce what was determined.
4. Friction (which the fast model lacks) is fitted by replaying in PyBullet (sysid/replay.py), and
   judged identifiable the same way, on PyBullet trajectories.
5. Optionally, Nelder-Mead on the PyBullet replay cost itself polishes everything (`sim_polish_evals`).
6. The held-out error before (nominal parameters) and after, from full PyBullet replays.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import differential_evolution, minimize

from ..sim.params import SimParams
from .fit_data import FitData
from .joint_model import ModelGrid, inertia_and_coupling, simulate_joint
from .latency import SysidError
from .replay import KINDS, Dynamics, Replayer

FIT_CHOICES = ("latency", "kp", "kd", "damping", "friction")
METHODS = ("nelder-mead", "differential-evolution")
PERTURB_FRACTION = 0.2  # +/-20 % of a positive parameter
PERTURB_LATENCY_S = 0.01  # +/-10 ms: one control period at 100 Hz
MIN_EFFECT = 0.01  # a parameter moving the trajectory by less than 1 % of the motion is not identifiable
LOG_RANGE = math.log(20.0)  # positive parameters are searched within nominal /20 .. x20
MIN_MOTION_RAD = 1e-3  # floor of a joint's motion scale [rad]
UNSTABLE_COST = 1e6
FLAT_WEIGHT = 0.4  # a parameter this much inside flat directions is not determined on its own
# Why damping cannot be told from kd, whatever its size: the sim's torque is kp e - kd qd - damping qd,
# and kd sits inside the effort-limit clip, damping outside; they differ only while the limit saturates.
SUM_ONLY = ("kd.{joint} and damping.{joint} act on the motion only through their sum kd + damping (they differ only "
            "while the effort limit saturates): only the sum is determined, kd.{joint} carries it")


@dataclass(frozen=True)
class FitOptions:
    """fit: which of FIT_CHOICES to fit; method: METHODS; holdout_fraction: last part of the time
    kept for validation; max_latency_s [s]: latency search range; warmup_s [s]: start of the bag left
    out of the cost (commands in flight at the start are unknown); min_excitation_rad [rad]: a joint
    whose command moves less is not fitted; max_evaluations: per search run on the fast model;
    sim_polish_evals: Nelder-Mead evaluations on PyBullet replays (0 = none); seed: for DE."""

    fit: tuple[str, ...] = FIT_CHOICES
    method: str = "nelder-mead"
    holdout_fraction: float = 0.3
    max_latency_s: float = 0.25
    warmup_s: float = 0.5
    min_excitation_rad: float = 0.01
    max_evaluations: int = 4000
    sim_polish_evals: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [f for f in self.fit if f not in FIT_CHOICES]
        if unknown or not self.fit:
            raise SysidError(f"fit = {list(self.fit)}: choose from {list(FIT_CHOICES)}")
        if self.method not in METHODS:
            raise SysidError(f"method = {self.method!r}: choose from {list(METHODS)}")
        if not 0.0 < self.max_latency_s <= 2.0:
            raise SysidError(f"max_latency_s = {self.max_latency_s}: must be in (0, 2] s")
        if not 0.0 <= self.warmup_s < 10.0:
            raise SysidError(f"warmup_s = {self.warmup_s}: must be in [0, 10) s")
        if self.max_evaluations < 10 or self.sim_polish_evals < 0:
            raise SysidError(f"max_evaluations = {self.max_evaluations} (>= 10), sim_polish_evals = "
                             f"{self.sim_polish_evals} (>= 0)")


@dataclass(frozen=True)
class ParameterResult:
    """One fitted parameter: joint '' for the latency. value: what the new params file holds (the
    nominal value when not identifiable); fitted: the optimizer's number; effect: trajectory change
    of a +/-20 % (latency +/-10 ms) move, as a fraction of the joint's motion; flat_weight: how much of
    the parameter lies in flat directions of the cost (0..1)."""

    kind: str
    joint: str
    nominal: float
    fitted: float
    value: float
    identifiable: bool
    effect: float
    flat_weight: float
    reason: str = ""


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
        return [_label(p.kind, p.joint) for p in self.parameters if not p.identifiable]

    def to_dict(self) -> dict[str, Any]:
        return {
            "joint_names": list(self.joint_names), "fitted_joints": list(self.fitted_joints),
            "method": self.method,
            "nominal": self.nominal.to_dict(self.joint_names), "fitted": self.fitted.to_dict(self.joint_names),
            "parameters": [vars(p) | {"name": _label(p.kind, p.joint)} for p in self.parameters],
            "not_identifiable": self.not_identifiable, "errors": self.errors,
            "evaluations": self.evaluations, "timings_s": self.timings_s, "inertia": self.inertia,
            "data": {"time_source": self.data.time_source, "time_source_reason": self.data.time_source_reason,
                     "command_time_source": self.data.command_time_source,
                     "duration_s": self.data.duration_s, "split_t_s": self.data.split_t,
                     "transport_delay_s": self.data.transport_delay_s, "commands": len(self.data.command_t),
                     "states": len(self.data.state_t), "dropped_messages": self.data.dropped},
            "notes": list(self.notes),
        }


def _label(kind: str, joint: str) -> str:
    return "actuation_latency_s" if kind == "latency" else f"{kind}.{joint}"


# ----------------------------------------------------------------------------------------------
class _FastProblem:
    """The search space (latency [s] and log parameters) on the fast per-joint model."""

    def __init__(self, data: FitData, grid: ModelGrid, inertia: np.ndarray, nominal: Dynamics,
                 fitted_joints: list[int], kinds: list[str], fit_latency: bool, options: FitOptions) -> None:
        self.inertia, self.base = inertia, nominal
        self.joints, self.kinds, self.fit_latency = fitted_joints, kinds, fit_latency
        self.mask = data.train_mask(options.warmup_s)
        if np.count_nonzero(self.mask) < 20:
            raise SysidError(f"only {np.count_nonzero(self.mask)} state samples to fit on after the warm-up; "
                             "record longer or lower --holdout")
        self.grid = grid.for_samples(self.mask)
        self.recorded = data.states[self.mask]
        motion = np.std(self.recorded, axis=0)
        self.scale = np.maximum(motion, MIN_MOTION_RAD)
        self.slots: list[tuple[str, int]] = ([("latency", -1)] if fit_latency else []) + [
            (k, j) for j in fitted_joints for k in kinds]
        self.evaluations = 0
        self.max_latency_s = options.max_latency_s

    def x_of(self, dyn: Dynamics) -> np.ndarray:
        return np.array([dyn.latency_s if k == "latency" else math.log(max(dyn.values(k)[j], 1e-9))
                         for k, j in self.slots])

    def dynamics(self, x: np.ndarray, base: Dynamics | None = None) -> Dynamics:
        base = base or self.base
        changes: dict[str, Any] = {k: base.values(k).copy() for k in KINDS}
        latency = base.latency_s
        for (kind, j), value in zip(self.slots, x, strict=True):
            if kind == "latency":
                latency = float(value)
            else:
                changes[kind][j] = math.exp(value)
        return base.replace_values(latency_s=latency, **changes)

    def bounds(self) -> list[tuple[float, float]]:
        out = []
        for kind, j in self.slots:
            if kind == "latency":
                out.append((0.0, self.max_latency_s))
            else:
                center = math.log(max(self.base.values(kind)[j], 1e-6))
                out.append((center - LOG_RANGE, center + LOG_RANGE))
        return out

    def trajectories(self, dyn: Dynamics) -> np.ndarray:
        """Model positions (M_train, n_fitted) [rad] of the fitted joints."""
        self.evaluations += 1
        cols = [simulate_joint(self.grid, j, dyn.latency_s, dyn.kp[j], dyn.kd[j] + dyn.damping[j],
                               self.inertia[j]) for j in self.joints]
        return np.stack(cols, axis=1)

    def cost_of(self, dyn: Dynamics) -> float:
        with np.errstate(all="ignore"):
            err = (self.trajectories(dyn) - self.recorded[:, self.joints]) / self.scale[self.joints]
            value = float(np.mean(err**2))
        # Unstable candidates (the sim would blow up too) get a large, finite cost.
        return min(value, UNSTABLE_COST) if math.isfinite(value) else UNSTABLE_COST

    def cost(self, x: np.ndarray) -> float:
        return self.cost_of(self.dynamics(np.asarray(x)))


def _nelder_mead(fun, x0: np.ndarray, bounds: list[tuple[float, float]], slots, max_evals: int):
    """Nelder-Mead with a simplex sized to the parameters (10 ms latency, 15 % in log), restarted
    once from its result (a collapsed simplex is the method's usual way to stop early)."""
    x = np.clip(x0, [b[0] for b in bounds], [b[1] for b in bounds])
    total = 0
    for _ in range(2):
        simplex = [x]
        for i, (kind, _j) in enumerate(slots):
            point = x.copy()
            step = 0.01 if kind == "latency" else 0.15
            point[i] = point[i] + step if point[i] + step <= bounds[i][1] else point[i] - step
            simplex.append(point)
        result = minimize(fun, x, method="Nelder-Mead", bounds=bounds,
                          options={"initial_simplex": np.array(simplex), "maxfev": max(10, max_evals // 2),
                                   "xatol": 1e-4, "fatol": 1e-9, "adaptive": len(x) > 5})
        total += int(result.nfev)
        x = result.x
    return x, total


def _search(problem: _FastProblem, options: FitOptions, start: Dynamics) -> tuple[np.ndarray, int]:
    """Minimize the fast-model cost from `start`; returns (x, evaluations)."""
    bounds = problem.bounds()
    x0 = problem.x_of(start)
    evaluations = 0
    if problem.fit_latency:
        # Grid scan of the latency with the other parameters at their start values.
        grid = np.arange(0.0, options.max_latency_s + 1e-9, 0.002)
        costs = []
        for latency in grid:
            x = x0.copy()
            x[0] = latency
            costs.append(problem.cost(x))
        evaluations += len(grid)
        x0[0] = grid[int(np.argmin(costs))]
    if options.method == "differential-evolution":
        result = differential_evolution(problem.cost, bounds, x0=np.clip(x0, *zip(*bounds, strict=True)),
                                        seed=options.seed, popsize=10, maxiter=max(5, options.max_evaluations // (
                                            10 * len(bounds))), tol=1e-8, polish=False, init="sobol")
        evaluations += int(result.nfev)
        x0 = result.x
    x, used = _nelder_mead(problem.cost, x0, bounds, problem.slots, options.max_evaluations)
    return x, evaluations + used


def _flat_weights(columns: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-parameter weight (p,) in flat directions of H = S^T S / N, S = trajectory change per
    perturbation (normalized), and the flat eigenvectors."""
    h = columns.T @ columns / max(1, columns.shape[0])
    eigenvalues, vectors = np.linalg.eigh(h)
    flat = [vectors[:, i] for i in range(len(eigenvalues)) if math.sqrt(max(eigenvalues[i], 0.0)) < MIN_EFFECT]
    weight = np.sum([v**2 for v in flat], axis=0) if flat else np.zeros(h.shape[0])
    return weight, flat


def _identifiability(problem: _FastProblem, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(effect (p,), flat weight (p,), flat directions) of each search parameter at x."""
    reference = problem.trajectories(problem.dynamics(x)) / problem.scale[problem.joints]
    effects, columns = [], []
    for i, (kind, _j) in enumerate(problem.slots):
        delta = PERTURB_LATENCY_S if kind == "latency" else math.log(1.0 + PERTURB_FRACTION)
        moved = []
        for sign in (1.0, -1.0):
            xp = x.copy()
            xp[i] = max(0.0, xp[i] + sign * delta) if kind == "latency" else xp[i] + sign * delta
            with np.errstate(all="ignore"):
                change = problem.trajectories(problem.dynamics(xp)) / problem.scale[problem.joints] - reference
            # An unstable neighbour certainly changes the trajectory: count it as a large effect.
            moved.append(np.nan_to_num(change, nan=10.0, posinf=10.0, neginf=-10.0).clip(-10.0, 10.0))
        # Effect on the joints it acts on (the latency acts on all).
        effects.append(max(float(np.sqrt(np.mean(m**2))) * (1 if kind == "latency" else len(problem.joints))
                           ** 0.5 for m in moved))
        # Per-joint parameters act on one column of n: undo that dilution so thresholds match `effects`.
        dilution = 1.0 if kind == "latency" else math.sqrt(len(problem.joints))
        columns.append(((moved[0] - moved[1]) / 2.0).ravel() * dilution)
    weight, flat = _flat_weights(np.stack(columns, axis=1))
    return np.array(effects), weight, flat


# ----------------------------------------------------------------------------------------------
def _errors(data: FitData, simulated: np.ndarray, warmup_s: float, fitted_joints: list[int]) -> dict[str, Any]:
    """RMS error [rad] per joint, normalized MSE over all joints and over the fitted joints, on the fit
    part and the held-out part. The fitted joints' figure is what the fit can change: a joint that is
    not excited moves only by coupling, under parameters the data did not fit."""
    out: dict[str, Any] = {}
    scale = np.maximum(np.std(data.states[data.train_mask(warmup_s)], axis=0), MIN_MOTION_RAD)
    for part, mask in (("train", data.train_mask(warmup_s)), ("holdout", data.holdout_mask())):
        err = simulated[mask] - data.states[mask]
        out[part] = {"rms_rad": {n: float(np.sqrt(np.mean(err[:, j] ** 2))) for j, n in enumerate(data.joint_names)},
                     "samples": int(np.count_nonzero(mask))}
        out[part]["normalized_mse"] = float(np.mean((err / scale) ** 2)) if len(err) else float("nan")
        fitted = err[:, fitted_joints] / scale[fitted_joints]
        out[part]["fitted_joints_normalized_mse"] = float(np.mean(fitted**2)) if fitted.size else float("nan")
    return out


def _friction_stage(replayer: Replayer, data: FitData, dyn: Dynamics, joints: list[int],
                    warmup_s: float) -> tuple[Dynamics, dict[int, tuple[float, float]], int]:
    """Fit friction per excited joint by PyBullet replays of the fit part (all joints scaled at once,
    each joint's cost read separately), then judge it by +/-20 %. Returns (dynamics, {joint:
    (effect, nominal-relative value)}, replays)."""
    end = data.split_t
    mask = data.train_mask(warmup_s)[data.state_t <= end + 1e-12]
    recorded = data.states[data.state_t <= end + 1e-12][mask]
    scale = np.maximum(np.std(recorded, axis=0), MIN_MOTION_RAD)

    def per_joint_cost(d: Dynamics) -> tuple[np.ndarray, np.ndarray]:
        sim = replayer.run(d, end)[mask]
        return np.mean(((sim - recorded) / scale) ** 2, axis=0), sim

    base = dyn.friction.copy()
    floor = np.maximum(base, 1e-4)
    factors = (1.0 / 3.0, 1.0, 3.0)
    costs = []
    for f in factors:
        c, _ = per_joint_cost(dyn.replace_values(friction=np.where(np.isin(np.arange(len(base)), joints),
                                                                   floor * f, base)))
        costs.append(c)
    costs_arr = np.array(costs)
    best = base.copy()
    logs = np.log(factors)
    for j in joints:
        a, b, _c = np.polyfit(logs, costs_arr[:, j], 2)
        guess = -b / (2 * a) if a > 0 else logs[int(np.argmin(costs_arr[:, j]))]
        best[j] = floor[j] * math.exp(float(np.clip(guess, 2 * logs[0], 2 * logs[-1])))
    candidate = dyn.replace_values(friction=best)
    cand_cost, reference = per_joint_cost(candidate)
    for j in joints:
        k = int(np.argmin(costs_arr[:, j]))
        if costs_arr[k, j] < cand_cost[j]:
            best[j] = floor[j] * factors[k]
    result = dyn.replace_values(friction=best)
    if not np.allclose(best, candidate.friction):
        _, reference = per_joint_cost(result)
    effects = {j: 0.0 for j in joints}
    for factor in (1.0 + PERTURB_FRACTION, 1.0 - PERTURB_FRACTION):
        moved = dyn.replace_values(friction=np.where(np.isin(np.arange(len(best)), joints), best * factor, best))
        _, sim = per_joint_cost(moved)
        for j in joints:
            effects[j] = max(effects[j], float(np.sqrt(np.mean(((sim[:, j] - reference[:, j]) / scale[j]) ** 2))))
    return result, {j: (effects[j], best[j]) for j in joints}, replayer.replays


def fit(data: FitData, params: SimParams, robot_description: str, options: FitOptions) -> FitResult:
    """Fit the sim's dynamics to `data` (see the module doc). Raises SysidError when nothing can be fitted."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    replayer = Replayer(params, robot_description, data)
    try:
        nominal = replayer.nominal()
        names = data.joint_names
        excitation = np.ptp(data.commands[data.command_t < data.split_t], axis=0) if np.any(
            data.command_t < data.split_t) else np.zeros(len(names))
        fitted_joints = [j for j in range(len(names)) if excitation[j] >= options.min_excitation_rad]
        notes = [f"joint {names[j]} not excited in the fit part (command range {excitation[j]:.4f} rad): not fitted"
                 for j in range(len(names)) if j not in fitted_joints]
        if not fitted_joints:
            raise SysidError(f"no commanded joint moves by {options.min_excitation_rad} rad or more before the "
                             "held-out part: nothing to fit (record an excitation: sim2real sysid excite)")
        inertia, grid = inertia_and_coupling(replayer.world, data, ModelGrid.from_data(data, replayer.dt_s))
        kinds = [k for k in ("kp", "kd", "damping") if k in options.fit]
        fit_latency = "latency" in options.fit
        timings["prepare"] = time.perf_counter() - started

        parameters: list[ParameterResult] = []
        dyn = nominal
        evaluations = {"model": 0, "sim_replays": 0}
        t0 = time.perf_counter()
        if kinds or fit_latency:
            problem = _FastProblem(data, grid, inertia, nominal, fitted_joints, kinds, fit_latency, options)
            x, _ = _search(problem, options, nominal)
            effects, flat_weight, flat = _identifiability(problem, x)
            fitted_x = x.copy()
            # Negligible parameters go back to nominal and the rest is re-fitted around them.
            negligible = [i for i in range(len(x)) if effects[i] < MIN_EFFECT]
            if negligible:
                keep = [i for i in range(len(x)) if i not in negligible]
                nominal_x = problem.x_of(nominal)
                x = nominal_x.copy()
                if keep:
                    def reduced(z: np.ndarray) -> float:
                        full = nominal_x.copy()
                        full[keep] = z
                        return problem.cost(full)
                    bounds = problem.bounds()
                    x[keep], _ = _nelder_mead(reduced, fitted_x[keep], [bounds[i] for i in keep],
                                              [problem.slots[i] for i in keep], options.max_evaluations // 2)
            dyn = problem.dynamics(x)
            # exp(log(v)) is not always v: negligible parameters keep their nominal value exactly.
            exact = {k: dyn.values(k).copy() for k in KINDS}
            for i in negligible:
                kind, j = problem.slots[i]
                if kind == "latency":
                    dyn = dyn.replace_values(latency_s=nominal.latency_s)
                else:
                    exact[kind][j] = nominal.values(kind)[j]
            dyn = dyn.replace_values(**exact)
            labels = [_label(kind, "" if kind == "latency" else names[j]) for kind, j in problem.slots]
            for i, (kind, j) in enumerate(problem.slots):
                joint = "" if kind == "latency" else names[j]
                nominal_value = nominal.latency_s if kind == "latency" else float(nominal.values(kind)[j])
                fitted_value = float(fitted_x[i]) if kind == "latency" else math.exp(fitted_x[i])
                value = dyn.latency_s if kind == "latency" else float(dyn.values(kind)[j])
                reason = ""
                if effects[i] < MIN_EFFECT:
                    reason = (f"a {'10 ms' if kind == 'latency' else '20 %'} change moves the trajectory by "
                              f"{effects[i]:.2%} of the motion (< {MIN_EFFECT:.0%}); nominal value kept")
                    if kind == "damping" and "kd" in kinds:
                        # Small is not the whole story: however large, damping would not be told apart.
                        reason += f"; {SUM_ONLY.format(joint=joint)}"
                elif flat_weight[i] > FLAT_WEIGHT:
                    partners = sorted({labels[k] for v in flat for k in np.flatnonzero(np.abs(v) > 0.3)
                                       if abs(v[i]) > 0.3 and k != i})
                    reason = (f"lies in a flat direction of the cost ({flat_weight[i]:.0%}) with "
                              f"{', '.join(partners) or 'other parameters'}: only their combination is determined; "
                              "the fitted value, which reproduces it, is written")
                parameters.append(ParameterResult(kind, joint, nominal_value, fitted_value, value, not reason,
                                                  float(effects[i]), float(flat_weight[i]), reason))
            evaluations["model"] = problem.evaluations
        timings["model_search"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        if "friction" in options.fit:
            dyn, friction_info, _ = _friction_stage(replayer, data, dyn, fitted_joints, options.warmup_s)
            for j, (effect, value) in friction_info.items():
                ok = effect >= MIN_EFFECT
                reason = "" if ok else (f"a 20 % change moves the trajectory by {effect:.2%} of the motion "
                                        f"(< {MIN_EFFECT:.0%}) in PyBullet")
                parameters.append(ParameterResult("friction", names[j], float(nominal.friction[j]), float(value),
                                                  float(value) if ok else float(nominal.friction[j]), ok, effect, 0.0,
                                                  reason))
            friction = dyn.friction.copy()
            for p in parameters:
                if p.kind == "friction" and not p.identifiable:
                    friction[names.index(p.joint)] = p.nominal
            dyn = dyn.replace_values(friction=friction)
        timings["friction_sim"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        if options.sim_polish_evals > 0:
            dyn = _sim_polish(replayer, data, dyn, parameters, options)
        timings["sim_polish"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        before = replayer.run(nominal)
        after = replayer.run(dyn)
        timings["validate_sim"] = time.perf_counter() - t0
        parameters = [replace(p, value=_final_value(dyn, p, names)) if p.identifiable else p for p in parameters]
        evaluations["sim_replays"] = replayer.replays
        evaluations["sim_steps"] = replayer.steps
        errors = {"before": _errors(data, before, options.warmup_s, fitted_joints),
                  "after": _errors(data, after, options.warmup_s, fitted_joints)}
        timings["total"] = time.perf_counter() - started
        return FitResult(
            joint_names=names, fitted_joints=tuple(names[j] for j in fitted_joints), nominal=nominal, fitted=dyn,
            parameters=parameters, errors=errors, traces={"before": before, "after": after}, data=data,
            method=options.method, evaluations=evaluations, timings_s=timings,
            inertia={n: float(inertia[j]) for j, n in enumerate(names)}, notes=notes,
        )
    finally:
        replayer.close()


def _final_value(dyn: Dynamics, p: ParameterResult, names: tuple[str, ...]) -> float:
    return float(dyn.latency_s) if p.kind == "latency" else float(dyn.values(p.kind)[names.index(p.joint)])


def _sim_polish(replayer: Replayer, data: FitData, dyn: Dynamics, parameters: list[ParameterResult],
                options: FitOptions) -> Dynamics:
    """Nelder-Mead on the PyBullet replay cost of the fit part over the identifiable parameters."""
    names = data.joint_names
    slots = [(p.kind, -1 if p.kind == "latency" else names.index(p.joint)) for p in parameters if p.identifiable]
    if not slots:
        return dyn
    end = data.split_t
    keep = data.state_t <= end + 1e-12
    mask = data.train_mask(options.warmup_s)[keep]
    recorded = data.states[keep][mask]
    joints = sorted({j for _k, j in slots if j >= 0}) or list(range(len(names)))
    scale = np.maximum(np.std(recorded, axis=0), MIN_MOTION_RAD)

    def apply(x: np.ndarray) -> Dynamics:
        values = {k: dyn.values(k).copy() for k in KINDS}
        latency = dyn.latency_s
        for (kind, j), v in zip(slots, x, strict=True):
            if kind == "latency":
                latency = max(0.0, float(v))
            else:
                values[kind][j] = math.exp(v)
        return dyn.replace_values(latency_s=latency, **values)

    def cost(x: np.ndarray) -> float:
        sim = replayer.run(apply(x), end)[mask]
        return float(np.mean(((sim[:, joints] - recorded[:, joints]) / scale[joints]) ** 2))

    x0 = np.array([dyn.latency_s if k == "latency" else math.log(max(dyn.values(k)[j], 1e-9)) for k, j in slots])
    bounds = [(0.0, options.max_latency_s) if k == "latency" else (v - LOG_RANGE, v + LOG_RANGE)
              for (k, _j), v in zip(slots, x0, strict=True)]
    x, _ = _nelder_mead(cost, x0, bounds, slots, 2 * options.sim_polish_evals)
    return apply(x)
