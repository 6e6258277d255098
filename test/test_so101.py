"""The SO-101 in the stack (issue 30): its sim description loads with its joints and URDF limits, the
camera renders it, the jaw is a position-commanded joint, `robot: so101` selects it in the sim node, the
supervisor, training, evaluation and sysid, and a checkpoint for the other robot is refused by name."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from support import node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.errors import CheckpointError, ConfigError
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.supervisor import COMMAND_MARGIN_RAD
from sim2real_ros.graph import GraphArgs, declare_graph
from sim2real_ros.nodes.common import JOINT_STATE_QOS, LATCHED_QOS, RELIABLE_LATEST_QOS, SENSOR_QOS
from sim2real_ros.paths import config_path, share_dir
from sim2real_ros.robots import ROBOTS, check_checkpoint_robot, get_robot, robot_for_checkpoint
from sim2real_ros.sim.params import load_sim_params
from sim2real_ros.sim.world import SimWorld
from sim2real_ros.training.config import load_train_config
from sim2real_ros.training.untrained import init_checkpoint

SO101 = get_robot("so101")
UPSTREAM = share_dir() / "urdf" / "so101" / "so101_new_calib.urdf"
REPO_ROOT = Path(__file__).resolve().parent.parent
# [rad] the upstream URDF's limits, written out: a regenerated so101.urdf must keep them.
UPSTREAM_LIMITS = {"shoulder_pan": (-1.91986, 1.91986), "shoulder_lift": (-1.74533, 1.74533),
                   "elbow_flex": (-1.69, 1.69), "wrist_flex": (-1.65806, 1.65806),
                   "wrist_roll": (-2.74385, 2.84121), "gripper": (-0.174533, 1.74533)}


def _limits(model: RobotModel) -> dict[str, tuple[float, float]]:
    arrays = model.limits_arrays(model.joint_names)
    return {n: (float(lo), float(hi)) for n, lo, hi in zip(model.joint_names, arrays["lower"], arrays["upper"],
                                                           strict=True)}


def test_the_sim_description_keeps_the_upstream_joints_limits_and_frames():
    sim, upstream = RobotModel.from_file(SO101.urdf_path()), RobotModel.from_file(UPSTREAM)
    assert sim.joint_names == list(SO101.joints)  # chain order, 5 joints + the jaw
    assert _limits(sim) == _limits(upstream) == UPSTREAM_LIMITS
    q = np.array([0.3, -0.8, 0.9, 0.7, -0.4, 0.6])
    tool = sim.forward_kinematics(q, SO101.tool_link, list(SO101.joints))[0]
    same = upstream.forward_kinematics(q, SO101.tool_link, list(SO101.joints))[0]
    np.testing.assert_allclose(tool, same, atol=1e-12)
    text = SO101.urdf_path().read_text()
    meshes = re.findall(r'filename="([^"]+)"', text)
    assert meshes and all(m.startswith(("meshes/visual/", "meshes/collision/")) for m in meshes)
    folder = SO101.urdf_path().parent
    assert all((folder / m).is_file() for m in meshes)
    size = sum(p.stat().st_size for p in (folder / "meshes").rglob("*.stl"))
    assert size < 1_500_000, f"simplified meshes are {size} bytes"


def test_so101_loads_in_the_sim_world_with_its_limits_and_the_camera_sees_it():
    params = load_sim_params(SO101.sim_params_path())
    world = SimWorld(params, str(SO101.urdf_path()), seed=3)
    try:
        assert world.joint_names == list(SO101.joints) and world.all_joint_names == list(SO101.joints)
        np.testing.assert_array_equal(world.lower, [UPSTREAM_LIMITS[n][0] for n in SO101.joints])
        np.testing.assert_array_equal(world.upper, [UPSTREAM_LIMITS[n][1] for n in SO101.joints])
        assert world.ee_link == SO101.tool_link
        image = world.render(artifacts=False)
        assert image.shape == (240, 320, 3)
        # The arm is in view: printed parts are yellow (high red and green, low blue) in the image.
        yellow = (image[..., 0] > 150) & (image[..., 1] > 120) & (image[..., 2] < 90)
        assert yellow.sum() > 500, yellow.sum()
        # The jaw is a joint like the others: commanded by position, it goes there.
        target = world.joint_positions().copy()
        target[SO101.joints.index("gripper")] = 0.2
        target[SO101.joints.index("shoulder_pan")] = 0.3
        world.set_command(target)
        world.step(1500)
        np.testing.assert_allclose(world.joint_positions(), target, atol=0.02)
    finally:
        world.close()



def test_the_sim_description_is_what_its_generator_writes(monkeypatch):
    """urdf/so101/so101.urdf (camera mast, wrist camera and all) is tools/so101_meshes.py's output for
    the upstream URDF, so regenerating the meshes cannot drop a hand edit. The mesh libraries it
    imports are tools-only (not installed here) and not needed for the URDF text."""
    import importlib.util
    import types

    for name in ("trimesh", "fast_simplification"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(Trimesh=object))
    spec = importlib.util.spec_from_file_location("so101_meshes_under_test", REPO_ROOT / "tools" / "so101_meshes.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator._sim_urdf(UPSTREAM.read_text()) == SO101.urdf_path().read_text()


WRIST_PARAMS = config_path("sim_params_so101_wrist.yaml")


def test_the_wrist_sim_params_are_the_so101_s_but_for_the_camera():
    """Kept in step by this test: the wrist file changes the camera (link, mount, calibration, near
    plane) and its mount's jitter, nothing else; the mast file has no mount (its camera_link is the
    optical frame)."""
    import yaml

    base, wrist = (yaml.safe_load(p.read_text()) for p in (SO101.sim_params_path(), WRIST_PARAMS))
    assert (wrist["camera"]["link"], wrist["camera"]["calibration_file"]) == ("gripper_link", "camera_wrist_sim.yaml")
    assert load_sim_params(SO101.sim_params_path()).camera.mount_xyz is None
    assert wrist["randomization"]["camera_position_jitter_m"] < base["randomization"]["camera_position_jitter_m"]
    for data in (base, wrist):
        data.pop("camera")
        data["randomization"].pop("camera_position_jitter_m")
    assert wrist == base
    assert load_sim_params(WRIST_PARAMS).camera.calibration_path().is_file()


def _pixels_by_link(world: SimWorld) -> tuple[np.ndarray, np.ndarray]:
    """The world's camera image rendered once more with PyBullet's segmentation: (body ids, link
    indices + 1) per pixel, (240, 320) each (-1 / 0 where no body)."""
    import pybullet

    from sim2real_ros.sim.rendering import gl_list, projection_matrix, view_matrix

    cam = world.camera
    seg = world.client.getCameraImage(
        cam.width, cam.height, viewMatrix=gl_list(view_matrix(world.camera_pose())),
        projectionMatrix=gl_list(projection_matrix(cam, world.params.camera.near_m, world.params.camera.far_m)),
        renderer=pybullet.ER_TINY_RENDERER, flags=pybullet.ER_SEGMENTATION_MASK_OBJECT_AND_LINKINDEX)[4]
    seg = np.asarray(seg, dtype=np.int64).reshape(cam.height, cam.width)
    return np.where(seg >= 0, seg & ((1 << 24) - 1), -1), np.where(seg >= 0, seg >> 24, 0)


def test_the_wrist_camera_sees_the_cube_between_the_jaws_at_the_grasp():
    """The scripted pick_lift expert on the wrist sim params: when both jaws touch the cube, the wrist
    camera (riding on the gripper) sees the cube, both jaws and the cube inside the wrist policy
    camera's view, and the cube covers many times the pixels the mast camera gives it."""
    from sim2real_ros.sim.params import with_task

    params = with_task(load_sim_params(WRIST_PARAMS), "pick_lift")
    mast = with_task(load_sim_params(SO101.sim_params_path()), "pick_lift")
    world = SimWorld(params, str(SO101.urdf_path()), seed=3)
    try:
        world.reset(seed=11)
        expert = world.task.make_expert(world)
        expert.start(world)
        for _ in range(600):  # 12 s of 20 ms commands: the expert grasps within about 3 s
            world.set_command(expert.command(world))
            world.step(20)
            if world.task.jaws_on_cube(world):
                break
        assert world.task.jaws_on_cube(world), "the expert never grasped"
        # The camera rides on the gripper at the sim params' mount (no jitter in a nominal episode).
        from sim2real_ros.sim.rendering import camera_mount_pose

        np.testing.assert_allclose(np.linalg.inv(world.link_pose("gripper_link")) @ world.camera_pose(),
                                   camera_mount_pose(params.camera), atol=1e-9)
        bodies, links = _pixels_by_link(world)
        cube = int((bodies == world.task.cube).sum())
        on_robot = bodies == world.robot
        jaw_links = {world._link_index[n] + 1 for n in SO101.jaw_links}  # noqa: SLF001 - the world's link table
        for link in jaw_links:
            assert (on_robot & (links == link)).sum() > 500, f"jaw link {link - 1} hardly in view"
        # The cube's center in the wrist policy camera (preprocess_wrist.yaml: 96 x 96, f 48 px).
        policy = PreprocessConfig.from_yaml(config_path("preprocess_wrist.yaml")).policy_camera
        center = np.linalg.inv(world.camera_pose()) @ np.append(world.task.cube_position(world), 1.0)
        u, v = policy.cx + policy.fx * center[0] / center[2], policy.cy + policy.fy * center[1] / center[2]
        assert center[2] > 0 and 10 < u < 86 and 10 < v < 86, (u, v)
        # The same state seen from the mast: a twin world of the mast params (the same episode seed,
        # so the same cube) put in this world's visual state, as the sim node's render process does.
        twin = SimWorld(mast, str(SO101.urdf_path()), seed=3)
        try:
            twin.reset(seed=11)
            twin.show_visual_state(*world.visual_state())
            twin_bodies, _ = _pixels_by_link(twin)
            cube_from_mast = int((twin_bodies == twin.task.cube).sum())
        finally:
            twin.close()
    finally:
        world.close()
    assert cube_from_mast > 20, "the mast camera should see the cube too"
    assert cube > 10 * cube_from_mast, (cube, cube_from_mast)


