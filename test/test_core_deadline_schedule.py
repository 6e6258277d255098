"""core.deadline_schedule at fixed times: absolute deadlines, skipping after an overrun, phase nudges."""
from __future__ import annotations

import pytest

from sim2real_ros.core.deadline_schedule import DeadlineSchedule
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.tick_phase import TickPhaseLock

P = 10_000_000  # [ns] 100 Hz
T0 = 5_000_000_000


def test_first_tick_one_period_after_start_and_delays_to_it():
    s = DeadlineSchedule(P, T0)
    assert s.deadline_ns == T0 + P
    assert s.delay_ns(T0) == P
    assert s.delay_ns(T0 + P - 1) == 1
    assert s.delay_ns(T0 + P + 3) == -3  # late: due now


def test_deadlines_are_absolute_a_late_tick_does_not_delay_the_next():
    s = DeadlineSchedule(P, T0)
    # Ticks end 1, 7 and 9.9 ms after they were due: the grid stays at T0 + k P.
    assert s.advance(T0 + P + 1_000_000) == T0 + 2 * P
    assert s.advance(T0 + 2 * P + 7_000_000) == T0 + 3 * P
    assert s.advance(T0 + 3 * P + 9_900_000) == T0 + 4 * P
    assert s.skips == 0


def test_an_overrun_of_up_to_one_period_is_caught_up_not_skipped():
    s = DeadlineSchedule(P, T0)
    # The tick due at T0 + P ended at T0 + 3P: the next deadline T0 + 2P is exactly one period behind.
    assert s.advance(T0 + 3 * P) == T0 + 2 * P
    assert s.skips == 0


def test_an_overrun_of_more_than_one_period_skips_the_missed_ticks():
    s = DeadlineSchedule(P, T0)
    end = T0 + 3 * P + 1  # one ns more than a period behind the next deadline
    assert s.advance(end) == end + P
    assert s.skips == 1
    assert s.advance(end + P + 2_000_000) == end + 2 * P  # then the grid goes on from there


def test_a_chunk_arrival_nudges_the_next_deadline_within_the_lock_bounds():
    lock = TickPhaseLock(P, lead_ns=1_500_000, max_shift_ns=1_000_000)
    s = DeadlineSchedule(P, T0, lock)
    # A chunk arrived 6 ms after the tick at T0 + P: it waits 4 ms for the next (T0 + 2P), 2.5 ms more
    # than the lead; half of that, bounded to 1 ms, comes off the deadline.
    assert s.advance(T0 + P + 7_000_000, T0 + P + 6_000_000) == T0 + 2 * P - 1_000_000
    # No arrival: no nudge, the next deadline is a period on.
    assert s.advance(T0 + 2 * P, None) == T0 + 3 * P - 1_000_000
    # Arrived 2 ms after a tick (8 ms wait): past half a period, the tick after it moves later (+1 ms).
    assert s.advance(T0 + 3 * P, T0 + 2 * P + 1_000_000) == T0 + 4 * P


def test_an_arrival_without_a_phase_lock_changes_nothing():
    s = DeadlineSchedule(P, T0)
    assert s.advance(T0 + P, arrival_ns=T0 + P + 2_000_000) == T0 + 2 * P


def test_period_must_be_positive():
    with pytest.raises(ConfigError):
        DeadlineSchedule(0, T0)
