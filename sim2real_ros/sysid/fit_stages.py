"""The stages of `sysid fit`, each a function returning a dataclass; `fit.fit` chains them.

1. `prepare`: nominal dynamics, the excited joints, the inertia and the model grid.
2. `fit_fast_model`: search, identifiability, re-fit without the negligible parameters, one
   ParameterResult per search parameter (`fit_model.py` holds the search itself).
3. `fit_friction`: friction by PyBullet replays, judged the same way.
4. `sim_polish`: optionally, Nelder-Mead on the PyBullet replay cost.
5. `validate`: held-out error before (nominal) and after, from full PyBullet replays.
The reasons a parameter is not identifiable are worded by the `*_reason` functions.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .fit_data import FitData
from .fit_model import (
    FastProblem,
    Identifiability,
    Slot,
    identifiability,
    nelder_mead,
    refit_without,
    search,
    with_nominal_values,
)
from .fit_options import (
    FLAT_WEIGHT,
    LOG_RANGE,
    MIN_EFFECT,
    MIN_MOTION_RAD,
    PERTURB_FRACTION,
    SUM_ONLY,
    FitOptions,
    ParameterResult,
    parameter_label,
)
from .joint_model import ModelGrid, inertia_and_coupling
from .latency import SysidError
from .replay import KINDS, Dynamics, Replayer


# ----------------------------------------------------------------------------------------------
# 1. prepare
@dataclass(frozen=True)
class Excitation:
    """The joints (indices) whose command moves by min_excitation_rad or more in the fit part, and a
    note for each one that does not."""

    fitted_joints: list[int]
    notes: list[str]


def excited_joints(data: FitData, min_excitation_rad: float) -> Excitation:
    """Which joints the fit part excites (command range [rad] before the split >= min_excitation_rad)."""
    names = data.joint_names
    before_split = data.command_t < data.split_t
    excitation = np.ptp(data.commands[before_split], axis=0) if np.any(before_split) else np.zeros(len(names))
    fitted = [j for j in range(len(names)) if excitation[j] >= min_excitation_rad]
    notes = [f"joint {names[j]} not excited in the fit part (command range {excitation[j]:.4f} rad): not fitted"
             for j in range(len(names)) if j not in fitted]
    return Excitation(fitted, notes)


@dataclass(frozen=True)
class Preparation:
    """What every later stage needs: nominal dynamics, the excited joints, the inertia (n,) [kg m^2]
    and the fast model's grid, and which of the model's parameters to search."""

    nominal: Dynamics
    fitted_joints: list[int]
    notes: list[str]
    inertia: np.ndarray
    grid: ModelGrid
    kinds: list[str]
    fit_latency: bool


def prepare(replayer: Replayer, data: FitData, options: FitOptions) -> Preparation:
    """Stage 1. Raises SysidError when no joint is excited (nothing to fit)."""
    nominal = replayer.nominal()
    excitation = excited_joints(data, options.min_excitation_rad)
    if not excitation.fitted_joints:
        raise SysidError(f"no commanded joint moves by {options.min_excitation_rad} rad or more before the "
                         "held-out part: nothing to fit (record an excitation: sim2real sysid excite)")
    inertia, grid = inertia_and_coupling(replayer.world, data, ModelGrid.from_data(data, replayer.dt_s))
    return Preparation(nominal, excitation.fitted_joints, excitation.notes, inertia, grid,
                       kinds=[k for k in ("kp", "kd", "damping") if k in options.fit],
                       fit_latency="latency" in options.fit)


# ----------------------------------------------------------------------------------------------
# 2. the fast model
def negligible_reason(kind: str, joint: str, effect: float, kd_fitted: bool) -> str:
    """Why a parameter whose move changes the trajectory by `effect` (< MIN_EFFECT) keeps its nominal value."""
    reason = (f"a {'10 ms' if kind == 'latency' else '20 %'} change moves the trajectory by "
              f"{effect:.2%} of the motion (< {MIN_EFFECT:.0%}); nominal value kept")
    if kind == "damping" and kd_fitted:
        # Small is not the whole story: however large, damping would not be told apart.
        reason += f"; {SUM_ONLY.format(joint=joint)}"
    return reason


def flat_partners(labels: Sequence[str], flat: Sequence[np.ndarray], i: int) -> list[str]:
    """The parameters sharing a flat direction with parameter i (both weigh > 0.3 in it), sorted."""
    return sorted({labels[k] for v in flat for k in np.flatnonzero(np.abs(v) > 0.3) if abs(v[i]) > 0.3 and k != i})


def flat_reason(flat_weight: float, partners: Sequence[str]) -> str:
    """Why a parameter mostly in a flat direction of the cost is not identifiable on its own."""
    return (f"lies in a flat direction of the cost ({flat_weight:.0%}) with "
            f"{', '.join(partners) or 'other parameters'}: only their combination is determined; "
            "the fitted value, which reproduces it, is written")


def model_parameter_results(slots: Sequence[Slot], fitted_x: np.ndarray, dyn: Dynamics, judged: Identifiability,
                            nominal: Dynamics, names: Sequence[str], kinds: Sequence[str]) -> list[ParameterResult]:
    """One ParameterResult per search parameter: fitted_x is the search's optimum (latency [s], log
    parameters), dyn the dynamics the fit keeps."""
    labels = [parameter_label(kind, "" if kind == "latency" else names[j]) for kind, j in slots]
    results = []
    for i, (kind, j) in enumerate(slots):
        joint = "" if kind == "latency" else names[j]
        nominal_value = nominal.latency_s if kind == "latency" else float(nominal.values(kind)[j])
        fitted_value = float(fitted_x[i]) if kind == "latency" else math.exp(fitted_x[i])
        value = dyn.latency_s if kind == "latency" else float(dyn.values(kind)[j])
        reason = ""
        if judged.effects[i] < MIN_EFFECT:
            reason = negligible_reason(kind, joint, float(judged.effects[i]), "kd" in kinds)
        elif judged.flat_weight[i] > FLAT_WEIGHT:
            reason = flat_reason(float(judged.flat_weight[i]), flat_partners(labels, judged.flat, i))
        results.append(ParameterResult(kind, joint, nominal_value, fitted_value, value, not reason,
                                       float(judged.effects[i]), float(judged.flat_weight[i]), reason))
    return results


@dataclass(frozen=True)
class ModelFit:
    """Stage 2's result: the dynamics kept, one ParameterResult per search parameter, model evaluations."""

    dynamics: Dynamics
    parameters: list[ParameterResult]
    evaluations: int


