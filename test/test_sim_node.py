"""sim_node as a real process over DDS: topics, camera, commands, latency, episodes, bad input."""
import subprocess
import sys
import time

import numpy as np
import pybullet_data
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from support import REPO_ROOT, node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.perception.camera_model import load_calibration_yaml
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.nodes.common import (
    EVENTS_QOS,
    JOINT_STATE_QOS,
    LATCHED_QOS,
    RELIABLE_LATEST_QOS,
    SENSOR_QOS,
)
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.expert import ReachExpert
from sim2real_ros.sim.params import load_sim_params

PANDA = f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf"
LATENCY_S = 0.05
JOINTS = RobotModel.from_file(urdf_path()).joint_names


def status_values(msg: DiagnosticArray) -> dict[str, str]:
    return cv.diagnostic_values(msg)


@pytest.fixture(scope="module")
def arm6_node(tmp_path_factory):
    """One arm6 sim node for the module: 50 ms actuation latency, long episodes."""
    tmp = tmp_path_factory.mktemp("sim_node")
    raw = yaml.safe_load(config_path("sim_params.yaml").read_text())
    raw["actuator"]["actuation_latency_s"] = LATENCY_S
    raw["task"]["timeout_s"] = 600.0
    raw["camera"]["calibration_file"] = str(config_path("camera_sim.yaml"))
    params_file = tmp / "sim_params.yaml"
    params_file.write_text(yaml.safe_dump(raw))
    decl = node_decl("sim_node", {"sim_params_file": str(params_file), "seed": 4})
    with running_nodes([decl], tmp) as launcher:
        yield launcher


def latest_status(ros, received: list, predicate, timeout_s: float = 45.0) -> dict[str, str]:
    assert wait_until(lambda: any(predicate(status_values(m)) for m in list(received)), timeout_s), (
        f"no sim/status matching the condition; last: {status_values(received[-1]) if received else None}")
    return next(status_values(m) for m in reversed(list(received)) if predicate(status_values(m)))


def commanding(ros):
    """Joint states and sim/status being collected, and a command publisher the sim node hears:
    (states, status, pub), once the first joint states are in."""
    states = ros.collect(JointState, "joint_states", JOINT_STATE_QOS)
    status = ros.collect(DiagnosticArray, "sim/status", LATCHED_QOS)
    pub = ros.publisher(Float64MultiArray, "forward_position_controller/commands", RELIABLE_LATEST_QOS)
    ros.wait_for_subscribers(pub, timeout_s=45)
    ros.wait_for_messages(states, 5, timeout_s=45)
    return states, status, pub


def test_topics_follow_the_contract(arm6_node, ros):
    states = ros.collect(JointState, "joint_states", JOINT_STATE_QOS)
    images = ros.collect(Image, "camera/image_raw", SENSOR_QOS)
    infos = ros.collect(CameraInfo, "camera/camera_info", SENSOR_QOS)
    clocks = ros.collect(Clock, "clock", 10)
    ros.wait_for_messages(states, 30, timeout_s=60)
    ros.wait_for_messages(images, 6, timeout_s=60)
    ros.wait_for_messages(clocks, 20, timeout_s=60)
    ros.wait_for_messages(infos, 6, timeout_s=60)

    msg = states[-1]
    assert list(msg.name) == JOINTS
    assert len(msg.position) == len(msg.velocity) == len(msg.effort) == 6
    stamps = np.array([cv.stamp_to_ns(m.header.stamp) for m in list(states)])
    assert np.all(np.diff(stamps) > 0) and np.all(np.diff(stamps) % 10_000_000 == 0)

    calibration = load_calibration_yaml(config_path("camera_sim.yaml"))
    image_stamps = []
    for image in list(images):
        assert (image.width, image.height, image.encoding, image.step) == (320, 240, "rgb8", 960)
        assert cv.image_to_array(image).shape == (240, 320, 3)
        image_stamps.append(cv.stamp_to_ns(image.header.stamp))
    assert np.all(np.diff(image_stamps) > 0)
    periods_ms = np.diff(image_stamps) / 1e6
    # 30 Hz of sim time on the 1 ms physics grid (a frame dropped under load doubles one period)
    assert periods_ms.min() >= 33.0 and np.median(periods_ms) == pytest.approx(1000.0 / 30.0, abs=1.0)
    model = cv.camera_info_to_model(infos[-1])
    assert model == calibration
    info_stamps = {cv.stamp_to_ns(i.header.stamp) for i in list(infos)}
    assert set(image_stamps) & info_stamps  # info goes out with the image it describes
    clock_stamps = [cv.stamp_to_ns(c.clock) for c in list(clocks)]
    assert np.all(np.diff(clock_stamps) > 0)


