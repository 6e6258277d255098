"""Bring-up on an SO-101 (docs/so101.md "Running on an SO-101"): the graph declaration, the flags'
errors, the generated calibration of the emulated arm, the emulator's goal log, the launch arguments.
The whole graph on the emulated arm: test_bringup_emulated.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from feetech_support import SO101_URDF, emulated_bus, so101_calibration

from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.graph import DEFAULT_CAMERA_CALIBRATION, GraphArgs, bringup_problems, declare_graph
from sim2real_ros.hardware import protocol as p
from sim2real_ros.hardware.bus import FeetechBus
from sim2real_ros.hardware.calibration import RAD_PER_TICK, calibration_covering, joint_maps
from sim2real_ros.hardware.emulated_arm import read_goal_log, rehearsal_pose
from sim2real_ros.launch_support import graph_args_from_launch, launch_flag
from sim2real_ros.paths import config_path, default_policy_path
from sim2real_ros.robots import ROBOT_NAMES, robot_description_for, sim_params_for
from sim2real_ros.sim.params import load_sim_params

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


def by_name(decls):
    return {d.name: d for d in decls}


def test_robot_graph_with_a_port_starts_the_driver_and_the_camera(tmp_path):
    args = GraphArgs(robot="so101", port="/dev/ttyACM0", calibration="/arm.json", camera="0",
                     estop_heartbeat_s=0.5)
    decls = declare_graph("robot", args)
    assert [d.name for d in decls] == ["feetech_driver", "camera_node", "policy_node", "actuator_node", "supervisor"]
    nodes = by_name(decls)
    driver = nodes["feetech_driver"].parameters
    assert (driver["port"], driver["calibration"]) == ("/dev/ttyACM0", "/arm.json")
    # The driver clamps to the same URDF the supervisor enforces.
    assert driver["robot_description"] == nodes["supervisor"].parameters["robot_description"]
    assert nodes["camera_node"].parameters["source"] == "0"
    assert nodes["camera_node"].parameters["camera_calibration"] == str(config_path(DEFAULT_CAMERA_CALIBRATION))
    supervisor = nodes["supervisor"].parameters
    assert supervisor["require_stop_source"] is True and supervisor["auto_arm"] is False
    assert supervisor["estop_heartbeat_timeout_s"] == 0.5
    assert all(d.parameters["use_sim_time"] is False for d in decls)
    # Topic remaps reach the robot's own nodes too.
    remapped = by_name(declare_graph("robot", GraphArgs(robot="so101", port="/p", calibration="/c", camera="0",
                                                        joint_states_topic="arm/joint_states")))
    assert ("joint_states", "arm/joint_states") in remapped["feetech_driver"].remappings


def test_robot_graph_without_a_port_is_unchanged():
    """Without bring-up flags the robot's drivers are its own (ros2_control, a camera driver)."""
    names = [d.name for d in declare_graph("robot", GraphArgs(robot="so101"))]
    assert names == ["policy_node", "actuator_node", "supervisor"]
    assert "estop_heartbeat_timeout_s" not in by_name(declare_graph("robot", GraphArgs()))["supervisor"].parameters


def test_sim_camera_and_leader_arm_in_the_graph():
    decls = by_name(declare_graph("robot", GraphArgs(robot="so101", port="/pty", calibration="/c.json",
                                                     sim_camera=True, leader_port="/dev/ttyACM1",
                                                     leader_calibration="/leader.json")))
    assert "camera_node" not in decls
    assert decls["sim_camera"].parameters["robot"] == "so101"
    assert decls["leader_arm"].parameters["port"] == "/dev/ttyACM1"
    assert decls["leader_arm"].parameters["calibration"] == "/leader.json"
    assert decls["leader_arm"].parameters["follower_calibration"] == "/c.json"


@pytest.mark.parametrize("robot", ROBOT_NAMES)
def test_default_camera_calibration_is_the_sim_cameras(robot):
    """camera_node's default calibration is the camera the robot's policies were trained with."""
    params = load_sim_params(sim_params_for(robot))
    assert Path(params.camera.calibration_path()) == Path(config_path(DEFAULT_CAMERA_CALIBRATION))


def test_bringup_problems_name_the_flag(tmp_path):
    calibration = so101_calibration(tmp_path / "arm.json")
    assert bringup_problems(GraphArgs(robot="so101", port="/dev/null", calibration=str(calibration))) == []
    problems = bringup_problems(GraphArgs(robot="so101", port=str(tmp_path / "ttyACM0")))
    assert problems[0].startswith(f"--port {tmp_path / 'ttyACM0'}: no such device")
    assert problems[1].startswith("--calibration: required with --port")
    problems = bringup_problems(GraphArgs(robot="so101", port="/dev/null", calibration=str(tmp_path / "no.json")))
    assert problems == [f"--calibration {tmp_path / 'no.json'}: no such file (the LeRobot calibration JSON of "
                        f"this arm)"]
    assert bringup_problems(GraphArgs(robot="arm6", port="/dev/null", calibration=str(calibration)))[0].startswith(
        "--port: the Feetech servo-bus driver drives an SO-101; add --robot so101")
    assert bringup_problems(GraphArgs(robot="so101", calibration=str(calibration)))[0].startswith(
        "--calibration: given without --port")
    leader = bringup_problems(GraphArgs(robot="so101", port="/dev/null", calibration=str(calibration),
                                        leader_port="/dev/null"))
    assert leader == ["--leader-calibration: required with --leader-port (the LeRobot calibration JSON of the "
                      "leader arm)"]
    camera = bringup_problems(GraphArgs(robot="so101", camera="0", camera_calibration=str(tmp_path / "cam.yaml")))
    assert camera == [f"--camera-calibration {tmp_path / 'cam.yaml'}: no such file"]
    # ros2 launch names its launch arguments
    assert bringup_problems(GraphArgs(robot="so101", port="/dev/null"), flag=lambda n: f"launch argument {n}") == [
        "launch argument calibration: required with launch argument port (the LeRobot calibration JSON of this arm)"]


