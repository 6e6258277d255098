"""The supervisor state machine at fixed times: every transition, every watchdog, no sleeps."""
from __future__ import annotations

import numpy as np
import pybullet_data
import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.joystick import load_joystick_mapping
from sim2real_ros.core.safety.limits import limits_from_urdf
from sim2real_ros.core.safety.supervision.estop import ABSENT_POLLS as ESTOP_ABSENT_POLLS
from sim2real_ros.core.safety.supervisor import COMMAND_MARGIN_RAD, Mode, Supervisor, SupervisorConfig
from sim2real_ros.core.safety.teleop import Jogger
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
    if silent == "joints":
        # Held at the last command while nothing fresh was measured; the first fresh reading is
        # where the arm is, and becomes the hold.
        assert np.allclose(sup.hold_target, sup.last_sent)
        sup.on_joint_state(NAMES, moving, last_fresh + 120 * MS)
    # Later measurements do not move the hold (stop category 2).
    sup.on_joint_state(NAMES, HOME + 0.3, last_fresh + 125 * MS)
    assert np.allclose(sup.tick(last_fresh + 130 * MS).positions, hold)
    assert np.allclose(sup.hold_target, moving)



def test_a_hold_entered_on_stale_readings_moves_to_the_first_fresh_measurement_only():
    # A starved supervisor wakes to a silent policy and stale joint states (the newer ones still
    # queued): it holds the last command for now, and where the arm is once a reading is processed.
    sup = armed(policy_timeout_s=0.1, joint_state_timeout_s=0.1)
    t = T0
    for _ in range(5):
        t += 10 * MS
        feed(sup, t)
        sup.tick(t)
    t += 300 * MS
    cmd = sup.tick(t)
    assert sup.mode == Mode.HOLD and cmd.hold
    assert np.allclose(sup.hold_target, sup.last_sent)  # no fresh measurement: the last command
    measured = np.clip(HOME + 0.05, LIMITS.lower, LIMITS.upper)
    assert sup.on_joint_state(NAMES, measured, t + 1 * MS)
    assert np.allclose(sup.hold_target, measured)
    # From then on the hold stays put (stop category 2): a later reading moves nothing.
    assert sup.on_joint_state(NAMES, measured + 0.01, t + 11 * MS)
    assert np.allclose(sup.hold_target, measured)


def test_an_estop_pressed_during_a_hold_holds_where_the_arm_is_measured():
    sup = armed(policy_timeout_s=0.1)
    t = T0 + 10 * MS
    feed(sup, t)
    sup.tick(t)
    assert sup.request_hold(t + 1 * MS)[0] and np.allclose(sup.hold_target, HOME)
    # The arm sags away from the hold (a weak servo, a push) before the stop is pressed.
    sagged = np.clip(HOME - 0.04, LIMITS.lower, LIMITS.upper)
    t_meas = t
    for _ in range(4):
        t_meas += 10 * MS
        sup.on_joint_state(NAMES, HOME + (sagged - HOME) * (t_meas - t) / (40 * MS), t_meas)
    assert np.allclose(sup.hold_target, HOME)
    sup.on_estop(True, t_meas + 1 * MS)
    assert sup.mode == Mode.ESTOP and np.allclose(sup.hold_target, sagged)

# A teleported arm (sim episode reset, re-homed encoder): hold where it now is, never drag it back.
JUMP = np.clip(HOME + 0.6, LIMITS.lower, LIMITS.upper)  # 0.6 rad in one 10 ms sample: not physical
CONFIRM = SupervisorConfig().joint_jump_confirm_samples


def jump_to(sup: Supervisor, t: int, q=JUMP, q_policy=HOME, samples: int = CONFIRM) -> int:
    """`samples` joint states at q (and policy commands), 10 ms apart from t; returns the last time.
    All but the last are held back (not used) until the jump is confirmed."""
    for k in range(samples):
        used = sup.on_joint_state(NAMES, q, t)
        assert used == (k == samples - 1), f"sample {k}: used={used}"
        if q_policy is not None:
            assert sup.on_policy_command(NAMES, q_policy, t)
        if k < samples - 1:
            t += 10 * MS
    return t


