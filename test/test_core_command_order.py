"""core.command_order at fixed times: which decisions go out, and forward-or-wait of policy commands."""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from sim2real_ros.core.control.command_order import CommandForwarding, CommandOrder
from sim2real_ros.core.safety.limits import SafetyLimits, clamp_command

PERIOD_NS = 10_000_000  # 100 Hz


def test_every_decided_command_is_published_in_decision_order_across_threads():
    """Two threads (the executor's ticks, the e-stop thread's holds) decide step-limited commands
    while publishing is slow: the robot gets every one, in order, so no step between two published
    commands exceeds one control period's travel. (Dropping a command that lost the race to the
    publisher, as an earlier design did, made steps of up to two periods.)"""
    limits = SafetyLimits(("j",), np.array([-10.0]), np.array([10.0]), np.array([1.0]),
                          np.array([-10.0]), np.array([10.0]))
    published: list[float] = []
    last = {"q": np.zeros(1), "decided": 0}
    rng = random.Random(3)

    def publish(q: float) -> None:
        time.sleep(rng.uniform(0.0, 0.0005))  # a publish the other thread can overtake
        published.append(q)

    order = CommandOrder(publish)

    def decision(wish: float):
        def decide() -> float:
            last["q"] = clamp_command(np.array([wish]), last["q"], limits, PERIOD_NS / 1e9)
            last["decided"] += 1
            return float(last["q"][0])
        return decide

    def drive(wish: float) -> None:
        for _ in range(150):
            assert order.decide(decision(wish))

    threads = [threading.Thread(target=drive, args=(w,)) for w in (5.0, -5.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(published) == last["decided"] == order.sent == 300
    steps = np.abs(np.diff([0.0, *published]))
    assert steps.max() <= 1.0 * PERIOD_NS / 1e9 + 1e-12, steps.max()
    assert published[-1] == last["q"][0]


def test_a_decision_without_a_command_publishes_nothing():
    sent = []
    order = CommandOrder(sent.append)
    assert order.decide(lambda: None) is False
    assert order.decide(lambda: "hold") is True
    assert sent == ["hold"] and order.sent == 1


def test_no_tick_yet_or_a_clock_that_went_back_counts_as_two_periods_ago():
    fwd = CommandForwarding(PERIOD_NS)
    assert fwd.since_tick_ns(123) == 2 * PERIOD_NS
    fwd.ticked(1_000_000_000)
    assert fwd.since_tick_ns(1_003_000_000) == 3_000_000
    assert fwd.since_tick_ns(999_999_999) == 2 * PERIOD_NS  # sim restart


@pytest.mark.parametrize(("since_ns", "forward"), [
    (0, False), (4_999_999, False), (5_000_000, True), (7_000_000, True), (30_000_000, True)])
def test_autonomous_policy_command_is_forwarded_from_half_a_period_after_the_last_tick(since_ns, forward):
    fwd = CommandForwarding(PERIOD_NS)
    fwd.ticked(2_000_000_000)
    assert fwd.forward_now(True, 2_000_000_000 + since_ns) is forward


def test_nothing_is_forwarded_outside_autonomous_or_when_disabled():
    fwd = CommandForwarding(PERIOD_NS)
    assert fwd.forward_now(False, 10 * PERIOD_NS) is False
    off = CommandForwarding(PERIOD_NS, enabled=False)
    assert off.forward_now(True, 10 * PERIOD_NS) is False
    off.ticked(0)
    assert off.timer_ticks(True, 1) is True  # disabled: every timer tick runs


@pytest.mark.parametrize(("since_ns", "ticks"), [
    (0, False), (9_000_000, False), (14_999_999, False), (15_000_000, True), (40_000_000, True)])
def test_timer_is_the_fallback_after_one_and_a_half_periods_without_a_tick(since_ns, ticks):
    fwd = CommandForwarding(PERIOD_NS)
    fwd.ticked(5_000_000_000)
    assert fwd.timer_ticks(True, 5_000_000_000 + since_ns) is ticks
    assert fwd.timer_ticks(False, 5_000_000_000 + since_ns) is True  # HOLD, TELEOP...: the timer drives


def test_odd_period_rounds_the_thresholds_down():
    fwd = CommandForwarding(3)  # [ns]: half = 1, one and a half = 4
    fwd.ticked(100)
    assert [fwd.forward_now(True, 100 + d) for d in (0, 1, 2)] == [False, True, True]
    assert [fwd.timer_ticks(True, 100 + d) for d in (3, 4)] == [False, True]


@pytest.mark.parametrize(("since_ns", "deferred"), [(0, True), (4_999_999, True), (5_000_000, False)])
def test_a_policy_command_too_soon_after_a_tick_is_deferred_not_dropped(since_ns, deferred):
    """Too soon to go out now: it goes out half a period after the last tick (the node's one-shot
    timer), not with whatever command comes next; outside AUTONOMOUS or disabled nothing waits."""
    fwd = CommandForwarding(PERIOD_NS)
    fwd.ticked(2_000_000_000)
    assert fwd.deferred(True, 2_000_000_000 + since_ns) is deferred
    assert fwd.deferred(False, 2_000_000_000 + since_ns) is False
    assert CommandForwarding(PERIOD_NS, enabled=False).deferred(True, 1) is False


@pytest.mark.parametrize(("since_ns", "forward"), [(0, False), (1_999_999, False), (2_000_000, True),
                                                   (4_000_000, True)])
def test_a_shorter_forward_interval_sends_the_actuators_command_for_a_new_chunk_at_once(since_ns, forward):
    """The supervisor's min_forward_interval_s (2 ms, as the actuator's min_command_interval_s): a
    command 2-5 ms after the last tick goes out at once instead of waiting for half a period; sooner
    it waits for the interval, never longer."""
    fwd = CommandForwarding(PERIOD_NS, min_interval_ns=2_000_000)
    fwd.ticked(2_000_000_000)
    assert fwd.interval_ns == 2_000_000 and CommandForwarding(PERIOD_NS).interval_ns == PERIOD_NS // 2
    assert fwd.forward_now(True, 2_000_000_000 + since_ns) is forward
    assert fwd.deferred(True, 2_000_000_000 + since_ns) is not forward
    assert fwd.timer_ticks(True, 2_000_000_000 + since_ns) is False  # the fallback timer is unchanged


def test_commands_closer_than_a_period_move_proportionally_less():
    """Why a shorter interval keeps the velocity limit: the step limiter every command passes moves
    a command velocity x the time since the last one, so two commands 2 ms apart move no farther
    together than one 10 ms tick would (the DESIGN's step rule)."""
    from sim2real_ros.core.safety.limits import SafetyLimits
    from sim2real_ros.core.safety.supervision.command_output import StepLimiter

    limits = SafetyLimits(("j",), np.array([-10.0]), np.array([10.0]), np.array([1.0]),
                          np.array([-10.0]), np.array([10.0]))
    limiter = StepLimiter(limits, PERIOD_NS / 1e9)
    wish = np.array([5.0])
    first = limiter.limit(wish, 1_000_000_000, np.zeros(1))
    early = limiter.limit(wish, 1_002_000_000, None)  # the actuator's extra command, 2 ms later
    regular = limiter.limit(wish, 1_010_000_000, None)  # the next regular tick
    assert first[0] == pytest.approx(0.01)  # one period's travel at 1 rad/s
    assert early[0] - first[0] == pytest.approx(0.002) and regular[0] - early[0] == pytest.approx(0.008)
