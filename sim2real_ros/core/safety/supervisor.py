"""The supervisor: the only thing that decides what the robot is commanded.

This module keeps the supervisor's public names where the nodes, the training graph and the tests
import them. The supervisor is built of parts of one concern each, in `core/supervision/`: the
modes and the explicit transition table (`modes`), the e-stop sources (`estop`), the watchdogs
(`watchdogs`), the hand-over ramp (`handover`), shared control (`shared_control`), the step limiter
(`command_output`), intervention events (`interventions`), under the `Supervisor` of `coordinator`.
docs/safety.md shows the transition table.
"""
from __future__ import annotations

from .supervision.config import CONFIG_RANGES, SupervisorConfig
from .supervision.coordinator import Supervisor
from .supervision.modes import HUMAN_MODES, MOVING_MODES, POLICY_MODES, TRANSITIONS, Event, Mode
from .supervision.outputs import COUNTER_NAMES, InterventionEvent, SentCommand, SupervisorStatus
from .supervision.plausibility import COMMAND_MARGIN_RAD

__all__ = [
    "COMMAND_MARGIN_RAD", "CONFIG_RANGES", "COUNTER_NAMES", "HUMAN_MODES", "MOVING_MODES", "POLICY_MODES",
    "TRANSITIONS", "Event", "InterventionEvent", "Mode", "SentCommand", "Supervisor", "SupervisorConfig",
    "SupervisorStatus",
]
