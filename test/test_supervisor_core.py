"""The supervisor state machine at fixed times: every transition, every watchdog, no sleeps."""
from __future__ import annotations

import numpy as np
import pybullet_data
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.joystick import load_joystick_mapping
from sim2real_ros.core.safety import limits_from_urdf
from sim2real_ros.core.supervisor import Mode, Supervisor, SupervisorConfig
from sim2real_ros.core.teleop import Jogger
from sim2real_ros.core.urdf import RobotModel
from sim2real_ros.paths import config_path, urdf_path

MS = 1_000_000
T0 = 5_000 * MS
MAPPING = load_joystick_mapping(config_path("joystick.yaml"))
N_AXES, N_BUTTONS = 6, 15


def robot() -> RobotModel:
    """The project's arm when it exists, else pybullet_data's Panda."""
    path = urdf_path()
    if path.is_file():
        return RobotModel.from_file(path)
    return RobotModel.from_file(f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf")


MODEL = robot()
NAMES = MODEL.joint_names
LIMITS = limits_from_urdf(MODEL, NAMES)
N = len(NAMES)
HOME = (LIMITS.lower + LIMITS.upper) / 2 + 0.1 * (LIMITS.upper - LIMITS.lower) * np.linspace(-1, 1, N)


def make(**overrides) -> Supervisor:
    config = SupervisorConfig(**overrides)
    return Supervisor(config, LIMITS, Jogger(MAPPING, LIMITS, MODEL))


def joy(*pressed: str, axes: dict[int, float] | None = None) -> tuple[list[float], list[int]]:
    buttons = [0] * N_BUTTONS
    for role in pressed:
        buttons[MAPPING.button(role)] = 1
    values = [0.0] * N_AXES
    for index, value in (axes or {}).items():
        values[index] = value
    return values, buttons


def feed(sup: Supervisor, t: int, q_meas=HOME, q_policy=HOME) -> None:
    """Fresh joint state and policy command at time t [ns]."""
    if q_meas is not None:
        assert sup.on_joint_state(NAMES, q_meas, t)
    if q_policy is not None:
        assert sup.on_policy_command(NAMES, q_policy, t)


def armed(**overrides) -> Supervisor:
    sup = make(**{"handover_ramp_s": 0.0, **overrides})
    feed(sup, T0)
    assert sup.request_arm(T0)[0] and sup.mode == Mode.AUTONOMOUS
    return sup


# ----------------------------------------------------------------------------------------------
def test_starts_in_hold_and_sends_nothing_before_a_joint_state():
    sup = make()
    assert sup.mode == Mode.HOLD
    assert sup.tick(T0) is None
    sup.on_joint_state(NAMES, HOME, T0 + MS)
    cmd = sup.tick(T0 + 2 * MS)
    assert cmd.hold and np.allclose(cmd.positions, HOME)


@pytest.mark.parametrize(("max_gap", "ramp_s"), [(0.25, 0.8), (0.8, 0.25)])
def test_arm_needs_fresh_inputs_then_ramps_from_the_measured_position(max_gap, ramp_s):
    # handover_ramp_s is the ramp for a gap of handover_max_gap_rad: the 0.2 rad gap here takes
    # 0.2 / max_gap of it.
    sup = make(handover_ramp_s=1.0, handover_max_gap_rad=max_gap)
    sup.on_joint_state(NAMES, HOME, T0)
    ok, message = sup.request_arm(T0)
    assert not ok and "no fresh command/policy" in message and sup.mode == Mode.HOLD
    target = HOME + 0.2
    feed(sup, T0, q_policy=target)
    assert sup.request_arm(T0)[0] and sup.mode == Mode.AUTONOMOUS
    t = T0
    for _ in range(200):  # 2 s of ticks at 100 Hz
        t += 10 * MS
        feed(sup, t, q_policy=target)
        cmd = sup.tick(t)
        expected = HOME + min((t - T0) / 1e9 / ramp_s, 1.0) * 0.2
        assert np.allclose(cmd.positions, expected, atol=1e-9), (t - T0) / 1e9
    assert np.allclose(cmd.positions, target)


def test_handover_with_a_large_gap_is_refused_and_stays_in_hold():
    sup = make(handover_max_gap_rad=0.3)
    far = HOME.copy()
    far[1] += 0.5
    feed(sup, T0, q_policy=far)
    ok, message = sup.request_arm(T0)
    assert not ok and sup.mode == Mode.HOLD
    assert f"gap 0.500 rad at joint '{NAMES[1]}'" in message and message in sup.reason
    assert sup.counters["arm_refused"] == 1


def test_auto_arm_arms_once_inputs_are_fresh():
    sup = make(auto_arm=True, handover_ramp_s=0.0)
    sup.on_joint_state(NAMES, HOME, T0)
    assert sup.tick(T0).hold and "auto_arm waiting: no fresh command/policy" in sup.reason
    feed(sup, T0 + 10 * MS)
    cmd = sup.tick(T0 + 10 * MS)
    assert sup.mode == Mode.AUTONOMOUS and not cmd.hold


@pytest.mark.parametrize(
    ("silent", "timeout_field", "expected"),
    [("policy", "policy_timeout_s", "command/policy silent"),
     ("joints", "joint_state_timeout_s", "joint_states silent")],
)
def test_watchdogs_hold_at_the_position_measured_at_the_stop(silent, timeout_field, expected):
    sup = armed(**{timeout_field: 0.1})
    moving = HOME + 0.01
    t = T0
    for _ in range(5):
        t += 10 * MS
        feed(sup, t, q_meas=moving, q_policy=moving)
        assert not sup.tick(t).hold
    last_fresh = t
    t += 100 * MS  # exactly at the timeout: still fine
    if silent == "policy":
        feed(sup, t, q_policy=None, q_meas=moving)
    else:
        feed(sup, t, q_meas=None, q_policy=moving)
    assert sup.mode == Mode.AUTONOMOUS and not sup.tick(last_fresh + 100 * MS).hold
    cmd = sup.tick(last_fresh + 101 * MS)
    assert sup.mode == Mode.HOLD and cmd.hold and expected in sup.reason
    hold = cmd.positions
    assert sup.counters["watchdog_holds"] == 1
    # Later measurements do not move the hold (stop category 2).
    sup.on_joint_state(NAMES, HOME + 0.3, last_fresh + 120 * MS)
    assert np.allclose(sup.tick(last_fresh + 130 * MS).positions, hold)


# A teleported arm (sim episode reset, re-homed encoder): hold where it now is, never drag it back.
JUMP = np.clip(HOME + 0.6, LIMITS.lower, LIMITS.upper)  # 0.6 rad in one 10 ms sample: not physical


def test_a_measured_jump_holds_at_the_new_position_and_auto_arm_ramps_from_there():
    sup = make(auto_arm=True, handover_ramp_s=0.5, handover_max_gap_rad=0.5)
    feed(sup, T0)
    assert not sup.tick(T0).hold and sup.mode == Mode.AUTONOMOUS
    t = T0 + 10 * MS
    # The arm is teleported; the policy still asks for the old pose (its chunk predates the jump).
    feed(sup, t, q_meas=JUMP, q_policy=HOME)
    cmd = sup.tick(t)
    assert sup.mode == Mode.HOLD and cmd.hold and np.allclose(cmd.positions, JUMP)
    assert sup.counters["joint_jumps"] == 1 and "joint_states jumped" in sup.reason
    t += 10 * MS
    feed(sup, t, q_meas=JUMP, q_policy=HOME)
    assert np.allclose(sup.tick(t).positions, JUMP)
    assert "handover gap" in sup.reason  # auto_arm waits for a policy command near the new pose
    # The policy catches up with what it sees: auto_arm re-arms and ramps from the new position.
    t += 10 * MS
    feed(sup, t, q_meas=JUMP, q_policy=JUMP + 0.1)
    cmd = sup.tick(t)
    assert sup.mode == Mode.AUTONOMOUS and np.allclose(cmd.positions, JUMP, atol=1e-9)
    assert sup.counters["watchdog_holds"] == 0


def test_a_jump_re_armed_at_once_commands_from_the_new_position():
    sup = make(auto_arm=True, handover_ramp_s=0.5, handover_max_gap_rad=1.0)
    feed(sup, T0)
    assert not sup.tick(T0).hold
    # The gap to the stale policy command is within handover_max_gap_rad: one hold at the new
    # position, then auto_arm re-arms and the ramp starts there instead of stepping from the old command.
    feed(sup, T0 + 10 * MS, q_meas=JUMP, q_policy=HOME)
    cmd = sup.tick(T0 + 10 * MS)
    assert cmd.hold and np.allclose(cmd.positions, JUMP) and sup.counters["joint_jumps"] == 1
    feed(sup, T0 + 20 * MS, q_meas=JUMP, q_policy=HOME)
    cmd = sup.tick(T0 + 20 * MS)
    assert sup.mode == Mode.AUTONOMOUS and not cmd.hold and np.allclose(cmd.positions, JUMP, atol=1e-9)


def test_motion_at_the_velocity_limit_is_not_a_jump_even_when_delivered_in_a_burst():
    sup = armed()
    q = HOME.copy()
    for k in range(1, 11):
        q = q + 2.0 * LIMITS.velocity * 0.01  # twice the limit, every 10 ms (measured, not commanded)
        # Received all at once after a stall; the stamps say when they were measured.
        assert sup.on_joint_state(NAMES, np.clip(q, LIMITS.lower, LIMITS.upper), T0 + 200 * MS, T0 + k * 10 * MS)
    sup.on_policy_command(NAMES, HOME, T0 + 200 * MS)
    sup.tick(T0 + 200 * MS)
    assert sup.counters["joint_jumps"] == 0 and sup.mode == Mode.AUTONOMOUS
    # Without stamps the receipt times are all there is: the same burst is a jump.
    sup = armed()
    sup.on_joint_state(NAMES, HOME, T0 + 200 * MS)
    sup.on_joint_state(NAMES, np.clip(HOME + 0.25, LIMITS.lower, LIMITS.upper), T0 + 200 * MS)
    assert sup.counters["joint_jumps"] == 1


@pytest.mark.parametrize("mode", ["HOLD", "ESTOP", "TELEOP"])
def test_a_measured_jump_moves_the_hold_to_the_new_position_in_every_stopped_mode(mode):
    sup = armed()
    if mode == "HOLD":
        assert sup.request_hold(T0)[0]
    elif mode == "ESTOP":
        sup.on_estop(True, T0)
    else:
        sup.on_joy(*joy(), T0)
        sup.on_joy(*joy("takeover"), T0)
    assert np.allclose(sup.tick(T0 + 5 * MS).positions, HOME)
    feed(sup, T0 + 10 * MS, q_meas=JUMP)
    cmd = sup.tick(T0 + 10 * MS)
    assert sup.mode.value == mode and cmd.hold and np.allclose(cmd.positions, JUMP)
    assert sup.counters["joint_jumps"] == 1
    # Later measurements near the new pose do not move it again (still stop category 2).
    feed(sup, T0 + 20 * MS, q_meas=JUMP - 0.01)
    assert np.allclose(sup.tick(T0 + 20 * MS).positions, JUMP)
    if mode == "TELEOP":  # jogging resumes from the new position, not the old one
        stick = {MAPPING.joint_axes[0]: 1.0}
        sup.on_joy(*joy("deadman", axes=stick), T0 + 30 * MS)
        feed(sup, T0 + 30 * MS, q_meas=JUMP)
        cmd = sup.tick(T0 + 30 * MS)
        assert not cmd.hold and np.abs(cmd.positions - JUMP).max() <= LIMITS.velocity.max() * 0.01 + 1e-9


def test_ticks_faster_than_the_control_period_keep_the_velocity_limit():
    """A node forwarding commands as they arrive may tick at any rate: the step scales with the time
    since the last command, so the speed never exceeds the velocity limits."""
    sup = armed()
    far = np.clip(HOME + 1.0, LIMITS.lower, LIMITS.upper)
    t = T0
    previous = sup.tick(t).positions
    for k in range(1, 21):
        t += 3 * MS if k % 2 else 7 * MS  # 10 ms on average, in uneven steps
        feed(sup, t, q_policy=far)
        sent = sup.tick(t).positions
        elapsed_s = (3 if k % 2 else 7) / 1000
        assert np.all(np.abs(sent - previous) <= LIMITS.velocity * elapsed_s + 1e-9)
        previous = sent
    # Over the 100 ms it moved as far as the velocity limits allow in 100 ms, not further.
    assert np.allclose(np.abs(previous - HOME), np.minimum(np.abs(far - HOME), LIMITS.velocity * 0.1))
    # Two ticks at the same instant: the second one does not move.
    feed(sup, t, q_policy=far)
    assert np.array_equal(sup.tick(t).positions, previous)
    # A hold counts as a command sent: a policy command 1 ms after it moves 1 ms worth.
    near = np.clip(HOME + 0.3, LIMITS.lower, LIMITS.upper)
    sup = armed()
    assert sup.request_hold(T0 + 5 * MS)[0]
    hold = sup.tick(T0 + 5 * MS)
    assert hold.hold and np.allclose(hold.positions, HOME)
    feed(sup, T0 + 6 * MS, q_policy=near)
    assert sup.request_arm(T0 + 6 * MS)[0]
    sent = sup.tick(T0 + 6 * MS)
    assert not sent.hold and np.all(np.abs(sent.positions - HOME) <= LIMITS.velocity * 0.001 + 1e-9)


def test_joystick_watchdog_applies_while_the_human_is_in_control():
    sup = armed(joy_timeout_s=0.5)
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0 + 10 * MS)
    assert sup.mode == Mode.TELEOP
    feed(sup, T0 + 500 * MS)
    sup.tick(T0 + 510 * MS)
    assert sup.mode == Mode.TELEOP
    feed(sup, T0 + 520 * MS)
    cmd = sup.tick(T0 + 520 * MS)
    assert sup.mode == Mode.HOLD and cmd.hold and "joy silent" in sup.reason
    takeover, handback = sup.pop_events()
    assert (takeover.event, takeover.start_ns, takeover.mode) == ("takeover", T0 + 10 * MS, Mode.TELEOP)
    assert (handback.event, handback.start_ns, handback.end_ns) == ("handback", T0 + 10 * MS, T0 + 520 * MS)
    assert handback.mode == Mode.HOLD