def test_the_ik_teacher_reaches_targets_in_the_so101_training_world():
    """The world training builds for `robot: so101` (its sim params, nominal), driven by the IK teacher
    the trainer labels with: every target drawn is reached, the commands within the URDF limits."""
    from sim2real_ros.training.trainer import make_expert

    config = load_train_config(config_path("train_reach.yaml"), robot="so101")
    world = SimWorld(load_sim_params(config.sim_params), config.robot_description, seed=5, render=False)
    try:
        expert = make_expert(world)
        for _ in range(3):
            world.reset()
            while world.episode_outcome() is None:
                chunk = expert.chunk(world.joint_positions(), world.target_position(), 10, 0.05)
                assert np.all(chunk >= world.lower - 1e-9) and np.all(chunk <= world.upper + 1e-9)
                world.set_command(chunk[1])  # the chunk's point 0.05 s ahead
                world.step(50)
            assert world.episode_outcome()["success"], world.episode_outcome()
    finally:
        world.close()


def test_the_registry_refuses_an_unknown_robot_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"field 'robot' = 'so100': must be one of \['arm6', 'so101'\]"):
        get_robot("so100")
    assert set(ROBOTS) == {"arm6", "so101"}


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_each_robot_entry_agrees_with_its_urdf_and_sim_params(name):
    robot = get_robot(name)
    model = RobotModel.from_file(robot.urdf_path())
    params = load_sim_params(robot.sim_params_path())
    assert model.joint_names == list(robot.joints)
    assert robot.gripper is None or robot.gripper in robot.joints
    assert {robot.tool_link, robot.camera_link} <= set(model.link_names())
    assert (params.robot.ee_link, params.camera.link) == (robot.tool_link, robot.camera_link)
    assert set(params.home_pose(list(robot.joints))) == set(robot.joints)  # every joint has a home


