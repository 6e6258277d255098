"""The soak's pure logic (core/soak.py): the seeded fault schedule and the invariant checks, on
hand-made recordings at fixed times, each shown to catch the violation it is there for."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.core import soak
from sim2real_ros.core.errors import ConfigError

MS = 1_000_000  # ns
LIMITS = soak.CommandLimits.from_limits([-1.0, -2.0], [1.0, 2.0], [2.0, 4.0], control_period_s=0.01)


def stream(start_ns: int, positions: list[list[float]], period_ns: int = 10 * MS) -> list[soak.TimedPositions]:
    return [soak.TimedPositions(start_ns + k * period_ns, np.array(q, dtype=float)) for k, q in enumerate(positions)]


def test_schedule_is_seeded_and_injects_every_kind_first():
    first = soak.fault_schedule(7, 30)
    assert first == soak.fault_schedule(7, 30)
    assert first != soak.fault_schedule(8, 30)
    assert sorted(f.kind for f in first[:len(soak.FAULT_KINDS)]) == sorted(soak.FAULT_KINDS)
    drops = [f for f in soak.fault_schedule(1, 200) if f.kind == "joint_states_drop"]
    assert drops and all(0.05 <= f.duration_s <= 0.5 for f in drops)
    assert all(1.0 <= f.gap_s <= 4.0 for f in first)
    with pytest.raises(ConfigError, match="gap_range_s"):
        soak.fault_schedule(0, 1, gap_range_s=(3.0, 1.0))


def test_commands_within_limits_and_steps_pass():
    # 0.02 rad per 10 ms on joint 0 (velocity 2 rad/s x 0.01 s), 0.04 on joint 1
    commands = stream(0, [[0.0, 0.0], [0.02, 0.04], [0.04, 0.08], [0.04, 0.08]])
    assert soak.check_commands(commands, LIMITS) == []


def test_command_over_the_limit_and_a_large_step_are_caught():
    commands = stream(0, [[0.98, 0.0], [1.0, 0.0], [1.01, 0.0], [1.01, 0.5], [float("nan"), 0.0]])
    kinds = [v.kind for v in soak.check_commands(commands, LIMITS)]
    assert kinds == ["command_outside_limits", "command_outside_limits", "command_step_too_large",
                     "command_not_finite"]


def test_commands_are_checked_in_publish_order():
    ordered = stream(0, [[0.0, 0.0], [0.02, 0.0], [0.04, 0.0]])
    shuffled = [ordered[2], ordered[0], ordered[1]]
    assert soak.check_commands(shuffled, LIMITS) == []


def test_commands_the_recording_lacks_are_counted_by_sequence_number_and_bound_the_step():
    # The supervisor sent 5 commands, 0.02 rad apart on joint 0; the bag lacks the middle three
    # (a stalled recorder). Sequence numbers 1 and 5: four steps were sent, so 0.08 rad is allowed.
    sent = stream(0, [[0.02 * k, 0.0] for k in range(5)])
    recorded = [soak.TimedPositions(c.t_ns, c.positions, k + 1) for k, c in enumerate(sent) if k in (0, 4)]
    assert soak.check_commands(recorded, LIMITS) == [] and soak.missed_commands(recorded) == 3
    # The same two recorded as neighbours (consecutive numbers, or unknown: 0) jump 0.08 rad in one.
    for first, second in ((1, 2), (0, 0), (0, 5), (5, 1), (5, 5)):
        pair = [soak.TimedPositions(recorded[0].t_ns, recorded[0].positions, first),
                soak.TimedPositions(recorded[1].t_ns, recorded[1].positions, second)]
        [violation] = soak.check_commands(pair, LIMITS)
        assert violation.kind == "command_step_too_large" and "0.080000 rad > 0.020000 rad" in violation.detail
    # Across the gap a jump larger than one step per command sent is still caught.
    jumped = [recorded[0], soak.TimedPositions(recorded[1].t_ns, np.array([0.081, 0.0]), 5)]
    [violation] = soak.check_commands(jumped, LIMITS)
    assert "0.081000 rad > 0.080000 rad across 4 commands sent" in violation.detail
    # The bag does not say which writer sent a message: numbers that ever fail to increase (a second
    # publisher on the topic, a restart) are not one stream, and no gap is trusted anywhere.
    other_writer = soak.TimedPositions(recorded[1].t_ns + 10 * MS, np.array([0.08, 0.0]), 3)
    assert soak.missed_commands([*recorded, other_writer]) == 0
    [violation] = soak.check_commands([*recorded, other_writer], LIMITS)
    assert violation.t_ns == recorded[1].t_ns and "across" not in violation.detail


def estop_recording(hold_from_ms: int):
    """The arm moves +0.004 rad per 10 ms on joint 0 (measured = commanded); the e-stop is pressed at
    t = 1000 ms and released at 1500 ms; from `hold_from_ms` on, the commands hold where the arm
    was then."""
    t_press, t_release = 1000 * MS, 1500 * MS
    commands, measured = [], []
    hold = None
    for k in range(0, 200):
        t = k * 10 * MS
        q = np.array([0.004 * k if hold is None else hold, 0.0])
        if hold is None and t >= hold_from_ms * MS:
            hold = q[0]
        commands.append(soak.TimedPositions(t, q))
        measured.append(soak.TimedPositions(t + 5 * MS, q.copy()))
    modes = [soak.ModeSample(0, "AUTONOMOUS"), soak.ModeSample(t_press + 3 * MS, "ESTOP", "e-stop: estop topic")]
    return [soak.EstopPress(t_press, t_release)], commands, measured, modes


def test_an_estop_held_at_once_is_honoured():
    presses, commands, measured, modes = estop_recording(hold_from_ms=1010)
    verdicts, violations = soak.check_estops(presses, commands, measured, modes, bound_s=0.1)
    assert violations == []
    assert verdicts[0].honoured and verdicts[0].latch_ms == pytest.approx(3.0)
    assert verdicts[0].reaction_ms <= 100


def test_a_late_estop_hold_is_caught():
    # the policy drives on for 300 ms after the press, then holds there: not the stop's position
    presses, commands, measured, modes = estop_recording(hold_from_ms=1300)
    verdicts, violations = soak.check_estops(presses, commands, measured, modes, bound_s=0.1)
    assert [v.kind for v in violations] == ["estop_not_honoured"]
    assert not verdicts[0].honoured and "away from every measured position" in verdicts[0].problem
    # the detail says what the supervisor was doing before the press (the hold it kept comes from there)
    assert "(supervisor before the press: AUTONOMOUS since 1.00 s before: )" in verdicts[0].problem


def test_a_press_while_latched_is_judged_by_where_the_arm_was_when_estop_was_entered():
    """ESTOP latched at 500 ms (hold there), then the sim teleports the arm 0.3 rad (an episode reset)
    while latched: the command stays (latched, it never moves). A second press at 1000 ms is
    honoured; a hold that was never where the arm was at the latch is still caught."""
    presses, commands, measured, _ = estop_recording(hold_from_ms=500)
    measured = [soak.TimedPositions(m.t_ns, m.positions + (np.array([0.3, 0.0]) if m.t_ns > 700 * MS else 0.0))
                for m in measured]
    modes = [soak.ModeSample(0, "AUTONOMOUS"), soak.ModeSample(503 * MS, "ESTOP", "e-stop: estop topic"),
             soak.ModeSample(800 * MS, "ESTOP", "e-stop: estop topic")]
    verdicts, violations = soak.check_estops(presses, commands, measured, modes, bound_s=0.1)
    assert violations == [] and verdicts[0].honoured and verdicts[0].latch_ms == 0.0
    elsewhere = [soak.TimedPositions(c.t_ns, c.positions + np.array([0.2, 0.0])) if c.t_ns >= 500 * MS else c
                 for c in commands]
    _, violations = soak.check_estops(presses, elsewhere, measured, modes, bound_s=0.1)
    assert [v.kind for v in violations] == ["estop_not_honoured"], violations


def test_a_press_while_latched_from_a_joint_state_silence_is_judged_by_the_last_measurement():
    """Joint states silent from 310 ms (the supervisor holds at the last one, 305 ms), ESTOP entered
    at 503 ms in that silence (30-minute soak, 2026-12-02): a second press at 1000 ms is judged by
    the last measurement before the entry, and a hold elsewhere is still caught."""
    presses, commands, measured, _ = estop_recording(hold_from_ms=300)
    silent = [m for m in measured if not 310 * MS <= m.t_ns < 700 * MS]
    modes = [soak.ModeSample(0, "AUTONOMOUS"), soak.ModeSample(503 * MS, "ESTOP", "e-stop: heartbeat silent")]
    verdicts, violations = soak.check_estops(presses, commands, silent, modes, bound_s=0.1)
    assert violations == [] and verdicts[0].honoured, violations
    elsewhere = [soak.TimedPositions(c.t_ns, c.positions + np.array([0.2, 0.0])) if c.t_ns >= 500 * MS else c
                 for c in commands]
    _, violations = soak.check_estops(presses, elsewhere, silent, modes, bound_s=0.1)
    assert [v.kind for v in violations] == ["estop_not_honoured"], violations


def test_an_estop_reported_late_or_never_is_caught():
    presses, commands, measured, _ = estop_recording(hold_from_ms=1010)
    late = [soak.ModeSample(0, "AUTONOMOUS"), soak.ModeSample(1000 * MS + 250 * MS, "ESTOP")]
    _, violations = soak.check_estops(presses, commands, measured, late, bound_s=0.1)
    assert "after 250.0 ms" in violations[0].detail
    _, violations = soak.check_estops(presses, commands, measured, [soak.ModeSample(0, "AUTONOMOUS")], 0.1)
    assert "not reported" in violations[0].detail


def test_an_estop_with_commands_moving_on_is_caught():
    presses, commands, measured, modes = estop_recording(hold_from_ms=1010)
    # a command jumps away and comes back inside the hold window
    commands[120] = soak.TimedPositions(commands[120].t_ns, commands[120].positions + np.array([0.3, 0.0]))
    _, violations = soak.check_estops(presses, commands, measured, modes, bound_s=0.1)
    assert violations and "moved away from the hold" in violations[0].detail


def test_an_estop_without_any_command_after_it_is_caught():
    presses, commands, measured, modes = estop_recording(hold_from_ms=1010)
    silent = [c for c in commands if c.t_ns <= 1000 * MS]
    _, violations = soak.check_estops(presses, silent, measured, modes, bound_s=0.1)
    assert violations and "no command after the press" in violations[0].detail


def test_arming_needs_a_request_after_every_stop():
    modes = [soak.ModeSample(0, "HOLD"), soak.ModeSample(10, "AUTONOMOUS"), soak.ModeSample(20, "ESTOP"),
             soak.ModeSample(30, "HOLD"), soak.ModeSample(40, "AUTONOMOUS")]
    assert soak.check_no_auto_arm(modes, [5, 35]) == []
    # the arm request before the stop does not count for the re-arm after it
    violations = soak.check_no_auto_arm(modes, [5])
    assert [(v.kind, v.t_ns) for v in violations] == [("auto_rearm", 40)]
    assert [v.t_ns for v in soak.check_no_auto_arm(modes, [])] == [10, 40]


def test_recovery_summary_and_counts():
    log = soak.RecoveryLog()
    for value in (1.0, 3.0, None, 2.0):
        log.add("estop", value)
    assert log.summary()["estop"] == {"count": 4, "unrecovered": 1, "median_s": 2.0, "max_s": 3.0}
    counts = soak.count_by_kind(["estop", "estop", "other"], ("estop", "cpu_hog"))
    assert counts == {"estop": 2, "cpu_hog": 0, "other": 1}


def test_an_estop_pressed_while_latched_counts_as_latched_at_once():
    presses, commands, measured, _ = estop_recording(hold_from_ms=1010)
    latched = [soak.ModeSample(0, "AUTONOMOUS"), soak.ModeSample(900 * MS, "ESTOP"),
               soak.ModeSample(1190 * MS, "ESTOP")]
    verdicts, violations = soak.check_estops(presses, commands, measured, latched, bound_s=0.1)
    assert violations == [] and verdicts[0].latch_ms == 0.0


def test_a_lost_stop_source_must_latch_while_moving():
    modes = [soak.ModeSample(0, "AUTONOMOUS"), soak.ModeSample(500, "ESTOP"), soak.ModeSample(2000, "HOLD"),
             soak.ModeSample(3000, "AUTONOMOUS")]
    assert soak.check_stop_source_losses([(100, 1000)], modes) == []
    assert soak.check_stop_source_losses([(2100, 2900)], modes) == []  # HOLD: nothing to stop
    violations = soak.check_stop_source_losses([(3100, 4000)], modes)
    assert [(v.kind, v.t_ns) for v in violations] == [("stop_source_loss_ignored", 3100)]
