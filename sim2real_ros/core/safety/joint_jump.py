"""Measured joint positions that move faster than the joints can: a jump or a glitch, not motion.

A re-homed encoder, a restarted driver or a teleported sim robot (every sim episode reset) makes the
measured position change between two consecutive joint states by more than the velocity limits
allow. Whatever was planned or commanded from the old position is then wrong: the supervisor holds
at the new position instead of slewing back to the old one, and the actuator drops the chunks that
were planned before the jump (their observations show a world that no longer exists).

One such sample is not enough: a glitching encoder, a bit flip on the bus or a second publisher on
`joint_states` produce single samples far from the others. A jump counts only once `confirm_samples`
consecutive samples agree with each other (each within the velocity limits of the one before) and
all lie off the last accepted position. Until then the new samples are held back (`pending`), and a
sample that comes back to the accepted position makes the held-back ones outliers: rejected and
counted, never used.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..timebase import NS_PER_S


@dataclass(frozen=True)
class JointJumpConfig:
    """joint_names and velocity (n,) [rad/s]: the joints' velocity limits, in measurement order.
    slack_rad [rad]: allowed beyond 2 x velocity x dt (stamp jitter, encoder noise).
    max_dt_s [s]: longest gap between joint states credited with motion (a stalled stream is a
    watchdog's business, not a licence for any step).
    confirm_samples: consecutive samples that must agree on the new position before it is a jump
    (>= 2: one sample alone is an outlier)."""

    joint_names: tuple[str, ...]
    velocity: np.ndarray
    slack_rad: float = 0.2
    max_dt_s: float = 0.2
    confirm_samples: int = 3
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
        if not (isinstance(self.confirm_samples, int) and 2 <= self.confirm_samples <= 50):
            raise ConfigError(self.source, "joint_jump_confirm_samples", self.confirm_samples,
                              "must be an integer in [2, 50] (one sample alone is an outlier, not a jump)")


class JointJumpDetector:
    """Feed every joint state (positions in config order, stamp [ns]).

    `update` returns why the newest sample confirmed a jump, or "". After each call:
    `pending` is True when the sample was held back (off the accepted position, not confirmed yet);
    `outliers` counts samples rejected because the position came back; `last_outlier` says why.
    The first sample is accepted as it is.
    """

    def __init__(self, config: JointJumpConfig) -> None:
        self.config = config
        self.jumps = 0
        self.outliers = 0
        self.last_outlier = ""
        self.pending = False
        self.jump_stamp_ns = -1  # stamp [ns] of the first sample of the last confirmed jump
        self._q: np.ndarray | None = None  # last accepted sample
        self._stamp_ns = 0
        self._run: list[tuple[np.ndarray, int]] = []  # held-back samples that agree with each other

    def update(self, positions: Sequence[float] | np.ndarray, stamp_ns: int) -> str:
        q = np.asarray(positions, dtype=float).copy()
        self.pending = False
        if self._q is None:
            self._accept(q, stamp_ns)
            return ""
        back = not self._excess(self._q, self._stamp_ns, q, stamp_ns)[0]
        along = bool(self._run) and not self._excess(*self._run[-1], q, stamp_ns)[0]
        if along and back:
            # Both fit: the allowance from the accepted sample grows with the time the run has been
            # held back (2 x velocity x dt), so a teleport of 0.5 rad fits it after two samples at
            # 100 Hz. The nearer one decides; a jump does not turn into motion by waiting.
            run_q = self._run[-1][0]
            back = float(np.max(np.abs(q - self._q))) < float(np.max(np.abs(q - run_q)))
        if back:
            self._drop_run("the position came back")
            self._accept(q, stamp_ns)
            return ""
        if self._run and not along:
            # Off the accepted position and off the held-back run too: the run did not persist.
            self._drop_run("the next sample disagreed")
        self._run.append((q, stamp_ns))
        if len(self._run) < self.config.confirm_samples:
            self.pending = True
            return ""
        first_q, first_ns = self._run[0]
        why = self._describe(self._q, self._stamp_ns, first_q, first_ns)
        self._run.clear()
        self.jumps += 1
        self.jump_stamp_ns = first_ns
        self._accept(q, stamp_ns)
        return f"{why}, confirmed by {self.config.confirm_samples} samples"

    def reset(self) -> None:
        """Forget the history (the next sample is accepted as it is): a new timeline."""
        self._q = None
        self._run.clear()
        self.pending = False

    def _accept(self, q: np.ndarray, stamp_ns: int) -> None:
        self._q, self._stamp_ns = q, stamp_ns

    def _drop_run(self, why: str) -> None:
        if not self._run:
            return
        assert self._q is not None
        first_q, first_ns = self._run[0]
        self.outliers += len(self._run)
        self.last_outlier = (f"{len(self._run)} joint_states sample(s) rejected as outliers ({why}): "
                             f"{self._describe(self._q, self._stamp_ns, first_q, first_ns)}")
        self._run.clear()

    def _excess(self, q0: np.ndarray, t0_ns: int, q1: np.ndarray, t1_ns: int) -> tuple[bool, int, float, float]:
        """(too fast?, worst joint, its step [rad], allowed step [rad]) from (q0, t0) to (q1, t1)."""
        dt_s = min(max((t1_ns - t0_ns) / NS_PER_S, 0.0), self.config.max_dt_s)
        allowed = 2.0 * self.config.velocity * dt_s + self.config.slack_rad
        step = q1 - q0
        excess = np.abs(step) - allowed
        worst = int(np.argmax(excess))
        return bool(excess[worst] > 0), worst, float(step[worst]), float(allowed[worst])

    def _describe(self, q0: np.ndarray, t0_ns: int, q1: np.ndarray, t1_ns: int) -> str:
        _, worst, step, allowed = self._excess(q0, t0_ns, q1, t1_ns)
        dt_s = min(max((t1_ns - t0_ns) / NS_PER_S, 0.0), self.config.max_dt_s)
        return (f"joint_states jumped {step:+.3f} rad at joint '{self.config.joint_names[worst]}' in "
                f"{dt_s:.3f} s (allowed {allowed:.3f})")
