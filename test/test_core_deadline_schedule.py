"""core.deadline_schedule at fixed times: absolute deadlines, skipping after an overrun, phase nudges."""
from __future__ import annotations

import pytest

from sim2real_ros.core.control.deadline_schedule import DeadlineSchedule
from sim2real_ros.core.control.tick_phase import TickPhaseLock
from sim2real_ros.core.errors import ConfigError

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


# ----------------------------------------------------------------------------------------------
# tick_on_chunk (issue 36): a chunk re-phases the schedule instead of waiting for the next tick
J = 2_000_000  # [ns] the jitter bound: the shortest interval between two commands (min_interval_ns)
TICK_COST = 200_000  # [ns] a tick's duration


def run_schedule(schedule: DeadlineSchedule, arrivals: list[int], end_ns: int) -> tuple[list[int], list[int]]:
    """Drive `schedule` at fixed times: ticks exactly at their deadlines, each lasting TICK_COST, chunk
    arrivals handled between ticks as the node's chunk callback does. Returns (tick times, per chunk
    the wait from its arrival to the first tick after it) [ns]."""
    ticks: list[int] = []
    waits: list[int] = []
    pending: list[int] = []
    i = 0
    while schedule.deadline_ns < end_ns:
        if i < len(arrivals) and arrivals[i] < schedule.deadline_ns:
            schedule.on_arrival(arrivals[i])
            pending.append(arrivals[i])
            i += 1
            continue
        tick = schedule.deadline_ns
        ticks.append(tick)
        waits += [tick - a for a in pending]
        schedule.advance(tick + TICK_COST, pending[-1] if pending else None)
        pending = []
    return ticks, waits


@pytest.mark.parametrize("offset_ns", [100_000, 2_500_000, 5_000_000, 7_300_000, 9_900_000])
def test_a_chunk_waits_at_most_the_jitter_bound_instead_of_up_to_a_period(offset_ns):
    arrivals = [T0 + offset_ns + k * 10 * P + (k * 1_300_000) % 3_000_000 for k in range(30)]  # 10 Hz + jitter
    fixed_ticks, fixed_waits = run_schedule(DeadlineSchedule(P, T0), arrivals, T0 + 310 * P)
    for clear_next_arrival in (False, True):
        schedule = DeadlineSchedule(P, T0, min_interval_ns=J, clear_next_arrival=clear_next_arrival)
        ticks, waits = run_schedule(schedule, arrivals, T0 + 310 * P)
        intervals = [b - a for a, b in zip(ticks[:-1], ticks[1:], strict=True)]
        assert max(waits) <= J  # never waits for a fixed tick
        assert max(fixed_waits) > J  # the fixed schedule does, for some (up to a period)
        assert min(intervals) >= J  # the rate limit: no two commands closer than the bound
        assert max(intervals) == P  # never later than the fixed period
        # The mean rate rises by at most the chunk rate per change: at most one tick more per chunk
        # for the re-phase (a chunk just after a tick moves the grid by up to a period), one more
        # for placing the grid after it.
        assert 0 <= len(ticks) - len(fixed_ticks) <= len(arrivals) * (2 if clear_next_arrival else 1)


@pytest.mark.parametrize("offset_ns", [100_000, 3_000_000, 6_000_000, 9_900_000])
def test_the_grid_after_a_chunk_clears_the_next_arrival_so_a_late_one_does_not_wait(offset_ns):
    # 10 Hz chunks on a 100 Hz grid (ten periods each) with +-1.5 ms of jitter: re-phased to each
    # arrival, the grid has a tick right where the next one is due, and every late one lands just
    # after that tick and waits for the rest of min_interval_ns.
    jitter = [((k * 7) % 13 - 6) * 250_000 for k in range(40)]  # [ns] -1.5 .. +1.5 ms
    arrivals = [T0 + offset_ns + k * 10 * P + j for k, j in enumerate(jitter)]
    _, rephased_waits = run_schedule(DeadlineSchedule(P, T0, min_interval_ns=J, clear_next_arrival=False),
                                     arrivals, T0 + 410 * P)
    schedule = DeadlineSchedule(P, T0, min_interval_ns=J)
    ticks, waits = run_schedule(schedule, arrivals, T0 + 410 * P)
    assert sum(w > 0 for w in rephased_waits) >= 10  # the late ones wait without the placement
    assert waits[2:] == [0] * (len(arrivals) - 2)  # with it, none once an interval is known
    assert schedule.predicted_interval_ns() == pytest.approx(10 * P, abs=1_500_000)
    intervals = [b - a for a, b in zip(ticks[:-1], ticks[1:], strict=True)]
    assert min(intervals) >= J and max(intervals) == P


def test_no_grid_placement_for_chunks_faster_than_the_ticks_or_before_two_arrivals():
    s = DeadlineSchedule(P, T0, min_interval_ns=J)
    assert s.advance(T0 + P + TICK_COST, arrival_ns=T0 + P) == T0 + 2 * P  # one arrival: nothing known
    assert s.advance(T0 + 2 * P + TICK_COST) == T0 + 3 * P
    # The second chunk, 20 ms on, arrived as its tick was due: the next is expected at T0 + 5P, so the
    # grid moves 6 ms earlier to put it min_interval + half the rest (2 + 4 ms) after a tick.
    assert s.advance(T0 + 3 * P + TICK_COST, arrival_ns=T0 + 3 * P) == T0 + 4 * P - 6_000_000
    assert s.predicted_interval_ns() == 2 * P
    fast = DeadlineSchedule(P, T0, min_interval_ns=J)
    fast.advance(T0 + P + TICK_COST, arrival_ns=T0 + P - 3_000_000)
    assert fast.advance(T0 + 2 * P + TICK_COST, arrival_ns=T0 + P - 1_000_000) == T0 + 3 * P  # 2 ms apart
    assert fast.grid_placements == 0 and s.grid_placements == 1


def test_an_arrival_right_after_a_tick_waits_for_the_min_interval_only():
    s = DeadlineSchedule(P, T0, min_interval_ns=J)
    s.advance(T0 + P + TICK_COST)  # a tick ran at T0 + P
    assert s.on_arrival(T0 + P + 300_000)
    assert s.deadline_ns == T0 + P + TICK_COST + J  # the interval from the tick's end is the bound
    assert s.advance(s.deadline_ns + TICK_COST) == T0 + P + TICK_COST + J + P  # same period from there
    assert s.rephases == 1


def test_an_arrival_just_before_a_due_tick_changes_nothing_and_without_the_bound_never():
    s = DeadlineSchedule(P, T0, min_interval_ns=J)
    s.advance(T0 + P)
    assert not s.on_arrival(T0 + 2 * P)  # the tick is due then anyway
    fixed = DeadlineSchedule(P, T0)
    assert not fixed.on_arrival(T0 + 1) and fixed.deadline_ns == T0 + P


def test_min_interval_must_be_below_the_period():
    with pytest.raises(ConfigError, match="min_interval_ns"):
        DeadlineSchedule(P, T0, min_interval_ns=P)