def converge(sup: Supervisor, t: int, target, q_meas=None, ticks: int = 200) -> tuple[int, np.ndarray]:
    """Tick every 10 ms (feeding q_meas) until the command reaches `target`; each step within the
    velocity limits. Returns the time and the command."""
    previous = sup.last_sent
    for _ in range(ticks):
        t += 10 * MS
        if q_meas is not None:
            sup.on_joint_state(NAMES, q_meas, t)
        cmd = sup.tick(t)
        assert np.all(np.abs(cmd.positions - previous) <= LIMITS.velocity * 0.01 + 1e-9)
        previous = cmd.positions
        if np.allclose(cmd.positions, target, atol=1e-12):
            return t, cmd.positions
    raise AssertionError(f"command {previous} did not reach {target}")


def test_a_measured_jump_holds_at_the_new_position_and_auto_arm_ramps_from_there():
    sup = make(auto_arm=True, handover_ramp_s=0.5, handover_max_gap_rad=0.5)
    feed(sup, T0)
    assert not sup.tick(T0).hold and sup.mode == Mode.AUTONOMOUS
    # The arm is teleported; the policy still asks for the old pose (its chunk predates the jump).
    t = jump_to(sup, T0 + 10 * MS)
    cmd = sup.tick(t)
    assert sup.mode == Mode.HOLD and cmd.hold and np.allclose(sup.hold_target, JUMP)
    assert sup.counters["joint_jumps"] == 1 and "joint_states jumped" in sup.reason
    assert "confirmed by 3 samples" in sup.reason
    # The hold reaches the new position through the step limit, not in one step.
    assert np.all(np.abs(cmd.positions - HOME) <= LIMITS.velocity * 0.01 + 1e-9)
    t += 10 * MS
    feed(sup, t, q_meas=JUMP, q_policy=HOME)
    sup.tick(t)
    assert "handover gap" in sup.reason  # auto_arm waits for a policy command near the new pose
    # The policy catches up with what it sees: auto_arm re-arms and ramps from the new position.
    t += 10 * MS
    feed(sup, t, q_meas=JUMP, q_policy=JUMP + 0.1)
    sup.tick(t)
    assert sup.mode == Mode.AUTONOMOUS
    assert sup.counters["watchdog_holds"] == 0


def test_after_a_jump_auto_arm_waits_for_a_plan_made_after_it_without_counting_a_refusal():
    """A sim episode reset: the policy's last command (received before the jump) was planned for the old
    pose, so auto_arm never arms on it; it waits, quietly, for the first command after the jump."""
    sup = make(auto_arm=True, handover_ramp_s=0.5, handover_max_gap_rad=0.5)
    feed(sup, T0)
    assert not sup.tick(T0).hold and sup.mode == Mode.AUTONOMOUS
    t = jump_to(sup, T0 + 10 * MS, q_policy=None)  # the policy says nothing after the jump's samples
    assert sup.tick(t).hold and sup.mode == Mode.HOLD
    for _ in range(5):  # the old command would still be "fresh" (policy_timeout_s 0.1 s) here
        t += 10 * MS
        sup.on_joint_state(NAMES, JUMP, t)
        assert sup.tick(t).hold and sup.mode == Mode.HOLD
        assert "auto_arm waiting: no fresh command/policy" in sup.reason
    assert sup.counters["arm_refused"] == 0
    t += 10 * MS
    feed(sup, t, q_meas=JUMP, q_policy=JUMP + 0.05)  # the first plan made at the new pose
    sup.tick(t)
    assert sup.mode == Mode.AUTONOMOUS and sup.counters["arm_refused"] == 0


def test_a_stale_plan_received_after_a_jump_is_a_counted_refusal_once():
    sup = make(auto_arm=True, handover_ramp_s=0.5, handover_max_gap_rad=0.5)
    feed(sup, T0)
    sup.tick(T0)
    t = jump_to(sup, T0 + 10 * MS)
    sup.tick(t)
    for _ in range(3):
        t += 10 * MS
        feed(sup, t, q_meas=JUMP, q_policy=HOME)
        sup.tick(t)
    assert sup.mode == Mode.HOLD and "handover gap" in sup.reason and sup.counters["arm_refused"] == 1


