"""Dead time, slew rate and time constant of a joint, by fitting a servo response model (pure numpy/scipy).

The model: the joint's target is the command, delayed by the dead time d [s] and mapped into the
measured units (target = scale * command(t - d) + offset); the joint moves toward it as a
rate-limited first-order system:

    dx/dt = clip((target - x) / tau, -v, +v)

with v [rad/s of the measured joint] the slew rate (the servo's speed limit) and tau [s] the time
constant of the final approach. Between command changes the target is constant and the response
has a closed form (slew at v until within v * tau of the target, then an exponential), so x(t) is
exact and continuous in d: the fit needs no time grid.

The measurement: servo buses often refresh a joint's reading far slower than its topic is
published and repeat the last value in between. A reading is compared with the model at the time
its value first appeared (its "fresh" time), but never more than one refresh interval before its
own time: a value unchanged for longer was re-read (a joint at rest), not stale. The refresh
interval limits how finely the onset is seen, and belongs in its uncertainty (latency.py adds it).

The dead time is the onset of the response: the time from a command change to the moment the
joint starts to move toward it, which is what a latency compensator must look ahead. A
cross-correlation lag (the "bulk lag") also contains the time spent slewing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

# Slew rates are searched within [MIN_SLEW, MAX_SLEW] [rad/s]; time constants within [tau_min, MAX_TAU_S] [s].
MIN_SLEW = 1e-3
MAX_SLEW = 1e3
MAX_TAU_S = 5.0
# A step smaller than this fraction of the command's range does not count as a step of its own.
STEP_FRACTION = 0.1
# A per-step fit needs at least this many fresh readings in its window.
MIN_FRESH_PER_STEP = 4


@dataclass(frozen=True)
class ResponseFit:
    """One fit of the model: dead_time_s [s], slew_rate [measured units/s], time_constant_s [s],
    scale and offset (command -> measured units), x0 (position at t0 [measured units]), t0 [s],
    rms (residual [measured units]), n (readings used), saturated (the joint slewed: v binding at
    some point; else v is not determined by the data)."""

    dead_time_s: float
    slew_rate: float
    time_constant_s: float
    scale: float
    offset: float
    x0: float
    t0: float
    rms: float
    n: int
    slewed: bool


def fresh_times(t: np.ndarray, x: np.ndarray, refresh_s: float | None = None) -> np.ndarray:
    """For each reading, the time [s] its value first appeared (the reading is held until it changes).

    refresh_s [s]: the interval at which the bus really re-reads the joint. A value held longer than
    that was read again with the same result (a joint at rest), so a reading is compared no earlier
    than one refresh interval before its own time: max(first appeared, t - refresh_s). Without it,
    every reading of a joint resting for seconds would be compared at the one instant it arrived.
    """
    changed = np.concatenate([[True], np.diff(x) != 0])
    index = np.maximum.accumulate(np.where(changed, np.arange(len(x)), 0))
    first = t[index]
    if refresh_s is None or not math.isfinite(refresh_s):
        return first
    return np.maximum(first, t - refresh_s)


def compress_hold(t: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A zero-order-hold command reduced to its changes: (times of changes [s], values), the first
    sample kept as the initial value."""
    keep = np.concatenate([[True], np.diff(x) != 0])
    return t[keep], x[keep]


def _segment(x0: float, target: float, s: np.ndarray, v: float, tau: float) -> np.ndarray:
    """Closed-form response after s [s] (array, >= 0) of a constant target from x0."""
    e = target - x0
    band = v * tau
    if abs(e) > band:
        sign = 1.0 if e > 0 else -1.0
        t_slew = (abs(e) - band) / v
        tail = target - sign * band * np.exp(-np.maximum(s - t_slew, 0.0) / tau)
        return np.where(s <= t_slew, x0 + sign * v * s, tail)
    return target - e * np.exp(-s / tau)


def response(query: np.ndarray, change_t: np.ndarray, targets: np.ndarray, t0: float, x0: float, v: float,
             tau: float) -> np.ndarray:
    """Model position at sorted `query` times [s] (times before t0 give x0). Target `targets[j]`
    acts from change_t[j] (change_t[0] may be anything <= t0: the target at t0) until change_t[j+1]."""
    out = np.full(len(query), x0, dtype=float)
    # The target in effect at t0, then every later change.
    first = max(int(np.searchsorted(change_t, t0, side="right")) - 1, 0)
    starts = [t0, *[float(c) for c in change_t[first + 1:]]]
    values = [float(v_) for v_ in targets[first:]]
    x = x0
    for j, (start, target) in enumerate(zip(starts, values, strict=True)):
        end = starts[j + 1] if j + 1 < len(starts) else math.inf
        lo, hi = np.searchsorted(query, start, side="left"), np.searchsorted(query, end, side="left")
        if hi > lo:
            out[lo:hi] = _segment(x, target, query[lo:hi] - start, v, tau)
        if math.isinf(end):
            break
        x = float(_segment(x, target, np.array([end - start]), v, tau)[0])
        if hi >= len(query):
            break
    return out