def test_generated_calibration_covers_the_urdf_limits():
    """The emulated arm's calibration: every URDF limit is inside the servo's range, and radians
    round-trip through ticks within one tick (the driver's map, hardware/calibration.py)."""
    model = RobotModel.from_description(str(SO101_URDF))
    limits = model.limits_arrays(JOINTS)
    motors = calibration_covering(JOINTS, limits["lower"], limits["upper"])
    assert [m.servo_id for m in motors] == [1, 2, 3, 4, 5, 6] and [m.name for m in motors] == JOINTS
    maps = joint_maps({m.name: m for m in motors}, JOINTS, limits["lower"])
    for joint_map, low, high in zip(maps, limits["lower"], limits["upper"], strict=True):
        for q in (low, high, 0.5 * (low + high)):
            ticks = joint_map.to_ticks(q)
            assert joint_map.motor.range_min <= ticks <= joint_map.motor.range_max
            assert abs(float(joint_map.to_radians(ticks)) - q) <= RAD_PER_TICK
    pan = maps[0]
    assert pan.to_ticks(0.0) == 2048  # arm joints: URDF zero at mid-turn, as the SO-101 "new calibration"


def test_rehearsal_starts_at_the_sim_home_pose():
    joints, lower, upper, home = rehearsal_pose(robot_description_for("so101"), sim_params_for("so101"))
    assert joints == JOINTS
    listed = load_sim_params(sim_params_for("so101")).home_pose(JOINTS)
    for joint in JOINTS:
        assert home[joint] == pytest.approx(np.clip(listed.get(joint, 0.0), lower[joints.index(joint)],
                                                    upper[joints.index(joint)]))


def test_emulator_goal_log_records_what_the_bus_carried(tmp_path):
    """Every goal a WRITE or SYNC_WRITE carries, with the present position then (a logic analyser)."""
    log = tmp_path / "goals.log"
    calibration = so101_calibration(tmp_path / "arm.json")
    with (emulated_bus("--calibration", str(calibration), "--initial", "1:2000", "--goal-log", str(log)) as port,
          FeetechBus(port, timeout_s=0.2) as bus):
        bus.write(1, p.GOAL_POSITION, 2010)
        bus.sync_write(p.GOAL_POSITION, {1: 2020, 2: 2030})
        bus.write(1, p.TORQUE_ENABLE, 0)  # not a goal: not logged
        assert bus.read(1, p.GOAL_POSITION) == 2020
    writes = read_goal_log(log)
    assert [w.goals for w in writes] == [{1: 2010}, {1: 2020, 2: 2030}]
    assert writes[0].present[1] == 2000
    assert writes[0].t_ns <= writes[1].t_ns


def test_launch_arguments_for_bringup():
    args = graph_args_from_launch({"robot": "so101", "port": "/dev/ttyACM0", "calibration": "/c.json", "camera": "0",
                                   "estop_heartbeat_s": "0.5", "emulate": "true"})
    assert (args.port, args.calibration, args.camera, args.estop_heartbeat_s) == ("/dev/ttyACM0", "/c.json", "0", 0.5)
    assert launch_flag({"emulate": "true"}, "emulate") and not launch_flag({}, "emulate")
    with pytest.raises(ValueError, match="emulate"):
        launch_flag({"emulate": "yes"}, "emulate")
    with pytest.raises(ValueError, match="estop_heartbeat_s"):
        graph_args_from_launch({"estop_heartbeat_s": "half a second"})


def launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "launch", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_launch_refuses_bad_bringup_flags_before_starting_anything(tmp_path):
    missing = tmp_path / "ttyACM0"
    result = launch("robot", "--robot", "so101", "--port", str(missing), "--duration", "1")
    assert result.returncode == 2
    assert f"--port {missing}: no such device" in result.stderr
    assert "--calibration: required with --port" in result.stderr
    assert "[launch] robot graph" not in result.stdout  # nothing started
    # A checkpoint trained for arm6 (the default one of arm6): refused for an SO-101, naming the flag.
    result = launch("robot", "--robot", "so101", "--emulate", "--checkpoint", str(default_policy_path()),
                    "--duration", "1")
    assert result.returncode == 2
    assert "--checkpoint" in result.stderr and "'arm6'" in result.stderr and "'so101'" in result.stderr
    assert "emulated arm on" not in result.stdout
    result = launch("sim", "--port", "/dev/null")
    assert result.returncode == 2 and "--port: only for `sim2real launch robot`" in result.stderr
    result = launch("robot", "--robot", "arm6", "--emulate", "--port", "/dev/null")
    assert result.returncode == 2 and "--emulate: emulates an SO-101's servo bus; add --robot so101" in result.stderr
    assert "drop --port/--calibration" in result.stderr