def test_a_jump_re_armed_at_once_commands_from_the_new_position():
    sup = make(auto_arm=True, handover_ramp_s=0.5, handover_max_gap_rad=1.0)
    feed(sup, T0)
    assert not sup.tick(T0).hold
    # The gap to the stale policy command is within handover_max_gap_rad: one hold toward the new
    # position, then auto_arm re-arms and the ramp starts there; the command gets there at the
    # velocity limits and never heads back to the old pose.
    t = jump_to(sup, T0 + 10 * MS)
    cmd = sup.tick(t)
    assert cmd.hold and np.allclose(sup.hold_target, JUMP) and sup.counters["joint_jumps"] == 1
    previous = cmd.positions
    low, high = np.minimum(HOME, JUMP), np.maximum(HOME, JUMP)
    for k in range(60):
        t += 10 * MS
        feed(sup, t, q_meas=JUMP, q_policy=HOME)
        cmd = sup.tick(t)
        assert sup.mode == Mode.AUTONOMOUS and not cmd.hold
        if k == 0:  # the ramp starts at the new position: the first command heads there
            assert np.all(np.abs(cmd.positions - JUMP) < np.abs(previous - JUMP))
        assert np.all(np.abs(cmd.positions - previous) <= LIMITS.velocity * 0.01 + 1e-9)
        assert np.all(cmd.positions >= low - 1e-9) and np.all(cmd.positions <= high + 1e-9)
        previous = cmd.positions
    assert np.allclose(previous, HOME)  # and then follows the policy


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
    # Without stamps the receipt times are all there is: the same burst, persisting, is a jump.
    sup = armed()
    sup.on_joint_state(NAMES, HOME, T0 + 200 * MS)
    for _ in range(CONFIRM):
        sup.on_joint_state(NAMES, np.clip(HOME + 0.25, LIMITS.lower, LIMITS.upper), T0 + 200 * MS)
    assert sup.counters["joint_jumps"] == 1


@pytest.mark.parametrize("mode", ["HOLD", "TELEOP"])
def test_a_measured_jump_moves_the_hold_to_the_new_position_in_every_stopped_mode(mode):
    sup = armed()
    if mode == "HOLD":
        assert sup.request_hold(T0)[0]
    else:
        sup.on_joy(*joy(), T0)
        sup.on_joy(*joy("takeover"), T0)
    assert np.allclose(sup.tick(T0 + 5 * MS).positions, HOME)
    t = jump_to(sup, T0 + 10 * MS, q_policy=None)
    cmd = sup.tick(t)
    assert sup.mode.value == mode and cmd.hold and np.allclose(sup.hold_target, JUMP)
    assert sup.counters["joint_jumps"] == 1
    if mode == "TELEOP":
        sup.on_joy(*joy(), t)  # the joystick stays alive while the hold converges
    t, _ = converge(sup, t, JUMP, q_meas=JUMP)
    # Later measurements near the new pose do not move it again (still stop category 2).
    feed(sup, t + 10 * MS, q_meas=JUMP - 0.01, q_policy=None)
    assert np.allclose(sup.tick(t + 10 * MS).positions, JUMP)
    if mode == "TELEOP":  # jogging resumes from the new position, not the old one
        stick = {MAPPING.joint_axes[0]: 1.0}
        sup.on_joy(*joy("deadman", axes=stick), t + 20 * MS)
        feed(sup, t + 20 * MS, q_meas=JUMP, q_policy=None)
        cmd = sup.tick(t + 20 * MS)
        assert not cmd.hold and np.abs(cmd.positions - JUMP).max() <= LIMITS.velocity.max() * 0.01 + 1e-9


def test_a_jump_never_moves_the_command_while_the_estop_is_latched():
    sup = armed()
    sup.on_estop(True, T0)
    t = jump_to(sup, T0 + 10 * MS, q_policy=None)
    for _ in range(20):
        cmd = sup.tick(t)
        assert sup.mode == Mode.ESTOP and cmd.hold and np.allclose(cmd.positions, HOME)
        t += 10 * MS
        sup.on_joint_state(NAMES, JUMP, t)
    assert sup.counters["joint_jumps"] == 1 and "hold kept while latched" in sup.reason
    assert np.allclose(sup.hold_target, HOME)
    # The reset re-captures the hold where the arm now is, reached through the step limit.
    sup.on_estop(False, t)
    assert sup.request_reset(t)[0] and sup.mode == Mode.HOLD
    assert np.allclose(sup.hold_target, JUMP)
    converge(sup, t, JUMP, q_meas=JUMP)