def fit_fast_model(data: FitData, prep: Preparation, options: FitOptions) -> ModelFit:
    """Stage 2: search, judge, put the negligible parameters back to nominal and re-fit the others (a
    parameter confounded with others keeps its fitted value: together they reproduce what was determined)."""
    nominal = prep.nominal
    if not (prep.kinds or prep.fit_latency):
        return ModelFit(nominal, [], 0)
    problem = FastProblem(data, prep.grid, prep.inertia, nominal, prep.fitted_joints, prep.kinds, prep.fit_latency,
                          options)
    found = search(problem, options, nominal)
    judged = identifiability(problem, found.x)
    negligible = judged.negligible()
    x = refit_without(problem, negligible, found.x.copy(), nominal, options.max_evaluations)
    dyn = with_nominal_values(problem.dynamics(x), problem.slots, negligible, nominal)
    parameters = model_parameter_results(problem.slots, found.x, dyn, judged, nominal, data.joint_names, prep.kinds)
    return ModelFit(dyn, parameters, problem.evaluations)


# ----------------------------------------------------------------------------------------------
# 3. friction
def friction_reason(effect: float) -> str:
    """Why friction keeps its nominal value ("" when `effect` >= MIN_EFFECT: it is identifiable)."""
    if effect >= MIN_EFFECT:
        return ""
    return f"a 20 % change moves the trajectory by {effect:.2%} of the motion (< {MIN_EFFECT:.0%}) in PyBullet"