def test_the_joystick_watchdog_does_not_apply_to_autonomous():
    sup = armed(joy_timeout_s=0.5)
    sup.on_joy(*joy(), T0)
    feed(sup, T0 + 900 * MS)
    assert not sup.tick(T0 + 900 * MS).hold and sup.mode == Mode.AUTONOMOUS


def test_estop_topic_latches_and_only_reset_after_release_clears_it():
    sup = armed()
    sup.tick(T0 + 10 * MS)
    feed(sup, T0 + 15 * MS, q_meas=HOME + 0.05)
    hold = sup.on_estop(True, T0 + 20 * MS)
    assert hold is not None and hold.hold and np.allclose(hold.positions, np.clip(HOME + 0.05, LIMITS.lower,
                                                                                   LIMITS.upper))
    assert sup.mode == Mode.ESTOP and "estop topic" in sup.reason
    # Nothing else moves it while latched.
    for request in (lambda t: sup.request_arm(t), lambda t: sup.on_joy(*joy("takeover"), t),
                    lambda t: sup.on_joy(*joy("arm", "deadman", axes={1: 1.0}), t)):
        request(T0 + 30 * MS)
        assert sup.mode == Mode.ESTOP
    ok, message = sup.request_reset(T0 + 40 * MS)
    assert not ok and "estop topic is true" in message
    assert sup.on_estop(False, T0 + 50 * MS) is None
    assert sup.mode == Mode.ESTOP  # releasing is not resetting
    assert np.allclose(sup.tick(T0 + 60 * MS).positions, hold.positions)
    assert sup.request_reset(T0 + 70 * MS)[0] and sup.mode == Mode.HOLD
    assert np.allclose(sup.tick(T0 + 80 * MS).positions, hold.positions)
    assert sup.counters["estops"] == 1