@pytest.mark.parametrize("mode", ["ESTOP", "HOLD", "AUTONOMOUS"])
def test_one_outlier_joint_state_moves_nothing_and_is_counted(mode):
    """A glitching encoder or a second publisher on joint_states: one sample 2.5 rad off."""
    sup = armed()
    if mode == "ESTOP":
        sup.on_estop(True, T0)
    elif mode == "HOLD":
        sup.request_hold(T0)
    t = T0
    sent = [sup.tick(t).positions]
    outlier = np.clip(HOME + 2.5, LIMITS.lower, LIMITS.upper)
    for k in range(1, 40):
        t += 10 * MS
        # Every 7th sample is an outlier, also two in a row once: neither persists long enough.
        glitch = k % 7 == 0 or k == 22
        assert sup.on_joint_state(NAMES, outlier if glitch else HOME, t) is not glitch
        sup.on_policy_command(NAMES, HOME, t)
        sent.append(sup.tick(t).positions)
    assert sup.mode.value == mode and sup.counters["joint_jumps"] == 0
    assert np.allclose(np.asarray(sent), HOME, atol=1e-12)  # not a single command moved
    assert sup.counters["rejected_joint_states"] == 6 and "outlier" in sup.last_rejection


def test_implausible_and_non_physical_inputs_are_rejected_and_counted():
    sup = armed()
    margin = sup.config.joint_state_limit_margin_rad
    beyond = LIMITS.upper.copy()
    beyond[2] += margin + 0.01
    for q in (beyond, np.full(N, 1e308), np.full(N, -1e300)):
        assert not sup.on_joint_state(NAMES, q, T0 + MS)
    assert sup.counters["rejected_joint_states"] == 3 and "implausible" in sup.last_rejection
    within = LIMITS.upper.copy()
    within[2] += margin - 0.01  # a servo a little past its URDF limit is still a measurement
    assert make().on_joint_state(NAMES, within, T0 + 2 * MS)
    for q in (np.full(N, 1e308), LIMITS.upper + COMMAND_MARGIN_RAD + 0.01):
        assert not sup.on_policy_command(NAMES, q, T0 + 3 * MS)
    assert sup.counters["rejected_policy"] == 2 and "not a position" in sup.last_rejection
    cmd = sup.tick(T0 + 10 * MS)
    assert np.all(np.isfinite(cmd.positions)) and sup.counters["internal_errors"] == 0


def test_overflowing_inputs_never_raise_out_of_a_tick():
    """Values near 1e308 used to overflow the ramp arithmetic and end the node."""
    sup = make(handover_ramp_s=1.0, handover_max_gap_rad=3.2, auto_arm=True)
    t = T0
    for k in range(50):
        t += 10 * MS
        big = 1e308 if k % 2 else -1e308
        sup.on_joint_state(NAMES, np.full(N, big), t)
        sup.on_policy_command(NAMES, np.full(N, -big), t)
        sup.on_joint_state(NAMES, HOME, t)
        sup.on_policy_command(NAMES, HOME + 0.3 * (-1) ** k, t)
        cmd = sup.tick(t)
        assert cmd is None or np.all(np.isfinite(cmd.positions))
    assert sup.counters["internal_errors"] == 0 and sup.mode == Mode.AUTONOMOUS


def test_an_unexpected_error_latches_estop_at_the_last_command_instead_of_raising():
    sup = armed()
    last = sup.tick(T0 + 10 * MS).positions
    sup.jogger = None  # a bug: the joystick path now raises inside the core
    feed(sup, T0 + 20 * MS)
    hold = sup.on_joy(*joy("deadman"), T0 + 20 * MS)
    assert hold.hold and np.allclose(hold.positions, last)
    cmd = sup.tick(T0 + 40 * MS)
    assert sup.mode == Mode.ESTOP and sup.counters["internal_errors"] >= 1
    assert "internal error" in sup.reason and cmd.hold and np.allclose(cmd.positions, last)


def test_the_first_command_after_arming_is_step_limited_from_the_measured_position():
    """Nothing sent yet (armed before the first tick), no handover ramp: the first command is one
    velocity step from where the arm is, not the policy's target clamped to the position limits."""
    sup = make(handover_ramp_s=0.0, handover_max_gap_rad=0.5)
    target = np.clip(HOME + 0.45, LIMITS.lower, LIMITS.upper)
    feed(sup, T0, q_policy=target)
    assert sup.request_arm(T0)[0] and sup.last_sent is None
    cmd = sup.tick(T0)
    assert not cmd.hold
    assert np.all(np.abs(cmd.positions - HOME) <= LIMITS.velocity * sup.config.control_period_s + 1e-9)


