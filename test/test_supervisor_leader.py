"""The supervisor core at fixed times with a leader arm (command/teleop) and servo alarms (issue 31):
TELEOP follows the leader only once aligned, step-limited; a silent leader holds; the joystick jogs
when no leader publishes; an overload/overheat alarm latches ESTOP and blocks the reset while it persists."""
from __future__ import annotations

import numpy as np
import pytest
from test_supervisor_core import HOME, LIMITS, MAPPING, MS, NAMES, T0, armed, feed, joy, make

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.safety.supervisor import Mode

STEP = LIMITS.velocity * 0.01  # the most a command moves in one 10 ms control period [rad]


def in_teleop(**overrides):
    """Armed, then taken over with the gamepad; a leader arm is on the graph."""
    sup = armed(teleop_timeout_s=0.1, handover_max_gap_rad=0.1, **overrides)
    sup.on_joy(*joy(), T0)
    sup.on_joy(*joy("takeover"), T0 + 10 * MS)
    assert sup.mode == Mode.TELEOP
    sup.set_teleop_publishers(1)
    return sup


def step(sup, t, leader=None, q_meas=HOME, deadman=True):
    """One 10 ms period at t [ns]: joint state, joystick, the leader's command (if any), a tick."""
    feed(sup, t, q_meas=q_meas, q_policy=None)
    sup.on_joy(*joy("deadman") if deadman else joy(), t)
    if leader is not None:
        assert sup.on_teleop_command(NAMES, leader, t)
    return sup.tick(t)


def test_teleop_follows_the_leader_only_once_it_is_aligned_and_step_limited():
    sup = in_teleop()
    far = HOME.copy()
    far[0] += 0.5
    t = T0 + 20 * MS
    for _ in range(5):  # the leader 0.5 rad away: the arm holds, the reason says why
        t += 10 * MS
        cmd = step(sup, t, far)
        assert cmd.hold and np.allclose(cmd.positions, HOME)
    assert "align the leader with the arm" in sup.reason and NAMES[0] in sup.reason and not sup.leader_following
    near = HOME.copy()
    near[0] += 0.08  # within handover_max_gap_rad 0.1: following starts
    t += 10 * MS
    cmd = step(sup, t, near)
    assert not cmd.hold and sup.leader_following and "following the leader arm" in sup.reason
    assert cmd.positions[0] == pytest.approx(HOME[0] + STEP[0])  # step-limited toward the leader
    last = cmd.positions
    for _ in range(300):  # once following, the leader leads, even far away: paced by the step limit
        t += 10 * MS
        cmd = step(sup, t, far, q_meas=last)
        assert np.all(np.abs(cmd.positions - last) <= STEP + 1e-12)
        last = cmd.positions
    assert np.allclose(cmd.positions, far)
    beyond = far.copy()
    beyond[1] = LIMITS.upper[1] + 0.05  # near the limit: clamped to it
    for _ in range(300):
        t += 10 * MS
        cmd = step(sup, t, beyond, q_meas=last)
        last = cmd.positions
    assert cmd.positions[1] == LIMITS.upper[1]
    assert sup.mode == Mode.TELEOP and sup.counters["rejected_teleop"] == 0


def test_a_silent_leader_holds_and_must_be_aligned_again():
    sup = in_teleop()
    t = T0 + 30 * MS
    moved = HOME.copy()
    moved[2] += 0.05
    q = HOME  # the arm reaches each command by the next period
    for _ in range(20):
        t += 10 * MS
        cmd = step(sup, t, moved, q_meas=q)
        q = cmd.positions
    assert sup.leader_following and np.allclose(cmd.positions, moved)
    here = cmd.positions.copy()
    for _ in range(15):  # the leader stops publishing (its publisher stays): hold after 0.1 s
        t += 10 * MS
        cmd = step(sup, t, None, q_meas=here)
    assert cmd.hold and np.allclose(cmd.positions, here) and not sup.leader_following
    assert "command/teleop silent for" in sup.reason and sup.mode == Mode.TELEOP
    far = here.copy()
    far[2] -= 0.4
    for _ in range(5):  # back, but elsewhere: the arm does not jump to it
        t += 10 * MS
        cmd = step(sup, t, far, q_meas=here)
        assert cmd.hold and np.allclose(cmd.positions, here)
    assert "align the leader" in sup.reason