def friction_parameter_results(found: dict[int, tuple[float, float]], nominal: Dynamics,
                               names: Sequence[str]) -> list[ParameterResult]:
    """One ParameterResult per joint of `found` ({joint: (effect, fitted friction)})."""
    results = []
    for j, (effect, value) in found.items():
        reason = friction_reason(effect)
        ok = not reason
        results.append(ParameterResult("friction", names[j], float(nominal.friction[j]), float(value),
                                       float(value) if ok else float(nominal.friction[j]), ok, effect, 0.0, reason))
    return results


def search_friction(replayer: Replayer, data: FitData, dyn: Dynamics, joints: list[int],
                    warmup_s: float) -> tuple[Dynamics, dict[int, tuple[float, float]]]:
    """Fit friction per excited joint by PyBullet replays of the fit part (all joints scaled at once,
    each joint's cost read separately), then judge it by +/-20 %. Returns (dynamics, {joint:
    (effect, fitted friction)})."""
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
    return result, {j: (effects[j], best[j]) for j in joints}


@dataclass(frozen=True)
class FrictionFit:
    """Stage 3's result: the dynamics (friction not identifiable back at nominal) and one ParameterResult per joint."""

    dynamics: Dynamics
    parameters: list[ParameterResult]


def fit_friction(replayer: Replayer, data: FitData, dyn: Dynamics, prep: Preparation,
                 options: FitOptions) -> FrictionFit:
    """Stage 3 (when "friction" is fitted): friction of the excited joints; unidentifiable ones keep nominal."""
    if "friction" not in options.fit:
        return FrictionFit(dyn, [])
    dyn, found = search_friction(replayer, data, dyn, prep.fitted_joints, options.warmup_s)
    parameters = friction_parameter_results(found, prep.nominal, data.joint_names)
    friction = dyn.friction.copy()
    for p in parameters:
        if not p.identifiable:
            friction[data.joint_names.index(p.joint)] = p.nominal
    return FrictionFit(dyn.replace_values(friction=friction), parameters)


# ----------------------------------------------------------------------------------------------
# 4. polish
def sim_polish(replayer: Replayer, data: FitData, dyn: Dynamics, parameters: Sequence[ParameterResult],
               options: FitOptions) -> Dynamics:
    """Stage 4 (with sim_polish_evals > 0): Nelder-Mead on the PyBullet replay cost of the fit part
    over the identifiable parameters."""
    if options.sim_polish_evals <= 0:
        return dyn
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
    x, _ = nelder_mead(cost, x0, bounds, slots, 2 * options.sim_polish_evals)
    return apply(x)


# ----------------------------------------------------------------------------------------------
# 5. validate
def errors(data: FitData, simulated: np.ndarray, warmup_s: float, fitted_joints: list[int]) -> dict[str, Any]:
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


def final_values(dyn: Dynamics, parameters: Sequence[ParameterResult], names: Sequence[str]) -> list[ParameterResult]:
    """The parameters with each identifiable one's value read from the final dynamics (after polishing)."""
    def value(p: ParameterResult) -> float:
        return float(dyn.latency_s) if p.kind == "latency" else float(dyn.values(p.kind)[list(names).index(p.joint)])
    return [replace(p, value=value(p)) if p.identifiable else p for p in parameters]


@dataclass(frozen=True)
class Validation:
    """Stage 5's result: full replays (M, n) [rad] under the nominal and the fitted dynamics, their
    errors (`errors`, keys "before" and "after"), the final parameters and the replay counts."""

    before: np.ndarray
    after: np.ndarray
    errors: dict[str, dict[str, Any]]
    parameters: list[ParameterResult]
    sim_replays: int
    sim_steps: int


def validate(replayer: Replayer, data: FitData, prep: Preparation, dyn: Dynamics,
             parameters: Sequence[ParameterResult], options: FitOptions) -> Validation:
    """Stage 5: replay the whole bag under the nominal and the fitted dynamics and measure both."""
    before = replayer.run(prep.nominal)
    after = replayer.run(dyn)
    return Validation(
        before, after,
        {"before": errors(data, before, options.warmup_s, prep.fitted_joints),
         "after": errors(data, after, options.warmup_s, prep.fitted_joints)},
        final_values(dyn, parameters, data.joint_names), replayer.replays, replayer.steps)