def test_joystick_estop_button_wins_over_takeover_in_the_same_message():
    sup = armed()
    sup.on_joy(*joy(), T0)
    hold = sup.on_joy(*joy("estop", "takeover", "deadman"), T0 + 10 * MS)
    assert sup.mode == Mode.ESTOP and hold.hold
    assert not sup.request_reset(T0 + 20 * MS)[0]  # button still pressed
    sup.on_joy(*joy(), T0 + 30 * MS)
    assert sup.request_reset(T0 + 40 * MS)[0]
    assert sup.pop_events() == []  # no takeover happened


def test_estop_heartbeat_silence_latches_when_configured():
    sup = armed(estop_heartbeat_timeout_s=0.2)
    assert sup.tick(T0).hold is False  # the heartbeat counts from the first tick
    feed(sup, T0 + 200 * MS)
    assert sup.tick(T0 + 200 * MS).hold is False
    assert sup.estop_sources(T0 + 201 * MS) == ("e-stop heartbeat is silent",)
    sup.on_estop(False, T0 + 201 * MS)
    feed(sup, T0 + 401 * MS)
    assert sup.tick(T0 + 401 * MS).hold is False
    feed(sup, T0 + 402 * MS)
    cmd = sup.tick(T0 + 402 * MS)
    assert sup.mode == Mode.ESTOP and cmd.hold and "heartbeat silent" in sup.reason
    ok, message = sup.request_reset(T0 + 410 * MS)
    assert not ok and "heartbeat" in message
    sup.on_estop(False, T0 + 420 * MS)
    assert sup.request_reset(T0 + 430 * MS)[0] and sup.mode == Mode.HOLD