def fit_response(t_read: np.ndarray, y: np.ndarray, t_fresh: np.ndarray, cmd_t: np.ndarray, cmd_x: np.ndarray,
                 t0: float, dead_time_bounds: tuple[float, float], tau_min_s: float, scale: float, offset: float,
                 fit_scale: bool, dead_time_starts: list[float]) -> ResponseFit | None:
    """Least-squares fit of the model to readings y (measured units) at t_read [s] (each compared at
    its t_fresh), commands (cmd_t [s], cmd_x) as changes only. Starts from each dead time in
    `dead_time_starts`; keeps the best. fit_scale: also fit scale and offset (else fixed).
    Returns None without enough readings."""
    keep = t_read >= t0
    t_read, y, t_fresh = t_read[keep], y[keep], np.maximum(t_fresh[keep], t0)
    if len(y) < MIN_FRESH_PER_STEP:
        return None
    order = np.argsort(t_fresh, kind="stable")
    tq, yq = t_fresh[order], y[order]
    motion = max(float(np.ptp(yq)), 1e-6)
    lo_d, hi_d = dead_time_bounds
    tau_lo = max(tau_min_s, 1e-4)

    def unpack(p: np.ndarray) -> tuple[float, float, float, float, float, float]:
        d, log_v, log_tau, x0 = p[:4]
        sc, off = (p[4], p[5]) if fit_scale else (scale, offset)
        return float(d), math.exp(log_v), math.exp(log_tau), float(x0), float(sc), float(off)

    def residual(p: np.ndarray) -> np.ndarray:
        d, v, tau, x0, sc, off = unpack(p)
        model = response(tq, cmd_t + d, sc * cmd_x + off, t0, x0, v, tau)
        return (model - yq) / motion

    # Starting slew: the fastest change between fresh readings; starting tau: a few readings.
    fresh = np.concatenate([[True], np.diff(yq) != 0])
    tf, yf = tq[fresh], yq[fresh]
    slopes = np.abs(np.diff(yf)) / np.maximum(np.diff(tf), 1e-6) if len(yf) > 1 else np.array([1.0])
    v0 = float(np.clip(np.percentile(slopes, 90) if len(slopes) else 1.0, MIN_SLEW * 2, MAX_SLEW / 2))
    tau0 = float(np.clip(2 * tau_lo, tau_lo, MAX_TAU_S))
    lower = [lo_d, math.log(MIN_SLEW), math.log(tau_lo), -np.inf]
    upper = [hi_d, math.log(MAX_SLEW), math.log(MAX_TAU_S), np.inf]
    if fit_scale:
        lower += [-np.inf, -np.inf]
        upper += [np.inf, np.inf]
    best = None
    for d_start in dead_time_starts:
        p0 = [float(np.clip(d_start, lo_d, hi_d)), math.log(v0), math.log(tau0), float(yq[0])]
        if fit_scale:
            p0 += [scale, offset]
        try:
            result = least_squares(residual, np.array(p0), bounds=(lower, upper), x_scale="jac", max_nfev=400)
        except (ValueError, FloatingPointError):
            continue
        if best is None or result.cost < best.cost:
            best = result
    if best is None:
        return None
    d, v, tau, x0, sc, off = unpack(best.x)
    rms = float(np.sqrt(np.mean((best.fun * motion) ** 2)))
    # Did the joint slew (v binding) anywhere? Then v is determined; else only a lower bound.
    model = response(tq, cmd_t + d, sc * cmd_x + off, t0, x0, v, tau)
    speeds = np.abs(np.diff(model)) / np.maximum(np.diff(tq), 1e-9)
    slewed = bool(len(speeds) and np.max(speeds) > 0.9 * v)
    return ResponseFit(d, v, tau, sc, off, x0, t0, rms, len(yq), slewed)


def step_times(cmd_t: np.ndarray, cmd_x: np.ndarray, min_gap_s: float) -> list[int]:
    """Indices (into the change-compressed command) of the steps: changes of at least STEP_FRACTION
    of the command's range, at least min_gap_s [s] after the previous change of any size."""
    if len(cmd_x) < 2:
        return []
    span = float(np.ptp(cmd_x))
    steps = []
    for i in range(1, len(cmd_x)):
        if abs(cmd_x[i] - cmd_x[i - 1]) >= STEP_FRACTION * span and cmd_t[i] - cmd_t[i - 1] >= min_gap_s:
            steps.append(i)
    return steps