def settled_position(states, window: int = 20, tolerance_rad: float = 2e-5, timeout_s: float = 45.0) -> np.ndarray:
    """The arm's position [rad] once `window` consecutive joint_states agree within tolerance_rad: the
    module's tests share one sim node, and an earlier test's command may still be settling (in random
    order the step test can run just before)."""
    def still() -> bool:
        recent = np.array([m.position for m in list(states)[-window:]])
        return len(recent) == window and float(np.max(np.ptp(recent, axis=0))) < tolerance_rad
    assert wait_until(still, timeout_s), "the arm never came to rest"
    return np.array(states[-1].position)


def test_bad_commands_are_rejected_counted_and_never_move_the_robot(arm6_node, ros):
    states, status, pub = commanding(ros)
    # Hold where the arm is (after an earlier test's reset no command holds it, and it sags slowly),
    # then wait until it rests: only then does "never moved" measure what the bad commands did.
    accepted = int(latest_status(ros, status, lambda v: True)["commands_accepted"])
    pub.publish(cv.make_position_command(np.array(states[-1].position)))
    latest_status(ros, status, lambda v: int(v["commands_accepted"]) > accepted)
    q0 = settled_position(states, window=50, tolerance_rad=1e-5)
    before = latest_status(ros, status, lambda v: True)
    bad = [np.zeros(5), np.array([0.5, 0, 0, np.nan, 0, 0]), np.array([np.inf, 0, 0, 0, 0, 0]), np.zeros(7)]
    rejected0 = int(before["commands_rejected"])
    for k, values in enumerate(bad, start=1):
        msg = Float64MultiArray()
        msg.data = [float(v) for v in values]
        pub.publish(msg)  # one at a time: the command topic keeps only the newest message (depth 1)
        after = latest_status(ros, status, lambda v, k=k: int(v["commands_rejected"]) >= rejected0 + k)
    assert after["commands_accepted"] == before["commands_accepted"]
    assert "expected 6" in after["last_rejection"]
    count = len(states)
    ros.wait_for_messages(states, count + 30, timeout_s=45)
    positions = np.array([m.position for m in list(states)[-40:]])
    assert np.max(np.abs(positions - q0)) < 1e-4


def test_step_command_shows_the_latency_then_reaches_the_target(arm6_node, ros):
    states, status, pub = commanding(ros)
    accepted0 = int(latest_status(ros, status, lambda v: True)["commands_accepted"])
    q0 = np.array(states[-1].position)
    goal = q0.copy()
    goal[0] += 0.2
    pub.publish(cv.make_position_command(goal))
    received = latest_status(ros, status, lambda v: int(v["commands_accepted"]) > accepted0)
    received_ns = int(received["last_command_sim_ns"])
    assert abs(float(received["actuation_latency_s"]) - LATENCY_S) < 1e-9

    def first_motion():
        samples = [m for m in list(states) if cv.stamp_to_ns(m.header.stamp) >= received_ns]
        for prev, cur in zip(samples, samples[1:], strict=False):
            if abs(cur.position[0] - q0[0]) > 1e-5:
                return prev, cur
        return None

    assert wait_until(lambda: first_motion() is not None, 45), "joint1 never moved"
    prev, cur = first_motion()
    prev_ns, cur_ns = cv.stamp_to_ns(prev.header.stamp), cv.stamp_to_ns(cur.header.stamp)
    # The command acts from received + latency and is visible one physics step (1 ms) later; the
    # joint_states samples (every 10 ms) before and after the first motion bracket that instant.
    onset_ns = received_ns + int(LATENCY_S * 1e9) + 1_000_000
    assert prev_ns < onset_ns <= cur_ns, (prev_ns - received_ns, cur_ns - received_ns)
    assert cur_ns - prev_ns <= 20_000_000  # at most one sample lost on a loaded machine
    assert abs(prev.position[0] - q0[0]) <= 1e-5
    assert wait_until(lambda: abs(states[-1].position[0] - goal[0]) < 0.01, 45)


