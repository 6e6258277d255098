"""The supervisor's parts one by one (core/supervision/), as ros2_controllers tests its trajectory:
hand-made inputs, fixed times (int [ns]), exact expectations. The whole supervisor is
test_supervisor_core.py's and test_supervisor_fuzz.py's."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.safety.joystick import JoystickMapping
from sim2real_ros.core.safety.limits import SafetyLimits
from sim2real_ros.core.safety.supervision.command_output import StepLimiter
from sim2real_ros.core.safety.supervision.config import SupervisorConfig
from sim2real_ros.core.safety.supervision.coordinator import Supervisor
from sim2real_ros.core.safety.supervision.estop import ABSENT_POLLS, EStopSources
from sim2real_ros.core.safety.supervision.handover import HandoverRamp, gap_refusal, ramp_duration_ns
from sim2real_ros.core.safety.supervision.interventions import InterventionLog
from sim2real_ros.core.safety.supervision.modes import (
    EVENT_FIELDS,
    MOVING_MODES,
    POLICY_MODES,
    TRANSITIONS,
    Event,
    Guard,
    Ignored,
    Mode,
    Note,
    Refused,
    Transition,
    entry,
    template_fields,
    transition_table_markdown,
)
from sim2real_ros.core.safety.supervision.plausibility import COMMAND_MARGIN_RAD, beyond_limits
from sim2real_ros.core.safety.supervision.shared_control import SharedCorrection
from sim2real_ros.core.safety.supervision.watchdogs import (
    ClockWatch,
    InputTimes,
    age_text,
    fresh,
    missing_inputs,
    watchdog_problem,
)
from sim2real_ros.core.safety.teleop import Jogger

MS = 1_000_000
T0 = 7_000 * MS  # any fixed time [ns]
LIMITS = SafetyLimits(("j1", "j2"), np.array([-1.0, -2.0]), np.array([1.0, 2.0]), np.array([1.0, 2.0]))
BUTTONS = {"estop": 1, "deadman": 4, "takeover": 2, "shared": 3, "arm": 7, "hold": 0}
MAPPING = JoystickMapping(buttons=BUTTONS)
DOC = Path(__file__).resolve().parent.parent / "docs" / "safety.md"


# ----------------------------------------------------------------------------------------------
# modes: the transition table
def test_table_is_total_over_every_mode_and_event():
    assert set(TRANSITIONS) == {(mode, event) for mode in Mode for event in Event}
    assert len(TRANSITIONS) == len(Mode) * len(Event) == 70
    for key, item in TRANSITIONS.items():
        assert isinstance(item, Transition | Note | Refused | Ignored), key
        assert item.reason, key


def test_reasons_use_only_the_fields_their_event_fills():
    for (mode, event), item in TRANSITIONS.items():
        templates = [item.reason] + ([item.refusal] if isinstance(item, Transition) else [])
        for template in templates:
            assert template_fields(template) <= EVENT_FIELDS[event], (mode, event, template)
            template.format(**dict.fromkeys(EVENT_FIELDS[event], 1.0))  # formats with any value


def test_guarded_transitions_say_how_they_are_refused_and_unguarded_ones_never_are():
    for key, item in TRANSITIONS.items():
        if isinstance(item, Transition):
            assert bool(item.refusal) == (item.guard != Guard.NONE), key


def test_estop_is_left_only_by_a_reset_with_every_source_released():
    for event in Event:
        item = entry(Mode.ESTOP, event)
        if isinstance(item, Transition) and item.to != Mode.ESTOP:
            assert (event, item.to, item.guard) == (Event.RESET, Mode.HOLD, Guard.SOURCES_RELEASED)
    assert isinstance(entry(Mode.ESTOP, Event.ARM), Refused)
    assert isinstance(entry(Mode.ESTOP, Event.HOLD_REQUEST), Refused)


def test_every_mode_latches_on_an_estop_source_and_an_internal_error_unguarded():
    for mode in Mode:
        if mode != Mode.ESTOP:
            assert entry(mode, Event.ESTOP_SOURCE) == Transition(Mode.ESTOP, "e-stop: {source}")
        assert entry(mode, Event.INTERNAL_ERROR) == Transition(Mode.ESTOP, "e-stop: {error}")
    assert entry(Mode.ESTOP, Event.ESTOP_SOURCE) == Ignored("already latched")


def test_moving_modes_stop_on_a_watchdog_a_clock_step_back_and_a_lost_stop_source():
    for mode in MOVING_MODES:
        for event, to in ((Event.WATCHDOG, Mode.HOLD), (Event.CLOCK_STEP_BACK, Mode.HOLD),
                          (Event.STOP_SOURCE_LOST, Mode.ESTOP)):
            item = entry(mode, event)
            assert isinstance(item, Transition) and (item.to, item.guard) == (to, Guard.NONE), (mode, event)
    # Not moving: nothing to stop, and a lost stop source only blocks arming.
    assert isinstance(entry(Mode.HOLD, Event.WATCHDOG), Ignored)
    assert isinstance(entry(Mode.HOLD, Event.STOP_SOURCE_LOST), Ignored)
    assert isinstance(entry(Mode.HOLD, Event.CLOCK_STEP_BACK), Note)


def test_control_reaches_the_policy_only_through_the_arming_checks():
    unguarded = set()
    for (mode, event), item in TRANSITIONS.items():
        if isinstance(item, Transition) and item.to in POLICY_MODES and item.to != mode:
            if item.guard == Guard.NONE:
                unguarded.add((mode, event))
            else:
                assert item.guard == Guard.POLICY_READY, (mode, event)
    # The one exception: AUTONOMOUS -> SHARED, where the policy already drives (its offset starts at 0).
    assert unguarded == {(Mode.AUTONOMOUS, Event.SHARED_TOGGLE)}


def test_a_jump_moves_no_latched_hold_and_keeps_teleop_with_the_human():
    assert entry(Mode.ESTOP, Event.JOINT_JUMP) == Note("{jump}: hold kept while latched (the reset re-captures it)")
    assert entry(Mode.TELEOP, Event.JOINT_JUMP).to == Mode.TELEOP
    assert entry(Mode.AUTONOMOUS, Event.JOINT_JUMP).to == entry(Mode.SHARED, Event.JOINT_JUMP).to == Mode.HOLD


def test_docs_show_the_codes_table():
    text = DOC.read_text()
    begin = text.index("<!-- transition-table:begin")
    start = text.index("\n", begin) + 1
    end = text.index("<!-- transition-table:end -->")
    assert text[start:end] == transition_table_markdown(), (
        "docs/safety.md's transition table is out of date: run `python -m sim2real_ros.core.safety.supervision.modes`")


def test_table_renders_one_row_per_event():
    lines = transition_table_markdown().splitlines()
    assert lines[0] == "| event | ESTOP | HOLD | AUTONOMOUS | SHARED | TELEOP |"
    assert len(lines) == 2 + len(Event)
    assert lines[2 + list(Event).index(Event.RESET)] == (
        "| `reset` | **HOLD** if sources released: `reset after e-stop ({latched_reason}); holding until armed` | "
        + " | ".join(["ignored: `not latched (mode {mode}); nothing to reset`"] * 4) + " |")


# ----------------------------------------------------------------------------------------------
# estop: the sources and the stop-source check
def sources(**overrides) -> EStopSources:
    return EStopSources(SupervisorConfig(**overrides), BUTTONS["estop"])


def test_heartbeat_counts_from_the_first_tick_and_trips_strictly_after_its_timeout():
    stop = sources(estop_heartbeat_timeout_s=0.5)
    assert stop.heartbeat_silent_s(T0) is None  # no tick yet: nothing to count from
    stop.start_heartbeat(T0)
    stop.start_heartbeat(T0 + 100 * MS)  # later ticks do not move the start
    assert stop.heartbeat_start_ns == T0
    assert stop.heartbeat_silent_s(T0 + 500 * MS) is None
    assert stop.heartbeat_silent_s(T0 + 500 * MS + 1) == pytest.approx(0.500000001, abs=1e-12)
    stop.on_message(False, T0 + 400 * MS)
    assert stop.heartbeat_silent_s(T0 + 900 * MS) is None
    assert stop.heartbeat_silent_s(T0 + 1_000 * MS) == pytest.approx(0.6, abs=1e-12)
    assert stop.active(T0 + 1_000 * MS) == ("e-stop heartbeat is silent",)


def test_no_heartbeat_configured_never_trips():
    stop = sources()
    stop.start_heartbeat(T0)
    assert stop.heartbeat_silent_s(T0 + 3_600_000 * MS) is None


def test_the_estop_button_pressed_released_and_unreadable():
    stop = sources()
    stop.read_button([0, 1, 0], T0)
    assert (stop.button_active, stop.button_read_ns) == ("joystick e-stop button is pressed", T0)
    stop.read_button([0, 0, 0], T0 + MS)
    assert (stop.button_active, stop.button_read_ns) == ("", T0 + MS)
    stop.read_button([0], T0 + 2 * MS)  # too short to hold button 1: a faulty stop source, not a release
    assert stop.button_active == ("joystick e-stop button 1 unreadable (the Joy message has 1 buttons): "
                                  "a stop source that cannot be read")
    assert stop.button_read_ns == T0 + MS
    assert stop.active(T0 + 2 * MS) == (stop.button_active,)


def test_active_sources_in_order():
    stop = sources()
    stop.on_message(True, T0)
    unheard = "2 estop publisher(s) cannot be heard (QoS must be reliable + transient local)"
    stop.set_faulty_publishers([unheard])
    assert stop.active(T0) == ("estop topic is true", unheard)
    stop.on_message(False, T0 + MS)
    stop.set_faulty_publishers([])
    assert stop.active(T0 + MS) == ()


def test_the_topic_is_released_only_when_every_publisher_that_pressed_has_released():
    """Issue 34: with two e-stop publishers the last message won (B's release cleared A's press)."""
    stop = sources()
    stop.on_message(True, T0, publisher="a")
    stop.on_message(False, T0 + MS, publisher="b")
    assert stop.active(T0 + MS) == ("estop topic is true (publisher a)",)
    stop.on_message(True, T0 + 2 * MS, publisher="b")
    stop.on_message(False, T0 + 3 * MS, publisher="a")
    assert stop.active(T0 + 3 * MS) == ("estop topic is true (publisher b)",)
    stop.on_message(False, T0 + 4 * MS, publisher="b")
    assert stop.active(T0 + 4 * MS) == () and not stop.topic_active


def test_without_publisher_gids_a_release_counts_only_when_one_publisher_remains():
    """rclpy 7 (Jazzy) gives no publisher GID: with two publishers on `estop`, a release may be the
    other button's, so it does not release; once one publisher remains, its release does."""
    stop = sources()
    stop.set_live_publishers(["gid-a", "gid-b"])
    stop.on_message(True, T0)  # A presses (anonymous)
    stop.on_message(False, T0 + MS)  # B's release, or A's: cannot tell
    assert stop.topic_active
    assert "unidentified, one of 2" in stop.active(T0 + MS)[0]
    stop.set_live_publishers(["gid-a"])  # B left
    assert stop.topic_active  # a release heard before does not count now
    stop.on_message(False, T0 + 2 * MS)
    assert stop.active(T0 + 2 * MS) == () and not stop.topic_active


