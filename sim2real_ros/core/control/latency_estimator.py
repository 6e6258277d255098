"""Online estimate of actuation latency: how long after a command is sent the joints follow it.

Method: over a sliding window, the sent commands and the measured joint positions are resampled
onto one uniform time grid (linear interpolation, `grid_dt_s`), differentiated to velocities (a
position offset or a steady tracking error does not bias the result), and cross-correlated for
lags in [0, max_lag_s] (measurement lagging command). The correlation is normalized per lag over
the overlapping samples and summed over joints weighted by their energy, so it lies in [-1, 1].
The peak is refined to sub-sample precision with a parabola through it and its two neighbours.

Commands are held until the next one arrives (a ros2_control forward controller, the sim's command
queue): the joints see a staircase whose mean delay behind the smooth line through the command
samples is half a command period. That half period is a property of the control rate, not of the
actuator, so with `hold_correction` (default) it is subtracted: the estimate is then the delay a
system-identification step response would show (the `actuation_latency_s` of the sim params).

Confidence is the normalized correlation at the peak (1 = the measurement is a delayed copy of
the command), forced to 0 when the commands do not move enough (no excitation: any lag fits a
constant) or when the window holds too few samples. What the estimate measures is the delay from
a command's tick stamp to the measured motion: transport, driver and controller tracking lag
together, which is what latency compensation has to cover.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..timebase import NS_PER_S


@dataclass(frozen=True)
class LatencyEstimatorConfig:
    """window_s [s]: history used; grid_dt_s [s]: resampling step; max_lag_s [s]: largest latency
    searched; min_velocity_rms [rad/s]: command velocity RMS below which there is no excitation;
    hold_correction: subtract half the median command period (commands are held until the next);
    max_command_gap_s [s]: a longer pause between commands restarts the histories."""

    window_s: float = 4.0
    grid_dt_s: float = 0.002
    max_lag_s: float = 0.25
    min_velocity_rms: float = 0.01
    hold_correction: bool = True
    max_command_gap_s: float = 0.25
    source: str = "LatencyEstimatorConfig"

    def __post_init__(self) -> None:
        for name in ("window_s", "grid_dt_s", "max_lag_s", "min_velocity_rms", "max_command_gap_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(self.source, name, value, "must be a finite number > 0")
        if self.max_lag_s >= self.window_s / 2:
            raise ConfigError(self.source, "max_lag_s", self.max_lag_s, f"must be < window_s / 2 = {self.window_s / 2}")
        if self.grid_dt_s > self.max_lag_s / 4:
            limit = self.max_lag_s / 4
            raise ConfigError(self.source, "grid_dt_s", self.grid_dt_s, f"must be <= max_lag_s / 4 = {limit}")


@dataclass(frozen=True)
class LatencyEstimate:
    """latency_s [s] (None when it cannot be estimated), confidence in [0, 1], excitation: command
    velocity RMS [rad/s] over the window, reason: why the confidence is what it is, hold_s [s]: the
    half command period subtracted (0 without hold_correction)."""

    latency_s: float | None
    confidence: float
    excitation: float
    reason: str
    hold_s: float = 0.0


class LatencyEstimator:
    """Collects (time, positions) of commands sent and joint states measured; estimates the delay.

    Times are integer nanoseconds on one clock (the node's); positions are (n,) arrays [rad] in one
    joint order. Samples older than the window are dropped as new ones arrive.
    """

    def __init__(self, config: LatencyEstimatorConfig | None = None) -> None:
        self.config = config or LatencyEstimatorConfig()
        self._commands: deque[tuple[int, np.ndarray]] = deque()
        self._measured: deque[tuple[int, np.ndarray]] = deque()

    def add_command(self, stamp_ns: int, positions: np.ndarray) -> None:
        """A command sent at `stamp_ns` [ns] (the tick stamp), positions (n,) [rad].

        After a gap longer than `max_command_gap_s` (stale chunks, a paused policy) the joints held
        something else and jump when commands resume; both histories restart from here."""
        if self._commands and stamp_ns - self._commands[-1][0] > int(self.config.max_command_gap_s * NS_PER_S):
            self.clear()
        self._append(self._commands, stamp_ns, positions)

    def add_measurement(self, stamp_ns: int, positions: np.ndarray) -> None:
        """A measured joint state stamped `stamp_ns` [ns], positions (n,) [rad]."""
        self._append(self._measured, stamp_ns, positions)

    def _append(self, history: deque, stamp_ns: int, positions: np.ndarray) -> None:
        if history and stamp_ns <= history[-1][0]:
            if stamp_ns < history[-1][0] - int(self.config.window_s * NS_PER_S):
                history.clear()  # the clock jumped back (sim reset, bag loop): start over
            else:
                return  # duplicate or out of order: interpolation needs increasing times
        history.append((int(stamp_ns), np.asarray(positions, dtype=float).copy()))
        horizon = stamp_ns - int(self.config.window_s * NS_PER_S)
        while history and history[0][0] < horizon:
            history.popleft()

    def copy(self) -> LatencyEstimator:
        """A copy of the histories, so a caller can estimate outside its lock (arrays are never mutated)."""
        other = LatencyEstimator(self.config)
        other._commands = deque(self._commands)
        other._measured = deque(self._measured)
        return other

    def clear(self) -> None:
        self._commands.clear()
        self._measured.clear()

    def estimate(self) -> LatencyEstimate:
        """Cross-correlation estimate over the common part of the two histories."""
        cfg = self.config
        if len(self._commands) < 4 or len(self._measured) < 4:
            return LatencyEstimate(None, 0.0, 0.0, "too few samples")
        cmd_t = np.array([t for t, _ in self._commands], dtype=np.int64)
        meas_t = np.array([t for t, _ in self._measured], dtype=np.int64)
        cmd_q = np.stack([q for _, q in self._commands])
        meas_q = np.stack([q for _, q in self._measured])
        if cmd_q.shape[1] != meas_q.shape[1]:
            return LatencyEstimate(None, 0.0, 0.0, f"{cmd_q.shape[1]} command joints vs {meas_q.shape[1]} measured")
        # The first max_lag of commands is skipped: the joints' response to what came before them
        # (a hold, a jump to the first command) has no counterpart in the command history.
        start_ns = max(cmd_t[0] + int(cfg.max_lag_s * NS_PER_S), meas_t[0])
        stop_ns = min(cmd_t[-1], meas_t[-1])
        return estimate_delay(
            (cmd_t - start_ns) / NS_PER_S, cmd_q, (meas_t - start_ns) / NS_PER_S, meas_q,
            (stop_ns - start_ns) / NS_PER_S, cfg,
        )


def _resample(times_s: np.ndarray, values: np.ndarray, grid_s: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(grid_s, times_s, values[:, j]) for j in range(values.shape[1])], axis=1)


def _moving_average(values: np.ndarray, width: int) -> np.ndarray:
    """Means over `width` consecutive rows ('valid' part only: len - width + 1 rows)."""
    cumulative = np.vstack([np.zeros((1, values.shape[1])), np.cumsum(values, axis=0)])
    return (cumulative[width:] - cumulative[:-width]) / width


def estimate_delay(
    cmd_times_s: np.ndarray, cmd_positions: np.ndarray,
    meas_times_s: np.ndarray, meas_positions: np.ndarray,
    span_s: float, config: LatencyEstimatorConfig,
) -> LatencyEstimate:
    """Delay [s] of `meas` behind `cmd` over [0, span_s] [s] (times relative to the same origin).

    cmd/meas positions are (N, n) / (M, n) [rad]. See the module docstring for the method.
    """
    dt = config.grid_dt_s
    max_lag = int(round(config.max_lag_s / dt))
    n_grid = int(span_s / dt) + 1
    # Half a window at least: a short stretch of a slow motion fits many lags about equally well.
    min_span_s = max(config.window_s / 2, 2 * config.max_lag_s + 8 * dt)
    if span_s < min_span_s:
        return LatencyEstimate(None, 0.0, 0.0, f"common window {span_s:.2f} s shorter than {min_span_s:.2f} s")
    grid = np.arange(n_grid) * dt
    n_joints = cmd_positions.shape[1]
    cmd_vel = np.gradient(_resample(cmd_times_s, cmd_positions, grid), dt, axis=0)
    meas_vel = np.gradient(_resample(meas_times_s, meas_positions, grid), dt, axis=0)
    # The same moving average (one command period) on both: it turns the velocity spikes of a held
    # (staircase) measurement into the smooth slope again and shifts both signals alike.
    command_period_s = float(np.median(np.diff(cmd_times_s)))
    width = max(1, int(round(command_period_s / dt)))
    if width > 1 and n_grid > 4 * width + 2 * max_lag:
        cmd_vel, meas_vel = _moving_average(cmd_vel, width), _moving_average(meas_vel, width)
        n_grid = len(cmd_vel)
    excitation = float(np.sqrt(np.mean(cmd_vel**2)))
    if excitation < config.min_velocity_rms:
        return LatencyEstimate(None, 0.0, excitation, f"no excitation (command velocity RMS {excitation:.4f} rad/s)")
    # The command over the first (n - max_lag) samples is compared with the measurement `lag`
    # samples later, so every lag uses the same command segment and the same number of samples.
    length = n_grid - max_lag
    cmd_seg = cmd_vel[:length] - cmd_vel[:length].mean(axis=0)
    cmd_energy = np.sum(cmd_seg**2, axis=0)  # (n,)
    # cross[lag, j] = sum_t cmd_seg[t, j] * meas[t + lag, j]; the measurement's own mean drops out
    # because cmd_seg has zero mean, so only its energy needs the per-lag mean removed (cumsums).
    cross = np.stack([np.correlate(meas_vel[:, j], cmd_seg[:, j], mode="valid") for j in range(n_joints)], axis=1)
    csum = np.vstack([np.zeros((1, n_joints)), np.cumsum(meas_vel, axis=0)])
    csum2 = np.vstack([np.zeros((1, n_joints)), np.cumsum(meas_vel**2, axis=0)])
    lags = np.arange(max_lag + 1)
    seg_sum = csum[lags + length] - csum[lags]
    seg_sum2 = csum2[lags + length] - csum2[lags]
    meas_energy = np.maximum(seg_sum2 - seg_sum**2 / length, 0.0)  # (lags, n)
    # Energy-weighted sum of per-joint normalized correlations: sum_j cross / sum_j sqrt(Ec Em).
    denominator = np.sum(np.sqrt(cmd_energy[None, :] * meas_energy), axis=1)
    correlation = np.where(denominator > 0, cross.sum(axis=1) / np.where(denominator > 0, denominator, 1.0), 0.0)
    peak = int(np.argmax(correlation))
    peak_value = float(correlation[peak])
    offset = 0.0
    if 0 < peak < max_lag:
        left, right = correlation[peak - 1], correlation[peak + 1]
        curvature = left - 2 * peak_value + right
        if curvature < 0:
            offset = 0.5 * (left - right) / curvature
    hold_s = 0.5 * command_period_s if config.hold_correction else 0.0
    latency = float((peak + offset) * dt) - hold_s
    confidence = float(np.clip(peak_value, 0.0, 1.0))
    if peak == max_lag:
        return LatencyEstimate(latency, 0.0, excitation, f"peak at the search limit {config.max_lag_s} s", hold_s)
    return LatencyEstimate(latency, confidence, excitation, "ok", hold_s)