def test_the_graph_and_training_take_the_robot_and_arm6_stays_the_default():
    nodes = {d.name: d for d in declare_graph("sim", GraphArgs(robot="so101"))}
    for name in ("sim_node", "supervisor", "policy_node", "actuator_node"):
        assert nodes[name].parameters["robot_description"] == str(SO101.urdf_path()), name
    assert nodes["sim_node"].parameters["robot"] == nodes["supervisor"].parameters["robot"] == "so101"
    default = {d.name: d for d in declare_graph("sim")}
    assert default["sim_node"].parameters["robot_description"] == str(get_robot("arm6").urdf_path())
    arm6 = load_train_config(config_path("train_reach.yaml"))
    assert (arm6.robot, Path(arm6.sim_params).name) == ("arm6", "sim_params.yaml")
    so101 = load_train_config(config_path("train_reach.yaml"), robot="so101")
    assert so101.robot_description == str(SO101.urdf_path())
    assert so101.sim_params == str(SO101.sim_params_path())


@pytest.fixture(scope="module")
def arm6_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "arm6.pt"
    preprocess = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    init_checkpoint(path, list(get_robot("arm6").joints), preprocess, sim_params_path=config_path("sim_params.yaml"))
    return path


def test_a_checkpoint_for_arm6_is_refused_on_so101_naming_both(arm6_checkpoint):
    joints, provenance = list(get_robot("arm6").joints), {}
    with pytest.raises(CheckpointError, match=r"trained for robot 'arm6' .* not for 'so101'"):
        check_checkpoint_robot(joints, provenance, "so101", str(arm6_checkpoint))
    assert robot_for_checkpoint(None, joints, provenance, "ckpt") == "arm6"  # read from the checkpoint
    assert robot_for_checkpoint(None, list(SO101.joints), {"robot": "so101"}, "ckpt") == "so101"
    # The command line: refused before any episode, both robots named, no traceback.
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--checkpoint",
                             str(arm6_checkpoint), "--robot", "so101", "--episodes", "1"],
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 2, result.stderr
    assert "trained for robot 'arm6'" in result.stderr and "not for 'so101'" in result.stderr
    assert "Traceback" not in result.stderr
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "launch", "sim", "--robot", "so101",
                             "--checkpoint", str(arm6_checkpoint), "--duration", "1"],
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 2, result.stderr
    assert "sim2real launch:" in result.stderr and "trained for robot 'arm6'" in result.stderr
    assert "[launch] sim graph" not in result.stdout  # refused before any node started