def test_without_gids_a_release_from_a_publisher_the_poll_has_not_seen_yet_does_not_release():
    """Jazzy, CI: A pressed; B joined and released before the next poll counted it (the poll still
    said one publisher). The count the node reads as the message arrives says two: no release."""
    stop = sources()
    stop.set_live_publishers(["gid-a"])
    stop.on_message(True, T0)  # A presses (anonymous)
    stop.on_message(False, T0 + MS, publishers_now=2)  # B's release, B not yet polled
    assert stop.topic_active and "estop topic is true" in stop.active(T0 + MS)[0]
    stop.on_message(False, T0 + 2 * MS, publishers_now=1)  # B gone again: the one left is A
    assert not stop.topic_active


def test_a_publisher_that_leaves_while_pressed_stays_pressed_until_a_reset():
    stop = sources()
    stop.on_message(True, T0, publisher="a")
    for _ in range(ABSENT_POLLS - 1):  # the graph may show a publisher after its first message
        stop.set_live_publishers(["b"])
        assert stop.active(T0) == ("estop topic is true (publisher a)",) and not stop.vanished_text()
    stop.set_live_publishers(["a"])  # seen: the absence count starts again
    for _ in range(ABSENT_POLLS):
        stop.set_live_publishers([])
    # Gone while pressed: it can never release; it no longer blocks the reset, the reset clears it.
    assert stop.topic_active and stop.active(T0) == ()
    assert stop.vanished_text() == "1 estop publisher(s) left while pressed (publisher a)"
    stop.clear_vanished()
    assert not stop.topic_active and stop.vanished_text() == ""
    # A publisher whose GID is unknown ("") never counts as gone.
    stop.on_message(True, T0, publisher="")
    for _ in range(2 * ABSENT_POLLS):
        stop.set_live_publishers([])
    assert stop.active(T0) == ("estop topic is true",)


