"""Takeovers and hand-backs: entering a human mode from a mode without the human, and leaving it."""
from __future__ import annotations

from .modes import HUMAN_MODES, Mode
from .outputs import InterventionEvent


class InterventionLog:
    """The running intervention's start int [ns] (None: none) and the events not yet popped."""

    def __init__(self) -> None:
        self.start_ns: int | None = None
        self.events: list[InterventionEvent] = []

    def on_mode_change(self, previous: Mode, mode: Mode, reason: str, now_ns: int) -> bool:
        """Record a takeover or hand-back for previous -> mode at now_ns [ns]; True when a takeover began."""
        if previous in HUMAN_MODES and mode not in HUMAN_MODES and self.start_ns is not None:
            self.events.append(InterventionEvent("handback", self.start_ns, now_ns, mode, reason))
            self.start_ns = None
        if previous not in HUMAN_MODES and mode in HUMAN_MODES:
            self.start_ns = now_ns
            self.events.append(InterventionEvent("takeover", now_ns, 0, mode, reason))
            return True
        return False

    def pop(self) -> list[InterventionEvent]:
        """The events since the last call, oldest first."""
        events, self.events = self.events, []
        return events
