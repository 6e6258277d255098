"""The PyBullet world without ROS: params, kinematics, actuator model, task, camera, randomization."""
import copy

import numpy as np
import pybullet_data
import pytest
import yaml

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.hashing import content_hash
from sim2real_ros.core.perception.camera_model import CameraModel
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.robots import get_robot
from sim2real_ros.sim.expert import ReachExpert
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict
from sim2real_ros.sim.rendering import project_points
from sim2real_ros.sim.world import SimWorld

PANDA = f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf"
ARM6 = str(urdf_path())
SO101 = get_robot("so101")


@pytest.fixture(scope="module")
def raw_params() -> dict:
    return yaml.safe_load(config_path("sim_params.yaml").read_text())


@pytest.fixture
def world():
    w = SimWorld(load_sim_params(), ARM6, seed=3)
    yield w
    w.close()


def with_changes(raw: dict, **dotted) -> dict:
    data = copy.deepcopy(raw)
    for path, value in dotted.items():
        keys = path.split("__")
        node = data
        for key in keys[:-1]:
            node = node[key]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return data


# ----------------------------------------------------------------------------------------------
# params
def test_version_is_the_content_hash_of_the_yaml_mapping(raw_params):
    params = load_sim_params()
    assert params.version == content_hash(raw_params)
    assert params.source == str(config_path("sim_params.yaml"))
    assert params.physics_dt == 0.001 and params.task.success_radius_m == 0.03
    assert params.to_dict() == raw_params


@pytest.mark.parametrize(("changes", "field", "shown"), [
    ({"actuator__kp": KeyError}, "actuator.kp", "None"),
    ({"physics__dt_s": -0.001}, "physics.dt_s", "-0.001"),
    ({"task__success_radius_m": "three cm"}, "task.success_radius_m", "'three cm'"),
    ({"randomization__mass_scale": [1.2, 0.8]}, "randomization.mass_scale", "[1.2, 0.8]"),
    ({"actuator__kd": {"joint1": 1.0}}, "actuator.kd.default", "None"),
    ({"actuator__damping": {"default": 0.1, "joint2": float("nan")}}, "actuator.damping.joint2", "nan"),
    ({"task__name": "juggle"}, "task.name", "'juggle'"),
    ({"camera__mount_xyz": [0.0, 0.0, 0.0]}, "camera.mount_look_at", "None"),
    ({"camera__mount_xyz": [0.1, 0.2], "camera__mount_look_at": [0.0, 0.0, 0.1]}, "camera.mount_xyz", "[0.1, 0.2]"),
    ({"camera__mount_xyz": [0.1, 0.0, 0.0], "camera__mount_look_at": [0.1, 0.0, 0.0]}, "camera.mount_look_at",
     "[0.1, 0.0, 0.0]"),
    ({"camera__mount_xyz": [0.0, 0.0, 0.0], "camera__mount_look_at": [0.0, 0.0, 0.2],
      "camera__mount_up": [0.0, 0.0, -1.0]}, "camera.mount_up", "[0.0, 0.0, -1.0]"),
])
def test_bad_sim_params_name_file_field_and_value(raw_params, changes, field, shown):
    with pytest.raises(ConfigError) as info:
        sim_params_from_dict(with_changes(raw_params, **changes), "my_params.yaml")
    assert info.value.field == field
    assert str(info.value).startswith(f"my_params.yaml: field '{field}' = {shown}")