def test_a_live_stop_source_is_a_recent_estop_message_or_a_recently_read_button():
    stop = sources(require_stop_source=True, estop_heartbeat_timeout_s=0.5, joy_timeout_s=0.2)
    assert stop.stop_source_missing(T0) == (
        "no live stop source (require_stop_source: needs estop messages within 0.5 s or "
        "a joystick (e-stop button 1) within 0.2 s)")
    stop.read_button([0, 0], T0)
    assert stop.stop_source_missing(T0 + 200 * MS) == ""
    assert stop.stop_source_missing(T0 + 200 * MS + 1) != ""
    stop.on_message(False, T0 + 300 * MS)
    assert stop.stop_source_missing(T0 + 800 * MS) == ""
    assert stop.stop_source_missing(T0 + 299 * MS) != ""  # a message in the future is not live
    assert sources().stop_source_missing(T0) == ""  # not required


def test_a_clock_step_back_makes_every_source_speak_again():
    stop = sources(require_stop_source=True, estop_heartbeat_timeout_s=0.5)
    stop.start_heartbeat(T0)
    stop.on_message(False, T0 + 100 * MS)
    stop.read_button([0, 0], T0 + 100 * MS)
    stop.restart_after_clock_step(T0 - 30_000 * MS)
    assert (stop.message_ns, stop.button_read_ns, stop.heartbeat_start_ns) == (None, None, T0 - 30_000 * MS)
    assert stop.heartbeat_silent_s(T0 - 29_500 * MS) is None  # counts from the step, not 30 s later
    assert stop.heartbeat_silent_s(T0 - 29_400 * MS) == pytest.approx(0.6, abs=1e-12)