def test_sysid_excite_and_policy_init_take_the_robot_name(tmp_path):
    out = tmp_path / "excite.csv"
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "sysid", "excite", "--robot", "so101",
                             "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    header = out.read_text().splitlines()[0]
    assert all(n in header for n in SO101.joints), header
    ckpt = tmp_path / "so101.pt"
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "policy", "init", "--robot", "so101",
                             "--out", str(ckpt)], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    from sim2real_ros.core.policy.checkpoint import read_checkpoint

    spec = read_checkpoint(ckpt)[0]
    assert spec.joint_names == SO101.joints and spec.provenance["robot"] == "so101"
    with pytest.raises(CheckpointError, match=r"trained for robot 'so101' .* not for 'arm6'"):
        robot_for_checkpoint("arm6", spec.joint_names, spec.provenance, str(ckpt))


def test_the_sim_node_runs_the_so101(ros, tmp_path):
    decl = node_decl("sim_node", {"robot": "so101", "seed": 2})
    with running_nodes([decl], tmp_path, namespace="so101"):
        states = ros.collect(JointState, "/so101/joint_states", JOINT_STATE_QOS)
        images = ros.collect(Image, "/so101/camera/image_raw", SENSOR_QOS)
        pub = ros.publisher(Float64MultiArray, "/so101/forward_position_controller/commands", RELIABLE_LATEST_QOS)
        ros.wait_for_subscribers(pub, timeout_s=60)
        ros.wait_for_messages(states, 5, timeout_s=60)
        ros.wait_for_messages(images, 1, timeout_s=60)
        assert list(states[-1].name) == list(SO101.joints)
        assert (images[-1].width, images[-1].height) == (320, 240)
        goal = np.array(states[-1].position)
        jaw = SO101.joints.index("gripper")
        goal[jaw] = 0.1  # close the jaw by position, like any joint
        pub.publish(cv.make_position_command(goal))
        assert wait_until(lambda: abs(states[-1].position[jaw] - 0.1) < 0.03, 60), states[-1].position


def test_supervisor_limits_come_from_the_so101_urdf(ros, tmp_path):
    """A policy asking for beyond every upper limit gets the so101 URDF's upper limits, not arm6's."""
    names = list(SO101.joints)
    upper = np.array([UPSTREAM_LIMITS[n][1] for n in names])
    home = np.array([(UPSTREAM_LIMITS[n][0] + UPSTREAM_LIMITS[n][1]) / 2 for n in names])
    commands = ros.collect(Float64MultiArray, "forward_position_controller/commands", RELIABLE_LATEST_QOS)
    states = ros.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS)
    joint_pub = ros.publisher(JointState, "joint_states", JOINT_STATE_QOS)
    policy_pub = ros.publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
    asked = [home]  # the policy agrees with the arm until the supervisor arms (a handover gap would hold)

    def feed() -> None:
        joint_pub.publish(cv.make_joint_state(names, home, ros.node.get_clock().now().nanoseconds))
        policy_pub.publish(JointState(name=names, position=[float(v) for v in asked[-1]]))

    ros.node.create_timer(0.02, feed)
    params = {"robot": "so101", "auto_arm": True, "policy_timeout_s": 0.5, "joint_state_timeout_s": 0.5}
    with running_nodes([node_decl("supervisor", params)], tmp_path):
        assert wait_until(lambda: bool(states) and cv.diagnostic_values(states[-1]).get("mode") == "AUTONOMOUS",
                          30), cv.diagnostic_values(states[-1]) if states else None
        asked.append(upper + COMMAND_MARGIN_RAD / 2)  # a position, but beyond every upper limit
        assert wait_until(lambda: bool(commands) and np.allclose(commands[-1].data, upper), 30), \
            commands[-1].data if commands else None
        assert all(np.all(np.asarray(m.data) <= upper + 1e-12) for m in list(commands))