def test_reaching_the_target_ends_the_episode_and_reset_draws_a_new_target(arm6_node, ros):
    targets = ros.collect(PointStamped, "sim/target", LATCHED_QOS)
    episodes = ros.collect(DiagnosticArray, "sim/episode", EVENTS_QOS)
    states = ros.collect(JointState, "joint_states", JOINT_STATE_QOS)
    pub = ros.publisher(Float64MultiArray, "forward_position_controller/commands", RELIABLE_LATEST_QOS)
    ros.wait_for_subscribers(pub, timeout_s=45)
    ros.wait_for_messages(targets, 1, timeout_s=45)
    ros.wait_for_messages(states, 1, timeout_s=45)
    assert targets[-1].header.frame_id == "world"
    target = np.array([targets[-1].point.x, targets[-1].point.y, targets[-1].point.z])
    model = RobotModel.from_file(urdf_path())
    expert = ReachExpert(model, JOINTS, "ee_link", np.array(states[-1].position))
    pub.publish(cv.make_position_command(expert.solve_ik(target)))
    assert wait_until(lambda: any(status_values(m)["success"] == "true" for m in list(episodes)), 60), (
        [status_values(m) for m in list(episodes)])
    outcome = next(m for m in list(episodes) if status_values(m)["success"] == "true")
    status = outcome.status[0]
    values = status_values(outcome)
    assert status.name == "episode" and status.message == "success" == values["reason"]
    assert set(values) == {"episode", "success", "duration_s", "reason", "final_distance_m", "seed", "failure"}
    assert values["failure"] == "success"  # the task's category (sim/tasks.py), what validate counts
    assert float(values["final_distance_m"]) <= 0.03 and float(values["duration_s"]) > 0
    # auto_reset: a new episode with a new target
    assert wait_until(lambda: len(targets) >= 2, 45)
    second = np.array([targets[-1].point.x, targets[-1].point.y, targets[-1].point.z])
    assert not np.allclose(second, target)

    response = ros.call(Trigger, "sim/reset", timeout_s=45)
    assert response.success and "episode" in response.message
    assert wait_until(lambda: len(targets) >= 3, 45)
    third = np.array([targets[-1].point.x, targets[-1].point.y, targets[-1].point.z])
    assert not np.allclose(third, second)


def test_after_a_reset_commands_wait_until_one_rejoins_the_arm(arm6_node, ros):
    """The reset teleports the arm home; commands aimed at the old pose must not drag it back."""
    states, status, pub = commanding(ros)

    def drive_to(goal: np.ndarray) -> bool:
        """Command `goal` (from where the arm is, so an earlier reset's resync is satisfied first)."""
        here = np.array(states[-1].position)
        for k in range(1, 11):
            pub.publish(cv.make_position_command(here + (goal - here) * k / 10))
            time.sleep(0.05)
        return wait_until(lambda: (pub.publish(cv.make_position_command(goal)), time.sleep(0.05),
                                   abs(states[-1].position[0] - goal[0]) < 0.02)[-1], 45)

    away = np.array(states[-1].position)
    away[0] += 0.5
    assert drive_to(away), "the arm never got away from home"
    assert ros.call(Trigger, "sim/reset", timeout_s=45).success
    assert wait_until(lambda: abs(states[-1].position[0] - away[0]) > 0.4, 45)
    home = np.array(states[-1].position)
    ignored0 = int(latest_status(ros, status, lambda v: True)["commands_ignored_after_reset"])
    # Commands still aiming where the arm was before the reset, until the node has ignored 15 of them
    # (the subscription keeps only the latest command: a node short of CPU skips some it never saw).
    deadline = time.monotonic() + 45.0
    while time.monotonic() < deadline and not any(
            int(status_values(m)["commands_ignored_after_reset"]) >= ignored0 + 15 for m in list(status)):
        pub.publish(cv.make_position_command(away))
        time.sleep(0.05)
    latest_status(ros, status, lambda v: int(v["commands_ignored_after_reset"]) >= ignored0 + 15, 1.0)
    assert abs(states[-1].position[0] - home[0]) < 0.01, "the arm was dragged back toward the old pose"
    # A command at the arm (the supervisor's hold, converged) rejoins; then commands are followed.
    goal = home.copy()
    goal[0] += 0.2
    assert drive_to(goal), "commands not followed after the resync"