def test_releasing_the_deadman_holds_and_jogging_works_without_a_leader():
    sup = in_teleop()
    t = T0 + 30 * MS
    step(sup, t, HOME)  # the first tick ever sends the hold
    t += 10 * MS
    cmd = step(sup, t, HOME)
    assert sup.leader_following and not cmd.hold
    t += 10 * MS
    cmd = step(sup, t, HOME, deadman=False)
    assert cmd.hold and not sup.leader_following
    # No leader on the graph: the joystick jogs again.
    sup.set_teleop_publishers(0)
    stick = {MAPPING.joint_axes[0]: 1.0}
    t += 500 * MS  # the leader's last command is older than teleop_timeout_s
    for _ in range(5):
        t += 10 * MS
        feed(sup, t, q_policy=None)
        sup.on_joy(*joy("deadman", axes=stick), t)
        cmd = sup.tick(t)
    assert not cmd.hold and cmd.positions[0] > HOME[0] and "jogging" in sup.reason


def test_bad_leader_commands_are_rejected_and_counted():
    sup = make()
    assert not sup.on_teleop_command(NAMES[1:], HOME[1:], T0)
    bad = HOME.copy()
    bad[0] = np.nan
    assert not sup.on_teleop_command(NAMES, bad, T0)
    bad[0] = 1e308
    assert not sup.on_teleop_command(NAMES, bad, T0)
    assert sup.counters["rejected_teleop"] == 3 and "command/teleop" in sup.last_rejection
    assert sup.status(T0).counters["rejected_teleop"] == 3
    with pytest.raises(ConfigError, match="teleop_timeout_s"):
        make(teleop_timeout_s=0.0)


def overheat(joints: str = "elbow_flex") -> dict[str, str]:
    return {"overheat": joints, "temperature_c.elbow_flex": "85", "load.elbow_flex": "0.100"}


def test_a_servo_alarm_latches_estop_naming_the_servo_and_blocks_the_reset_while_it_persists():
    sup = armed()
    t = T0 + 10 * MS
    feed(sup, t)
    assert sup.on_servo_diagnostics("feetech_driver", "/dev/pts/3", False, {"temperature_c.elbow_flex": "50"},
                                    t) is None
    assert sup.mode == Mode.AUTONOMOUS
    hold = sup.on_servo_diagnostics("feetech_driver", "/dev/pts/3", True, overheat(), t + MS)
    assert hold is not None and hold.hold and sup.mode == Mode.ESTOP
    assert "servo alarm: overheat on elbow_flex (85 degC) from feetech_driver on /dev/pts/3" in sup.reason
    assert sup.counters["estops"] == 1
    ok, message = sup.request_reset(t + 2 * MS)
    assert not ok and "servo alarm overheat on elbow_flex" in message
    assert any("overheat" in s for s in sup.status(t).estop_sources)
    # Another status (another driver) without alarms does not clear this one.
    sup.on_servo_diagnostics("feetech_driver", "/dev/pts/9", False, {}, t + 3 * MS)
    assert not sup.request_reset(t + 4 * MS)[0]
    # The servo cooled down: the driver reports without the alarm; the reset goes to HOLD.
    sup.on_servo_diagnostics("feetech_driver", "/dev/pts/3", False, {"temperature_c.elbow_flex": "60"}, t + 5 * MS)
    feed(sup, t + 5 * MS)
    assert sup.request_reset(t + 6 * MS)[0] and sup.mode == Mode.HOLD
    # An overload (level ERROR and the key) latches again; the key without ERROR is not an alarm.
    assert sup.on_servo_diagnostics("feetech_driver", "", False, {"overload": "gripper"}, t + 7 * MS) is None
    assert sup.mode == Mode.HOLD
    sup.on_servo_diagnostics("feetech_driver", "", True, {"overload": "gripper,wrist_roll", "load.gripper": "1.000"},
                             t + 8 * MS)
    assert sup.mode == Mode.ESTOP and "overload on gripper (load 1.000), wrist_roll from feetech_driver" in sup.reason