@pytest.mark.parametrize("student, recipe", [
    ("so101_pick_lift_wrist.safetensors", "train_pick_lift_so101_wrist.yaml"),                      # 71/100
    ("so101_pick_lift_wrist_long_refit.safetensors", "train_pick_lift_so101_wrist_long_refit.yaml"),  # 76/100
])
def test_the_shipped_wrist_pick_lift_students_are_the_committed_recipes_on_their_own_camera(student, recipe):
    """The SO-101's shipped pick_lift students (randomized with pushes, docs/learning.md), each trained by
    its config as committed (the same fields but the config file's own name), whose evaluation finds the
    wrist sim params it was trained on (unchanged since: their content hash is the recorded one) and
    whose preprocessing is the wrist policy camera's."""
    from sim2real_ros.core.policy.checkpoint import read_checkpoint
    from sim2real_ros.provenance import portable_provenance
    from sim2real_ros.robots import sim_params_for_checkpoint

    path = share_dir() / "policies" / student
    spec = read_checkpoint(path)[0]
    provenance = spec.provenance
    assert provenance["robot"] == "so101" and provenance["task"] == "pick_lift"
    assert robot_for_checkpoint(None, spec.joint_names, provenance, str(path)) == "so101"
    sim_params, why = sim_params_for_checkpoint("so101", None, provenance)
    assert (Path(sim_params), why) == (WRIST_PARAMS, "checkpoint")
    committed = portable_provenance(load_train_config(config_path(recipe)).to_dict(),
                                    [share_dir()])
    trained = dict(provenance["config"])
    trained.pop("source"), committed.pop("source")  # the file it was read from (the first: a copy, elsewhere)
    assert trained == committed, "the student is not the committed recipe"
    wrist = PreprocessConfig.from_yaml(config_path("preprocess_wrist.yaml"))
    assert PreprocessConfig.from_dict(spec.preprocess).policy_camera == wrist.policy_camera


def test_launch_sim_runs_a_student_as_it_was_trained(tmp_path):
    """`sim2real launch sim --checkpoint S` follows the checkpoint as eval-sim --graph does: its
    preprocessing (the wrist student's 90 deg policy camera; the graph's default made policy_node refuse
    it and exit 2), its sim params (the wrist camera) and its task (pick_lift, where the graph ran the
    file's reach). The shipped reach policy follows nothing: it was trained on the defaults."""
    from sim2real_ros.core.policy.backend import load_policy
    from sim2real_ros.evaluation.checkpoint_graph import checkpoint_graph_parameters

    student = REPO_ROOT / "policies" / "so101_pick_lift_wrist.safetensors"
    spec = load_policy(student, warmup=False).spec
    extra, followed = checkpoint_graph_parameters(spec, "sim", "so101", tmp_path)
    assert extra["sim_node"] == {"sim_params_file": str(REPO_ROOT / "config" / "sim_params_so101_wrist.yaml"),
                                 "task": "pick_lift"}
    assert extra["policy_node"] == extra["camera_preprocessor"] and len(followed) == 3
    assert "sim_node" not in checkpoint_graph_parameters(spec, "robot", "so101", tmp_path)[0]
    reach = load_policy(REPO_ROOT / "policies" / "reach_so101.safetensors", warmup=False).spec
    assert checkpoint_graph_parameters(reach, "sim", "so101", tmp_path) == ({}, [])
    # Until the supervisor arms on the student's commands (a fixed 15 s ran out on a loaded CI machine
    # while policy_node was still importing torch), then Ctrl-C.
    launch = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "launch", "sim", "--robot", "so101",
                               "--checkpoint", str(student), "--stop-on-exit"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)
    lines: list[str] = []
    armed = threading.Event()

    def read() -> None:
        for line in launch.stdout:
            lines.append(line)
            if "[supervisor]" in line and "AUTONOMOUS:" in line:
                armed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert armed.wait(240), "".join(lines)[-4000:]
        launch.send_signal(signal.SIGINT)
        assert launch.wait(60) == 0, "".join(lines)[-4000:]
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    reader.join(10)
    out = "".join(lines)
    assert "its task pick_lift" in out and "policy_node=0" in out, out[-4000:]
    assert "does not match the running graph" not in out