def test_an_estop_publisher_that_cannot_be_heard_counts_as_pressed():
    sup = armed()
    assert sup.set_unheard_estop_publishers(0, T0 + MS) is None and sup.mode == Mode.AUTONOMOUS
    hold = sup.set_unheard_estop_publishers(1, T0 + 2 * MS)
    assert hold.hold and sup.mode == Mode.ESTOP and "cannot be heard" in sup.reason
    assert not sup.request_reset(T0 + 3 * MS)[0]
    sup.set_unheard_estop_publishers(0, T0 + 4 * MS)
    assert sup.request_reset(T0 + 5 * MS)[0]


def test_estop_heartbeat_is_off_by_default():
    sup = armed()
    feed(sup, T0 + 10_000 * MS)
    assert sup.tick(T0 + 10_000 * MS).hold is False


def test_teleop_needs_the_deadman_and_releasing_it_holds_at_once():
    sup = armed()
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0 + 10 * MS)
    assert sup.mode == Mode.TELEOP and sup.counters["interventions"] == 1
    stick = {MAPPING.joint_axes[0]: 1.0}
    # Stick pushed without the deadman: nothing moves.
    sup.on_joy(*joy(axes=stick), T0 + 20 * MS)
    feed(sup, T0 + 20 * MS)
    assert np.allclose(sup.tick(T0 + 20 * MS).positions, HOME)
    t = T0 + 20 * MS
    for _ in range(10):
        t += 10 * MS
        sup.on_joy(*joy("deadman", axes=stick), t)
        feed(sup, t)
        cmd = sup.tick(t)
    speed = LIMITS.velocity[0] * MAPPING.joint_speed_fraction
    assert cmd.positions[0] == pytest.approx(HOME[0] + 10 * speed * 0.01)
    assert np.allclose(cmd.positions[1:], HOME[1:])
    measured = cmd.positions - 0.002  # the robot lags its command
    feed(sup, t + 5 * MS, q_meas=measured)
    hold = sup.on_joy(*joy(axes=stick), t + 6 * MS)
    assert hold is not None and hold.hold and np.allclose(hold.positions, measured)
    assert np.allclose(sup.tick(t + 10 * MS).positions, measured)
    assert sup.mode == Mode.TELEOP and "deadman released" in sup.reason