def test_unreadable_sim_params_file_is_a_config_error(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("physics: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_sim_params(bad)


def test_bad_camera_yaml_named_in_params_fails_at_world_start(raw_params, tmp_path):
    camera_file = tmp_path / "cam.yaml"
    camera_file.write_text(config_path("camera_sim.yaml").read_text().replace("image_width: 320", "image_width: 0"))
    params = sim_params_from_dict(with_changes(raw_params, camera__calibration_file=str(camera_file)), "p.yaml")
    with pytest.raises(ConfigError, match=r"cam\.yaml.*'camera_matrix/image size/distortion_model'"):
        SimWorld(params, ARM6)


# ----------------------------------------------------------------------------------------------
# kinematics
@pytest.mark.parametrize(("robot", "ee_link"), [(ARM6, "ee_link"), (PANDA, "panda_grasptarget"), (PANDA, "panda_hand")])
def test_urdf_forward_kinematics_agrees_with_pybullet(robot, ee_link):
    w = SimWorld(load_sim_params(), robot, ee_link=ee_link, render=False)
    try:
        model = RobotModel.from_file(robot)
        rng = np.random.default_rng(0)
        for _ in range(5):
            q = rng.uniform(w.lower, w.upper)
            for index, value in zip(w._all_idx, q, strict=True):
                w.client.resetJointState(w.robot, index, float(value))
            fk = model.forward_kinematics(q, ee_link, w.joint_names)[0]
            assert np.allclose(fk[:3, 3], w.ee_position(), atol=1e-6)
            assert np.allclose(fk, w.link_pose(ee_link), atol=1e-6)
    finally:
        w.close()


@pytest.mark.parametrize("robot", ["arm6", "so101"])
def test_every_link_pose_agrees_with_pybullet(robot):
    """core/robot/urdf.py is the stack's one forward kinematics (jogging, the scripted teacher, the
    viewers' frame transforms): every link frame, not only the tool, lands where PyBullet puts it."""
    urdf, params = (ARM6, load_sim_params()) if robot == "arm6" else (
        str(SO101.urdf_path()), load_sim_params(SO101.sim_params_path()))
    w = SimWorld(params, urdf, render=False)
    try:
        model = RobotModel.from_file(urdf)
        root = model.root_link()
        base = w.link_pose(root)  # the arm's base in the world (identity for both arms)
        links = model.link_names()
        assert len(links) >= 6 and root not in links
        rng = np.random.default_rng(7)
        for _ in range(4):
            q = rng.uniform(w.lower, w.upper)
            for index, value in zip(w._all_idx, q, strict=True):
                w.client.resetJointState(w.robot, index, float(value))
            for link in links:
                fk = base @ model.forward_kinematics(q, link, w.joint_names)[0]
                pybullet_pose = w.link_pose(link)
                assert np.linalg.norm(fk[:3, 3] - pybullet_pose[:3, 3]) < 1e-6, link
                assert np.allclose(fk[:3, :3], pybullet_pose[:3, :3], atol=1e-6), link
    finally:
        w.close()


def test_camera_pose_comes_from_the_urdf_camera_link(world):
    fk = RobotModel.from_file(ARM6).forward_kinematics(np.zeros(6), "camera_link")[0]
    assert np.allclose(world.camera_pose(), fk, atol=1e-6)
    # optical z axis looks down at the workspace
    assert world.camera_pose()[2, 2] < -0.5


# ----------------------------------------------------------------------------------------------
# actuator model
def test_command_moves_each_joint_to_its_target(world):
    q0 = world.joint_positions()
    goal = np.clip(q0 + np.array([0.3, -0.2, 0.25, 0.4, -0.3, 0.5]), world.lower, world.upper)
    world.set_command(goal)
    world.step(1500)
    assert np.max(np.abs(world.joint_positions() - goal)) < 0.01
    assert np.max(np.abs(world.joint_velocities())) < 0.05
    assert np.all(np.abs(world.joint_efforts()) <= world.dynamics()["effort_limit"] + 1e-9)


def test_latency_delays_the_first_motion_by_the_configured_time(world):
    world.set_dynamics(actuation_latency_s=0.037)
    world.step(200)
    q0 = world.joint_positions()
    start = world.time_ns
    world.set_command(q0 + np.array([0.2, 0, 0, 0, 0, 0]))
    moved_at = None
    for _ in range(100):
        world.step(1)
        if abs(world.joint_positions()[0] - q0[0]) > 1e-6:
            moved_at = world.time_ns
            break
    assert moved_at is not None
    # the command acts from the step that starts at +37 ms; its effect shows one step later
    assert (moved_at - start) / 1e6 == pytest.approx(38.0, abs=1.0)


def test_effort_limit_can_only_tighten(world):
    world.set_dynamics(effort_limit=1000.0)
    assert np.allclose(world.dynamics()["effort_limit"], world.model.limits_arrays()["effort"])
    world.set_dynamics(effort_limit=[1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    assert np.allclose(world.dynamics()["effort_limit"], [1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="unknown key"):
        world.set_dynamics(stiffness=3.0)
    with pytest.raises(ValueError, match="kp must be >= 0"):
        world.set_dynamics(kp=[1.0, 2.0])


@pytest.mark.parametrize("bad", [np.zeros(5), np.array([0, 0, np.nan, 0, 0, 0]), np.array([np.inf, 0, 0, 0, 0, 0])])
def test_bad_commands_raise_and_never_move_the_robot(world, bad):
    q0 = world.joint_positions()
    with pytest.raises(ValueError):
        world.set_command(bad)
    assert world.pending_commands() == 0
    world.step(300)
    assert np.max(np.abs(world.joint_positions() - q0)) < 1e-4


# ----------------------------------------------------------------------------------------------
# task and episodes
def test_reset_draws_a_new_target_reproducibly():
    params = load_sim_params()
    a, b = SimWorld(params, ARM6, seed=7, render=False), SimWorld(params, ARM6, seed=7, render=False)
    try:
        targets = [a.target_position()]
        for _ in range(3):
            info = a.reset()
            targets.append(np.array(info["target"]))
            b.reset()
            assert np.allclose(a.target_position(), b.target_position())
        assert len({tuple(np.round(t, 6)) for t in targets}) == 4
        region = np.asarray(params.task.target_region)
        assert all(np.all((t >= region[:, 0]) & (t <= region[:, 1])) for t in targets)
        # an episode seed replays that episode's target
        seed = a.episode_seed
        replay = a.reset(seed=seed)
        assert np.allclose(replay["target"], targets[-1])
    finally:
        a.close()
        b.close()


def test_reaching_the_target_succeeds_and_waiting_times_out(raw_params):
    params = sim_params_from_dict(with_changes(raw_params, task__timeout_s=1.0), "short.yaml")
    w = SimWorld(params, ARM6, seed=11, render=False)
    try:
        w.step(1200)
        outcome = w.episode_outcome()
        assert outcome["reason"] == "timeout" and outcome["success"] is False
        assert outcome["duration_s"] == pytest.approx(1.0, abs=2e-3)
        assert outcome["final_distance_m"] > 0.03

        w.reset()
        assert w.episode_outcome() is None
        expert = ReachExpert(w.model, w.joint_names, w.ee_link, w.joint_positions())
        w.set_command(expert.solve_ik(w.target_position()))
        for _ in range(100):
            w.step(10)
            if w.episode_outcome():
                break
        outcome = w.episode_outcome()
        assert outcome["reason"] == "success" and outcome["success"] is True
        assert outcome["final_distance_m"] <= 0.03 and outcome["duration_s"] < 1.0
        assert outcome["episode"] == 1
    finally:
        w.close()


def test_randomization_changes_dynamics_and_appearance_reproducibly():
    params = load_sim_params()
    w = SimWorld(params, ARM6, seed=5, render=False)
    try:
        nominal = w.dynamics()
        mass0 = w.client.getDynamicsInfo(w.robot, 1)[0]
        info = w.reset(randomize=True)
        r = params.randomization
        assert r.actuation_latency_s[0] <= w.actuation_latency_s <= r.actuation_latency_s[1]
        assert not np.allclose(w.dynamics()["kp"], nominal["kp"])
        assert w.client.getDynamicsInfo(w.robot, 1)[0] != pytest.approx(mass0)
        replay = w.reset(randomize=True, seed=info["seed"])
        assert replay["randomization"] == info["randomization"] and replay["target"] == info["target"]
        w.reset(randomize=False)
        assert np.allclose(w.dynamics()["kp"], nominal["kp"])
        assert w.client.getDynamicsInfo(w.robot, 1)[0] == pytest.approx(mass0)
    finally:
        w.close()


# ----------------------------------------------------------------------------------------------
# camera
@pytest.mark.parametrize(("cx", "cy"), [(159.5, 119.5), (205.0, 78.0), (118.0, 152.0)])
def test_render_follows_the_calibrated_principal_point(raw_params, cx, cy):
    camera = CameraModel(320, 240, 220.0, 230.0, cx, cy, "none", ())
    # A small sphere 0.3 m in front of the lens: nothing of the scene can hide it, and its outline's
    # centroid is within ~0.1 px of its center's projection.
    params = sim_params_from_dict(with_changes(raw_params, task__target_radius_m=0.01), "small_target.yaml")
    w = SimWorld(params, ARM6, camera=camera)
    try:
        pose = w.camera_pose()
        for pixel in ([cx - 50.0, cy - 35.0], [cx + 45.0, cy + 30.0], [cx, cy]):
            ray = np.linalg.solve(camera.K, np.array([pixel[0], pixel[1], 1.0]))
            point = pose[:3, 3] + pose[:3, :3] @ (0.3 * ray / np.linalg.norm(ray))
            assert np.allclose(project_points(camera, pose, point)[0], pixel)
            w.task.set_target(w, point)
            image = w.render(artifacts=False)
            red = (image[:, :, 0] > 120) & (image[:, :, 1] < 60) & (image[:, :, 2] < 60)
            rows, cols = np.nonzero(red)
            assert len(rows) > 60
            assert np.hypot(cols.mean() - pixel[0], rows.mean() - pixel[1]) < 0.3, (cols.mean(), rows.mean())
    finally:
        w.close()


def test_render_size_and_artifacts(world):
    image = world.render()
    assert image.shape == (240, 320, 3) and image.dtype == np.uint8
    clean = world.render(artifacts=False)
    assert not np.array_equal(image, clean)  # distortion and noise were applied
    big = SimWorld(load_sim_params(), ARM6, camera=CameraModel(640, 480, 440.0, 440.0, 320.0, 240.0, "none", ()))
    try:
        assert big.render().shape == (480, 640, 3)
    finally:
        big.close()


def test_panda_runs_unchanged_with_fallback_camera():
    params = load_sim_params()
    w = SimWorld(params, PANDA, ee_link="panda_grasptarget", seed=2)
    try:
        assert w.joint_names == RobotModel.from_file(PANDA).joint_names
        assert len(w.joint_names) == 9
        pose = w.camera_pose()
        assert np.allclose(pose[:3, 3], params.camera.fallback_position)
        assert w.render().shape == (240, 320, 3)
        q0 = w.joint_positions()
        goal = q0.copy()
        goal[0] += 0.3
        goal[3] += 0.2
        w.set_command(goal)
        w.step(2000)
        assert np.max(np.abs(w.joint_positions() - goal)) < 0.02
    finally:
        w.close()


def test_robot_description_may_be_urdf_xml():
    w = SimWorld(load_sim_params(), urdf_path().read_text(), render=False)
    try:
        assert w.joint_names == RobotModel.from_file(ARM6).joint_names
        assert w.model.source == "robot_description"
        w.step(10)
    finally:
        w.close()


def test_a_followed_episode_is_judged_on_placed_joints_by_the_tasks_condition():
    """sim_camera's episodes (eval-sim --emulate): the world's clock is the caller's, nothing steps;
    the seed's episodes are the core path's (same seed, same target), success and timeout are the task's."""
    from sim2real_ros.robots import robot_description_for, sim_params_for
    from sim2real_ros.sim.world import episode_seed

    params = load_sim_params(sim_params_for("so101"))
    core = SimWorld(params, robot_description_for("so101"), seed=1000, render=False)
    followed = SimWorld(params, robot_description_for("so101"), seed=1000, render=False)
    try:
        t0 = 5_000_000_000  # [ns] some node clock, far from the world's own 0
        targets = []
        for k in range(2):
            info = followed.start_followed_episode(t0, restart=k == 0)
            assert (info["episode"], info["seed"]) == (k, episode_seed(1000, k))
            targets.append(followed.target_position())
        core.restart()
        assert np.allclose(core.target_position(), targets[0])
        core.reset()
        assert np.allclose(core.target_position(), targets[1])
        home = followed.home_positions
        assert followed.follow_measured(home, t0 + 1_000_000_000) is None  # at home, 1 s in: still running
        # The arm measured 9.99 s after the start, still at home: the task's timeout (10 s) not yet.
        timeout_ns = int(params.task.timeout_s * 1e9)
        assert followed.follow_measured(home, t0 + timeout_ns - 10_000_000) is None
        outcome = followed.follow_measured(home, t0 + timeout_ns)
        assert outcome is not None and not outcome["success"] and outcome["reason"] == "timeout"
        assert outcome["final_distance_m"] == pytest.approx(float(np.linalg.norm(followed.ee_position() - targets[1])))
        # A new episode whose target is where the tool point is: the first measurement succeeds.
        followed.start_followed_episode(t0 + 20_000_000_000)
        followed.task.set_target(followed, followed.ee_position())
        outcome = followed.follow_measured(home, t0 + 20_100_000_000)
        assert outcome is not None and outcome["success"] and outcome["duration_s"] == pytest.approx(0.1)
    finally:
        core.close()
        followed.close()