def test_panda_runs_with_the_same_node(ros, tmp_path):
    decl = node_decl("sim_node", {"robot_description": PANDA, "ee_link": "panda_grasptarget",
                                  "joints": [f"panda_joint{i}" for i in range(1, 8)]})
    # In its own namespace: the module's arm6 node is still running (and the graph is namespaceable).
    with running_nodes([decl], tmp_path, namespace="panda"):
        states = ros.collect(JointState, "/panda/joint_states", JOINT_STATE_QOS)
        images = ros.collect(Image, "/panda/camera/image_raw", SENSOR_QOS)
        pub = ros.publisher(Float64MultiArray, "/panda/forward_position_controller/commands", RELIABLE_LATEST_QOS)
        ros.wait_for_subscribers(pub, timeout_s=60)
        ros.wait_for_messages(states, 5, timeout_s=60)
        ros.wait_for_messages(images, 1, timeout_s=60)
        assert list(states[-1].name) == RobotModel.from_file(PANDA).joint_names  # fingers included
        assert (images[-1].width, images[-1].height) == (320, 240)
        q0 = np.array(states[-1].position[:7])
        goal = q0 + np.array([0.3, 0, 0, 0, 0, 0, 0])
        pub.publish(cv.make_position_command(goal))
        assert wait_until(lambda: abs(states[-1].position[0] - goal[0]) < 0.02, 60)


def run_node_process(*ros_args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "node", "sim_node", "--ros-args",
                           *ros_args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


def test_bad_sim_params_fail_at_start_naming_file_field_value(tmp_path):
    raw = yaml.safe_load(config_path("sim_params.yaml").read_text())
    raw["actuator"]["actuation_latency_s"] = -0.01
    bad = tmp_path / "bad_params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    result = run_node_process("-p", f"sim_params_file:={bad}")
    assert result.returncode == 2, result.stderr
    assert f"{bad}: field 'actuator.actuation_latency_s' = -0.01: must be >= 0.0" in result.stderr


def test_bad_camera_yaml_and_bad_parameter_fail_at_start(tmp_path):
    camera = tmp_path / "bad_camera.yaml"
    data = yaml.safe_load(config_path("camera_sim.yaml").read_text())
    del data["image_height"]
    camera.write_text(yaml.safe_dump(data))
    result = run_node_process("-p", f"camera_calibration:={camera}")
    assert result.returncode == 2, result.stderr
    assert f"{camera}: field 'image_height' = None: missing" in result.stderr
    result = run_node_process("-p", "pacing:=warp")
    assert result.returncode == 2, result.stderr
    assert "sim_node parameter: field 'pacing' = 'warp'" in result.stderr


def test_lockstep_waits_for_a_command_after_each_frame_and_exits_cleanly(ros, tmp_path):
    decl = node_decl("sim_node", {"pacing": "lockstep", "lockstep_timeout_s": 600.0})
    home = np.array([load_sim_params().home_pose(JOINTS)[n] for n in JOINTS])
    with running_nodes([decl], tmp_path, namespace="lockstep") as launcher:
        states = ros.collect(JointState, "/lockstep/joint_states", JOINT_STATE_QOS)
        images = ros.collect(Image, "/lockstep/camera/image_raw", SENSOR_QOS)
        pub = ros.publisher(Float64MultiArray, "/lockstep/forward_position_controller/commands", RELIABLE_LATEST_QOS)
        ros.wait_for_subscribers(pub, timeout_s=60)
        def frame_stamps() -> list[int]:
            return [cv.stamp_to_ns(m.header.stamp) for m in list(images)]

        # Frames fall on the 30 Hz grid rounded up to the 1 ms physics step: 0, 34, 67, 100 ms.
        for expected_ns in (34_000_000, 67_000_000, 100_000_000):
            pub.publish(cv.make_position_command(home))  # each command releases one camera frame
            assert wait_until(lambda e=expected_ns: e in frame_stamps(), 60), f"no frame at {expected_ns} ns"
        # Without another command the sim holds at its last frame.
        assert not wait_until(lambda: any(cv.stamp_to_ns(m.header.stamp) > 100_000_000 for m in list(states)), 2.0)
        assert max(frame_stamps()) == 100_000_000
    assert launcher.nodes[0].process.returncode == 0


def test_the_inline_camera_render_still_serves_frames(ros, tmp_path):
    """camera_render: inline (the old path, kept for comparison in benchmarks) renders in the physics
    thread and publishes the same 30 Hz sim-time frames; the node logs which path it uses."""
    # its own namespace: the module's arm6 node may still publish camera/image_raw
    images = ros.collect(Image, "/inline/camera/image_raw", SENSOR_QOS)
    decl = node_decl("sim_node", {"seed": 4, "camera_render": "inline"})
    with running_nodes([decl], tmp_path, namespace="inline"):
        ros.wait_for_messages(images, 6, timeout_s=90)
    stamps = np.array([cv.stamp_to_ns(m.header.stamp) for m in list(images)])
    assert np.all(np.diff(stamps) > 0) and np.all(np.diff(stamps) % 1_000_000 == 0)
    assert cv.image_to_array(images[-1]).shape == (240, 320, 3)
    assert "rendered inline" in (tmp_path / "graph.log").read_text()