def test_next_group_jogs_other_joints():
    sup = armed()
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0 + 10 * MS)
    sup.on_joy(*joy("next_group"), T0 + 20 * MS)
    t = T0 + 20 * MS
    for _ in range(3):
        t += 10 * MS
        sup.on_joy(*joy("deadman", axes={MAPPING.joint_axes[0]: -1.0}), t)
        feed(sup, t)
        cmd = sup.tick(t)
    group = MAPPING.groups_for(N)[1]
    moved = np.flatnonzero(~np.isclose(cmd.positions, HOME))
    assert moved.tolist() == [group[0]] and cmd.positions[group[0]] < HOME[group[0]]


def test_shared_control_adds_the_human_correction_and_hands_back_with_a_ramp():
    sup = armed(shared_authority=0.5, handover_ramp_s=0.5)
    t1 = T0 + 600 * MS  # past the arming ramp
    feed(sup, t1)
    sup.tick(t1)
    sup.on_joy(*joy(), t1)
    sup.on_joy(*joy("shared"), t1 + 10 * MS)
    assert sup.mode == Mode.SHARED
    t = t1 + 10 * MS
    for _ in range(20):
        t += 10 * MS
        sup.on_joy(*joy("deadman", axes={MAPPING.joint_axes[0]: 1.0}), t)
        feed(sup, t)
        cmd = sup.tick(t)
    speed = LIMITS.velocity[0] * MAPPING.joint_speed_fraction
    assert cmd.positions[0] > HOME[0]
    assert cmd.positions[0] - HOME[0] <= 0.5 * speed * 0.2 + 1e-9
    # The human lets go: the correction stays, the policy still drives.
    sup.on_joy(*joy(), t + 5 * MS)
    feed(sup, t + 10 * MS, q_meas=cmd.positions)
    assert np.allclose(sup.tick(t + 10 * MS).positions, cmd.positions)
    # Hand back: ramps from the measured position back to the policy's command, over
    # handover_ramp_s * gap / handover_max_gap_rad.
    sup.on_joy(*joy("shared"), t + 20 * MS)
    assert sup.mode == Mode.AUTONOMOUS
    gap = cmd.positions[0] - HOME[0]
    ramp_s = 0.5 * gap / sup.config.handover_max_gap_rad
    for k in range(1, 26):
        feed(sup, t + 20 * MS + k * 10 * MS, q_meas=cmd.positions)
        sent = sup.tick(t + 20 * MS + k * 10 * MS).positions
        assert sent[0] == pytest.approx(cmd.positions[0] - min(k * 0.01 / ramp_s, 1.0) * gap)
    assert sent[0] == pytest.approx(HOME[0])
    events = sup.pop_events()
    assert [e.event for e in events] == ["takeover", "handback"]
    assert events[1].start_ns == t1 + 10 * MS and events[1].end_ns == t + 20 * MS
    assert events[1].mode == Mode.AUTONOMOUS