def test_requiring_a_stop_source_without_one_is_a_config_error():
    with pytest.raises(ConfigError):
        EStopSources(SupervisorConfig(require_stop_source=True), estop_button=-1)
    EStopSources(SupervisorConfig(require_stop_source=True, estop_heartbeat_timeout_s=0.5), estop_button=-1)


# ----------------------------------------------------------------------------------------------
# watchdogs: freshness, the clock watch, the stale-input check
def test_fresh_includes_the_timeout_and_excludes_the_future():
    assert fresh(T0, T0 + 100 * MS, 0.1)
    assert not fresh(T0, T0 + 100 * MS + 1, 0.1)
    assert not fresh(T0, T0 - 1, 0.1)
    assert not fresh(None, T0, 0.1)
    assert fresh(T0, T0, 0.001)


def test_age_text():
    assert age_text(T0, T0 + 1_234 * MS) == "1.234 s"
    assert age_text(None, T0) == "ever (nothing received)"


def test_clock_watch_reports_steps_back_only():
    clock = ClockWatch()
    assert clock.observe(T0) is None
    assert clock.observe(T0) is None  # the same time again is not a step back
    assert clock.observe(T0 + 500 * MS) is None
    assert clock.observe(T0 + 250 * MS) == 0.25
    assert clock.latest_ns == T0 + 250 * MS  # re-anchored: the next comparison is with the new time
    assert clock.observe(T0 + 260 * MS) is None


def test_missing_inputs_and_forget():
    config = SupervisorConfig(joint_state_timeout_s=0.2, policy_timeout_s=0.1)
    times = InputTimes(joint_state_ns=T0, policy_ns=T0)
    assert missing_inputs(times, T0 + 100 * MS, config) == []
    assert missing_inputs(times, T0 + 150 * MS, config) == ["no fresh command/policy"]
    assert missing_inputs(times, T0 + 201 * MS, config) == ["no fresh joint_states", "no fresh command/policy"]
    times.forget()
    assert times == InputTimes()


