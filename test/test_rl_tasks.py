"""The privileged env on the harder tasks (reach_hold, pick_lift, pick_place): the task's own observation and
reward terms, failure categories, and a tiny PPO run that learns an easy reach_hold (real PyBullet,
real Ray, real rsl_rl). Ray is started once for this module (2 CPUs, no dashboard) and shut down."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from support import untrained_and_trained

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.paths import config_path, share_dir
from sim2real_ros.rl.cluster import init_ray, shutdown_ray
from sim2real_ros.rl.env import EnvConfig, TaskEnv
from sim2real_ros.rl.labeller import PPOChunkTeacher
from sim2real_ros.rl.pool import RolloutPool
from sim2real_ros.rl.ppo import TeacherConfig, TeacherTrainer
from sim2real_ros.rl.rewards import RewardConfig
from sim2real_ros.rl.teacher_checkpoint import load_teacher, read_teacher
from sim2real_ros.robots import robot_description_for, robot_for_joints, sim_params_for
from sim2real_ros.sim.params import load_sim_params, with_task
from sim2real_ros.sim.world import SimWorld
from sim2real_ros.training.config import TrainConfig


@pytest.fixture(scope="module")
def ray_local():
    info = init_ray(2)
    yield info
    shutdown_ray()


def _env(robot: str, task: str, rewards: dict[str, float]) -> TaskEnv:
    params = load_sim_params(sim_params_for(robot, ""))
    return TaskEnv(params, robot_description_for(robot, ""), EnvConfig(task=task, randomize=False, pushes=False),
                   RewardConfig.from_dict(rewards), run_seed=3)


def test_the_env_observes_and_rewards_the_tasks_own_terms():
    env = _env("arm6", "reach_hold", {"distance": 1.0, "holding": 1.0, "tool_speed": 0.5})
    try:
        assert env.world.task.name == "reach_hold"
        assert list(env.layout)[-1] == "task_hold_progress" and env.obs_dim == sum(env.layout.values())
        obs, _, _, _, info = env.step(np.zeros(env.n))
        assert obs.shape == (env.obs_dim,) and set(info["terms"]) == {"distance", "holding", "tool_speed"}
        assert info["terms"]["holding"] == 0.0 and info["terms"]["tool_speed"] <= 0.0
    finally:
        env.close()
    env = _env("so101", "pick_lift", {"tool_to_cube": 1.0, "grasp": 1.0, "cube_height": 10.0})
    try:
        layout = list(env.layout)
        assert layout[-7:] == ["task_cube_pos", "task_cube_quat", "task_cube_size_m", "task_cube_mass_kg",
                               "task_cube_friction", "task_jaw_contacts", "task_hold_progress"]
        cube = env.world.task.privileged_observation(env.world)["cube_pos"]
        obs = env.observe()
        start = sum(list(env.layout.values())[:layout.index("task_cube_pos")])
        np.testing.assert_allclose(obs[start:start + 3], cube, atol=1e-6)  # the true cube position
        for _ in range(env.max_steps):  # an arm that never moves: the episode ends in a pick_lift failure
            _, reward, terminated, truncated, info = env.step(np.zeros(env.n))
            if terminated or truncated:
                break
        assert info["episode"]["failure"] in env.world.task.failure_categories and not info["episode"]["success"]
        assert reward == pytest.approx(sum(info["terms"].values()))
    finally:
        env.close()


def test_the_pick_place_env_targets_the_zone_and_rewards_the_cube_reaching_it():
    env = _env("so101", "pick_place", {"tool_to_cube": 1.0, "grasp": 1.0, "cube_to_zone": 5.0})
    try:
        task = env.world.task
        assert list(env.layout)[-7:] == ["task_cube_pos", "task_cube_quat", "task_cube_size_m", "task_cube_mass_kg",
                                         "task_cube_friction", "task_jaw_contacts", "task_hold_progress"]
        np.testing.assert_allclose(env.world.target_position(), task.zone_center)
        _, reward, _, _, info = env.step(np.zeros(env.n))
        assert info["terms"]["cube_to_zone"] == pytest.approx(-5.0 * task.cube_to_zone_m(env.world))
        assert task.cube_to_zone_m(env.world) >= env.world.params.task.pick_place.min_separation_m - 0.01
        assert reward == pytest.approx(sum(info["terms"].values()))
    finally:
        env.close()
    with pytest.raises(ConfigError, match=r"rewards\.cube_to_zone.*task 'pick_lift' has no 'cube_to_zone_m'"):
        _env("so101", "pick_lift", {"cube_to_zone": 1.0})


@pytest.mark.parametrize("name", sorted(p.name for p in config_path(".").glob("train_*.yaml")))
def test_every_shipped_student_config_loads_with_its_teacher(name):
    """The student configs users start from load (their files exist, a PPO teacher's task is the
    student's: TrainConfig and the labeller check both)."""
    from sim2real_ros.training.config import load_train_config

    config = load_train_config(config_path(name))
    if config.teacher == "ppo":
        spec, _, _ = read_teacher(config.teacher_checkpoint)
        assert (spec.env.get("task") or "reach") == (config.task or "reach"), name



@pytest.mark.parametrize("name", sorted(p.name for p in (share_dir() / "policies").glob("teacher_*.safetensors")))
def test_every_shipped_teacher_labels_on_the_world_its_robot_builds_today(name):
    """A shipped teacher's privileged observation fits the world its robot and task build now: a change
    to the robot's description or the world that alters it (a URDF link more is one mass scale more)
    fails here, not at a training run's first label."""
    teacher = load_teacher(share_dir() / "policies" / name)
    robot = robot_for_joints(teacher.spec.joint_names)
    assert robot is not None, teacher.spec.joint_names
    params = with_task(load_sim_params(robot.sim_params_path()), teacher.spec.env.get("task") or "reach")
    world = SimWorld(params, str(robot.urdf_path()), seed=0, render=False, randomize=True)
    try:
        world.reset(randomize=True, seed=1)
        labeller = PPOChunkTeacher(teacher, world, 0.05)
        chunk = labeller.chunk(world.joint_positions(), world.target_position(), 10, labeller.decision_s)
        assert chunk.shape == (10, len(world.joint_names)) and np.isfinite(chunk).all()
        assert np.all(chunk >= world.lower - 1e-9) and np.all(chunk <= world.upper + 1e-9)
    finally:
        world.close()

def test_a_reward_term_the_task_does_not_have_fails_naming_it():
    with pytest.raises(ConfigError, match=r"rewards\.grasp.*task 'reach' has no 'grasp'"):
        _env("arm6", "", {"distance": 1.0, "grasp": 1.0})
    with pytest.raises(ConfigError, match=r"env\.task.*unknown task"):
        _env("arm6", "stack_cups", {"distance": 1.0})


def test_a_student_config_names_its_task_and_refuses_an_ik_teacher_for_a_grasp():
    assert TrainConfig(source="t", task="reach_hold").task == "reach_hold"
    with pytest.raises(ConfigError, match=r"field 'task' = 'stack_cups': unknown task"):
        TrainConfig(source="t", task="stack_cups")
    with pytest.raises(ConfigError, match=r"field 'teacher' = 'ik'.*pick_lift needs a grasp"):
        TrainConfig(source="t", robot="so101", task="pick_lift")
    with pytest.raises(ConfigError, match=r"field 'teacher' = 'ik'.*pick_place needs a grasp"):
        TrainConfig(source="t", robot="so101", task="pick_place")


def _easy_reach_hold(tmp_path: Path) -> str:
    """The nominal arm6 sim with the target close to the home tool point, and a lenient hold (6 cm,
    15 cm/s, 0.2 s): reach_hold PPO improves on it within a couple of minutes here. (With 5 cm,
    10 cm/s, 0.3 s and 30 iterations, success after training was all or nothing by seed: 10/16 for
    seed 0 with the driver sampling the noise, 0/16 for seeds 0-2 with the workers sampling it. With
    this hold: seeds 1-3 gave 15, 11, 12/16 after 30 iterations, seed 0 0/16 after 30 and 16/16
    after 45.)"""
    data = yaml.safe_load(config_path("sim_params.yaml").read_text())
    data["task"]["target_region"] = {"x": [0.26, 0.34], "y": [-0.08, 0.08], "z": [0.06, 0.06]}
    data["task"]["reach_hold"] = {"radius_m": 0.06, "max_speed_m_s": 0.15, "hold_s": 0.2}
    data["camera"]["calibration_file"] = str(config_path(data["camera"]["calibration_file"]))
    path = tmp_path / "easy_reach_hold.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_tiny_ppo_run_improves_an_easy_reach_hold(ray_local, tmp_path):
    config = TeacherConfig(source="test", sim_params=_easy_reach_hold(tmp_path),
                           env={"task": "reach_hold", "pushes": False, "randomize": False, "episode_s": 2.5},
                           rewards={"distance": 2.0, "distance_fine": 1.0, "holding": 1.0, "success": 10.0,
                                    "action_rate": 0.02},
                           num_envs=16, steps_per_env=25, iterations=45, eval_episodes=16, workers=2,
                           actor={"hidden_dims": [64, 64], "activation": "elu", "init_std": 0.5},
                           ppo={"learning_rate": 0.003})
    out = tmp_path / "teacher.safetensors"
    TeacherTrainer(config, out, tmp_path / "work", workers=2, log=lambda s: None).run(resume=False)
    teacher = load_teacher(out)
    assert teacher.spec.env["task"] == "reach_hold" and "task_hold_progress" in teacher.spec.observation_layout
    pool = RolloutPool(config.env_spec(), config.num_envs, 2)
    try:
        _, before, after = untrained_and_trained(pool, teacher)
    finally:
        pool.close()
    # A student's labeller refuses this teacher on a world of another task, naming it.
    world = SimWorld(load_sim_params(config.sim_params), config.robot_description, seed=0, render=False)
    try:
        with pytest.raises(ConfigError, match=r"env\.task.*trained on task 'reach_hold'; this world runs 'reach'"):
            PPOChunkTeacher(teacher, world, 0.0)
    finally:
        world.close()
    print(f"reach_hold (easy): untrained {before['successes']}/16, after 45 PPO iterations {after['successes']}/16")
    assert after["successes"] >= before["successes"] + 6, (before, after)


def _easy_bc_config(tmp_path: Path, workers: int) -> TeacherConfig:
    """The easy reach_hold of the PPO test, behaviour-cloned from the expert and no PPO at all. Its
    lenient hold (15 cm/s) keeps the expert's episodes successful under action noise 0.1, which
    covers more states off the expert's path than the default 0.02 (with the earlier 10 cm/s hold:
    16/16 after BC, 11/16 with 0.02)."""
    return TeacherConfig(source="test", sim_params=_easy_reach_hold(tmp_path),
                         env={"task": "reach_hold", "pushes": False, "randomize": False, "episode_s": 2.5},
                         rewards={"distance": 2.0, "distance_fine": 1.0, "holding": 1.0, "success": 10.0,
                                  "action_rate": 0.02},
                         num_envs=16, steps_per_env=25, iterations=0, eval_episodes=16, workers=workers,
                         actor={"hidden_dims": [64, 64], "activation": "elu", "init_std": 0.5},
                         bc_init={"episodes": 32, "epochs": 30, "learning_rate": 0.003, "batch_size": 256,
                                  "init_std": 0.2, "action_noise": 0.1})


def test_bc_init_from_the_expert_makes_a_teacher_of_an_easy_reach_hold(ray_local, tmp_path):
    """32 expert episodes on 2 Ray workers, 30 epochs of regression, 0 PPO iterations: the
    deterministic actor holds where the untrained one never does, and on expert episodes it did
    not see its actions are close to the expert's (MSE far below the untrained actor's)."""
    import torch

    from sim2real_ros.rl.bc import BC_EPISODE_BASE

    config = _easy_bc_config(tmp_path, workers=2)
    out = tmp_path / "teacher.safetensors"
    result = TeacherTrainer(config, out, tmp_path / "work", workers=2, log=lambda s: None).run(resume=False)
    teacher = load_teacher(out)
    record = teacher.spec.provenance["bc_init"]
    assert record["episodes"] == 32 and record == result["bc_init"]
    ranges = teacher.spec.provenance["training_episodes"]["index_ranges"]
    assert ranges[0] == [BC_EPISODE_BASE, BC_EPISODE_BASE + 32] and ranges[1][0] == 0
    # The exploration std PPO would start from is bc_init.init_std, not actor.init_std.
    _, actor, _ = read_teacher(out)
    np.testing.assert_allclose(actor.state_dict()["distribution.std_param"].numpy(), 0.2, rtol=1e-6)
    pool = RolloutPool(config.env_spec(), 8, 2)
    try:
        held_out = pool.expert_pairs(range(BC_EPISODE_BASE + 100_000, BC_EPISODE_BASE + 100_008), gamma=0.98)
        untrained, before, after = untrained_and_trained(pool, teacher)
    finally:
        pool.close()
    obs, expert = torch.from_numpy(held_out.obs), torch.from_numpy(held_out.actions)
    with torch.inference_mode():
        mse = float(((teacher.policy(obs) - expert) ** 2).mean())
        mse_untrained = float(((untrained(obs) - expert) ** 2).mean())
    print(f"reach_hold (easy): untrained {before['successes']}/16, after BC {after['successes']}/16; "
          f"held-out action MSE {mse:.4f} (untrained {mse_untrained:.4f})")
    assert after["successes"] >= 12 and after["successes"] >= before["successes"] + 10, (before, after)
    assert mse < 0.02 and mse < 0.2 * mse_untrained, (mse, mse_untrained)


def test_the_expert_pairs_do_not_depend_on_the_worker_count(ray_local, tmp_path):
    """BC's collection (with its action noise) gives the same pairs on 2 Ray workers as in process,
    and in blocks as in one call."""
    from sim2real_ros.rl.bc import BC_EPISODE_BASE, ExpertPairs

    spec = _easy_bc_config(tmp_path, workers=0).env_spec(episode_base=BC_EPISODE_BASE)
    indices = list(range(BC_EPISODE_BASE, BC_EPISODE_BASE + 8))
    pairs = {}
    for workers in (0, 2):
        pool = RolloutPool(spec, 4, workers)
        try:
            pairs[workers] = pool.expert_pairs(indices, 0.98, 0.1)
        finally:
            pool.close()
    # train-teacher collects in blocks of whole rounds of the slots (a progress line each): the same pairs
    pool = RolloutPool(spec, 4, 2)
    try:
        pairs["blocks"] = ExpertPairs.concatenate([pool.expert_pairs(indices[:4], 0.98, 0.1),
                                                   pool.expert_pairs(indices[4:], 0.98, 0.1)])
    finally:
        pool.close()
    assert [e["index"] for e in pairs[0].episodes] == indices
    assert len(pairs[0].obs) > 8 * 10 and np.abs(pairs[0].actions).max() <= 1.0
    for name in ("obs", "actions", "returns"):
        np.testing.assert_array_equal(getattr(pairs[0], name), getattr(pairs[2], name))
        np.testing.assert_array_equal(getattr(pairs[0], name), getattr(pairs["blocks"], name))