def test_holds_are_step_limited_from_the_last_command_sent():
    """An e-stop while the command leads the measured arm: the hold converges at the velocity
    limits, it does not jump."""
    sup = armed()
    far = np.clip(HOME + 0.4, LIMITS.lower, LIMITS.upper)
    t = T0
    for _ in range(20):  # the command runs ahead while the (measured) arm stays at HOME
        t += 10 * MS
        feed(sup, t, q_meas=HOME, q_policy=far)
        sup.tick(t)
    lead = sup.last_sent
    assert np.abs(lead - HOME).max() > 0.1
    hold = sup.on_estop(True, t + 2 * MS)
    assert hold.hold and np.all(np.abs(hold.positions - lead) <= LIMITS.velocity * 0.002 + 1e-9)
    assert np.allclose(sup.hold_target, HOME)
    converge(sup, t + 2 * MS, HOME, q_meas=HOME)


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
    target = np.clip(HOME + 0.05, LIMITS.lower, LIMITS.upper)
    assert hold is not None and hold.hold and np.allclose(sup.hold_target, target)
    assert sup.mode == Mode.ESTOP and "estop topic" in sup.reason
    feed(sup, T0 + 25 * MS, q_meas=target, q_policy=None)
    _, reached = converge(sup, T0 + 20 * MS, target)
    hold = sup.tick(T0 + 29 * MS)
    assert np.allclose(hold.positions, reached)
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


def test_a_wrong_type_estop_publisher_latches_and_blocks_reset_and_arming_while_it_exists():
    sup = armed()
    faulty = ["estop publisher /panel (std_msgs/msg/String): not std_msgs/msg/Bool, its stops cannot be read"]
    hold = sup.set_estop_publishers(["g1"], faulty, T0 + MS)
    assert hold.hold and sup.mode == Mode.ESTOP and "/panel (std_msgs/msg/String)" in sup.reason
    assert sup.status(T0 + MS).estop_sources == tuple(faulty)
    ok, message = sup.request_reset(T0 + 2 * MS)
    assert not ok and "/panel" in message
    sup.set_estop_publishers(["g1"], [], T0 + 3 * MS)
    assert sup.request_reset(T0 + 4 * MS)[0] and sup.mode == Mode.HOLD
    sup.set_estop_publishers(["g1"], faulty, T0 + 5 * MS)  # appears again while holding: latches again
    assert sup.mode == Mode.ESTOP


def test_two_estop_publishers_one_release_does_not_clear_the_others_press():
    """Issue 34: B's "released" let a reset through while A still pressed."""
    sup = armed()
    sup.on_estop(False, T0 + MS, publisher="b")
    hold = sup.on_estop(True, T0 + 2 * MS, publisher="a")
    assert hold.hold and sup.mode == Mode.ESTOP and "publisher a" in sup.reason
    sup.on_estop(False, T0 + 3 * MS, publisher="b")
    ok, message = sup.request_reset(T0 + 4 * MS)
    assert not ok and "estop topic is true (publisher a)" in message
    sup.on_estop(False, T0 + 5 * MS, publisher="a")
    assert sup.request_reset(T0 + 6 * MS)[0]


def test_a_pressed_estop_publisher_that_vanishes_stays_latched_until_reset():
    sup = armed()
    sup.on_estop(True, T0 + MS, publisher="a")
    for k in range(ESTOP_ABSENT_POLLS):
        sup.set_estop_publishers([], [], T0 + (2 + k) * MS)
    status = sup.status(T0 + 10 * MS)
    assert sup.mode == Mode.ESTOP and "left while pressed (publisher a)" in status.estop_vanished
    assert status.estop_sources == ()
    assert sup.request_reset(T0 + 11 * MS)[0] and sup.status(T0 + 11 * MS).estop_vanished == ""


def test_a_node_clock_that_stands_still_stops_nothing_the_steady_clock_runs_the_watchdogs():
    """Issue 34: with sim time and /clock stopped, input ages stopped growing and no watchdog fired."""
    sup = armed(estop_heartbeat_timeout_s=1.0)
    steady = 7 * T0  # another clock entirely: only its differences count
    sup.on_estop(False, T0)
    assert sup.tick(T0, steady).hold is False
    frozen = T0 + 10 * MS  # the node's clock stops here ...
    for k in range(1, 60):  # ... while 10 ms steady ticks go on, inputs still arriving at the frozen time
        feed(sup, frozen)
        sup.on_estop(False, frozen)
        sup.tick(frozen, steady + k * 10 * MS)
    assert sup.mode == Mode.ESTOP and "heartbeat cannot be checked" in sup.reason, sup.reason
    assert "has not advanced for more than 0.5 s of steady time" in sup.reason
    assert not sup.request_reset(frozen)[0]
    # The clock moves again: the stall clears and a reset is accepted.
    feed(sup, frozen + MS)
    sup.on_estop(False, frozen + MS)
    sup.tick(frozen + MS, steady + 61 * 10 * MS)
    assert sup.request_reset(frozen + 2 * MS)[0]


