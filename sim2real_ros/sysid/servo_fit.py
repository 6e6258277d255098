"""`sysid fit --model servo`: fit the sim's servo actuator model (actuator.model: servo) to a bag.

Per excited joint, on the measured joint's own units (wraps unwrapped, sign and offset mapped, as
`sysid latency` does; the commands are mapped into them with the response model's scale and offset):

- servo model (sim/actuation.ServoLoop, kinematic: the PD loop is taken to track the reference):
  dead time d [s], max speed v [rad/s], max acceleration a [rad/s^2], loop gain K [1/s];
- PD baseline, fitted the same way: dead time, then x'' = w^2 (r - x) - 2 z w x' (a linear PD loop
  on a unit inertia: kp/I = w^2, kd/I = 2 z w), what the sim's pd model is without saturation.

Both are simulated over the whole recording from its first reading (5 ms steps, readings compared
at the time their value first appeared: servo buses repeat a stale reading; but at most one refresh
interval before the reading's own time: a joint at rest is re-read with the same value), fitted on the first
part (Nelder-Mead from the `sysid latency` estimates, several dead-time starts) and scored on the
held-out last part: RMS error [rad] per joint. A parameter whose +/-20 % change (dead time: +/- one
control period) moves the fitted-part RMS by less than 1 % is reported as not determined by the
data (e.g. a joint that never settles says nothing about its gain).

Pure numpy/scipy; no PyBullet and no URDF (so a robot without a model, like the real servo arm bag,
can be fitted).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize

from . import servo_response
from .latency import JointLatency, LatencyOptions, SysidError, estimate_latency, match_joints
from .signals import JointStream, median_period_s, times_s, unwrap

STEP_S = 0.005  # simulation step [s]
PERTURB = 0.2  # +/-20 % for the identifiability check
MIN_EFFECT = 0.01  # below 1 % change of the fitted-part RMS: not determined
SERVO_NAMES = ("dead_time_s", "max_speed", "max_acceleration", "gain")
PD_NAMES = ("dead_time_s", "omega", "zeta")


@dataclass(frozen=True)
class ServoFitOptions:
    """holdout_fraction: last part of the overlap held out; max_dead_time_s [s]; control_period_s [s]:
    the dead-time perturbation of the identifiability check (0: the command's median period);
    max_evaluations: Nelder-Mead evaluations per start."""

    holdout_fraction: float = 0.3
    max_dead_time_s: float = 1.0
    control_period_s: float = 0.0
    max_evaluations: int = 600

    def __post_init__(self) -> None:
        if not 0.05 <= self.holdout_fraction <= 0.8:
            raise SysidError(f"holdout_fraction = {self.holdout_fraction}: must be in [0.05, 0.8]")
        if not 0.0 < self.max_dead_time_s <= 5.0:
            raise SysidError(f"max_dead_time_s = {self.max_dead_time_s}: must be in (0, 5] s")
        if self.control_period_s < 0:
            raise SysidError(f"control_period_s = {self.control_period_s}: must be >= 0 s")
        if self.max_evaluations < 20:
            raise SysidError(f"max_evaluations = {self.max_evaluations}: must be >= 20")


@dataclass(frozen=True)
class JointServoFit:
    """One joint: fitted servo and PD parameters, held-out RMS [measured units, rad] of each, the
    fitted-part RMS, parameters the data does not determine, and the mapping used
    (target = scale * command + offset, unwrap period [rad] or None)."""

    name: str
    servo: dict[str, float]
    pd: dict[str, float]
    holdout_rms_servo: float
    holdout_rms_pd: float
    fit_rms_servo: float
    fit_rms_pd: float
    not_determined: tuple[str, ...]
    scale: float
    offset: float
    unwrap_period: float | None
    latency_dead_time_s: float | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServoFitResult:
    joints: tuple[JointServoFit, ...]
    skipped: dict[str, str]
    split_t: float
    duration_s: float
    time_source: str
    control_period_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["joints"] = [asdict(j) for j in self.joints]
        return data

    def dead_time_s(self) -> float:
        """The one latency the sim's queue applies to every joint: the median of the joints' fits."""
        return float(np.median([j.servo["dead_time_s"] for j in self.joints]))


# ----------------------------------------------------------------------------------------------
def simulate_servo(target: np.ndarray, x0: float, v: float, a: float, gain: float, deadband: float = 0.0,
                   dt: float = STEP_S) -> np.ndarray:
    """ServoLoop (sim/motor_model.py) for one joint, scalar, from rest at x0: positions (N,) for the
    targets (N,) in effect at each step of dt [s]. Same arithmetic as the sim's loop."""
    ref, speed = float(x0), 0.0
    out = np.empty(len(target))
    step_a = a * dt
    for i, r in enumerate(target.tolist()):
        error = r - ref
        if abs(error) <= deadband:
            wanted = 0.0
        else:
            wanted = min(max(gain * error, -v), v)
            if abs(wanted * dt) > abs(error):
                wanted = error / dt
        speed += min(max(wanted - speed, -step_a), step_a)
        ref += speed * dt
        out[i] = ref
    return out


def simulate_pd(target: np.ndarray, x0: float, omega: float, zeta: float, dt: float = STEP_S) -> np.ndarray:
    """Linear PD loop on a unit inertia, semi-implicit Euler, from rest at x0."""
    x, xd = float(x0), 0.0
    k, c = omega * omega, 2.0 * zeta * omega
    out = np.empty(len(target))
    for i, r in enumerate(target.tolist()):
        xd += (k * (r - x) - c * xd) * dt
        x += xd * dt
        out[i] = x
    return out


@dataclass(frozen=True)
class _JointData:
    grid: np.ndarray  # (N,) [s]
    cmd_t: np.ndarray  # command changes [s]
    cmd_target: np.ndarray  # in measured units
    t_fresh: np.ndarray  # (M,) [s] the time each reading is compared with a model at
    y: np.ndarray  # (M,) measured
    train: np.ndarray  # (M,) bool
    holdout: np.ndarray  # (M,) bool
    x0: float
    t_read: np.ndarray  # (M,) [s] each reading's own time

    def delayed_target(self, d: float) -> np.ndarray:
        index = np.searchsorted(self.cmd_t + d, self.grid, side="right") - 1
        return self.cmd_target[np.clip(index, 0, len(self.cmd_target) - 1)]

    def errors(self, trace: np.ndarray) -> tuple[float, float]:
        model = np.interp(self.t_fresh, self.grid, trace)
        e = model - self.y
        return float(np.sqrt(np.mean(e[self.train] ** 2))), float(np.sqrt(np.mean(e[self.holdout] ** 2)))


def _fit(cost, p0s: list[np.ndarray], max_evaluations: int) -> np.ndarray:
    best = None
    for p0 in p0s:
        result = minimize(cost, p0, method="Nelder-Mead",
                          options={"maxfev": max_evaluations, "xatol": 1e-4, "fatol": 1e-12})
        if best is None or result.fun < best.fun:
            best = result
    assert best is not None
    return best.x


def _fit_joint(name: str, data: _JointData, lat: JointLatency, options: ServoFitOptions,
               control_period: float) -> JointServoFit:
    notes: list[str] = []
    d_max = options.max_dead_time_s
    motion = max(float(np.ptp(data.y)), 1e-6)

    def servo_params(p: np.ndarray) -> tuple[float, float, float, float]:
        return float(np.clip(p[0], 0.0, d_max)), math.exp(p[1]), math.exp(p[2]), math.exp(p[3])

    def servo_trace(p: np.ndarray) -> np.ndarray:
        d, v, a, k = servo_params(p)
        return simulate_servo(data.delayed_target(d), data.x0, v, a, k)

    def servo_cost(p: np.ndarray) -> float:
        if not all(-12 < q < 12 for q in p[1:]):
            return 1e6
        return (data.errors(servo_trace(p))[0] / motion) ** 2 + 1e3 * max(0.0, abs(p[0] - np.clip(p[0], 0, d_max)))

    d0 = lat.dead_time_s if lat.dead_time_s is not None else (lat.bulk_lag_s or 0.05)
    d0 = float(np.clip(d0, 0.0, d_max))
    v0 = lat.slew_rate or max(motion, 0.1)
    tau0 = max(lat.time_constant_s or 0.05, 0.01)
    starts = [np.array([d, math.log(v0), math.log(v0 / 0.05), math.log(1.0 / tau0)])
              for d in sorted({d0, max(0.0, d0 - 0.05), min(d_max, d0 + 0.05)})]
    p_servo = _fit(servo_cost, starts, options.max_evaluations)
    # Polish from the best point (Nelder-Mead restarts escape its early collapse).
    p_servo = _fit(servo_cost, [p_servo], options.max_evaluations)
    d, v, a, k = servo_params(p_servo)
    fit_servo, hold_servo = data.errors(servo_trace(p_servo))

    def pd_trace(p: np.ndarray) -> np.ndarray:
        dd = float(np.clip(p[0], 0.0, d_max))
        omega = min(math.exp(p[1]), 0.5 / STEP_S)
        return simulate_pd(data.delayed_target(dd), data.x0, omega, math.exp(p[2]))

    def pd_cost(p: np.ndarray) -> float:
        if not (-12 < p[1] < math.log(0.5 / STEP_S) and -8 < p[2] < 4):
            return 1e6
        return (data.errors(pd_trace(p))[0] / motion) ** 2 + 1e3 * max(0.0, abs(p[0] - np.clip(p[0], 0, d_max)))

    pd_starts = [np.array([d0, math.log(w), math.log(1.0)]) for w in (2.0, 6.0, 20.0)]
    p_pd = _fit(pd_cost, pd_starts, options.max_evaluations)
    p_pd = _fit(pd_cost, [p_pd], options.max_evaluations)
    fit_pd, hold_pd = data.errors(pd_trace(p_pd))

    # Which servo parameters the data determines: +/-20 % (dead time +/- one control period).
    not_determined = []
    for i, pname in enumerate(SERVO_NAMES):
        effects = []
        for sign in (-1.0, 1.0):
            q = p_servo.copy()
            q[i] = q[i] + sign * control_period if i == 0 else q[i] + math.log(1 + sign * PERTURB)
            effects.append(abs(data.errors(servo_trace(q))[0] - fit_servo))
        if max(effects) < MIN_EFFECT * max(fit_servo, 1e-3 * motion):
            not_determined.append(pname)
    if not_determined:
        notes.append(f"not determined by the data (a +/-20 % change moves the fit by < 1 %): {not_determined}; "
                     "written as fitted, randomize them widely")
    return JointServoFit(
        name, {"dead_time_s": d, "max_speed": v, "max_acceleration": a, "gain": k},
        {"dead_time_s": float(np.clip(p_pd[0], 0.0, d_max)), "omega": math.exp(p_pd[1]), "zeta": math.exp(p_pd[2])},
        hold_servo, hold_pd, fit_servo, fit_pd, tuple(not_determined), float(lat.model_scale or 1.0),
        float(lat.model_offset or 0.0), lat.unwrap_period, lat.dead_time_s, tuple(notes),
    )


@dataclass(frozen=True)
class PreparedJoints:
    """What both models are fitted to and scored on, per excited joint: (name, data, latency estimate).
    data.t_read: each reading's own time; data.t_fresh: the time it is compared with a model at."""

    joints: tuple[tuple[str, _JointData, JointLatency], ...]
    skipped: dict[str, str]
    split_t: float
    window_s: tuple[float, float]
    time_source: str
    control_period_s: float


def prepare_joints(command: JointStream, state: JointStream, options: ServoFitOptions | None = None,
                   latency_options: LatencyOptions | None = None) -> PreparedJoints:
    """The readings of each excited joint (unwrapped on the latency estimate's branch), the commands
    mapped into measured units, the comparison times and the fitted/held-out split; see the module doc."""
    options = options or ServoFitOptions()
    report = estimate_latency(command, state, latency_options or LatencyOptions(max_lag_s=options.max_dead_time_s))
    names, command_cols, state_cols, _, _ = match_joints(command, state)
    origin = report.origin_ns
    tc, tm = times_s(command, report.time_source, origin), times_s(state, report.time_source, origin)
    start, end = report.window_s
    split = start + (1.0 - options.holdout_fraction) * (end - start)
    control_period = options.control_period_s or median_period_s(tc)
    grid = np.arange(start, end + STEP_S, STEP_S)
    joints, skipped = [], {}
    for name, ci, si, lat in zip(names, command_cols, state_cols, report.joints, strict=True):
        if lat.dead_time_s is None or lat.model_scale is None:
            skipped[name] = "not excited or no response model: " + "; ".join(lat.notes[-1:])
            continue
        # The same samples as the latency estimate unwrapped (its window): the same branch of the wrap.
        state_period = median_period_s(tm)
        near = (tm >= start - state_period) & (tm <= end + state_period)
        tm_w, y_w = tm[near], state.positions[near, si]
        if lat.unwrap_period is not None:
            y_w = unwrap(y_w, lat.unwrap_period)
        keep = (tm_w >= start) & (tm_w <= end)
        # Compared where its value first appeared, but at most one refresh interval back: a joint
        # at rest is re-read with the same value, its readings are not all from the instant it arrived.
        t_fresh = servo_response.fresh_times(tm_w, y_w, lat.update_period_s)[keep]
        y = y_w[keep]
        cmd_t, cmd_x = servo_response.compress_hold(tc, command.positions[:, ci])
        target = lat.model_scale * cmd_x + lat.model_offset
        train, holdout = t_fresh < split, t_fresh >= split
        if train.sum() < 10 or holdout.sum() < 5:
            skipped[name] = f"too few readings ({train.sum()} fitted, {holdout.sum()} held out)"
            continue
        data = _JointData(grid, cmd_t, target, np.maximum(t_fresh, start), y, train, holdout, float(y[0]),
                          tm_w[keep])
        joints.append((name, data, lat))
    return PreparedJoints(tuple(joints), skipped, float(split), (float(start), float(end)), report.time_source,
                          float(control_period))


def fit_servo(command: JointStream, state: JointStream, options: ServoFitOptions | None = None,
              latency_options: LatencyOptions | None = None) -> ServoFitResult:
    """Fit the servo model (and the PD baseline) per excited joint; see the module doc."""
    options = options or ServoFitOptions()
    prepared = prepare_joints(command, state, options, latency_options)
    joints = [_fit_joint(name, data, lat, options, prepared.control_period_s) for name, data, lat in prepared.joints]
    if not joints:
        raise SysidError(f"no joint of {command.topic} could be fitted: {prepared.skipped}")
    start, end = prepared.window_s
    return ServoFitResult(tuple(joints), prepared.skipped, prepared.split_t, end - start, prepared.time_source,
                          prepared.control_period_s)


# ----------------------------------------------------------------------------------------------
# Output: a versioned sim params YAML with model: servo, and a report.
def _r(value: float) -> float:
    return float(f"{value:.6g}")


def servo_mapping(result: ServoFitResult, params: Any, bag: str, extra: dict[str, Any] | None = None,
                  randomize_scale: float = 0.15) -> dict[str, Any]:
    """The input params' mapping with actuator.model: servo, the fitted values per joint (the
    default of each servo field: the input's, else the median of the fit), the dead time as
    actuation_latency_s, randomization ranges around the fit (servo scales +/- randomize_scale,
    widened to +/-50 % for parameters the data did not determine; the latency range +/- the larger
    of one control period and the joints' dead-time spread), and a provenance.sysid record."""
    import copy

    data = copy.deepcopy(params.to_dict())
    actuator = data.setdefault("actuator", {})
    actuator["model"] = "servo"
    dead_time = result.dead_time_s()
    actuator["actuation_latency_s"] = _r(dead_time)
    servo = dict(actuator.get("servo") or {})
    fields = {"max_speed": "max_speed", "max_acceleration": "max_acceleration", "gain": "gain"}
    for key, fitted in fields.items():
        current = servo.get(key)
        mapping = dict(current) if isinstance(current, dict) else (
            {"default": current} if current is not None else {})
        mapping.setdefault("default", _r(float(np.median([j.servo[fitted] for j in result.joints]))))
        for joint in result.joints:
            mapping[joint.name] = _r(joint.servo[fitted])
        servo[key] = mapping
    servo.setdefault("deadband", 0.0)
    actuator["servo"] = servo
    rand = data.setdefault("randomization", {})
    undetermined = {p for j in result.joints for p in j.not_determined}
    for key, name in (("servo_speed_scale", "max_speed"), ("servo_acceleration_scale", "max_acceleration"),
                      ("servo_gain_scale", "gain")):
        width = 0.5 if name in undetermined else randomize_scale
        rand[key] = [_r(1 - width), _r(1 + width)]
    spread = float(np.ptp([j.servo["dead_time_s"] for j in result.joints])) if len(result.joints) > 1 else 0.0
    half = max(result.control_period_s, 0.5 * spread)
    rand["actuation_latency_s"] = [_r(max(0.0, dead_time - half)), _r(dead_time + half)]
    record = {
        "bag": str(bag), "model": "servo",
        "base_params": {"source": params.source, "version": params.version},
        "joints": {j.name: {"servo": {k: _r(v) for k, v in j.servo.items()},
                            "pd_baseline": {k: _r(v) for k, v in j.pd.items()},
                            "holdout_rms_rad": {"servo": _r(j.holdout_rms_servo), "pd": _r(j.holdout_rms_pd)},
                            "not_determined": list(j.not_determined)} for j in result.joints},
        "skipped": result.skipped,
        **(extra or {}),
    }
    provenance = dict(data.get("provenance") or {}) if isinstance(data.get("provenance"), dict) else {}
    provenance["sysid"] = record
    data["provenance"] = provenance
    return data


def write_servo_params(result: ServoFitResult, params: Any, bag: str, out: Any,
                       extra: dict[str, Any] | None = None) -> str:
    """Write the servo params YAML (validated by loading it back); returns its version."""
    from pathlib import Path

    import yaml

    from ..core.hashing import content_hash
    from ..sim.params import load_sim_params
    from .fit_output import HEADER

    out = Path(out)
    mapping = servo_mapping(result, params, bag, extra)
    version = content_hash(mapping)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(HEADER.format(version=version) + yaml.safe_dump(mapping, sort_keys=False))
    loaded = load_sim_params(out)
    if loaded.version != version or loaded.actuator.model != "servo":
        raise SysidError(f"{out}: written params load as version {loaded.version} model {loaded.actuator.model}")
    return version


def servo_report_markdown(result: ServoFitResult, bag: str, version: str | None) -> str:
    lines = [f"# sysid fit --model servo: {bag}", "",
             f"- time base: {result.time_source}; {result.duration_s:.1f} s, held out from "
             f"{result.split_t:.1f} s; control period {result.control_period_s * 1000:.1f} ms",
             f"- new sim params version: {version or '-'} (actuator.model: servo, actuation_latency_s "
             f"{result.dead_time_s():.3f} s)", "",
             "| joint | dead time [s] | max speed [rad/s] | max accel [rad/s^2] | gain [1/s] | held-out RMS PD "
             "[rad] | held-out RMS servo [rad] | servo/PD | not determined |",
             "|---|---|---|---|---|---|---|---|---|"]
    for j in result.joints:
        s = j.servo
        ratio = j.holdout_rms_servo / j.holdout_rms_pd if j.holdout_rms_pd > 0 else float("nan")
        lines.append(f"| {j.name} | {s['dead_time_s']:.3f} | {s['max_speed']:.4g} | {s['max_acceleration']:.4g} | "
                     f"{s['gain']:.4g} | {j.holdout_rms_pd:.4g} | {j.holdout_rms_servo:.4g} | {ratio:.2f} | "
                     f"{', '.join(j.not_determined) or '-'} |")
    if result.skipped:
        lines += ["", "Skipped: " + "; ".join(f"{k}: {v}" for k, v in result.skipped.items())]
    lines += ["", "PD: the same dead time, then a linear PD loop on a unit inertia (omega, zeta), fitted the same way.",
              ""]
    return "\n".join(lines)
