"""Command -> response lag by cross-correlation: the one implementation behind the actuator's online
latency estimate (core/control/latency_estimator.py) and `sim2real sysid latency` (its bulk lag,
sysid/latency.py), so that on the same samples both give the same figure.

Method, per joint (pure numpy, no ROS; times are seconds on one clock, relative to one origin):
1. Both streams onto one uniform grid (`lag_grid`: half the faster stream's period): the command
   held until replaced (zero-order hold: a forward position controller, the sim's command queue, a
   servo bus) or, for a joint that follows the line through the commands, linearly interpolated;
   the measurement linearly interpolated.
2. Cross-correlate the velocities of both, each smoothed by the same Gaussian as wide as the slower
   stream really refreshes (anything finer is aliasing), normalized over the samples that overlap
   at each lag. The peak of |rho| gives the sign (a joint may count the other way).
3. A sharp lobe (no wider than SPREAD_LOBE_RATIO x the command's own autocorrelation lobe: the
   joint follows like a pure delay) gives the lag at its peak, refined by a parabola to below one
   grid step. A spread lobe (the joint lags or slews) gives the lag at the lobe's rising
   half-height edge: the dead time before the response starts.
4. Confidence = peak normalized correlation x prominence (how far the peak stands above the
   correlation anywhere else in the lag range), halved when the lobe is wider than the lag range
   and its top sits at an end of it; uncertainty from the correlation noise over the lobe's slope
   and the refresh periods.
Joints are combined by a confidence-weighted mean (`combine_joints`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# A lobe wider than this many times the command's autocorrelation lobe is a spread response.
SPREAD_LOBE_RATIO = 1.5
# The grid is never finer than this [s], and never has more points than MAX_GRID_POINTS.
MIN_GRID_STEP_S = 1e-4
MAX_GRID_POINTS = 2_000_000
# Command peak-to-peak range [rad] below which a joint counts as not excited.
DEFAULT_MIN_COMMAND_RANGE = 1e-4


# ----------------------------------------------------------------------------------------------
# Streams onto a grid
def median_period_s(t: np.ndarray) -> float:
    """Median sample period [s] of increasing times t (N,) [s] (inf for fewer than 2 samples)."""
    if len(t) < 2:
        return math.inf
    d = np.diff(t)
    d = d[d > 0]
    return float(np.median(d)) if len(d) else math.inf


def update_period_s(t: np.ndarray, x: np.ndarray) -> float:
    """Median interval [s] between changes of value of one joint (t (N,) [s], x (N,)): the rate at
    which the joint is really measured. Servo buses often refresh each joint slower than the topic
    is published and repeat the last value in between (sample and hold)."""
    changed = np.flatnonzero(np.diff(x) != 0) + 1
    if len(changed) < 3:
        return median_period_s(t)
    return max(median_period_s(t), float(np.median(np.diff(t[changed]))))


def zero_order_hold(t: np.ndarray, x: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Value of the latest sample at or before each query time (a command holds until replaced);
    before the first sample, the first value."""
    index = np.searchsorted(t, query, side="right") - 1
    return x[np.clip(index, 0, len(x) - 1)]


