"""Model-free actuation latency from commanded vs measured joint positions (pure numpy, no rclpy).

Steps 1-3 and 5 (grid, correlation, lobe, confidence) and the combination over joints are
core/control/lag_correlation.py, the same code the actuator's online estimate runs: on the same
samples, window and lag range, `--method correlation` and the online estimate give the same figure.

Method, per joint:
1. Both streams onto one uniform grid: the command held (zero-order hold: it acts from the moment
   it is sent until replaced), the measurement linearly interpolated. Wrapped measurements
   (encoders folding positions modulo pi or pi/2) are unwrapped when that improves the fit.
2. Cross-correlate the derivatives (velocities) of both, each smoothed with the same Gaussian as
   wide as the slower stream really refreshes, over lags [min_lag, max_lag]. The peak of |rho|
   gives the sign of the joint's scale (a joint may count the other way).
3. A sharp lobe (no wider than 1.5x the command's own autocorrelation lobe: the joint follows like a
   pure delay) gives the latency at its peak, refined by a parabola to below one grid step. A
   spread lobe (the joint lags or slews, so its velocity response lasts longer than the command
   change) gives the latency at the lobe's rising half-height edge: the dead time before the
   response starts.
4. Fit measured ~ scale * command(t - delay) + offset by least squares (different zero and units,
   e.g. a gear ratio) at that latency and at the pure delay that best explains the positions
   (position_delay_s, which includes the joint's lag and slewing); the better fit is kept.
5. Confidence = peak normalized correlation * prominence (how far the peak stands above the
   correlation anywhere else in the lag range); 0 without excitation.
6. (method 'model', the default) The cross-correlation figure above is the "bulk lag": for a
   servo that slews it contains much of the ramp. The latency reported is the dead time, the onset
   of the response, from a model fit (servo_response: dead time, then a rate-limited first-order
   response, dx/dt = clip((target - x)/tau, -v, v)), fitted to the whole window for the scale and
   offset, then to each command step separately: the dead time is the median of the per-step
   estimates (their spread and range reported), the slew rate v and time constant tau are reported
   beside it. Its uncertainty includes the measurement's resolution: readings refreshed every
   update_period_s, each known to within that interval.
The overall latency is the confidence-weighted mean over joints.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..core.control.lag_correlation import (
    LagGrid,
    combine_joints,
    correlate_joint,
    cross_correlation,
    lag_grid,
    parabolic_peak,
)
from ..core.errors import Sim2RealError
from . import servo_response
from .signals import (
    JointStream,
    choose_time_source,
    linear,
    median_period_s,
    stamps_sane,
    times_s,
    unwrap,
    update_period_s,
    wrap_period,
    zero_order_hold,
)

# Below this R^2 the scale/offset fit is flagged as unreliable.
POOR_FIT_R2 = 0.5


class SysidError(Sim2RealError, ValueError):
    """The recording cannot answer the question (too short, no overlap, joints that do not match)."""


@dataclass(frozen=True)
class LatencyOptions:
    """How to estimate.

    min_lag_s, max_lag_s [s]: the lag range searched (a negative lag means the measurement moves
    before the command: clocks disagree). window_s: (start, end) [s] relative to the first sample
    of either topic, None = open. time_source: 'auto' | 'header' | 'log'. unwrap: 'auto' | 'none' |
    a period [rad] as text. min_excitation: the command's peak-to-peak range [rad] below which a
    joint counts as not excited. method: 'model' (latency = dead time, the onset of a fitted servo
    response, with slew rate and time constant; the cross-correlation lag is reported as bulk_lag_s)
    or 'correlation' (latency = the cross-correlation estimate alone, as before the model existed).
    """

    min_lag_s: float = -0.5
    max_lag_s: float = 2.0
    window_s: tuple[float | None, float | None] = (None, None)
    time_source: str = "auto"
    unwrap: str = "auto"
    min_excitation: float = 1e-4
    method: str = "model"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_lag_s) and math.isfinite(self.max_lag_s)) or self.min_lag_s >= self.max_lag_s:
            raise SysidError(f"lag range must satisfy min_lag_s < max_lag_s, got [{self.min_lag_s}, {self.max_lag_s}]")
        if self.time_source not in ("auto", "header", "log"):
            raise SysidError(f"time_source must be auto, header or log, got {self.time_source!r}")
        if self.unwrap not in ("auto", "none"):
            try:
                period = float(self.unwrap)
            except ValueError as err:
                raise SysidError(f"unwrap must be auto, none or a period [rad], got {self.unwrap!r}") from err
            if not period > 0:
                raise SysidError(f"unwrap period must be > 0, got {self.unwrap!r}")
        start, end = self.window_s
        if start is not None and end is not None and end <= start:
            raise SysidError(f"window end must be after its start, got {self.window_s}")
        if self.method not in ("model", "correlation"):
            raise SysidError(f"method must be model or correlation, got {self.method!r}")
        if not self.min_excitation >= 0:
            raise SysidError(f"min_excitation must be >= 0, got {self.min_excitation}")


@dataclass(frozen=True)
class JointLatency:
    """The estimate for one joint. latency_s/scale/uncertainty_s are None when not excited."""

    name: str
    latency_s: float | None
    confidence: float
    uncertainty_s: float | None
    offset: float | None
    scale: float | None
    fit_r2: float | None
    fit_delay_s: float | None
    correlation: float
    response: str  # 'sharp' | 'spread' | 'none'
    response_spread_s: float | None
    position_delay_s: float | None
    unwrap_period: float | None
    update_period_s: float
    command_range: float
    measured_range: float
    notes: tuple[str, ...] = ()
    # Model-based onset (servo_response): latency_s is dead_time_s when the model fits.
    bulk_lag_s: float | None = None
    bulk_lag_uncertainty_s: float | None = None
    dead_time_s: float | None = None
    dead_time_uncertainty_s: float | None = None
    dead_time_median_s: float | None = None
    dead_time_spread_s: float | None = None
    dead_time_range_s: tuple[float, float] | None = None
    slew_rate: float | None = None
    slew_rate_command_units: float | None = None
    time_constant_s: float | None = None
    model_rms: float | None = None
    model_scale: float | None = None
    model_offset: float | None = None
    whole_signal_dead_time_s: float | None = None
    steps: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class StepEstimate:
    """The model fitted to one command step: t_s [s] (step time from the origin), dead_time_s [s],
    slew_rate [measured units/s], time_constant_s [s], rms [measured units], readings used."""

    t_s: float
    dead_time_s: float
    slew_rate: float
    time_constant_s: float
    rms: float
    readings: int
    slewed: bool


@dataclass(frozen=True)
class LatencyReport:
    """The estimate for all joints plus how it was obtained (what the CLI prints as JSON)."""

    latency_s: float | None
    confidence: float
    uncertainty_s: float | None
    joints: tuple[JointLatency, ...]
    time_source: str
    time_source_reason: str
    matched_by_index: bool
    command_topic: str
    state_topic: str
    command_rate_hz: float
    state_rate_hz: float
    grid_step_s: float
    window_s: tuple[float, float]
    origin_ns: int
    lag_range_s: tuple[float, float]
    dropped_messages: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    bulk_lag_s: float | None = None
    bulk_lag_uncertainty_s: float | None = None
    method: str = "model"  # 'model': latency = dead time (response onset); 'correlation': bulk lag only

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["joints"] = [asdict(j) for j in self.joints]
        return _finite_or_none(data)


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/Inf: map them to None, recursively; tuples become lists."""
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def _fit_scale_offset(command: np.ndarray, measured: np.ndarray) -> tuple[float, float, float]:
    """Least squares measured ~ scale * command + offset; returns (scale, offset, R^2)."""
    design = np.column_stack([command, np.ones_like(command)])
    (scale, offset), *_ = np.linalg.lstsq(design, measured, rcond=None)
    residual = measured - (scale * command + offset)
    total = float(np.sum((measured - measured.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 0.0
    return float(scale), float(offset), r2


# ----------------------------------------------------------------------------------------------
def _position_delay(grid: LagGrid, c: np.ndarray, m: np.ndarray) -> float:
    """The pure delay [s] at which the positions correlate best (|rho|, parabola refined)."""
    r = np.abs(cross_correlation(c - c.mean(), m - m.mean(), grid.k_min, grid.k_max))
    return grid.lag_s(parabolic_peak(r, int(np.argmax(r))))


def _fit_at(grid: LagGrid, tc: np.ndarray, xc: np.ndarray, m: np.ndarray, delay_s: float) -> tuple[float, float, float]:
    """scale, offset, R^2 of measured ~ scale * command(t - delay) + offset, over grid points where
    the delayed command is known."""
    query = grid.t - delay_s
    valid = query >= tc[0]
    if valid.sum() < 3:
        return math.nan, math.nan, math.nan
    return _fit_scale_offset(zero_order_hold(tc, xc, query[valid]), m[valid])


def _estimate_joint(
    name: str, grid: LagGrid, tc: np.ndarray, xc: np.ndarray, tm: np.ndarray, xm: np.ndarray, command_period_s: float,
    options: LatencyOptions,
) -> JointLatency:
    notes: list[str] = []
    c = zero_order_hold(tc, xc, grid.t)
    command_range = float(np.ptp(c))
    update_s = update_period_s(tm, xm)

    unwrap_period: float | None = None
    if options.unwrap == "auto":
        unwrap_period = wrap_period(xm)
    elif options.unwrap != "none":
        unwrap_period = float(options.unwrap)
    if unwrap_period is not None:
        xm = unwrap(xm, unwrap_period)
        notes.append(f"measured position wraps every {unwrap_period:.4f} rad; unwrapped")
    m = linear(tm, xm, grid.t)
    measured_range = float(np.ptp(m))

    def unexcited(why: str) -> JointLatency:
        notes.append(why)
        offset = float(np.mean(m)) if command_range == 0 else None
        return JointLatency(
            name, None, 0.0, None, offset, None, None, None, 0.0, "none", None, None, unwrap_period, update_s,
            command_range, measured_range, tuple(notes),
        )

    lag = correlate_joint(grid, c, m, command_period_s, update_s, options.min_excitation)
    if lag.lag_s is None:
        return unexcited(lag.reason)
    notes.extend(lag.notes)
    latency_s, sign = lag.lag_s, lag.sign

    # Units and zero: fit at the latency, and at the position delay (for a lagging or slewing
    # joint the positions line up there); keep the better fit.
    position_delay = _position_delay(grid, c, m)
    fits = [(*_fit_at(grid, tc, xc, m, delay), delay) for delay in (latency_s, position_delay)]
    scale, offset, r2, fit_delay = max(fits, key=lambda f: f[2] if math.isfinite(f[2]) else -math.inf)
    if sign < 0:
        notes.append("measured moves against the command (negative correlation)")
    if not r2 >= POOR_FIT_R2:
        notes.append(
            f"a delayed, scaled command explains the positions poorly (R^2 {r2:.2f}): the joint does not reach its "
            "targets within a command period, so scale and offset are unreliable"
        )
    joint = JointLatency(
        name, latency_s, lag.confidence, lag.uncertainty_s, offset, scale, r2, fit_delay, lag.correlation,
        lag.response, lag.response_spread_s, position_delay, unwrap_period, update_s, command_range,
        measured_range, tuple(notes), bulk_lag_s=latency_s, bulk_lag_uncertainty_s=lag.uncertainty_s,
    )
    if options.method == "correlation":
        return joint
    return _with_model(joint, grid, tc, xc, tm, xm, sign, options)


def _with_model(joint: JointLatency, grid: LagGrid, tc: np.ndarray, xc: np.ndarray, tm: np.ndarray, xm: np.ndarray,
                sign: float, options: LatencyOptions) -> JointLatency:
    """Dead time (response onset), slew rate and time constant from the servo response model, fitted
    to the whole window and to each command step (servo_response). latency_s becomes the dead time:
    the median of the per-step estimates when there are steps, else the whole-signal fit. Its
    uncertainty combines the steps' standard error with the measurement's resolution: a reading
    refreshed every update_period_s is known only to within that interval (uniform: period/sqrt(12)),
    and a reading's time to within one topic period."""
    notes = list(joint.notes)
    start, end = float(grid.t[0]), float(grid.t[-1])
    state_period = median_period_s(tm)
    tau_min = 0.5 * state_period
    keep_c = tc <= end
    cmd_t, cmd_x = servo_response.compress_hold(tc[keep_c], xc[keep_c])
    fresh = servo_response.fresh_times(tm, xm, joint.update_period_s)
    bounds = (options.min_lag_s, options.max_lag_s)
    bulk = joint.bulk_lag_s if joint.bulk_lag_s is not None else 0.0
    # Initial scale/offset: the correlation fit's when it explains the positions, else the ranges'.
    if joint.scale is not None and joint.fit_r2 is not None and joint.fit_r2 >= POOR_FIT_R2:
        scale0, offset0 = joint.scale, joint.offset
    else:
        scale0 = sign * joint.measured_range / max(joint.command_range, 1e-9)
        offset0 = float(np.mean(xm)) - scale0 * float(np.mean(cmd_x))
    in_win = (tm >= start) & (tm <= end)
    starts = sorted({float(np.clip(d, *bounds)) for d in (0.0, 0.5 * bulk, bulk, 0.25 * options.max_lag_s)})
    whole = servo_response.fit_response(tm[in_win], xm[in_win], fresh[in_win], cmd_t, cmd_x, start, bounds, tau_min,
                                        scale0, offset0, True, starts)
    if whole is None:
        notes.append("the response model could not be fitted (too few readings): latency is the bulk lag")
        return replace(joint, notes=tuple(notes))
    steps: list[StepEstimate] = []
    pre = max(2 * joint.update_period_s, 0.3)
    step_index = servo_response.step_times(cmd_t, cmd_x, min_gap_s=pre)
    d_whole = whole.dead_time_s
    for n, k in enumerate(step_index):
        # The window of step k: from a little before its response can start until the next step's
        # response can start (both at the whole-signal dead time).
        t_step = float(cmd_t[k])
        t0 = t_step + d_whole - pre
        t_next = float(cmd_t[step_index[n + 1]]) if n + 1 < len(step_index) else end
        t_end = min(t_next + d_whole, end)
        if t0 < start or t_step + d_whole >= t_end:
            continue
        sel = (tm >= t0) & (tm < t_end)
        per = servo_response.fit_response(
            tm[sel], xm[sel], fresh[sel], cmd_t, cmd_x, t0, bounds, tau_min, whole.scale, whole.offset,
            False, sorted({float(np.clip(d_whole + dd, *bounds)) for dd in (-0.1, 0.0, 0.1)}))
        if per is not None:
            steps.append(StepEstimate(t_step, per.dead_time_s, per.slew_rate, per.time_constant_s, per.rms, per.n,
                                      per.slewed))
    resolution = math.hypot(joint.update_period_s, state_period) / math.sqrt(12)
    if steps:
        d = np.array([s.dead_time_s for s in steps])
        dead_time = float(np.median(d))
        spread = float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
        d_range = (float(d.min()), float(d.max()))
        standard_error = spread / math.sqrt(len(d)) if len(d) > 1 else 0.0
        slewed = [s.slew_rate for s in steps if s.slewed]
        slew = float(np.median(slewed)) if slewed else None
        tau = float(np.median([s.time_constant_s for s in steps]))
        notes.append(f"dead time: median of {len(steps)} per-step fits (spread {spread:.3f} s, "
                     f"range {d_range[0]:.3f}..{d_range[1]:.3f} s)")
    else:
        dead_time, spread, d_range, standard_error = whole.dead_time_s, None, None, 0.0
        slew = whole.slew_rate if whole.slewed else None
        tau = whole.time_constant_s
        notes.append("no isolated command steps: a smooth command cannot tell the onset from the lag, so the "
                     "latency is the bulk lag; the whole-signal model fit is reported beside it")
    if slew is None:
        notes.append("the joint never moved at a limited speed: slew rate not determined (faster than the data shows)")
    if tau <= 1.5 * tau_min or tau < 0.5 * joint.update_period_s:
        notes.append(f"time constant {tau:.3f} s is below what a reading refreshed every "
                     f"{joint.update_period_s:.3f} s resolves: an upper bound")
    uncertainty = math.hypot(standard_error, resolution)
    latency, latency_uncertainty = (dead_time, uncertainty) if steps else (joint.latency_s, joint.uncertainty_s)
    return replace(
        joint, latency_s=latency, uncertainty_s=latency_uncertainty, notes=tuple(notes), dead_time_s=dead_time,
        dead_time_uncertainty_s=uncertainty, dead_time_median_s=float(np.median([s.dead_time_s for s in steps]))
        if steps else None, dead_time_spread_s=spread, dead_time_range_s=d_range, slew_rate=slew,
        slew_rate_command_units=None if slew is None else slew / max(abs(whole.scale), 1e-9),
        time_constant_s=tau, model_rms=whole.rms, model_scale=whole.scale, model_offset=whole.offset,
        whole_signal_dead_time_s=whole.dead_time_s, steps=tuple(asdict(s) for s in steps),
    )


def match_joints(command: JointStream, state: JointStream) -> tuple[list[str], list[int], list[int], bool, list[str]]:
    """Pair command and state columns: by name when both carry names, else by index.

    Returns (names, command columns, state columns, matched_by_index, notes).
    """
    if command.names and state.names:
        index = {n: i for i, n in enumerate(state.names)}
        common = [n for n in command.names if n in index]
        if not common:
            raise SysidError(
                f"no joint names in common: {command.topic} has {list(command.names)}, "
                f"{state.topic} has {list(state.names)}"
            )
        notes = []
        missing = [n for n in command.names if n not in index]
        if missing:
            notes.append(f"joints {missing} of {command.topic} are not in {state.topic}; skipped")
        return common, [command.names.index(n) for n in common], [index[n] for n in common], False, notes
    n = min(command.n_joints, state.n_joints)
    names = list(command.names or state.names or tuple(f"joint_{i}" for i in range(n)))[:n]
    notes = [f"{command.topic if not command.names else state.topic} has no joint names: joints matched by index"]
    if command.n_joints != state.n_joints:
        notes.append(f"{command.topic} has {command.n_joints} joints, {state.topic} {state.n_joints}: first {n} used")
    return names, list(range(n)), list(range(n)), True, notes


def estimate_latency(command: JointStream, state: JointStream, options: LatencyOptions | None = None) -> LatencyReport:
    """Actuation latency per joint and overall from a command stream and a measured state stream."""
    options = options or LatencyOptions()
    for stream in (command, state):
        if len(stream) < 10:
            raise SysidError(f"{stream.topic}: {len(stream)} usable messages, need at least 10")
    if options.time_source == "auto":
        source, reason = choose_time_source(command, state)
    elif options.time_source == "header":
        for stream in (command, state):
            if stream.stamp_ns is None:
                raise SysidError(f"time_source 'header' asked for, but {stamps_sane(stream)[1]}")
        source, reason = "header", "asked for"
    else:
        source, reason = "log", "asked for"
    base = [s.stamp_ns if source == "header" else s.log_ns for s in (command, state)]
    origin_ns = int(min(int(b[0]) for b in base))
    tc, tm = times_s(command, source, origin_ns), times_s(state, source, origin_ns)
    start, end = max(tc[0], tm[0]), min(tc[-1], tm[-1])
    if options.window_s[0] is not None:
        start = max(start, options.window_s[0])
    if options.window_s[1] is not None:
        end = min(end, options.window_s[1])
    if end - start < 1.0:
        raise SysidError(
            f"{command.topic} and {state.topic} overlap for {max(0.0, end - start):.3f} s in the window; need >= 1 s"
        )
    command_period, state_period = median_period_s(tc), median_period_s(tm)
    grid = lag_grid(start, end, command_period, state_period, options.min_lag_s, options.max_lag_s)
    step = grid.step_s

    names, command_cols, state_cols, by_index, notes = match_joints(command, state)
    in_window = (tm >= start - state_period) & (tm <= end + state_period)
    joints = []
    for name, ci, si in zip(names, command_cols, state_cols, strict=True):
        joints.append(
            _estimate_joint(
                name, grid, tc, command.positions[:, ci], tm[in_window], state.positions[in_window, si],
                command_period, options,
            )
        )
    combined = combine_joints([j.latency_s for j in joints], [j.confidence for j in joints],
                              [j.uncertainty_s for j in joints])
    overall, confidence, uncertainty = combined.lag_s, combined.confidence, combined.uncertainty_s
    if not combined.used:
        notes.append("no joint was excited: the commands never changed enough to measure a latency")
    usable = [j for j in joints if j.latency_s is not None and j.confidence > 0]
    bulk = [j for j in usable if j.bulk_lag_s is not None]
    bulk_lag = bulk_uncertainty = None
    if bulk:
        weights = np.array([j.confidence for j in bulk])
        bulk_lag = float(np.dot(weights, [j.bulk_lag_s for j in bulk]) / weights.sum())
        bulk_uncertainty = float(np.sqrt(np.dot(weights**2, np.array([j.bulk_lag_uncertainty_s for j in bulk]) ** 2))
                                 / weights.sum())
    dropped = {s.topic: s.dropped for s in (command, state) if s.dropped}
    return LatencyReport(
        overall, confidence, uncertainty, tuple(joints), source, reason, by_index, command.topic, state.topic,
        1.0 / command_period, 1.0 / state_period, step, (float(start), float(end)), origin_ns,
        (grid.lag_s(0), grid.lag_s(grid.k_max - grid.k_min)), dropped, tuple(notes), bulk_lag, bulk_uncertainty,
        options.method,
    )


def format_report(report: LatencyReport) -> str:
    """Human-readable table of a LatencyReport."""

    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None or not math.isfinite(value) else format(value, spec)

    what = "dead time (response onset)" if report.method == "model" else "actuation latency (cross-correlation)"
    lines = [
        f"{what} {fmt(report.latency_s, '.3f')} s (+/- {fmt(report.uncertainty_s, '.3f')} s), "
        f"confidence {report.confidence:.2f}; bulk lag (cross-correlation, includes slewing) "
        f"{fmt(report.bulk_lag_s, '.3f')} s (+/- {fmt(report.bulk_lag_uncertainty_s, '.3f')} s)",
        f"{report.command_topic} ({report.command_rate_hz:.1f} Hz) -> {report.state_topic} "
        f"({report.state_rate_hz:.1f} Hz); time source: {report.time_source} ({report.time_source_reason}); "
        f"window {report.window_s[0]:.2f}..{report.window_s[1]:.2f} s",
        f"{'joint':<12} {'latency[s]':>10} {'+/-[s]':>8} {'conf':>5} {'scale':>8} {'offset':>9} {'R^2':>6} "
        f"{'pos.delay[s]':>12} {'response':>8}",
    ]
    for j in report.joints:
        lines.append(
            f"{j.name:<12} {fmt(j.latency_s, '10.3f')} {fmt(j.uncertainty_s, '8.3f')} {j.confidence:5.2f} "
            f"{fmt(j.scale, '8.4f')} {fmt(j.offset, '9.4f')} {fmt(j.fit_r2, '6.3f')} "
            f"{fmt(j.position_delay_s, '12.3f')} {j.response:>8}"
        )
        if j.dead_time_s is not None:
            lines.append(
                f"    dead time {fmt(j.dead_time_s, '.3f')} s +/- {fmt(j.dead_time_uncertainty_s, '.3f')} "
                f"(per-step spread {fmt(j.dead_time_spread_s, '.3f')} s over {len(j.steps)} steps), "
                f"bulk lag {fmt(j.bulk_lag_s, '.3f')} s, slew rate {fmt(j.slew_rate, '.3f')} /s, "
                f"time constant {fmt(j.time_constant_s, '.3f')} s, refresh {j.update_period_s:.3f} s")
            for st in j.steps:
                lines.append(f"      step at {st['t_s']:7.2f} s: dead time {st['dead_time_s']:.3f} s, slew "
                             f"{st['slew_rate']:.3f} /s, tau {st['time_constant_s']:.3f} s, rms {st['rms']:.4f}")
        lines.extend(f"    - {note}" for note in j.notes)
    lines.extend(f"note: {note}" for note in report.notes)
    if report.dropped_messages:
        lines.append(f"dropped malformed messages: {report.dropped_messages}")
    return "\n".join(lines)
