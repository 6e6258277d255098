"""leader_arm as a process over real DDS, on a second emulated bus (a pty speaking the STS protocol):
command/teleop in radians, torque never on, a silent leader stops the stream, and the supervisor's
takeover and hand-back with the leader running (issue 31, part 4)."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from feetech_support import SO101_MOTORS, SO101_URDF, emulated_bus, so101_calibration
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger
from support import RosProbe, node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.report import Level
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.joystick import load_joystick_mapping
from sim2real_ros.hardware import protocol as p
from sim2real_ros.hardware.bus import FeetechBus
from sim2real_ros.hardware.calibration import RAD_PER_TICK, CalibrationError, MotorCalibration, write_calibration
from sim2real_ros.nodes.common import EVENTS_QOS, JOY_QOS, LATCHED_QOS, RELIABLE_LATEST_QOS
from sim2real_ros.paths import config_path

KEEP_ALL = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
JOINTS = list(SO101_MOTORS)
# A leader's own ranges: its shoulder_pan turns further than the follower's URDF allows (+-1.92 rad).
RANGES = {"shoulder_pan": (200, 3900), "shoulder_lift": (850, 3200), "elbow_flex": (900, 3150),
          "wrist_flex": (880, 3180), "wrist_roll": (130, 3960), "gripper": (2030, 3500)}
MID = {name: (low + high) / 2 for name, (low, high) in RANGES.items()}
UPPER = RobotModel.from_file(SO101_URDF).limits_arrays(JOINTS)["upper"]
TIMEOUT = 30.0
# Generous: on the shared test machine five processes start at once and an emulator can wait for a CPU
# longer than a real bus ever takes (3 tries of 0.1 s were seen to fail at start).
BUS_TIMEOUT_S = 0.3
# The follow and alarm tests start five processes and two emulators on that machine (load above 20 seen):
# a slow reply drops a period, it does not stop the node.
SLOW_BUS_TIMEOUT_S = 1.0


def leader_calibration(path) -> str:
    write_calibration(path, [MotorCalibration(name, k + 1, 0, 0, *RANGES[name]) for k, name in enumerate(JOINTS)])
    return str(path)


def leader_decl(port: str, calibration: str, **extra) -> object:
    return node_decl("leader_arm", {"port": port, "calibration": calibration, "robot_description": str(SO101_URDF),
                                    "joints": JOINTS, "bus_timeout_s": BUS_TIMEOUT_S, "diagnostics_period_s": 0.2,
                                    **extra})


def values(received: list) -> dict[str, str]:
    return cv.merged_diagnostic_values(received[-1]) if received else {}


def test_leader_publishes_its_positions_in_radians_with_torque_off(ros, tmp_path):
    calibration = leader_calibration(tmp_path / "leader.json")
    # A hand moves servo 2 (shoulder_lift) to 1500 ticks from 1 s on: it can only while the torque is off.
    with emulated_bus("--calibration", calibration, "--initial", "1:3700", "2:2300", "3:2000", "4:2100", "5:2000",
                      "6:2400", "--hand", "2:1500:1.0") as port:
        # Another tool left the leader torqued: the node must release it.
        with FeetechBus(port, timeout_s=0.2) as bus:
            bus.sync_write(p.TORQUE_ENABLE, dict.fromkeys(range(1, 7), 1))
            assert all(bus.read(i, p.TORQUE_ENABLE) == 1 for i in range(1, 7))
        with running_nodes([leader_decl(port, calibration)], tmp_path):
            teleop = ros.collect(JointState, "command/teleop", KEEP_ALL)
            diag = ros.collect(DiagnosticArray, "leader_arm/diagnostics", KEEP_ALL)
            ros.wait_for_messages(teleop, 10, timeout_s=TIMEOUT)
            first = teleop[0]
            assert list(first.name) == JOINTS
            expected = {2: 2000, 3: 2100, 4: 2000, 5: 2400}
            for k, ticks in expected.items():
                joint = JOINTS[k]
                q = (ticks - (RANGES[joint][0] if joint == "gripper" else MID[joint])) * RAD_PER_TICK
                if joint == "gripper":
                    q += RobotModel.from_file(SO101_URDF).limits_arrays([joint])["lower"][0]
                assert abs(first.position[k] - q) <= RAD_PER_TICK, (joint, first.position[k], q)
            # shoulder_pan at 3700 ticks is 2.53 rad on the leader: clamped to the follower's limit, counted.
            assert (3700 - MID["shoulder_pan"]) * RAD_PER_TICK > UPPER[0] + 0.5
            assert first.position[0] == UPPER[0]
            lift = (1500 - MID["shoulder_lift"]) * RAD_PER_TICK
            assert wait_until(lambda: abs(teleop[-1].position[1] - lift) <= RAD_PER_TICK, TIMEOUT), (
                f"the hand's move did not show: torque still on? {teleop[-1].position[1]} vs {lift}")
            assert wait_until(lambda: int(values(diag).get("clamped.shoulder_pan", "0")) >= 10, TIMEOUT), values(diag)
            assert values(diag)["clamped.shoulder_lift"] == "0"
            assert cv.diagnostic_level(diag[-1]) == Level.OK
        # The node is gone: torque off on every servo and the old goal untouched (no goal was ever written).
        with FeetechBus(port, timeout_s=0.2) as bus:
            assert [bus.read(i, p.TORQUE_ENABLE) for i in range(1, 7)] == [0] * 6
            assert bus.read(2, p.GOAL_POSITION) == 2300
            assert abs(bus.read(2, p.PRESENT_POSITION) - 1500) <= 1


def test_a_silent_leader_stops_command_teleop(ros, tmp_path):
    calibration = leader_calibration(tmp_path / "leader.json")
    with emulated_bus("--calibration", calibration, "--faults", "silent:3:800") as port, \
            running_nodes([leader_decl(port, calibration)], tmp_path):
        teleop = ros.collect(JointState, "command/teleop", KEEP_ALL)
        diag = ros.collect(DiagnosticArray, "leader_arm/diagnostics", KEEP_ALL)
        ros.wait_for_messages(teleop, 20, timeout_s=TIMEOUT)
        # Servo 3 stops answering after 800 replies (8 s): every read fails naming it.
        # (A busy machine may also time out a whole read now and then: servo 3 is the one that keeps failing.)
        def servo_3_gone() -> bool:
            v = values(diag)
            return "bus_error" in v and \
                int(v.get("failed_replies.id3", "0")) >= int(v.get("failed_replies.id1", "0")) + 10
        assert wait_until(servo_3_gone, TIMEOUT), values(diag)
        assert "3" in values(diag)["bus_error"] and cv.diagnostic_level(diag[-1]) == Level.ERROR
        wait_until(lambda: False, 0.3)  # what was published before the failures has arrived
        count = len(teleop)
        assert not wait_until(lambda: len(teleop) > count, 1.0), "command/teleop went on without the leader"
        assert wait_until(lambda: int(values(diag).get("failed_cycles", "0")) >= 5, TIMEOUT)


MAPPING = load_joystick_mapping(config_path("joystick.yaml"))
COMMANDS = "forward_position_controller/commands"


def test_supervisor_takes_over_and_hands_back_with_the_leader_running(ros, tmp_path):
    """The existing rules with a leader arm on the graph: the follower is feetech_driver on a first
    emulated bus, the leader leader_arm on a second; the gamepad is the live stop source and gives the
    takeover button; supervisor/arm hands back. The leader's command/teleop never moves the follower by
    itself: it is not a second publisher on the robot topic, TELEOP holds while the deadman is up, and
    with the deadman held a leader 0.54 rad away is not followed (it must be aligned with the arm first;
    test_the_follower_follows_the_leader_once_aligned shows the following)."""
    calibration = leader_calibration(tmp_path / "leader.json")
    follower_calibration = so101_calibration(tmp_path / "follower.json")
    node = ros.node
    commands = ros.collect(Float64MultiArray, COMMANDS, KEEP_ALL)
    state = ros.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS)
    events = ros.collect(DiagnosticArray, "supervisor/interventions", EVENTS_QOS)
    teleop = ros.collect(JointState, "command/teleop", KEEP_ALL)
    measured = ros.collect(JointState, "joint_states", KEEP_ALL)
    policy_pub = node.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
    joy_pub = node.create_publisher(Joy, "joy", JOY_QOS)
    node.create_publisher(Bool, "estop", LATCHED_QOS)
    pressed: list[str] = []

    def feed() -> None:
        # The policy asks for where the follower started (the gap check passes), the gamepad is alive.
        if measured:
            policy_pub.publish(cv.make_joint_state(JOINTS, np.array(measured[0].position),
                                                   node.get_clock().now().nanoseconds))
        buttons = [0] * 15
        for role in pressed:
            buttons[MAPPING.button(role)] = 1
        joy_pub.publish(Joy(axes=[0.0] * 6, buttons=buttons))
    node.create_timer(0.02, feed)

    def mode() -> str:
        return cv.diagnostic_values(state[-1]).get("mode", "") if state else ""

    supervisor = node_decl("supervisor", {"robot_description": str(SO101_URDF), "joints": JOINTS,
                                          "auto_arm": False, "require_stop_source": True, "policy_timeout_s": 0.5,
                                          "joint_state_timeout_s": 0.5, "joy_timeout_s": 1.0,
                                          "handover_ramp_s": 0.2})
    driver = node_decl("feetech_driver", {"calibration": str(follower_calibration), "joints": JOINTS,
                                          "robot_description": str(SO101_URDF), "bus_timeout_s": BUS_TIMEOUT_S})
    with emulated_bus("--calibration", str(follower_calibration)) as follower_port, \
            emulated_bus("--calibration", calibration, "--initial", "1:2400") as leader_port, \
            running_nodes([dataclasses.replace(driver, parameters={**driver.parameters, "port": follower_port}),
                           leader_decl(leader_port, calibration), supervisor], tmp_path):
        ros.wait_for_messages(teleop, 10, timeout_s=TIMEOUT)
        ros.wait_for_messages(measured, 10, timeout_s=TIMEOUT)
        home = np.array(measured[0].position)
        leader_q = np.array(teleop[-1].position)
        assert abs(leader_q[0] - (2400 - MID["shoulder_pan"]) * RAD_PER_TICK) <= RAD_PER_TICK
        assert abs(leader_q[0] - home[0]) > 0.5  # the leader is far from the follower
        assert wait_until(lambda: mode() == "HOLD", TIMEOUT), mode()
        assert wait_until(lambda: ros.call(Trigger, "supervisor/arm", timeout_s=TIMEOUT).success, TIMEOUT), \
            cv.diagnostic_values(state[-1])
        assert wait_until(lambda: mode() == "AUTONOMOUS", TIMEOUT)
        # Pressed again until taken (a press is refused while an input is stale on a loaded machine).
        deadline = time.monotonic() + TIMEOUT
        while mode() != "TELEOP" and time.monotonic() < deadline:
            pressed[:] = ["takeover"]
            if not wait_until(lambda: mode() == "TELEOP", 1.0):
                pressed[:] = []
                time.sleep(0.2)
        assert mode() == "TELEOP", cv.diagnostic_values(state[-1])
        pressed[:] = []
        start, start_measured = len(commands), len(measured)
        ros.wait_for_messages(commands, start + 30, TIMEOUT)
        ros.wait_for_messages(measured, start_measured + 30, TIMEOUT)
        for msg in commands[start:]:
            assert np.all(np.abs(np.asarray(msg.data) - home) <= RAD_PER_TICK), list(msg.data)
        for msg in measured[start_measured:]:
            assert np.all(np.abs(np.asarray(msg.position) - home) <= RAD_PER_TICK), list(msg.position)
        assert cv.diagnostic_values(state[-1]).get("foreign_publishers", "0") == "0"
        # The deadman held: the leader is 0.54 rad away on shoulder_pan, so the arm holds and says why.
        pressed[:] = ["deadman"]
        assert wait_until(lambda: "align the leader" in cv.diagnostic_values(state[-1])["reason"], TIMEOUT), \
            cv.diagnostic_values(state[-1])
        assert "shoulder_pan" in cv.diagnostic_values(state[-1])["reason"]
        start = len(commands)
        ros.wait_for_messages(commands, start + 30, TIMEOUT)
        for msg in commands[start:]:
            assert np.all(np.abs(np.asarray(msg.data) - home) <= RAD_PER_TICK), list(msg.data)
        pressed[:] = []
        response = ros.call(Trigger, "supervisor/arm", timeout_s=TIMEOUT)
        assert response.success, response.message
        assert wait_until(lambda: mode() == "AUTONOMOUS", TIMEOUT)
        ros.wait_for_messages(events, 2, TIMEOUT)
        kinds = [cv.diagnostic_values(m)["event"] for m in events]
        assert kinds[:2] == ["takeover", "handback"], kinds


def test_a_bad_hand_move_is_refused_naming_it():
    import subprocess
    import sys

    for args, expected in ((["--hand", "2:1500"], "'2:1500': expected ID:TICKS:AT_S"),
                           (["--hand", "2:5000:1"], "'2:5000:1': TICKS must be in 0..4095"),
                           (["--ids", "1-3", "--hand", "7:100:1"], "servo 7, which is not on the bus")):
        done = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and expected in done.stderr, (args, done.stderr)


def test_the_follower_calibration_on_the_leader_bus_fails_at_start_naming_the_motor(tmp_path):
    """The leader's servos hold the leader's homing offsets: another arm's file is refused at start."""
    import subprocess
    import sys

    leader = leader_calibration(tmp_path / "leader.json")
    other = tmp_path / "follower.json"
    write_calibration(other, [MotorCalibration(name, k + 1, 0, 40 if name == "elbow_flex" else 0, *RANGES[name])
                              for k, name in enumerate(JOINTS)])
    with emulated_bus("--calibration", leader) as port:
        result = subprocess.run(
            [sys.executable, "-m", "sim2real_ros.cli.main", "node", "leader_arm", "--ros-args",
             "-p", f"port:={port}", "-p", f"calibration:={other}", "-p", f"robot_description:={SO101_URDF}",
             "-p", f"bus_timeout_s:={BUS_TIMEOUT_S}"],
            capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert "motor 'elbow_flex'" in result.stderr and "homing offset" in result.stderr


def test_with_the_follower_calibration_the_gripper_maps_by_fraction_of_travel(tmp_path):
    """LeaderArm (no ROS) on the emulated bus: the handle's travel fraction becomes the jaw's."""
    from sim2real_ros.hardware.calibration import joint_maps, load_calibration
    from sim2real_ros.hardware.leader import LeaderArm

    calibration = leader_calibration(tmp_path / "leader.json")
    follower = tmp_path / "follower.json"
    write_calibration(follower, [MotorCalibration(name, k + 1, 1 if name == "gripper" else 0, 0,
                                                  *((2000, 2800) if name == "gripper" else RANGES[name]))
                                 for k, name in enumerate(JOINTS)])
    limits = RobotModel.from_file(SO101_URDF).limits_arrays(JOINTS)
    maps = joint_maps(load_calibration(calibration), JOINTS, limits["lower"])
    with emulated_bus("--calibration", calibration, "--initial", "6:2400", "3:2000") as port, \
            FeetechBus(port, timeout_s=0.2) as bus:
        by_angle = LeaderArm(bus, maps, limits["lower"], limits["upper"]).start()
        by_fraction = LeaderArm(bus, maps, limits["lower"], limits["upper"],
                                follower=load_calibration(follower)).start()
    opened = (2400 - 2030) / (3500 - 2030)  # of the leader handle's range
    assert abs(by_angle.positions[5] - (limits["lower"][5] + 370 * RAD_PER_TICK)) <= 1e-9
    assert abs(by_fraction.positions[5] - (limits["lower"][5] + opened * 800 * RAD_PER_TICK)) <= 1e-9
    assert by_fraction.positions[2] == by_angle.positions[2]  # arm joints: the same map either way
    without_gripper = {name: m for name, m in load_calibration(follower).items() if name != "gripper"}
    with pytest.raises(CalibrationError, match="follower calibration: no motor 'gripper'"):
        LeaderArm(None, maps, limits["lower"], limits["upper"], follower=without_gripper)


def follower_graph(tmp_path, follower_port: str, follower_calibration, **supervisor_params) -> list:
    """feetech_driver on the follower's bus and the supervisor with the robot graph's settings (its
    timeouts long: a 0.51 s gap in joint_states was seen at a load of 20 on 2 cores)."""
    supervisor = node_decl("supervisor", {"robot_description": str(SO101_URDF), "joints": JOINTS,
                                          "auto_arm": False, "require_stop_source": True,
                                          "joint_state_timeout_s": 1.5, "joy_timeout_s": 2.0, **supervisor_params})
    driver = node_decl("feetech_driver", {"calibration": str(follower_calibration), "joints": JOINTS,
                                          "robot_description": str(SO101_URDF), "bus_timeout_s": SLOW_BUS_TIMEOUT_S,
                                          "port": follower_port, "alarm_samples": 10})
    return [driver, supervisor]


class Gamepad:
    """The test's gamepad at 50 Hz: the live stop source, its buttons (by role) and sticks.

    It is a node of its own on its own executor thread: on the test's probe, its timer waited behind
    the callbacks of three 100 Hz KEEP_ALL subscriptions, and on a loaded CI machine (Jazzy) the
    stream went unheard for the supervisor's 2 s, which latched ESTOP ("stop source lost") as it
    must."""

    def __init__(self) -> None:
        self.pressed: list[str] = []
        self.axes = [0.0] * 6
        self._probe = RosProbe("test_gamepad")
        self._pub = self._probe.node.create_publisher(Joy, "joy", JOY_QOS)
        self._probe.node.create_timer(0.02, self._publish)

    @property
    def node(self):
        """The gamepad's node (its own executor thread): for timers that move the sticks."""
        return self._probe.node

    def close(self) -> None:
        self._probe.close()

    def take_over(self, mode) -> bool:
        """Press takeover until `mode()` says TELEOP (True) or TIMEOUT passes. Takeover acts on a press
        and is refused while an input is stale (a loaded machine can starve joint_states for a moment),
        so the button is pressed again, as a person would, rather than held once."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            self.pressed[:] = ["takeover"]
            if wait_until(lambda: mode() == "TELEOP", 1.0):
                return True
            self.pressed[:] = []
            time.sleep(0.2)
        return False

    def _publish(self) -> None:
        buttons = [0] * 15
        for role in self.pressed:
            buttons[MAPPING.button(role)] = 1
        self._pub.publish(Joy(axes=list(self.axes), buttons=buttons))


@pytest.fixture
def pad():
    """The test's gamepad (Gamepad), closed after the test."""
    gamepad = Gamepad()
    try:
        yield gamepad
    finally:
        gamepad.close()


def test_the_follower_follows_the_leader_once_aligned_and_holds_when_it_goes_silent(ros, pad, tmp_path):
    """TELEOP with the deadman held: the leader starts 0.54 rad away on shoulder_pan and the follower
    holds (the reason says why); a hand brings it within handover_max_gap_rad (0.1 rad), then bends
    its elbow 0.42 rad: the follower's commands and joint states reach the leader's position. The leader process stopped
    (SIGSTOP: its publisher stays, its messages stop): the follower holds where it is."""
    import os
    import signal

    leader_cal = leader_calibration(tmp_path / "leader.json")
    follower_cal = so101_calibration(tmp_path / "follower.json")
    commands = ros.collect(Float64MultiArray, COMMANDS, KEEP_ALL)
    state = ros.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS)
    teleop = ros.collect(JointState, "command/teleop", KEEP_ALL)
    measured = ros.collect(JointState, "joint_states", KEEP_ALL)

    def status() -> dict[str, str]:
        return cv.diagnostic_values(state[-1]) if state else {}

    # The hand: shoulder_pan to the follower's position (mid-range: 0 rad) 20 s after the leader's bus
    # starts (the leader node is up long before), then the elbow to 2300 ticks (+0.42 rad).
    aligned_pan, elbow = 2050, 2300
    leader_target = np.array([0.0, 0.0, (elbow - MID["elbow_flex"]) * RAD_PER_TICK, 0.0, 0.0, 0.0])
    with emulated_bus("--calibration", str(follower_cal)) as follower_port, \
            running_nodes(follower_graph(tmp_path, follower_port, follower_cal, handover_max_gap_rad=0.1,
                                         teleop_timeout_s=0.3), tmp_path):
        ros.wait_for_messages(measured, 10, timeout_s=TIMEOUT)
        home = np.array(measured[-1].position)
        leader_target[5] = home[5]  # the grippers' calibrations are the same: the same jaw angle
        assert wait_until(lambda: status().get("mode") == "HOLD", TIMEOUT), status()
        assert pad.take_over(lambda: status().get("mode")), status()
        pad.pressed[:] = ["deadman"]
        with emulated_bus("--calibration", leader_cal, "--initial", "1:2400",
                          "--hand", f"1:{aligned_pan}:20", f"3:{elbow}:22") as leader_port, \
                running_nodes([leader_decl(leader_port, leader_cal, bus_timeout_s=SLOW_BUS_TIMEOUT_S)],
                              tmp_path) as leader:
            ros.wait_for_messages(teleop, 10, timeout_s=TIMEOUT)
            # Not before: the leader is far, so the arm holds with the deadman held, saying why.
            assert wait_until(lambda: "align the leader" in status().get("reason", ""), TIMEOUT), status()
            start = len(commands)
            ros.wait_for_messages(commands, start + 30, TIMEOUT)
            assert abs(teleop[-1].position[0] - home[0]) > 0.5, "the hand moved before the check: machine too slow"
            for msg in commands[start:]:
                assert np.all(np.abs(np.asarray(msg.data) - home) <= RAD_PER_TICK), list(msg.data)
            # After: the hand aligns the leader, and the follower follows it to the elbow's new angle.
            assert wait_until(lambda: "following the leader arm" in status().get("reason", ""), 2 * TIMEOUT), \
                status()
            assert wait_until(lambda: np.all(np.abs(np.asarray(commands[-1].data) - leader_target) <= 2 * RAD_PER_TICK)
                              and np.all(np.abs(np.asarray(measured[-1].position) - leader_target) <= 0.01),
                              TIMEOUT), (list(commands[-1].data), list(measured[-1].position), leader_target)
            assert int(status().get("rejected_teleop", "-1")) == 0 and status()["mode"] == "TELEOP"
            # The arm settles where it is commanded (its last ticks come at the servo loop's gain: a
            # loaded machine saw it 3 ticks short 0.3 s later), so "where it is" below is one position.
            assert wait_until(lambda: np.all(np.abs(np.asarray(measured[-1].position) - np.asarray(commands[-1].data))
                                             <= 2 * RAD_PER_TICK), TIMEOUT), \
                (list(commands[-1].data), list(measured[-1].position))
            # The leader goes silent: TELEOP holds at the arm's position.
            pid = leader.nodes[0].process.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                assert wait_until(lambda: "command/teleop silent" in status().get("reason", ""), TIMEOUT), status()
                here = np.array(measured[-1].position)
                start = len(commands)
                ros.wait_for_messages(commands, start + 30, TIMEOUT)
                for msg in commands[start:]:
                    assert np.all(np.abs(np.asarray(msg.data) - here) <= 2 * RAD_PER_TICK), list(msg.data)
                assert status()["mode"] == "TELEOP"
            finally:
                os.kill(pid, signal.SIGCONT)


