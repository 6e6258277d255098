"""feetech_driver as a process over real DDS, on the emulated bus (a pty speaking the STS protocol)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from feetech_support import SO101_URDF, emulated_bus, so101_calibration
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from support import node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.report import Level
from sim2real_ros.hardware import protocol as p
from sim2real_ros.hardware.bus import FeetechBus
from sim2real_ros.hardware.calibration import RAD_PER_TICK
from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS

KEEP_ALL = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
ARM_ORDER = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


def driver_decl(port: str, calibration, **extra) -> object:
    return node_decl("feetech_driver", {"port": port, "calibration": str(calibration),
                                        "robot_description": str(SO101_URDF), "joints": ARM_ORDER,
                                        "bus_timeout_s": 0.1, **extra})


def diagnostics(received: list) -> dict[str, str]:
    return cv.merged_diagnostic_values(received[-1]) if received else {}


def test_driver_publishes_joint_states_and_follows_commands(ros, tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    initial = ["1:1800", "2:2300", "3:2000", "4:2100", "5:2000", "6:2400"]
    with emulated_bus("--calibration", str(calibration), "--initial", *initial) as port:
        run_and_command(ros, port, calibration, tmp_path)
        # The node is gone (SIGTERM): the arm holds where it was, torque still on (the default).
        with FeetechBus(port, timeout_s=0.2) as bus:
            for servo_id in range(1, 7):
                assert bus.read(servo_id, p.TORQUE_ENABLE) == 1
                assert wait_until(lambda i=servo_id: abs(bus.read(i, p.GOAL_POSITION)
                                                         - bus.read(i, p.PRESENT_POSITION)) <= 1, 10)


def run_and_command(ros, port: str, calibration, tmp_path) -> None:
    with running_nodes([driver_decl(port, calibration)], tmp_path):
        states = ros.collect(JointState, "joint_states", KEEP_ALL)
        diag = ros.collect(DiagnosticArray, "feetech_driver/diagnostics", KEEP_ALL)
        ros.wait_for_messages(states, 20, timeout_s=30)
        first = states[0]
        assert list(first.name) == ARM_ORDER
        # No jump: the first states are where the servos were before the driver started.
        mid = {1: (820 + 3250) / 2, 2: (850 + 3200) / 2}
        assert abs(first.position[0] - (1800 - mid[1]) * RAD_PER_TICK) <= RAD_PER_TICK
        assert abs(first.position[1] - (2300 - mid[2]) * RAD_PER_TICK) <= RAD_PER_TICK
        assert len(first.velocity) == 6 and len(first.effort) == 6

        commands = ros.publisher(Float64MultiArray, "forward_position_controller/commands", RELIABLE_LATEST_QOS)
        ros.wait_for_subscribers(commands)
        target = np.array([0.3, -0.2, 0.4, 0.1, -0.5, 0.2])
        commands.publish(cv.make_position_command(target))
        assert wait_until(lambda: np.all(np.abs(np.array(states[-1].position) - target) <= RAD_PER_TICK), 15), (
            f"arm did not reach {target}: {list(states[-1].position)}")
        commands.publish(cv.make_position_command(np.array([9.0, 0, 0, 0, 0, 0])))  # past the limit
        values = None

        def clamped() -> bool:
            nonlocal values
            values = diagnostics(diag)
            return values.get("clamped.shoulder_pan") == "1"
        assert wait_until(clamped, 15), f"clamp not reported: {values}"
        assert values["commands_clamped"] == "1"
        assert "temperature_c.gripper" in values and "voltage_v.gripper" in values
        assert cv.diagnostic_level(diag[-1]) == Level.OK


def test_a_silent_servo_stops_joint_states_and_an_overheat_is_an_error(ros, tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "overheat:2:30", "silent:5:200") as port, \
            running_nodes([driver_decl(port, calibration, alarm_samples=3)], tmp_path):
        states = ros.collect(JointState, "joint_states", KEEP_ALL)
        diag = ros.collect(DiagnosticArray, "feetech_driver/diagnostics", KEEP_ALL)
        assert wait_until(lambda: any("overheat" in cv.merged_diagnostic_values(m) for m in diag), 30)
        heated = next(m for m in diag if "overheat" in cv.merged_diagnostic_values(m))
        assert cv.diagnostic_level(heated) == Level.ERROR
        assert cv.merged_diagnostic_values(heated)["overheat"] == "shoulder_lift"
        # Servo 5 is silent after 200 replies: from then on every read fails naming it.
        assert wait_until(lambda: int(diagnostics(diag).get("failed_replies.id5", "0")) >= 5
                          and "bus_error" in diagnostics(diag), 30), diagnostics(diag)
        assert "5" in diagnostics(diag)["bus_error"]
        count = len(states)
        # Servo 5 is gone for good: no joint state comes any more (the supervisor's watchdog holds).
        assert not wait_until(lambda: len(states) > count, 1.0)
        assert wait_until(lambda: int(diagnostics(diag).get("failed_cycles", "0")) >= 3, 10)


def test_dropped_and_corrupt_replies_are_reported_and_joint_states_go_on(ros, tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "drop:3:40", "corrupt:4:60") as port, \
            running_nodes([driver_decl(port, calibration)], tmp_path):
        states = ros.collect(JointState, "joint_states", KEEP_ALL)
        diag = ros.collect(DiagnosticArray, "feetech_driver/diagnostics", KEEP_ALL)

        def reported() -> bool:
            values = diagnostics(diag)
            return int(values.get("bus_timeouts", "0")) >= 1 and int(values.get("bus_checksum_errors", "0")) >= 1
        assert wait_until(reported, 30), diagnostics(diag)
        values = diagnostics(diag)
        assert int(values["failed_replies.id3"]) >= 1 and int(values["failed_replies.id4"]) >= 1
        # A lost or corrupt reply costs one period, not the stream.
        count = len(states)
        assert wait_until(lambda: len(states) >= count + 20, 10)


def test_a_calibration_without_the_gripper_fails_at_start_naming_it(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json", drop="gripper")
    with emulated_bus() as port:
        result = subprocess.run(
            [sys.executable, "-m", "sim2real_ros.cli.main", "node", "feetech_driver", "--ros-args",
             "-p", f"port:={port}", "-p", f"calibration:={calibration}", "-p", f"robot_description:={SO101_URDF}"],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "motor 'gripper'" in result.stderr
