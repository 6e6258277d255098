"""The actuator's wall-clock tick schedule: absolute deadlines, no drift, no bursts (pure, no rclpy).

Ticks are due at start + k * period on a steady clock, so a late tick does not delay the next one.
After an overrun of more than one period the missed ticks are skipped (the schedule restarts one
period after the moment it noticed) instead of running back to back to catch up. With a
core.tick_phase.TickPhaseLock, the deadline after a chunk's arrival moves by its bounded nudge so
ticks follow arrivals closely. Times are integer [ns] on one steady clock, passed in.
"""
from __future__ import annotations

from .errors import ConfigError
from .tick_phase import TickPhaseLock


class DeadlineSchedule:
    """period_ns: tick period [ns]; start_ns: when the schedule starts [ns] (the first tick is due
    one period later); phase_lock: nudges deadlines towards chunk arrivals (None: never)."""

    def __init__(self, period_ns: int, start_ns: int, phase_lock: TickPhaseLock | None = None) -> None:
        if period_ns <= 0:
            raise ConfigError("deadline schedule", "period_ns", period_ns, "must be > 0")
        self.period_ns = int(period_ns)
        self.deadline_ns = int(start_ns) + self.period_ns  # [ns] when the next tick is due
        self.phase_lock = phase_lock
        self.skips = 0  # times the schedule gave up missed ticks after an overrun

    def delay_ns(self, now_ns: int) -> int:
        """[ns] to wait at `now_ns` before the next tick is due (<= 0: due now)."""
        return self.deadline_ns - now_ns

    def advance(self, now_ns: int, arrival_ns: int | None = None) -> int:
        """A tick ran; returns the next deadline [ns]. now_ns: when it ended; arrival_ns: when the last
        chunk accepted since the previous advance arrived (None: none came)."""
        self.deadline_ns += self.period_ns
        if arrival_ns is not None and self.phase_lock is not None:
            self.deadline_ns += self.phase_lock.shift_ns(arrival_ns, self.deadline_ns)
        if now_ns - self.deadline_ns > self.period_ns:
            self.deadline_ns = now_ns + self.period_ns
            self.skips += 1
        return self.deadline_ns