def test_watchdog_problem_names_the_first_stale_input_of_the_mode():
    config = SupervisorConfig(joint_state_timeout_s=0.2, policy_timeout_s=0.1, joy_timeout_s=0.5)
    times = InputTimes(joint_state_ns=T0, policy_ns=T0, joy_ns=T0)
    now = T0 + 150 * MS
    assert watchdog_problem(times, Mode.AUTONOMOUS, 0, now, config) == \
        "command/policy silent for 0.150 s (timeout 0.1 s)"
    assert watchdog_problem(times, Mode.TELEOP, 0, now, config) == ""  # TELEOP needs no policy
    assert watchdog_problem(times, Mode.TELEOP, 1, now, config) == "1 other publisher(s) on the robot command topic"
    assert watchdog_problem(times, Mode.TELEOP, 0, T0 + 199 * MS, config) == ""
    times.joy_ns = None
    assert watchdog_problem(times, Mode.TELEOP, 0, now, config) == \
        "joy silent for ever (nothing received) (timeout 0.5 s)"
    assert watchdog_problem(times, Mode.SHARED, 0, T0 + 300 * MS, config) == \
        "joint_states silent for 0.300 s (timeout 0.2 s)"


# ----------------------------------------------------------------------------------------------
# plausibility
def test_beyond_limits_names_the_first_joint_out_of_range():
    assert beyond_limits(np.array([1.4, 2.4]), LIMITS, 0.5) == ""
    assert beyond_limits(np.array([0.0, -2.6]), LIMITS, 0.5) == \
        "joint 'j2' at -2.6 is beyond its limits [-2.000, 2.000] by more than 0.500"
    assert beyond_limits(np.array([1.0 + COMMAND_MARGIN_RAD + 1e-9, 0.0]), LIMITS, COMMAND_MARGIN_RAD) != ""


# ----------------------------------------------------------------------------------------------
# command_output: the step limiter
def test_first_command_is_limited_from_the_measured_position():
    limiter = StepLimiter(LIMITS, 0.01)
    sent = limiter.limit(np.array([1.0, -2.0]), T0, measured=np.array([0.5, 0.0]))
    np.testing.assert_allclose(sent, [0.51, -0.02], rtol=0, atol=1e-15)
    assert limiter.last_send_ns == T0 and np.array_equal(limiter.last_sent, sent)


def test_first_command_without_a_measurement_is_only_clamped_to_the_position_limits():
    sent = StepLimiter(LIMITS, 0.01).limit(np.array([3.0, -0.5]), T0, measured=None)
    np.testing.assert_array_equal(sent, [1.0, -0.5])


def test_step_time_is_the_time_since_the_last_command_capped_at_one_period():
    limiter = StepLimiter(LIMITS, 0.01)
    limiter.limit(np.zeros(2), T0, measured=np.zeros(2))
    np.testing.assert_allclose(limiter.limit(np.ones(2), T0 + 4 * MS, None), [0.004, 0.008], rtol=0, atol=1e-15)
    np.testing.assert_allclose(limiter.limit(np.ones(2), T0 + 1_000 * MS, None), [0.014, 0.028],
                               rtol=0, atol=1e-15)
    np.testing.assert_allclose(limiter.limit(np.ones(2), T0, None), [0.014, 0.028], rtol=0, atol=1e-15)  # back: 0
    limiter.forget_time()
    np.testing.assert_allclose(limiter.limit(np.ones(2), T0, None), [0.024, 0.048], rtol=0, atol=1e-15)


# ----------------------------------------------------------------------------------------------
# handover: gap check and ramp
def test_gap_refusal_names_the_worst_joint_and_allows_exactly_the_max_gap():
    q_meas = np.array([0.0, 0.0])
    assert gap_refusal(np.array([0.5, -0.25]), q_meas, LIMITS.joint_names, 0.5) == ""
    assert gap_refusal(np.array([0.25, -0.75]), q_meas, LIMITS.joint_names, 0.5) == \
        "handover gap 0.750 rad at joint 'j2' > handover_max_gap_rad 0.5"


def test_ramp_duration_scales_with_the_gap_up_to_the_full_ramp():
    assert ramp_duration_ns(np.zeros(2), np.array([0.25, -0.1]), 1.0, 0.5) == 500 * MS
    assert ramp_duration_ns(np.zeros(2), np.array([2.0, 0.0]), 1.0, 0.5) == 1_000 * MS
    assert ramp_duration_ns(np.zeros(2), np.zeros(2), 1.0, 0.5) == 0


