"""core.sim_schedule at fixed sim and wall times: the multi-rate grids, steps to the next output,
realtime pacing and the real-time factor reports."""
from __future__ import annotations

import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.sim.schedule import (
    Due,
    MultiRateSchedule,
    Pace,
    RateReporter,
    RealtimePacer,
    next_tick,
    period_ns,
)

MS = 1_000_000


def test_period_of_a_rate():
    assert period_ns(500.0) == 2 * MS
    assert period_ns(30.0) == 33_333_333
    assert period_ns(3e9) == 1  # never 0


@pytest.mark.parametrize(("tick", "now", "expected"), [
    (100, 50, 100),  # not due yet: unchanged
    (100, 100, 110),  # due exactly: the next one
    (100, 109, 110),
    (100, 135, 140),  # late by 3.5 periods: the missed ticks are skipped, the grid kept
])
def test_next_tick_keeps_the_grid(tick, now, expected):
    assert next_tick(tick, 10, now) == expected


def test_three_grids_at_their_rates_from_the_start():
    # clock 500 Hz, joint states 100 Hz, camera 30 Hz from sim time 0, physics dt 1 ms.
    s = MultiRateSchedule(0, 2 * MS, 10 * MS, 33_333_333)
    assert s.due(0) == Due(True, True, True)
    assert (s.next_clock_ns, s.next_joint_state_ns, s.next_camera_ns) == (2 * MS, 10 * MS, 33_333_333)
    assert s.steps(0, MS) == 2
    assert s.due(2 * MS) == Due(True, False, False)
    assert s.due(10 * MS) == Due(True, True, False)
    # A pass at 33 ms (the loop was late): clock and joint states are due, their missed ticks skipped.
    assert s.due(33 * MS) == Due(True, True, False)
    assert (s.next_clock_ns, s.next_joint_state_ns) == (34 * MS, 40 * MS)
    assert s.steps(33 * MS, MS) == 1  # 0.33 ms to the camera: one whole step
    assert s.due(34 * MS) == Due(True, False, True)
    assert s.next_camera_ns == 66_666_666


def test_steps_round_up_to_whole_physics_steps_and_are_at_least_one():
    s = MultiRateSchedule(0, 10 * MS, 10 * MS, None)
    s.due(0)
    assert s.steps(0, 3 * MS) == 4  # 10 ms in 3 ms steps: 4 (12 ms), never short of the output
    assert s.steps(10 * MS, MS) == 1  # at the output already
    assert s.steps(12 * MS, MS) == 1  # past it (a reset moved time): still one step


def test_camera_disabled_never_due_and_out_of_the_next_event():
    s = MultiRateSchedule(0, 2 * MS, 10 * MS, None)
    assert s.due(0) == Due(True, True, False)
    assert s.next_event_ns() == 2 * MS
    assert s.due(40 * MS).camera is False


def test_a_bad_period_is_refused():
    with pytest.raises(ConfigError):
        MultiRateSchedule(0, 0, 10 * MS, None)


def test_realtime_pacing_waits_runs_on_or_rebases():
    pacer = RealtimePacer(1.0, 250 * MS, wall_ns=1_000 * MS, sim_ns=0)
    assert pacer.after_step(10 * MS, 1_004 * MS) == Pace(6 * MS)  # ahead: wait 6 ms
    assert pacer.after_step(10 * MS, 1_010 * MS) == Pace(0)  # on time
    assert pacer.after_step(10 * MS, 1_260 * MS) == Pace(0)  # 250 ms behind: still catching up
    assert pacer.after_step(10 * MS, 1_260 * MS + 1) == Pace(0, lag_reset=True)
    assert (pacer.wall0_ns, pacer.sim0_ns) == (1_260 * MS + 1, 10 * MS)  # paced from there on
    assert pacer.after_step(20 * MS, 1_265 * MS + 1) == Pace(5 * MS)


def test_real_time_factor_two_halves_the_wall_time():
    pacer = RealtimePacer(2.0, 250 * MS, wall_ns=0, sim_ns=0)
    assert pacer.due_wall_ns(100 * MS) == 50 * MS
    assert pacer.after_step(100 * MS, 20 * MS) == Pace(30 * MS)
    pacer.rebase(500 * MS, 100 * MS)  # lockstep rebases after each frame
    assert pacer.due_wall_ns(300 * MS) == 600 * MS
    with pytest.raises(ConfigError):
        RealtimePacer(0.0, 250 * MS, 0, 0)


def test_rate_reports_each_period_and_logs_each_log_period():
    reporter = RateReporter(1_000 * MS, 10_000 * MS, wall_ns=0, sim_ns=0)
    assert reporter.poll(999 * MS, 900 * MS) is None
    first = reporter.poll(1_000 * MS, 500 * MS)
    assert first.real_time_factor == pytest.approx(0.5) and first.log is False
    second = reporter.poll(3_000 * MS, 2_500 * MS)  # 2 s of sim in 2 s of wall time
    assert second.real_time_factor == pytest.approx(1.0) and second.log is False
    logs = [reporter.poll(w * 1_000 * MS, w * 1_000 * MS).log for w in range(4, 12)]
    assert logs == [False] * 6 + [True, False]  # at 10 s, then not again until 20 s