def test_after_a_takeover_auto_arm_waits_for_an_explicit_hand_back():
    sup = make(auto_arm=True, handover_ramp_s=0.0)
    feed(sup, T0)
    sup.tick(T0)
    assert sup.mode == Mode.AUTONOMOUS
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0 + 10 * MS)
    sup.on_joy(*joy("hold"), T0 + 20 * MS)
    assert sup.mode == Mode.HOLD
    feed(sup, T0 + 30 * MS)
    sup.tick(T0 + 30 * MS)
    assert sup.mode == Mode.HOLD  # disarmed by the human
    sup.on_joy(*joy("arm"), T0 + 40 * MS)
    assert sup.mode == Mode.AUTONOMOUS


def test_a_button_already_down_when_the_joystick_appears_does_nothing():
    sup = make(handover_ramp_s=0.0)
    feed(sup, T0)
    sup.on_joy(*joy("arm"), T0)
    assert sup.mode == Mode.HOLD
    sup.on_joy(*joy(), T0 + 10 * MS)
    sup.on_joy(*joy("arm"), T0 + 20 * MS)
    assert sup.mode == Mode.AUTONOMOUS


def test_foreign_publisher_blocks_arming_and_stops_a_running_arm():
    sup = make(handover_ramp_s=0.0)
    feed(sup, T0)
    sup.set_foreign_publishers(1)
    ok, message = sup.request_arm(T0)
    assert not ok and "1 other publisher(s) on the robot command topic" in message
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0 + 1 * MS)
    assert sup.mode == Mode.HOLD
    sup.set_foreign_publishers(0)
    assert sup.request_arm(T0 + 2 * MS)[0]
    sup.set_foreign_publishers(2)
    feed(sup, T0 + 10 * MS)
    assert sup.tick(T0 + 10 * MS).hold and sup.mode == Mode.HOLD and "other publisher" in sup.reason


