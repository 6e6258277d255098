"""The actuator's wall-clock tick schedule: absolute deadlines, no drift, no bursts (pure, no rclpy).

Ticks are due at start + k * period on a steady clock, so a late tick does not delay the next one.
After an overrun of more than one period the missed ticks are skipped (the schedule restarts one
period after the moment it noticed) instead of running back to back to catch up. With a
core.tick_phase.TickPhaseLock, the deadline after a chunk's arrival moves by its bounded nudge so
ticks follow arrivals closely. Times are integer [ns] on one steady clock, passed in.

With `min_interval_ns` set (issue 36), an accepted chunk does not wait for the next fixed tick at
all: `on_arrival` brings the next deadline forward to the arrival, no sooner than min_interval_ns
after the last tick, and the schedule goes on at the same period from there (the stream is
re-phased to the arrival, not given an extra tick). So a chunk waits at most min_interval_ns
instead of up to a period, one interval per chunk is shortened to no less than min_interval_ns,
no interval is longer than a period, and the mean command rate rises by at most the chunk rate
(a chunk just after a tick moves the grid by up to a period: one tick more). The velocity and
step limits downstream hold: the supervisor's step limiter scales each step with the time since
the last command.

A chunk that lands within min_interval_ns after a tick still waits for the rest of it. So with
min_interval_ns set, the tick that carried a chunk also places the grid after it (instead of the
phase lock's nudge): from the median interval between recent arrivals it predicts the next one and
shortens the next interval (never below min_interval_ns) so that arrival lands mid-way between
min_interval_ns after a tick and the tick after that (`ARRIVAL_TARGET`): an arrival jittering by up
to half of (period - min_interval_ns) either way then never waits. In a 10 Hz chunk, 100 Hz tick
stream (ten periods per chunk) the arrival of the next chunk otherwise lands right where the grid
has a tick, and half of the chunks that jitter late waited up to min_interval_ns. It costs at most
one more tick per chunk (so at most two more than the fixed rate, with the re-phase's); every
interval stays within [min_interval_ns, period].
"""
from __future__ import annotations

from collections import deque

from ..errors import ConfigError
from .tick_phase import TickPhaseLock

ARRIVAL_HISTORY = 8  # arrival intervals the next arrival is predicted from (median: a dropped chunk is one outlier)
ARRIVAL_TARGET = 0.5  # where in the good part of a period [min interval, period] the next arrival is aimed (0..1)


class DeadlineSchedule:
    """period_ns: tick period [ns]; start_ns: when the schedule starts [ns] (the first tick is due
    one period later); phase_lock: nudges deadlines towards chunk arrivals (None: never; with
    min_interval_ns set, clear_next_arrival places the grid instead); clear_next_arrival: False keeps
    the grid where the re-phase left it (for comparison)."""

    def __init__(self, period_ns: int, start_ns: int, phase_lock: TickPhaseLock | None = None,
                 min_interval_ns: int | None = None, clear_next_arrival: bool = True) -> None:
        if period_ns <= 0:
            raise ConfigError("deadline schedule", "period_ns", period_ns, "must be > 0")
        if min_interval_ns is not None and not 0 <= min_interval_ns < period_ns:
            raise ConfigError("deadline schedule", "min_interval_ns", min_interval_ns,
                              f"must be in [0, period {period_ns})")
        self.period_ns = int(period_ns)
        self.deadline_ns = int(start_ns) + self.period_ns  # [ns] when the next tick is due
        self.phase_lock = phase_lock
        self.min_interval_ns = min_interval_ns  # None: chunks wait for the fixed tick
        self.last_tick_ns: int | None = None  # [ns] when the last tick ended
        self.skips = 0  # times the schedule gave up missed ticks after an overrun
        self.rephases = 0  # times a chunk's arrival brought the next tick forward
        self.grid_placements = 0  # times the grid after a chunk was shortened to clear the next arrival
        self._last_arrival_ns: int | None = None
        self._arrival_intervals: deque[int] = deque(maxlen=ARRIVAL_HISTORY)  # [ns] between chunks carried
        self.clear_next_arrival = clear_next_arrival

    def on_arrival(self, arrival_ns: int) -> bool:
        """A chunk was accepted at `arrival_ns`: with min_interval_ns set, move the next deadline
        forward to max(arrival, last tick + min_interval_ns) when that is sooner. True when it moved
        (the caller wakes its tick loop)."""
        if self.min_interval_ns is None:
            return False
        earliest = int(arrival_ns)
        if self.last_tick_ns is not None:
            earliest = max(earliest, self.last_tick_ns + self.min_interval_ns)
        if earliest >= self.deadline_ns:
            return False
        self.deadline_ns = earliest
        self.rephases += 1
        return True

    def delay_ns(self, now_ns: int) -> int:
        """[ns] to wait at `now_ns` before the next tick is due (<= 0: due now)."""
        return self.deadline_ns - now_ns

    def advance(self, now_ns: int, arrival_ns: int | None = None) -> int:
        """A tick ran; returns the next deadline [ns]. now_ns: when it ended; arrival_ns: when the last
        chunk accepted since the previous advance arrived (None: none came)."""
        # The end of the tick, not its start, bounds the next re-phased one: the interval between
        # two commands is then at least min_interval_ns.
        self.last_tick_ns = int(now_ns)
        due_ns = self.deadline_ns  # when the tick that just ran was due
        self.deadline_ns += self.period_ns
        if arrival_ns is not None and self.min_interval_ns is not None:
            if self.clear_next_arrival:
                self.deadline_ns += self._clear_next_arrival(due_ns, int(arrival_ns), int(now_ns))
        elif arrival_ns is not None and self.phase_lock is not None:
            self.deadline_ns += self.phase_lock.shift_ns(arrival_ns, self.deadline_ns)
        if now_ns - self.deadline_ns > self.period_ns:
            self.deadline_ns = now_ns + self.period_ns
            self.skips += 1
        return self.deadline_ns

    def predicted_interval_ns(self) -> int | None:
        """[ns] the median interval between the last ARRIVAL_HISTORY chunks carried (None: fewer than two)."""
        if not self._arrival_intervals:
            return None
        ordered = sorted(self._arrival_intervals)
        return ordered[len(ordered) // 2]

    def _clear_next_arrival(self, due_ns: int, arrival_ns: int, now_ns: int) -> int:
        """[ns] (<= 0) to add to the deadline after the tick due at `due_ns` that carried a chunk that
        arrived at `arrival_ns`, so that the predicted next arrival lands ARRIVAL_TARGET of the way
        between min_interval_ns after a tick and the next tick. 0 until two arrivals were seen, or
        when chunks come faster than the ticks."""
        if self._last_arrival_ns is not None and arrival_ns > self._last_arrival_ns:
            self._arrival_intervals.append(arrival_ns - self._last_arrival_ns)
        self._last_arrival_ns = arrival_ns
        interval = self.predicted_interval_ns()
        assert self.min_interval_ns is not None
        if interval is None or interval < self.period_ns:
            return 0
        margin = self.min_interval_ns + int(ARRIVAL_TARGET * (self.period_ns - self.min_interval_ns))
        # Ticks after this one at due + period + shift + k period; the next arrival at arrival + interval.
        behind = (arrival_ns + interval - due_ns - margin) % self.period_ns
        if behind == 0:
            return 0
        # Only shorter: one interval of at least min_interval_ns from the end of this tick.
        earliest = now_ns + self.min_interval_ns - (due_ns + self.period_ns)
        shift = max(behind - self.period_ns, earliest)
        if shift >= 0:
            return 0
        self.grid_placements += 1
        return shift