def test_an_overheating_servo_latches_estop_and_the_follower_holds(ros, pad, tmp_path):
    """The follower's emulated servo 3 (elbow_flex) overheats after 1500 replies (about 15 s at 100 Hz):
    feetech_driver raises `overheat` after 10 samples, the supervisor latches ESTOP naming the servo,
    the follower holds, and the reset is refused while the alarm persists. Meanwhile the gamepad jogs
    the arm in TELEOP, so the stop usually meets a moving arm."""
    follower_cal = so101_calibration(tmp_path / "follower.json")
    commands = ros.collect(Float64MultiArray, COMMANDS, KEEP_ALL)
    state = ros.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS)
    measured = ros.collect(JointState, "joint_states", KEEP_ALL)

    def status() -> dict[str, str]:
        return cv.diagnostic_values(state[-1]) if state else {}

    with emulated_bus("--calibration", str(follower_cal), "--faults", "overheat:3:1500") as port, \
            running_nodes(follower_graph(tmp_path, port, follower_cal), tmp_path):
        assert wait_until(lambda: status().get("mode") in ("HOLD", "ESTOP"), TIMEOUT), status()
        pad.pressed[:] = ["takeover"]
        wait_until(lambda: status().get("mode") != "HOLD", 5.0)
        pad.pressed[:] = ["deadman"]
        axis = MAPPING.joint_axes[0]

        def swing() -> None:  # the first joint to and fro, 1 s each way, away from its limits
            pad.axes[axis] = -0.2 if pad.axes[axis] > 0 else 0.2
        pad.node.create_timer(1.0, swing)
        assert wait_until(lambda: status().get("mode") == "ESTOP", 3 * TIMEOUT), status()
        pad.axes[axis] = 0.0
        reason = status()["reason"]
        assert "servo alarm: overheat on elbow_flex (85 degC) from feetech_driver" in reason, reason
        response = ros.call(Trigger, "supervisor/reset", timeout_s=TIMEOUT)
        assert not response.success and "servo alarm overheat on elbow_flex" in response.message, response.message
        # The follower holds: after the hold has arrived, commands and joint states stay put.
        wait_until(lambda: False, 0.5)
        here = np.array(commands[-1].data)
        start, start_measured = len(commands), len(measured)
        ros.wait_for_messages(commands, start + 30, TIMEOUT)
        ros.wait_for_messages(measured, start_measured + 30, TIMEOUT)
        for msg in commands[start:]:
            assert np.all(np.abs(np.asarray(msg.data) - here) <= 1e-9), list(msg.data)
        for msg in measured[start_measured:]:
            assert np.all(np.abs(np.asarray(msg.position) - here) <= 2 * RAD_PER_TICK), list(msg.position)
        assert status()["mode"] == "ESTOP"
