"""The command gate after an episode reset teleports the arm (sim_node, docs/nodes.md).

Why: the reset moves the arm at once, but the commands in flight (and the supervisor's hold, which
moves to the new position only through its step limit, docs/design.md §4) still aim at the pose
before it; followed, they would drag the arm back. A real robot is reset by something that owns the
arm until the controller's command has caught up; this gate is that. Pure: positions in, decision
out; the node keeps the state (one bool) under its lock.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# [rad] how near the arm a command must come after an episode reset that moved it to be followed
# again: the supervisor's hold converges on the measured position, a stale policy command does not.
RESYNC_TOLERANCE_RAD = 0.1


@dataclass(frozen=True)
class GateDecision:
    """follow: send this command to the arm; awaiting: the gate stays closed for the next one."""

    follow: bool
    awaiting: bool


def reset_moved_arm(before: np.ndarray, after: np.ndarray, tolerance_rad: float = RESYNC_TOLERANCE_RAD) -> bool:
    """Whether a reset moved any joint by more than `tolerance_rad` [rad] (before, after: (n,) [rad]):
    then commands wait (gate_command) until one rejoins the arm."""
    return float(np.max(np.abs(np.asarray(before, float) - np.asarray(after, float)))) > tolerance_rad


def gate_command(awaiting: bool, command: np.ndarray, measured: np.ndarray,
                 tolerance_rad: float = RESYNC_TOLERANCE_RAD) -> GateDecision:
    """Follow `command` (n,) [rad] unless the gate waits after a reset and the command is farther
    than `tolerance_rad` from the arm's `measured` (n,) [rad] position on some joint; the first
    command within it opens the gate for good (until the next reset that moves the arm)."""
    if not awaiting:
        return GateDecision(follow=True, awaiting=False)
    far = float(np.max(np.abs(np.asarray(command, float) - np.asarray(measured, float)))) > tolerance_rad
    return GateDecision(follow=not far, awaiting=far)