def test_a_stalled_node_clock_holds_a_moving_arm_and_refuses_arming():
    sup = armed()
    steady = 0
    for k in range(60):
        feed(sup, T0 + MS)
        sup.tick(T0 + MS, steady + k * 10 * MS)
    assert sup.mode == Mode.HOLD and "has not advanced" in sup.reason, sup.reason
    # counted apart, so a graph evaluation tells a starved sim from a silent policy
    assert sup.counters["watchdog_holds"] == sup.counters["clock_stall_holds"] == 1
    ok, message = sup.request_arm(T0 + MS)
    assert not ok and "has not advanced" in message


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
        wish = LIMITS.upper + 3.0 if k % 2 else LIMITS.lower - 3.0  # beyond the limits, still a number
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


@pytest.mark.parametrize("problem", ["nan_axis", "inf_axis", "few_axes", "few_buttons_but_estop_readable"])
def test_an_estop_press_inside_a_rejected_joy_message_still_latches(problem):
    sup = armed()
    axes, buttons = joy("estop")
    if problem == "nan_axis":
        axes[0] = float("nan")
    elif problem == "inf_axis":
        axes[3] = float("inf")
    elif problem == "few_axes":
        axes = axes[:1]
    else:
        buttons = buttons[:MAPPING.button("estop") + 1]
    hold = sup.on_joy(axes, buttons, T0 + 10 * MS)
    assert sup.mode == Mode.ESTOP and hold is not None and hold.hold
    assert sup.counters["rejected_joy"] == 1 and "joystick e-stop button is pressed" in sup.reason


def test_a_joy_message_too_short_to_read_the_estop_button_is_a_pressed_stop():
    sup = armed()
    hold = sup.on_joy([0.0] * N_AXES, [0] * MAPPING.button("estop"), T0 + 10 * MS)
    assert sup.mode == Mode.ESTOP and hold.hold and "unreadable" in sup.reason
    assert not sup.request_reset(T0 + 20 * MS)[0]  # the stop source is still faulty
    sup.on_joy(*joy(), T0 + 30 * MS)  # a readable message with the button released
    assert sup.request_reset(T0 + 40 * MS)[0]


@pytest.mark.parametrize("step_back_s", [0.05, 30.0])
def test_a_clock_step_back_makes_every_input_stale_and_holds(step_back_s):
    sup = armed(estop_heartbeat_timeout_s=0.3)
    sup.on_estop(False, T0)
    assert not sup.tick(T0 + 10 * MS).hold
    back = T0 + 10 * MS - int(step_back_s * 1e9)
    cmd = sup.tick(back)
    assert sup.mode == Mode.HOLD and cmd.hold and "clock stepped back" in sup.reason
    assert sup.counters["clock_steps_back"] == 1 and sup.counters["watchdog_holds"] == 1
    assert not sup.request_arm(back + MS)[0]  # nothing counts as fresh until it arrives again
    # The e-stop heartbeat counts again from the step: silent for its timeout, it latches (it used
    # to stay quiet for the whole step).
    sup.tick(back + 250 * MS)
    assert sup.mode == Mode.HOLD
    sup.tick(back + 310 * MS)
    assert sup.mode == Mode.ESTOP and "heartbeat" in sup.reason


def test_after_a_clock_step_back_fresh_inputs_arm_again():
    sup = armed()
    back = T0 - 5_000 * MS
    sup.tick(back)
    assert sup.mode == Mode.HOLD
    feed(sup, back + 10 * MS)
    assert sup.request_arm(back + 10 * MS)[0] and not sup.tick(back + 20 * MS).hold


