"""Measured joint positions that move faster than the joints can: a jump, not motion.

A re-homed encoder, a restarted driver or a teleported sim robot (every sim episode reset) makes the
measured position change between two consecutive joint states by more than the velocity limits
allow. Whatever was planned or commanded from the old position is then wrong: the supervisor holds
at the new position instead of slewing back to the old one, and the actuator drops the chunks that
were planned before the jump (their observations show a world that no longer exists).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class JointJumpConfig:
    """joint_names and velocity (n,) [rad/s]: the joints' velocity limits, in measurement order.
    slack_rad [rad]: allowed beyond 2 x velocity x dt (stamp jitter, encoder noise).
    max_dt_s [s]: longest gap between joint states credited with motion (a stalled stream is a
    watchdog's business, not a licence for any step)."""

    joint_names: tuple[str, ...]
    velocity: np.ndarray
    slack_rad: float = 0.2
    max_dt_s: float = 0.2
    source: str = "parameters"

    def __post_init__(self) -> None:
        velocity = np.asarray(self.velocity, dtype=float)
        if velocity.shape != (len(self.joint_names),) or not np.all(np.isfinite(velocity)) or np.any(velocity <= 0):
            raise ConfigError(self.source, "velocity limits", velocity.tolist(),
                              f"need {len(self.joint_names)} finite values > 0, one per joint")
        object.__setattr__(self, "velocity", velocity)
        for name in ("slack_rad", "max_dt_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(self.source, "max_joint_jump_rad" if name == "slack_rad" else name, value,
                                  "must be a finite number > 0")


class JointJumpDetector:
    """Feed every joint state (positions in config order, stamp [ns]); `update` says why the newest
    one jumped, or "" when it did not. The first state never jumps."""

    def __init__(self, config: JointJumpConfig) -> None:
        self.config = config
        self.jumps = 0
        self._q: np.ndarray | None = None
        self._stamp_ns = 0

    def update(self, positions: Sequence[float] | np.ndarray, stamp_ns: int) -> str:
        q = np.asarray(positions, dtype=float)
        previous, previous_ns = self._q, self._stamp_ns
        self._q, self._stamp_ns = q.copy(), stamp_ns
        if previous is None:
            return ""
        dt_s = min(max((stamp_ns - previous_ns) / NS_PER_S, 0.0), self.config.max_dt_s)
        allowed = 2.0 * self.config.velocity * dt_s + self.config.slack_rad
        step = q - previous
        excess = np.abs(step) - allowed
        worst = int(np.argmax(excess))
        if excess[worst] <= 0:
            return ""
        self.jumps += 1
        return (f"joint_states jumped {step[worst]:+.3f} rad at joint '{self.config.joint_names[worst]}' in "
                f"{dt_s:.3f} s (allowed {allowed[worst]:.3f})")