def test_ramp_blends_from_the_measured_position_and_ends_on_time():
    ramp = HandoverRamp()
    ramp.start(np.zeros(2), np.array([0.2, -0.2]), T0, ramp_s=1.0, max_gap_rad=0.4)
    assert ramp.running and ramp.duration_ns == 500 * MS
    target = np.array([0.2, -0.2])
    np.testing.assert_allclose(ramp.apply(target, T0 - 10 * MS), [0.0, 0.0], rtol=0, atol=1e-15)  # before: start
    np.testing.assert_allclose(ramp.apply(target, T0 + 125 * MS), [0.05, -0.05], rtol=0, atol=1e-15)
    assert ramp.running
    assert ramp.apply(target, T0 + 500 * MS) is target and not ramp.running


def test_no_ramp_when_it_is_switched_off_and_a_zero_length_ramp_ends_the_last_one():
    ramp = HandoverRamp()
    ramp.start(None, None, T0, ramp_s=0.0, max_gap_rad=0.5)  # switched off: inputs not even needed
    assert not ramp.running and ramp.duration_ns == 0
    ramp.start(np.zeros(2), np.array([0.5, 0.0]), T0, ramp_s=1.0, max_gap_rad=0.5)
    ramp.start(np.zeros(2), np.zeros(2), T0 + 10 * MS, ramp_s=1.0, max_gap_rad=0.5)
    assert ramp.duration_ns == 0 and ramp.start_ns == T0  # an earlier start stays ...
    target = np.array([0.5, 0.0])
    assert ramp.apply(target, T0 + 10 * MS) is target and not ramp.running  # ... and ends at once
    ramp.start(np.zeros(2), np.array([0.5, 0.0]), T0, ramp_s=1.0, max_gap_rad=0.5)
    ramp.clear()
    assert not ramp.running


# ----------------------------------------------------------------------------------------------
# shared_control
def test_shared_offset_integrates_authority_times_velocity_and_is_bounded():
    shared = SharedCorrection(2, authority=0.5, max_offset_rad=0.3)
    shared.integrate(np.array([1.0, -4.0]), 0.01)
    np.testing.assert_allclose(shared.offset, [0.005, -0.02], rtol=0, atol=1e-15)
    np.testing.assert_allclose(shared.apply(np.array([0.1, 0.1])), [0.105, 0.08], rtol=0, atol=1e-15)
    for _ in range(100):
        shared.integrate(np.array([1.0, -4.0]), 0.01)
    np.testing.assert_array_equal(shared.offset, [0.3, -0.3])
    shared.reset()
    np.testing.assert_array_equal(shared.offset, [0.0, 0.0])


# ----------------------------------------------------------------------------------------------
# interventions
def test_takeover_and_handback_events():
    log = InterventionLog()
    assert log.on_mode_change(Mode.AUTONOMOUS, Mode.TELEOP, "took over", T0)
    assert not log.on_mode_change(Mode.TELEOP, Mode.SHARED, "shared", T0 + 10 * MS)  # still the human's
    assert not log.on_mode_change(Mode.SHARED, Mode.AUTONOMOUS, "handed back", T0 + 30 * MS)
    assert [(e.event, e.start_ns, e.end_ns, e.mode, e.reason) for e in log.pop()] == [
        ("takeover", T0, 0, Mode.TELEOP, "took over"),
        ("handback", T0, T0 + 30 * MS, Mode.AUTONOMOUS, "handed back"),
    ]
    assert log.pop() == [] and log.start_ns is None
    assert not log.on_mode_change(Mode.HOLD, Mode.AUTONOMOUS, "armed", T0 + 40 * MS)
    assert log.events == []


# ----------------------------------------------------------------------------------------------
# coordinator: the table drives the supervisor
def supervisor(**overrides) -> Supervisor:
    return Supervisor(SupervisorConfig(**{"handover_ramp_s": 0.0, **overrides}), LIMITS, Jogger(MAPPING, LIMITS))


def fresh_inputs(sup: Supervisor, t: int, q=(0.1, -0.1)) -> None:
    assert sup.on_joint_state(LIMITS.joint_names, list(q), t)
    assert sup.on_policy_command(LIMITS.joint_names, list(q), t)


def joy(*pressed: str) -> tuple[list[float], list[int]]:
    buttons = [0] * 8
    for role in pressed:
        buttons[BUTTONS[role]] = 1
    return [0.0] * 6, buttons


