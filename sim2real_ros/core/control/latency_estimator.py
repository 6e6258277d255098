"""Online estimate of actuation latency: how long after a command is sent the joints follow it.

The correlation is core/control/lag_correlation.py, the same code `sim2real sysid latency` runs for
its bulk lag: over a sliding window the sent commands (held until the next one arrives, as a
ros2_control forward controller or the sim's command queue holds them) and the measured joint
positions are put on one grid, their smoothed velocities cross-correlated for lags in
[0, max_lag_s] (measurement lagging command), and the joints combined by a confidence-weighted
mean. On the same samples, window and lag range, this estimate and `sysid latency --method
correlation --min-lag 0 --max-lag max_lag_s` give the same figure (test/test_latency_estimator.py).
Because the command is modelled as held, the estimate is the delay a step response shows (the
`actuation_latency_s` of the sim params), with no half-period correction of the control rate.

Confidence is the correlation's (peak x prominence, combined over joints), forced to 0 when the
commands do not move enough (no excitation: any lag fits a constant), when the window is too short
or when the peak sits at the search limit. What the estimate measures is the delay from a command's
tick stamp to the measured motion: transport, driver and controller tracking lag together, which is
what latency compensation has to cover.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..timebase import NS_PER_S
from .lag_correlation import estimate_lag

# Fewer grid steps than this in [0, max_lag_s] cannot place a peak: the streams are too slow.
MIN_LAG_STEPS = 4


@dataclass(frozen=True)
class LatencyEstimatorConfig:
    """window_s [s]: history used; max_lag_s [s]: largest latency searched; min_velocity_rms
    [rad/s]: command velocity RMS below which there is no excitation; commands_held: the joints see
    each command until the next (a forward position controller), else the line through the
    commands (a joint that interpolates); max_command_gap_s [s]: a longer pause between commands
    restarts the histories. The grid step is the correlation's: half the faster stream's period."""

    window_s: float = 4.0
    max_lag_s: float = 0.25
    min_velocity_rms: float = 0.01
    commands_held: bool = True
    max_command_gap_s: float = 0.25
    source: str = "LatencyEstimatorConfig"

    def __post_init__(self) -> None:
        for name in ("window_s", "max_lag_s", "min_velocity_rms", "max_command_gap_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(self.source, name, value, "must be a finite number > 0")
        if self.max_lag_s >= self.window_s / 2:
            raise ConfigError(self.source, "max_lag_s", self.max_lag_s, f"must be < window_s / 2 = {self.window_s / 2}")


@dataclass(frozen=True)
class LatencyEstimate:
    """latency_s [s] (None when it cannot be estimated), confidence in [0, 1], excitation: command
    velocity RMS [rad/s] over the window, reason: why the confidence is what it is."""

    latency_s: float | None
    confidence: float
    excitation: float
    reason: str


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
        cmd_ns = np.array([t for t, _ in self._commands], dtype=np.int64)
        meas_ns = np.array([t for t, _ in self._measured], dtype=np.int64)
        cmd_q = np.stack([q for _, q in self._commands])
        meas_q = np.stack([q for _, q in self._measured])
        if cmd_q.shape[1] != meas_q.shape[1]:
            return LatencyEstimate(None, 0.0, 0.0, f"{cmd_q.shape[1]} command joints vs {meas_q.shape[1]} measured")
        # Seconds from the earlier first sample, as `sysid latency` counts them (the same floats).
        origin_ns = int(min(cmd_ns[0], meas_ns[0]))
        cmd_t = (cmd_ns - origin_ns).astype(float) / NS_PER_S
        meas_t = (meas_ns - origin_ns).astype(float) / NS_PER_S
        # The first max_lag of commands is skipped: the joints' response to what came before them
        # (a hold, a jump to the first command) has no counterpart in the command history.
        start_s, end_s = max(cmd_t[0] + cfg.max_lag_s, meas_t[0]), min(cmd_t[-1], meas_t[-1])
        # Half a window at least: a short stretch of a slow motion fits many lags about equally well.
        min_span_s = max(cfg.window_s / 2, 2 * cfg.max_lag_s)
        if end_s - start_s < min_span_s:
            return LatencyEstimate(None, 0.0, 0.0, f"common window {max(0.0, end_s - start_s):.2f} s shorter than "
                                                   f"{min_span_s:.2f} s")
        combined, joints, grid = estimate_lag(cmd_t, cmd_q, meas_t, meas_q, start_s, end_s, 0.0, cfg.max_lag_s,
                                              cfg.commands_held)
        excitation = float(np.sqrt(np.mean([j.excitation**2 for j in joints])))
        if grid.k_max - grid.k_min < MIN_LAG_STEPS:
            return LatencyEstimate(None, 0.0, excitation, f"grid step {grid.step_s:.4f} s too coarse for max_lag_s "
                                                          f"{cfg.max_lag_s} s: the streams are too slow")
        if excitation < cfg.min_velocity_rms:
            return LatencyEstimate(None, 0.0, excitation,
                                   f"no excitation (command velocity RMS {excitation:.4f} rad/s)")
        if combined.lag_s is None:
            reasons = sorted({j.reason for j in joints})
            return LatencyEstimate(None, 0.0, excitation, "; ".join(reasons))
        if combined.lag_s >= cfg.max_lag_s - grid.step_s:
            return LatencyEstimate(combined.lag_s, 0.0, excitation, f"peak at the search limit {cfg.max_lag_s} s")
        return LatencyEstimate(combined.lag_s, combined.confidence, excitation, "ok")