def linear(t: np.ndarray, x: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Linear interpolation of samples x (N,) at times t (N,), held constant outside their range."""
    return np.interp(query, t, x)


@dataclass(frozen=True)
class LagGrid:
    """t (N,) [s] relative to the caller's origin, step_s [s]; lags searched are k_min..k_max steps."""

    t: np.ndarray
    step_s: float
    k_min: int
    k_max: int

    def lag_s(self, k: float) -> float:
        """The lag [s] of index k into a correlation over k_min..k_max."""
        return (self.k_min + k) * self.step_s


def lag_grid(start_s: float, end_s: float, command_period_s: float, state_period_s: float,
             min_lag_s: float, max_lag_s: float) -> LagGrid:
    """The grid over [start_s, end_s) [s]: half the faster stream's period [s], no finer than
    MIN_GRID_STEP_S and no more than MAX_GRID_POINTS points; lags from min_lag_s to max_lag_s [s]."""
    step = max(min(command_period_s, state_period_s) / 2, MIN_GRID_STEP_S, (end_s - start_s) / MAX_GRID_POINTS)
    return LagGrid(np.arange(start_s, end_s, step), step, int(math.floor(min_lag_s / step)),
                   int(math.ceil(max_lag_s / step)))


def resample_command(grid: LagGrid, t: np.ndarray, x: np.ndarray, held: bool = True) -> np.ndarray:
    """Commands x (N,) sent at t (N,) [s] on the grid: held until replaced (held) or linear."""
    return zero_order_hold(t, x, grid.t) if held else linear(t, x, grid.t)


# ----------------------------------------------------------------------------------------------
# Correlation
def gaussian_smooth(x: np.ndarray, sigma: float) -> np.ndarray:
    """x (N,) smoothed by a Gaussian of standard deviation `sigma` samples (kernel truncated at 4
    sigma, the ends extended by their edge values)."""
    radius = int(4.0 * sigma + 0.5)
    if radius == 0:
        return x.astype(float, copy=True)
    offsets = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    return np.convolve(np.pad(x, radius, mode="edge"), kernel, mode="valid")


def cross_correlation(a: np.ndarray, b: np.ndarray, k_min: int, k_max: int) -> np.ndarray:
    """r[k] = sum_t a[t] b[t+k] / sqrt(sum a^2 * sum b^2), both sums over the samples that overlap
    at lag k, for k = k_min..k_max (FFT, zero padded). Normalizing over the overlap keeps a broad
    lobe from being pulled toward lag 0 by the shrinking overlap."""
    n = len(a)
    size = 1 << int(math.ceil(math.log2(2 * n + abs(k_min) + abs(k_max) + 1)))
    spectrum = np.conj(np.fft.rfft(a, size)) * np.fft.rfft(b, size)
    full = np.fft.irfft(spectrum, size)
    lags = np.arange(k_min, k_max + 1)
    # Energy of a[0:j] and b[0:j] for every j, to get each lag's overlap energy.
    energy_a = np.concatenate([[0.0], np.cumsum(a * a)])
    energy_b = np.concatenate([[0.0], np.cumsum(b * b)])
    shift = np.clip(np.abs(lags), 0, n)
    positive = lags >= 0
    overlap_a = np.where(positive, energy_a[n - shift], energy_a[n] - energy_a[shift])
    overlap_b = np.where(positive, energy_b[n] - energy_b[shift], energy_b[n - shift])
    norm = np.sqrt(overlap_a * overlap_b)
    values = full[lags % size]
    return np.divide(values, norm, out=np.zeros(len(lags)), where=norm > 0)


def _crossing(values: np.ndarray, start: int, level: float, step: int) -> tuple[float, bool]:
    """Walk from index `start` in direction `step` until values drop below `level`; the crossing
    position (fractional index, linear interpolation) and whether it was found inside the array."""
    i = start
    while 0 <= i + step < len(values):
        j = i + step
        if values[j] < level:
            frac = (values[i] - level) / (values[i] - values[j])
            return i + step * frac, True
        i = j
    return float(i), False


def _descent_end(values: np.ndarray, start: int, step: int) -> int:
    """Index where values stop decreasing, walking from `start` in direction `step`: the foot of
    the lobe whose top is at `start`."""
    i = start
    while 0 <= i + step < len(values) and values[i + step] < values[i]:
        i += step
    return i


def parabolic_peak(values: np.ndarray, k: int) -> float:
    """Sub-sample position of the maximum at index k (parabola through k-1, k, k+1)."""
    if k <= 0 or k >= len(values) - 1:
        return float(k)
    left, mid, right = values[k - 1], values[k], values[k + 1]
    denom = left - 2 * mid + right
    if denom >= 0:
        return float(k)
    return k + 0.5 * (left - right) / denom


@dataclass(frozen=True)
class JointLag:
    """One joint's lag of the measurement behind the command.

    lag_s [s] (None when not excited or uncorrelated), confidence [0, 1], uncertainty_s [s],
    correlation: the signed normalized correlation at the peak, sign: +1 or -1 (the joint counts
    the other way), response: 'sharp' | 'spread' | 'none', response_spread_s [s]: how much wider
    the lobe is than a pure delay's, excitation [rad/s]: RMS of the smoothed command velocity,
    reason: why lag_s is None ('ok' otherwise), notes: what the caller should tell the user.
    """

    lag_s: float | None
    confidence: float
    uncertainty_s: float | None
    correlation: float
    sign: float
    response: str
    response_spread_s: float | None
    excitation: float
    reason: str
    notes: tuple[str, ...] = ()


def correlate_joint(grid: LagGrid, command: np.ndarray, measured: np.ndarray, command_period_s: float,
                    update_period: float, min_command_range: float = DEFAULT_MIN_COMMAND_RANGE) -> JointLag:
    """The lag of `measured` behind `command`, both (N,) on `grid` (see the module docstring).

    command_period_s [s]: the command stream's median period; update_period [s]: how often the
    measurement really refreshes (update_period_s).
    """
    command_range = float(np.ptp(command))

    def unexcited(reason: str, excitation: float = 0.0) -> JointLag:
        return JointLag(None, 0.0, None, 0.0, 1.0, "none", None, excitation, reason)

    if command_range < min_command_range:
        return unexcited(f"no excitation: command range {command_range:.3g} < {min_command_range:g}")
    if float(np.ptp(measured)) == 0.0:
        return unexcited("the measurement never changes: the joint did not respond")
    # Velocities, smoothed as wide as the slower stream really refreshes (sample-and-hold servos
    # refresh each joint far slower than the topic rate; anything finer is aliasing).
    sigma_s = max(command_period_s, update_period, grid.step_s)
    sigma = sigma_s / grid.step_s
    dc = gaussian_smooth(np.gradient(command, grid.step_s), sigma)
    dm = gaussian_smooth(np.gradient(measured, grid.step_s), sigma)
    dc -= dc.mean()
    dm -= dm.mean()
    excitation = float(np.sqrt(np.mean(dc**2)))
    r = cross_correlation(dc, dm, grid.k_min, grid.k_max)
    k_peak = int(np.argmax(np.abs(r)))
    sign = 1.0 if r[k_peak] >= 0 else -1.0
    rs = sign * r
    peak = float(rs[k_peak])
    if peak <= 0:
        return unexcited("command and measurement do not correlate", excitation)

    notes: list[str] = []
    # Lobe of the command's own velocity autocorrelation: the shape a pure delay would give.
    half_ref_samples = max(1, int(4 * sigma) + 2)
    auto = cross_correlation(dc, dc, 0, min(len(dc) - 1, int(10 * half_ref_samples)))
    ref_half, _ = _crossing(auto, 0, 0.5 * float(auto[0]), +1)
    # Before the response the correlation sits at a baseline: ~0 when the joint was at rest
    # before each command change, negative when it was still moving the other way (a slewing joint
    # that never settles). The response's edge is half way from that baseline to the peak.
    baseline = min(0.0, float(rs[: k_peak + 1].min()))
    level = 0.5 * (peak + baseline)
    left, left_found = _crossing(rs, k_peak, level, -1)
    right, right_found = _crossing(rs, k_peak, 0.5 * peak, +1)
    if not left_found and not right_found:
        notes.append(
            "the command is too slow to resolve the latency (its correlation lobe is wider than the lag range): "
            "excite faster (sysid excite)"
        )
    elif not left_found:
        notes.append("the correlation peak reaches the low end of the lag range: widen --min-lag")
    elif not right_found:
        notes.append("the response lasts past the high end of the lag range")
    # A lobe cut by the end of the lag range is taken as symmetric about its peak.
    width = right - left if right_found else 2 * (k_peak - left)
    spread = width > SPREAD_LOBE_RATIO * 2 * ref_half
    if spread:
        k_lag = left
        notes.append("the joint lags or slews: latency is the dead time before its response starts")
    else:
        k_lag = parabolic_peak(rs, k_peak)
    lag_s = grid.lag_s(k_lag)

    # Confidence: correlation strength times prominence of the lobe over everything else.
    lobe = np.zeros(len(rs), bool)
    lobe[_descent_end(rs, k_peak, -1): _descent_end(rs, k_peak, +1) + 1] = True
    outside = rs[~lobe]
    duration_s = grid.t[-1] - grid.t[0]
    floor_noise = 1.0 / math.sqrt(max(1.0, duration_s / (2 * sigma_s)))
    noise = max(float(np.std(np.abs(r[~lobe]))) if len(outside) > 3 else 0.0, floor_noise * (1 - min(peak, 1.0)))
    competitor = max(float(outside.max()) if len(outside) else 0.0, noise)
    prominence = (peak - competitor) / (peak - baseline)
    confidence = float(np.clip(peak, 0, 1) * np.clip(prominence, 0, 1))
    # A lobe wider than the lag range with its top at an end of the range places no peak: the lag
    # may lie outside. A top inside the range is placed by the parabola however wide the lobe (a
    # slow, smooth command: the policy's usual motion, which the online estimate sees).
    if not left_found and not right_found and not 0 < k_peak < len(rs) - 1:
        confidence *= 0.5

    # Uncertainty: correlation noise over the lobe's slope, plus the timing lost to the refresh
    # periods (each sample is known only to within its period).
    slope = (peak - level) / max((k_peak - left) * grid.step_s, grid.step_s)
    uncertainty = math.sqrt((noise / slope) ** 2 + (max(command_period_s, update_period) ** 2 + grid.step_s**2) / 12)
    return JointLag(lag_s, confidence, uncertainty, float(sign * peak), sign, "spread" if spread else "sharp",
                    max(0.0, (width - 2 * ref_half) * grid.step_s), excitation, "ok", tuple(notes))


@dataclass(frozen=True)
class CombinedLag:
    """The joints' lags combined: lag_s [s] (None when no joint is usable), confidence [0, 1],
    uncertainty_s [s] (the weighted uncertainties and the joints' spread), joints used."""

    lag_s: float | None
    confidence: float
    uncertainty_s: float | None
    used: int


def combine_joints(lags_s: list[float | None], confidences: list[float],
                   uncertainties_s: list[float | None]) -> CombinedLag:
    """Confidence-weighted mean of the joints' lags [s] over those with a lag and confidence > 0.
    Confidence: sum w^2 / sum w (a confident joint is not diluted by a weak one)."""
    usable = [(lag, c, u) for lag, c, u in zip(lags_s, confidences, uncertainties_s, strict=True)
              if lag is not None and c > 0]
    if not usable:
        return CombinedLag(None, 0.0, None, 0)
    weights = np.array([c for _, c, _ in usable])
    lags = np.array([lag for lag, _, _ in usable])
    overall = float(np.dot(weights, lags) / weights.sum())
    confidence = float(np.dot(weights, weights) / weights.sum())
    spread = float(np.sqrt(np.dot(weights, (lags - overall) ** 2) / weights.sum()))
    uncertainties = np.array([u if u is not None else 0.0 for _, _, u in usable])
    combined = float(np.sqrt(np.dot(weights**2, uncertainties**2))) / weights.sum()
    return CombinedLag(overall, confidence, math.hypot(combined, spread), len(usable))


def estimate_lag(cmd_times_s: np.ndarray, cmd_positions: np.ndarray, meas_times_s: np.ndarray,
                 meas_positions: np.ndarray, start_s: float, end_s: float, min_lag_s: float, max_lag_s: float,
                 commands_held: bool = True,
                 min_command_range: float = DEFAULT_MIN_COMMAND_RANGE) -> tuple[CombinedLag, list[JointLag], LagGrid]:
    """Lag of the measurement behind the command over [start_s, end_s] [s], joints in the same columns.

    cmd/meas times (N,) / (M,) [s] relative to one origin, positions (N, n) / (M, n) [rad]. Lags
    searched: [min_lag_s, max_lag_s] [s]. This is what `sysid latency --method correlation` computes
    per joint (after its unwrapping) and overall; the actuator's online estimate calls it directly.
    """
    command_period, state_period = median_period_s(cmd_times_s), median_period_s(meas_times_s)
    grid = lag_grid(start_s, end_s, command_period, state_period, min_lag_s, max_lag_s)
    # Measurements just around the window: enough to interpolate at its ends.
    in_window = (meas_times_s >= start_s - state_period) & (meas_times_s <= end_s + state_period)
    tm = meas_times_s[in_window]
    joints = []
    for j in range(cmd_positions.shape[1]):
        xm = meas_positions[in_window, j]
        joints.append(correlate_joint(
            grid, resample_command(grid, cmd_times_s, cmd_positions[:, j], commands_held), linear(tm, xm, grid.t),
            command_period, update_period_s(tm, xm), min_command_range))
    combined = combine_joints([j.lag_s for j in joints], [j.confidence for j in joints],
                              [j.uncertainty_s for j in joints])
    return combined, joints, grid
