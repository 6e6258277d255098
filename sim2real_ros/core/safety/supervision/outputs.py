"""What the supervisor hands back: the command to publish, intervention events, its status."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .modes import Mode

COUNTER_NAMES = (
    "commands_sent", "clamped", "rejected_policy", "rejected_joint_states", "rejected_joy", "rejected_teleop",
    "estops", "watchdog_holds", "clock_stall_holds", "joint_jumps", "arm_refused", "interventions", "clock_steps_back",
    "internal_errors",
)
"""The counters supervisor/state reports, all starting at 0."""


@dataclass(frozen=True)
class SentCommand:
    """A command to publish: positions (n,) [rad] in the configured joint order.

    hold is True when it is a hold at a fixed target (stop category 2).
    """

    positions: np.ndarray
    mode: Mode
    hold: bool


@dataclass(frozen=True)
class InterventionEvent:
    """A human takeover (end_ns = 0, still running) or hand-back; times int [ns].

    mode: for a takeover the human mode entered, for a hand-back the mode control went to.
    """

    event: str
    start_ns: int
    end_ns: int
    mode: Mode
    reason: str


@dataclass(frozen=True)
class SupervisorStatus:
    """What supervisor/state reports."""

    mode: Mode
    reason: str
    estop_sources: tuple[str, ...]
    counters: dict[str, int]
    intervention_start_ns: int | None
    jog_mode: str
    foreign_publishers: int
    last_rejection: str
    hold_target: np.ndarray | None = field(default=None)
    estop_vanished: str = ""  # `estop` publishers that left while pressed (pressed until a reset)
