"""Following a leader arm in TELEOP: what the supervisor would send from command/teleop.

Not wired into the supervisor yet (docs/so101.md, "Taking over with the leader arm"): this is the
part the supervisor needs, kept out of core/supervision so that package's owner wires it. In TELEOP
with the deadman held, the supervisor would call `target()` each tick and send its answer through
its step limiter, or hold when it is None:

- a leader command is validated like a policy command (exactly the configured joints; a value beyond
  the URDF limits by more than COMMAND_MARGIN_RAD is a fault, rejected and counted by the caller;
  nearer ones are clamped to the limits);
- following starts only once the leader is within `max_gap_rad` of the arm on every joint (the
  person aligns the leader with the arm first, as jogging waits for the hold to arrive): taking over
  never makes the arm jump to where the leader happens to be;
- a stale leader (nothing within `timeout_s`) holds, and so does a released deadman (`release()`):
  both need a new alignment before following again.

Pure: every input carries its receipt time (int [ns]).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .safety import InvalidInputError, SafetyLimits, clamp_position, order_positions
from .supervision.handover import gap_refusal
from .supervision.plausibility import COMMAND_MARGIN_RAD, beyond_limits
from .supervision.watchdogs import age_text, fresh


class LeaderFollow:
    """The leader arm's last command and whether the arm follows it.

    limits: the follower's limits (joint order of every array); max_gap_rad [rad]: the largest
    leader-to-arm distance on any joint at which following starts; timeout_s [s]: a command older
    than this is stale.
    """

    def __init__(self, limits: SafetyLimits, max_gap_rad: float, timeout_s: float) -> None:
        if not max_gap_rad > 0 or not timeout_s > 0:
            raise ValueError(f"max_gap_rad and timeout_s must be > 0, got {max_gap_rad}, {timeout_s}")
        self.limits = limits
        self.max_gap_rad = float(max_gap_rad)
        self.timeout_s = float(timeout_s)
        self._q: np.ndarray | None = None
        self._received_ns: int | None = None
        self.following = False

    def on_teleop(self, names: Sequence[str], positions: Sequence[float], now_ns: int) -> str:
        """A command/teleop message received at now_ns [ns]: "" when accepted, else why it was rejected."""
        try:
            q = order_positions(names, positions, self.limits.joint_names, allow_extra=False)
        except InvalidInputError as err:
            return f"command/teleop: {err}"
        nonphysical = beyond_limits(q, self.limits, COMMAND_MARGIN_RAD)
        if nonphysical:
            return f"command/teleop: not a position, {nonphysical}"
        self._q = clamp_position(q, self.limits)
        self._received_ns = now_ns
        return ""

    def release(self) -> None:
        """The deadman was let go or TELEOP was left: following needs a new alignment."""
        self.following = False

    def target(self, q_arm: np.ndarray, now_ns: int) -> tuple[np.ndarray | None, str]:
        """(the leader's position (n,) [rad] to send, "") or (None, why the arm holds) at now_ns [ns];
        q_arm (n,) [rad]: where the arm is (its hold target)."""
        if self._q is None or not fresh(self._received_ns, now_ns, self.timeout_s):
            self.following = False
            return None, (f"command/teleop silent for {age_text(self._received_ns, now_ns)} "
                          f"(timeout {self.timeout_s} s)")
        if not self.following:
            gap = gap_refusal(self._q, np.asarray(q_arm, dtype=float), self.limits.joint_names, self.max_gap_rad)
            if gap:
                return None, f"align the leader with the arm: {gap}"
            self.following = True
        return self._q.copy(), ""