def test_bad_inputs_are_counted_and_never_used():
    sup = armed()
    good = HOME + 0.01
    feed(sup, T0 + 5 * MS, q_policy=good)
    bad_inputs = [
        (NAMES, [float("nan")] * N),
        (NAMES, [float("inf")] + [0.0] * (N - 1)),
        (NAMES[:-1], list(HOME[:-1])),
        ([*NAMES[:-1], "elbow_of_someone_else"], list(HOME)),
        ([], []),
    ]
    for names, values in bad_inputs:
        assert not sup.on_policy_command(names, values, T0 + 6 * MS)
    assert sup.counters["rejected_policy"] == len(bad_inputs)
    assert "command/policy" in sup.last_rejection
    assert not sup.on_joint_state(NAMES, [float("nan")] * N, T0 + 6 * MS)
    assert not sup.on_joy([float("nan")] * N_AXES, [0] * N_BUTTONS, T0 + 6 * MS)
    assert sup.counters["rejected_joint_states"] == 1 and sup.counters["rejected_joy"] == 1
    cmd = sup.tick(T0 + 10 * MS)
    assert np.allclose(cmd.positions, good)
    # Only bad commands arrive: the policy watchdog holds.
    for k in range(1, 30):
        sup.on_policy_command(NAMES, [float("nan")] * N, T0 + (10 + 10 * k) * MS)
        sup.on_joint_state(NAMES, good, T0 + (10 + 10 * k) * MS)
        cmd = sup.tick(T0 + (10 + 10 * k) * MS)
    assert sup.mode == Mode.HOLD and np.all(np.isfinite(cmd.positions))


def test_impossible_policy_is_clamped_to_position_and_step_limits():
    sup = armed()
    prev = sup.tick(T0).positions
    t = T0
    for k in range(300):
        t += 10 * MS
        wish = HOME + (100.0 if k % 2 else -100.0)
        feed(sup, t, q_meas=prev, q_policy=wish)
        sup._q_policy = wish  # noqa: SLF001 - bypass the arm-time gap check on purpose: a policy gone wild
        cmd = sup.tick(t)
        assert np.all(cmd.positions <= LIMITS.upper) and np.all(cmd.positions >= LIMITS.lower)
        assert np.all(np.abs(cmd.positions - prev) <= LIMITS.velocity * 0.01 + 1e-12)
        prev = cmd.positions
    assert sup.counters["clamped"] > 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("policy_timeout_s", 0.0), ("joy_timeout_s", -1.0), ("shared_authority", 1.5),
     ("handover_ramp_s", float("nan")), ("estop_heartbeat_timeout_s", -0.1), ("control_period_s", 0.5)],
)
def test_bad_config_names_the_field_and_value(field, value):
    with pytest.raises(ConfigError) as info:
        SupervisorConfig(**{field: value})
    assert info.value.field in (field, "policy_timeout_s")