def test_require_stop_source_arms_only_with_a_live_stop_source_and_latches_when_it_goes():
    sup = make(require_stop_source=True, handover_ramp_s=0.0)
    feed(sup, T0)
    ok, message = sup.request_arm(T0)
    assert not ok and "no live stop source" in message
    sup.on_joy(*joy(), T0)
    assert sup.request_arm(T0)[0]
    t = T0
    for _ in range(int(sup.config.joy_timeout_s / 0.01) + 5):  # the joystick goes quiet
        t += 10 * MS
        feed(sup, t)
        cmd = sup.tick(t)
    assert sup.mode == Mode.ESTOP and cmd.hold and "stop source lost" in sup.reason
    ok, message = sup.request_reset(t)
    assert not ok and "no live stop source" in message
    sup.on_joy(*joy(), t + MS)
    assert sup.request_reset(t + 2 * MS)[0]
    # A heartbeat on `estop` is a stop source too.
    sup = make(require_stop_source=True, estop_heartbeat_timeout_s=0.2, handover_ramp_s=0.0)
    feed(sup, T0)
    sup.on_estop(False, T0)
    assert sup.request_arm(T0)[0]


def test_require_stop_source_needs_a_stop_source_to_exist():
    no_button = load_joystick_mapping(config_path("joystick.yaml"))
    from dataclasses import replace

    no_button = replace(no_button, buttons={**no_button.buttons, "estop": -1})
    with pytest.raises(ConfigError) as info:
        Supervisor(SupervisorConfig(require_stop_source=True), LIMITS, Jogger(no_button, LIMITS, MODEL))
    assert info.value.field == "require_stop_source"


@pytest.mark.parametrize(
    ("field", "value"),
    [("joint_state_timeout_s", 1e9), ("policy_timeout_s", 10.0), ("joy_timeout_s", 60.0),
     ("estop_heartbeat_timeout_s", 1e6), ("handover_ramp_s", 100.0), ("max_joint_jump_rad", 50.0),
     ("joint_jump_confirm_samples", 1), ("joint_jump_confirm_samples", 2.5), ("joint_state_limit_margin_rad", 5.0)],
)
def test_config_values_beyond_their_range_are_refused(field, value):
    with pytest.raises(ConfigError) as info:
        SupervisorConfig(**{field: value})
    assert info.value.field == field and "must be" in str(info.value)


def test_teleop_jogging_after_a_jump_waits_for_the_hold_to_reach_the_arm():
    """The human keeps jogging through an episode reset: the jog resumes where the arm now is, not
    from the old pose the hold is still leaving (a recorded takeover would teach that pose)."""
    sup = armed()
    stick = {MAPPING.joint_axes[0]: 1.0}
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0)
    t = T0
    for _ in range(5):
        t += 10 * MS
        sup.on_joy(*joy("deadman", axes=stick), t)
        feed(sup, t, q_policy=None)
        jogging = sup.tick(t)
    assert not jogging.hold
    t = jump_to(sup, t + 10 * MS, q_policy=None)
    sup.on_joy(*joy("deadman", axes=stick), t)
    commands = [sup.tick(t)]
    while commands[-1].hold:
        t += 10 * MS
        sup.on_joy(*joy("deadman", axes=stick), t)
        sup.on_joint_state(NAMES, JUMP, t)
        commands.append(sup.tick(t))
        assert len(commands) < 100
    holds, jog = commands[:-1], commands[-1]
    assert np.allclose(holds[-1].positions, JUMP)  # the hold got to the arm first
    assert np.abs(jog.positions - JUMP).max() <= LIMITS.velocity.max() * 0.01 + 1e-9


def test_one_late_tick_of_a_starved_process_is_not_a_stopped_clock():
    """A process starved for 0.7 s wakes with its tick and the /clock message both ready: the tick
    alone sees the clock unchanged for 0.7 s. Only a second tick in a row counts as a standstill."""
    sup = armed()
    feed(sup, T0 + MS)
    sup.tick(T0 + MS, 0)
    feed(sup, T0 + MS)
    sup.tick(T0 + MS, 700 * MS)  # the late tick, before the clock message was taken
    assert sup.mode == Mode.AUTONOMOUS, sup.reason
    feed(sup, T0 + 2 * MS)
    sup.tick(T0 + 2 * MS, 701 * MS)  # the clock moved on
    assert sup.mode == Mode.AUTONOMOUS, sup.reason
    sup.tick(T0 + 2 * MS, 1300 * MS)
    sup.tick(T0 + 2 * MS, 1310 * MS)  # really standing: two ticks past the limit
    assert sup.mode == Mode.HOLD and "has not advanced" in sup.reason
