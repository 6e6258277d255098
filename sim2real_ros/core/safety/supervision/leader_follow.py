"""Following a leader arm in TELEOP: what the supervisor sends from command/teleop.

In TELEOP with the deadman held and a leader on the graph, the coordinator calls `target()` each
tick and sends its answer through its step limiter, or holds when it is None (docs/so101.md,
"Taking over with the leader arm"):

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

from ..limits import InvalidInputError, SafetyLimits, clamp_position, order_positions
from .handover import gap_refusal
from .plausibility import COMMAND_MARGIN_RAD, beyond_limits
from .watchdogs import age_text, fresh

SILENT = "silent"
ALIGNING = "aligning"
FOLLOWING = "following"
"""What `target()` last found (`LeaderFollow.state`): the reason changes only when this does."""


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
        self.state = SILENT

    @property
    def received_ns(self) -> int | None:
        """When the last accepted command arrived [ns] (None: none since start or the last forget())."""
        return self._received_ns

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

    def forget(self) -> None:
        """A clock step back: the last command's age is unknown, so it is stale until the next one."""
        self._received_ns = None
        self.following = False

    def target(self, q_arm: np.ndarray, now_ns: int) -> tuple[np.ndarray | None, str]:
        """(the leader's position (n,) [rad] to send, "") or (None, why the arm holds) at now_ns [ns];
        q_arm (n,) [rad]: where the arm is (its hold target)."""
        if self._q is None or not fresh(self._received_ns, now_ns, self.timeout_s):
            self.following = False
            self.state = SILENT
            return None, (f"command/teleop silent for {age_text(self._received_ns, now_ns)} "
                          f"(timeout {self.timeout_s} s)")
        if not self.following:
            gap = gap_refusal(self._q, np.asarray(q_arm, dtype=float), self.limits.joint_names, self.max_gap_rad)
            if gap:
                self.state = ALIGNING
                return None, f"align the leader with the arm: {gap}"
            self.following = True
        self.state = FOLLOWING
        return self._q.copy(), ""