def test_reasons_and_refusals_are_the_tables():
    sup = supervisor()
    assert sup.request_arm(T0, "arm request") == (
        False, "arm request refused: no fresh joint_states; no fresh command/policy")
    assert sup.reason == "arm request refused: no fresh joint_states; no fresh command/policy"
    fresh_inputs(sup, T0)
    assert sup.request_arm(T0, "arm request") == (True, "AUTONOMOUS (ramp 0.000 s)")
    assert (sup.mode, sup.reason) == (Mode.AUTONOMOUS, "armed by arm request")
    assert sup.request_arm(T0, "arm request") == (True, "already AUTONOMOUS")
    assert sup.request_reset(T0) == (True, "not latched (mode AUTONOMOUS); nothing to reset")
    cmd = sup.on_estop(True, T0 + MS)
    assert cmd.hold and (sup.mode, sup.reason) == (Mode.ESTOP, "e-stop: estop topic is true")
    assert sup.request_arm(T0 + MS, "arm button") == (False, "arm button refused: e-stop latched; reset first")
    assert sup.request_hold(T0 + MS) == (False, "e-stop latched; already holding")
    assert sup.request_reset(T0 + MS) == (False, "reset refused: e-stop still active: estop topic is true")
    sup.on_estop(False, T0 + 2 * MS)
    assert sup.request_reset(T0 + 2 * MS) == (True, "e-stop cleared; HOLD until armed")
    assert (sup.mode, sup.reason) == (
        Mode.HOLD, "reset after e-stop (e-stop: estop topic is true); holding until armed")
    assert sup.counters["estops"] == 1 and sup.counters["arm_refused"] == 2


def test_shared_toggle_and_its_hand_back_follow_the_table():
    sup = supervisor()
    fresh_inputs(sup, T0)
    sup.on_joy(*joy(), T0)
    assert sup.request_arm(T0)[0]
    sup.on_joy(*joy("shared"), T0 + 10 * MS)  # AUTONOMOUS -> SHARED: unguarded
    assert (sup.mode, sup.reason) == (Mode.SHARED, "SHARED: policy with human corrections")
    sup.on_joy(*joy(), T0 + 20 * MS)
    sup.set_foreign_publishers(1)
    sup.on_joy(*joy("shared"), T0 + 30 * MS)  # the hand-back is checked like an arm
    assert sup.mode == Mode.SHARED
    assert sup.reason == "shared button (hand back) refused: 1 other publisher(s) on the robot command topic"
    sup.set_foreign_publishers(0)
    sup.on_joy(*joy(), T0 + 40 * MS)
    sup.on_joy(*joy("shared"), T0 + 50 * MS)
    assert (sup.mode, sup.reason) == (Mode.AUTONOMOUS, "armed by shared button (hand back)")
    assert [(e.event, e.start_ns, e.end_ns) for e in sup.pop_events()] == [
        ("takeover", T0 + 10 * MS, 0), ("handback", T0 + 10 * MS, T0 + 50 * MS)]


def test_a_clock_step_back_is_a_transition_when_moving_and_a_note_when_holding():
    sup = supervisor()
    fresh_inputs(sup, T0)
    assert sup.tick(T0).hold
    sup.tick(T0 - 250 * MS)
    assert (sup.mode, sup.reason) == (
        Mode.HOLD, "starting: holding until armed | clock stepped back 0.250 s: every input is stale until it "
                   "arrives again")
    assert sup.counters["watchdog_holds"] == 0
    fresh_inputs(sup, T0)
    assert sup.request_arm(T0)[0]
    sup.tick(T0 - 100 * MS)
    assert (sup.mode, sup.reason) == (
        Mode.HOLD, "clock stepped back 0.100 s: every input is stale until it arrives again")
    assert sup.counters["watchdog_holds"] == 1 and sup.counters["clock_steps_back"] == 2


def test_an_internal_error_latches_with_the_tables_reason():
    sup = supervisor()
    fresh_inputs(sup, T0)
    last = sup.tick(T0).positions
    sup.jogger = None  # a bug: any joystick message now raises inside the core
    cmd = sup.on_joy(*joy(), T0 + 10 * MS)
    assert sup.mode == Mode.ESTOP and cmd.hold and np.array_equal(cmd.positions, last)
    assert sup.reason == f"e-stop: {sup.last_rejection}" and sup.reason.startswith("e-stop: internal error in on_joy")