# ----------------------------------------------------------------------------------------------
# Property: over random input sequences, every command is within limits, non-hold commands move at
# most velocity * dt per tick, and while latched the only command is the one hold.
events = st.one_of(
    st.tuples(st.just("meas"), st.lists(st.floats(-4, 4), min_size=N, max_size=N)),
    st.tuples(st.just("policy"), st.lists(st.one_of(st.floats(-3, 3), st.just(float("nan"))),
                                          min_size=N, max_size=N)),
    st.tuples(st.just("joy"), st.tuples(st.lists(st.floats(-1, 1), min_size=N_AXES, max_size=N_AXES),
                                        st.lists(st.sampled_from([0, 1]), min_size=N_BUTTONS, max_size=N_BUTTONS))),
    st.tuples(st.just("estop"), st.booleans()),
    st.tuples(st.just("reset"), st.none()),
    st.tuples(st.just("arm"), st.none()),
    st.tuples(st.just("foreign"), st.sampled_from([0, 0, 0, 1])),
    st.tuples(st.just("wait"), st.integers(1, 300)),
    st.tuples(st.just("fresh"), st.integers(1, 30)),  # n ticks of fresh inputs, 10 ms apart
)


@settings(max_examples=150, deadline=None)
@given(script=st.lists(events, min_size=1, max_size=80), auto_arm=st.booleans())
def test_property_commands_stay_within_limits_and_latch_holds(script, auto_arm):
    sup = make(auto_arm=auto_arm, handover_ramp_s=0.05, handover_max_gap_rad=10.0, policy_timeout_s=0.1)
    dt = sup.config.control_period_s
    t = T0
    prev = None
    latched_hold, latched_jumps = None, 0
    for kind, value in script:
        immediate = None
        if kind == "meas":
            sup.on_joint_state(NAMES, value, t)
        elif kind == "policy":
            sup.on_policy_command(NAMES, value, t)
        elif kind == "joy":
            immediate = sup.on_joy(list(value[0]), list(value[1]), t)
        elif kind == "estop":
            immediate = sup.on_estop(value, t)
        elif kind == "reset":
            sup.request_reset(t)
        elif kind == "arm":
            sup.request_arm(t)
        elif kind == "foreign":
            sup.set_foreign_publishers(value)
        elif kind == "wait":
            t += value * MS
        commands = [immediate, sup.tick(t)]
        if kind == "fresh":
            q_policy = sup._q_policy if sup._q_policy is not None else HOME  # noqa: SLF001 - keep the last wish
            for _ in range(value):
                t += 10 * MS
                sup.on_joint_state(NAMES, prev if prev is not None else HOME, t)
                sup.on_policy_command(NAMES, q_policy, t)
                commands.append(sup.tick(t))
        for cmd in commands:
            if cmd is None:
                continue
            q = cmd.positions
            assert np.all(np.isfinite(q))
            assert np.all(q >= LIMITS.lower) and np.all(q <= LIMITS.upper)
            if cmd.mode == Mode.ESTOP:
                assert cmd.hold
                # Only a measured jump may move an e-stop hold (to where the arm now is).
                if latched_hold is None or sup.counters["joint_jumps"] != latched_jumps:
                    latched_hold, latched_jumps = q, sup.counters["joint_jumps"]
                assert np.array_equal(q, latched_hold)
            else:
                latched_hold = None
            if not cmd.hold and prev is not None:
                assert np.all(np.abs(q - prev) <= LIMITS.velocity * dt + 1e-9)
            prev = q
        t += MS
