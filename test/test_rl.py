"""The privileged reach env, Ray rollout workers and PPO (real PyBullet, real Ray, real rsl_rl).

Ray is started once for this module (2 CPUs, no dashboard) and shut down at the end.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from support import REPO_ROOT, untrained_and_trained

from sim2real_ros.core.errors import CheckpointError, ConfigError
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.rl.batch import BatchedEnv
from sim2real_ros.rl.cluster import RayClusterError, init_ray, shutdown_ray
from sim2real_ros.rl.env import EnvConfig, observation_layout
from sim2real_ros.rl.pool import RolloutPool, split_slots
from sim2real_ros.rl.ppo import TeacherConfig, TeacherTrainer, load_teacher_config
from sim2real_ros.rl.rewards import RewardConfig, StepState
from sim2real_ros.rl.teacher_checkpoint import build_actor, load_teacher, read_teacher


@pytest.fixture(scope="module")
def ray_local():
    info = init_ray(2)
    yield info
    shutdown_ray()


def _config(**kwargs) -> TeacherConfig:
    return TeacherConfig(source="test", **kwargs)


def _easy_params(tmp_path: Path) -> str:
    """The nominal sim with the target drawn close to the home tool point and a wide success radius:
    a reach PPO learns within a minute here."""
    data = yaml.safe_load(config_path("sim_params.yaml").read_text())
    data["task"]["success_radius_m"] = 0.06
    data["task"]["target_region"] = {"x": [0.26, 0.34], "y": [-0.08, 0.08], "z": [0.06, 0.06]}
    data["camera"]["calibration_file"] = str(config_path(data["camera"]["calibration_file"]))
    path = tmp_path / "easy_sim_params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# -- rewards and config errors ---------------------------------------------------------------------
def test_an_unknown_reward_term_fails_naming_it():
    with pytest.raises(ConfigError, match=r"rewards\.distanse.*unknown reward term"):
        RewardConfig.from_dict({"distance": 1.0, "distanse": 2.0}, "teacher.yaml")
    with pytest.raises(ConfigError, match=r"rewards\.success.*finite"):
        RewardConfig.from_dict({"success": float("nan")}, "teacher.yaml")


def test_a_teacher_yaml_with_an_unknown_reward_term_fails_at_load(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"rewards": {"distance": 1.0, "reach_bonus": 5.0}}))
    with pytest.raises(ConfigError, match=r"rewards\.reach_bonus"):
        load_teacher_config(path)
    path.write_text(yaml.safe_dump({"ppo": {"learnin_rate": 0.1}}))
    with pytest.raises(ConfigError, match=r"ppo\.learnin_rate"):
        load_teacher_config(path)
    path.write_text(yaml.safe_dump({"env": {"policy_hz": -5}}))
    with pytest.raises(ConfigError, match=r"env\.policy_hz"):
        load_teacher_config(path)


@pytest.mark.parametrize("name", sorted(p.name for p in config_path(".").glob("teacher_*.yaml")))
def test_every_shipped_teacher_config_builds_its_env(name):
    """The configs users start from: each loads, and its env (task, reward terms the task must provide,
    bc_init) builds on the robot it names."""
    config = load_teacher_config(config_path(name))
    batch = BatchedEnv(config.env_spec(), 0, 1)
    try:
        assert batch.observations().shape[0] == 1
    finally:
        batch.close()
    assert config.bc() is None or config.bc().episodes > 0


def test_a_success_reward_that_staying_short_of_success_outpays_is_warned_about():
    from sim2real_ros.rl.rewards import STEP_MAX, TERMS, success_outweighs_staying

    assert set(STEP_MAX) == set(TERMS) - {"success"}  # a new term says what it can pay

    # reach_hold's first BC config: 4 per step of positive terms, gamma 0.98: 200 for never succeeding
    weights = {"distance": 2.0, "distance_fine": 2.0, "holding": 2.0, "tool_speed": 0.5, "success": 10.0}
    warning = success_outweighs_staying(weights, 0.98)
    assert warning is not None and "rewards.success = 10" in warning and "at least 200" in warning
    assert success_outweighs_staying({**weights, "success": 200.0}, 0.98) is None
    assert success_outweighs_staying({"distance": 1.0, "success": 1.0}, 0.99) is None  # nothing positive
    # cube_height pays at most its cap [m] per unit weight
    assert "at least 100" in success_outweighs_staying({"cube_height": 20.0, "success": 5.0}, 0.99)
    for name in sorted(config_path(".").glob("teacher_*_bc.yaml")):  # the BC configs are set above it
        config = load_teacher_config(name)
        assert success_outweighs_staying(config.rewards, config.ppo.get("gamma", 0.98)) is None, name


def test_reward_terms_are_weighted_and_summed():
    n = 2
    state = StepState(distance_m=0.1, success=True, action=np.array([1.0, 0.0]), last_action=np.zeros(n),
                      q=np.array([0.0, 0.95]), qd=np.zeros(n), lower=-np.ones(n), upper=np.ones(n),
                      tool_height_m=0.1)
    total, parts = RewardConfig.from_dict({"distance": 2.0, "success": 10.0, "action_rate": 0.5,
                                           "joint_limit": 1.0}).reward(state)
    assert parts["distance"] == pytest.approx(-0.2)
    assert parts["success"] == 10.0
    assert parts["action_rate"] == pytest.approx(-0.5)
    # joint 2 is 0.05 of its range (2 rad) from the upper limit -> 1 - 0.025 / 0.1 deep in the margin
    assert parts["joint_limit"] == pytest.approx(-(1.0 - 0.025 / 0.1))
    assert total == pytest.approx(sum(parts.values()))


REFUSE_UNREACHABLE = """
from sim2real_ros.rl.cluster import RayClusterError, init_ray
for address in ("127.0.0.1:1", "not-an-address"):
    try:
        init_ray(1, address)
        print("joined", address)
    except RayClusterError as err:
        print(err)
"""


def _refuse_unreachable_addresses() -> None:
    # In a fresh process: here, once ray_local has started Ray, init_ray uses the running instance.
    # With a token of its own: without one (a fresh machine before any test made ~/.ray/auth_token)
    # the token is refused first, and what this checks is the address.
    env = {**os.environ, "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    result = subprocess.run([sys.executable, "-c", REFUSE_UNREACHABLE], capture_output=True, text=True,
                            timeout=120, cwd=REPO_ROOT, env=env)
    assert result.returncode == 0, result.stderr
    unreachable, malformed = result.stdout.strip().splitlines()[-2:]
    assert re.search(r"127\.0\.0\.1:1: no Ray head answers", unreachable), result.stdout
    assert re.search(r"not-an-address.*HOST:PORT", malformed), result.stdout


def test_an_unreachable_ray_address_fails_naming_it():
    _refuse_unreachable_addresses()


@pytest.mark.timing
def test_an_unreachable_ray_address_fails_at_once():
    start = time.monotonic()
    _refuse_unreachable_addresses()
    assert time.monotonic() - start < 10.0


# -- the env -----------------------------------------------------------------------------------------
def test_the_privileged_observation_holds_the_true_target_and_physics():
    batch = BatchedEnv(_config(env={"pushes": False}).env_spec(), 0, 1)
    env = batch.envs[0]
    try:
        obs = env.observe()
        layout = observation_layout(env.n, len(env.world.randomization.mass_scale))
        assert obs.shape == (sum(layout.values()),) and env.layout == layout
        offsets = np.cumsum([0, *layout.values()])
        part = {name: obs[offsets[i]:offsets[i + 1]] for i, name in enumerate(layout)}
        target_world = env.world.target_position()
        np.testing.assert_allclose(part["target_pos"], env._in_base(target_world), atol=1e-6)
        np.testing.assert_allclose(part["kp_scale"], env.world.randomization.kp_scale, atol=1e-6)
        assert part["latency"][0] == pytest.approx(10 * env.world.actuation_latency_s, abs=1e-6)
    finally:
        batch.close()


@pytest.mark.parametrize("observe_time", [True, False])
def test_the_time_term_counts_down_unless_switched_off(observe_time):
    """env.observe_time: false holds the time term at 1 (a clone of the expert then cannot learn
    *when* to close the jaw, only where); a value that is not a bool fails naming the field."""
    batch = BatchedEnv(_config(env={"pushes": False, "observe_time": observe_time}).env_spec(), 0, 1)
    env = batch.envs[0]
    try:
        offsets = np.cumsum([0, *env.layout.values()])
        at = offsets[list(env.layout).index("time_left")]
        for _ in range(5):
            obs, *_ = env.step(np.zeros(env.n))
        expected = 1.0 - 5 / env.max_steps if observe_time else 1.0
        assert obs[at] == pytest.approx(expected, abs=1e-6)
    finally:
        batch.close()
    with pytest.raises(ConfigError, match=r"env\.observe_time.*true or false"):
        EnvConfig.from_dict({"observe_time": "no"})


def test_an_action_acts_through_the_worlds_latency_queue():
    """The teacher's command waits in the sim's latency queue: a step shorter than the latency does
    not move the arm toward it yet; the PD loop sees it after the latency."""
    batch = BatchedEnv(_config(env={"pushes": False, "randomize": False, "policy_hz": 100.0}).env_spec(), 0, 1)
    env = batch.envs[0]
    try:
        env.world.set_dynamics(actuation_latency_s=0.05)
        env.reset()
        q0 = env.world.joint_positions().copy()
        action = np.zeros(env.n)
        action[0] = 1.0
        env.step(action)  # 10 ms < 50 ms latency
        assert abs(env.world.joint_positions()[0] - q0[0]) < 1e-3
        assert env.world.pending_commands() >= 1
        for _ in range(10):
            env.step(np.zeros(env.n))
        assert env.world.joint_positions()[0] - q0[0] > 0.02
    finally:
        batch.close()


# -- Ray workers ---------------------------------------------------------------------------------------
def test_slots_split_evenly():
    assert split_slots(5, 2) == [(0, 3), (3, 2)]
    assert split_slots(2, 4) == [(0, 1), (1, 1)]


def test_two_ray_workers_collect_what_serial_collection_collects(ray_local):
    spec = _config(env={"pushes": True}).env_spec()
    rng = np.random.default_rng(7)
    actions = rng.uniform(-1, 1, size=(120, 4, 6))
    runs = {}
    for workers in (0, 2):
        pool = RolloutPool(spec, 4, workers)
        try:
            obs, rewards, episodes = [pool.observations()], [], []
            for a in actions:
                result = pool.step(a)
                obs.append(result.obs)
                rewards.append(result.rewards)
                episodes += result.episodes
            torch.manual_seed(0)
            policy = build_actor(_spec_for(pool)).as_jit().eval()
            evaluation = pool.run_episodes(range(1000, 1006), policy)
            runs[workers] = (np.stack(obs), np.stack(rewards), episodes, evaluation, pool.worker_info)
        finally:
            pool.close()
    serial, parallel = runs[0], runs[2]
    assert len(parallel[4]) == 2 and all(info["envs"] == 2 for info in parallel[4])
    np.testing.assert_array_equal(serial[0], parallel[0])
    np.testing.assert_array_equal(serial[1], parallel[1])
    assert serial[2] == parallel[2] and len(serial[2]) >= 4  # 120 steps of 0.05 s: every env ended an episode
    assert serial[3] == parallel[3]
    assert [e["index"] for e in serial[3]] == list(range(1000, 1006))
    assert sum(e["pushes_applied"] for e in serial[2]) > 0


def test_a_rollout_in_the_workers_does_not_depend_on_the_worker_count_and_samples_the_actors_gaussian(ray_local):
    """RolloutPool.rollout (the policy acting where the worlds are) on 0 and 2 workers gives the same
    observations, actions, rewards and episodes; each action is the policy's mean plus std times the
    slot's own noise, so the worker layout cannot change what a run explores."""
    from sim2real_ros.rl.batch import slot_noise

    spec = _config(env={"pushes": True}).env_spec()
    std = np.array([0.5, 0.1, 0.2, 0.3, 0.4, 0.05])
    runs = {}
    for workers in (0, 2):
        pool = RolloutPool(spec, 4, workers)
        try:
            torch.manual_seed(0)
            policy = build_actor(_spec_for(pool)).as_jit().eval()
            first = pool.rollout(policy, std, 70, [3, 0, 1])
            second = pool.rollout(policy, std, 70, [3, 0, 2])  # continues the same episodes
            runs[workers] = (first, second, policy)
        finally:
            pool.close()
    for serial, parallel in zip(runs[0][:2], runs[2][:2], strict=True):
        for name in ("obs", "actions", "rewards", "terminated", "truncated"):
            np.testing.assert_array_equal(getattr(serial, name), getattr(parallel, name), err_msg=name)
        assert serial.episodes == parallel.episodes
    first, second, policy = runs[2]
    np.testing.assert_array_equal(first.obs[-1], second.obs[0])
    assert len(first.episodes) + len(second.episodes) >= 4  # 140 steps of 0.05 s: every env ended one
    with torch.inference_mode():
        mean = policy(torch.from_numpy(first.obs[:-1].reshape(-1, first.obs.shape[-1]))).numpy()
    noise = np.stack([slot_noise([3, 0, 1], slot, 70, 6) for slot in range(4)], axis=1).reshape(-1, 6)
    np.testing.assert_allclose(first.actions.reshape(-1, 6), mean + std * noise, atol=1e-5)
    assert not np.allclose(first.actions, second.actions[:, :, :]), "a new key draws new noise"


def test_a_transition_recorded_from_a_worker_rollout_is_what_ppo_act_stores():
    """record_transition (the actions sampled in a worker) fills rsl_rl's transition as PPO.act does:
    values, log-probabilities and distribution parameters of the same actor for the same actions."""
    from rsl_rl.algorithms import PPO
    from tensordict import TensorDict

    from sim2real_ros.rl.ppo import gaussian_std, record_transition, rsl_config

    config = _config(num_envs=5, steps_per_env=4, actor={"hidden_dims": [16, 16], "activation": "elu",
                                                         "init_std": 0.4})
    obs = TensorDict({"policy": torch.randn(5, 75)}, batch_size=[5])
    env = type("Sizes", (), {"num_envs": 5, "num_actions": 6})()
    torch.manual_seed(1)
    with contextlib.redirect_stdout(io.StringIO()):
        alg = PPO.construct_algorithm(obs, env, rsl_config(config), "cpu")
    alg.actor.obs_normalizer.update(torch.randn(50, 75) * 3 + 1)  # statistics that matter
    with torch.inference_mode():
        actions = alg.act(obs)
        reference = {name: getattr(alg.transition, name) for name in
                     ("actions", "values", "actions_log_prob", "distribution_params", "observations")}
        alg.transition.clear()
        record_transition(alg, obs, actions.clone())
    for name in ("actions", "values", "actions_log_prob"):
        torch.testing.assert_close(getattr(alg.transition, name), reference[name], msg=name)
    for mine, theirs in zip(alg.transition.distribution_params, reference["distribution_params"], strict=True):
        torch.testing.assert_close(mine, theirs)
    assert alg.transition.observations is obs
    np.testing.assert_allclose(gaussian_std(alg.actor), np.full(6, 0.4), rtol=1e-6)


def _spec_for(pool: RolloutPool):
    from sim2real_ros.rl.teacher_checkpoint import TeacherSpec

    layout = observation_layout(pool.num_actions, pool.obs_dim - sum(observation_layout(pool.num_actions, 0).values()))
    return TeacherSpec(joint_names=[f"j{i}" for i in range(pool.num_actions)], observation_layout=layout,
                       hidden_dims=[32, 32], activation="elu", env={}, rewards={"distance": 1.0},
                       sim_params_version="test")


# -- PPO ---------------------------------------------------------------------------------------------
def test_a_tiny_ppo_run_learns_an_easy_reach_and_saves_a_safe_teacher(ray_local, tmp_path):
    config = _config(sim_params=_easy_params(tmp_path), env={"pushes": False, "randomize": False, "episode_s": 2.0},
                     num_envs=16, steps_per_env=20, iterations=25, eval_episodes=16, workers=2,
                     actor={"hidden_dims": [64, 64], "activation": "elu", "init_std": 0.5},
                     ppo={"learning_rate": 0.003})
    out = tmp_path / "teacher.pt"
    result = TeacherTrainer(config, out, tmp_path / "work", workers=2, log=lambda s: None).run(resume=False)
    teacher = load_teacher(out)
    assert teacher.spec.provenance["steps"] == 25 * 16 * 20
    assert teacher.spec.provenance["evaluation"]["episodes"] == 16
    # the untrained actor (same seed, same episodes) against the trained one
    pool = RolloutPool(config.env_spec(), config.num_envs, 2)
    try:
        assert teacher.spec.obs_dim == pool.obs_dim and list(teacher.spec.observation_layout)[0] == "joint_pos"
        _, before, after = untrained_and_trained(pool, teacher)
    finally:
        pool.close()
    assert after["successes"] == result["evaluation"]["successes"]  # the saved file acts as the trained actor did
    assert after["successes"] >= before["successes"] + 6, (before["successes"], after["successes"])


def test_a_damaged_teacher_checkpoint_fails_naming_the_file(tmp_path):
    from checkpoint_craft import legacy_checkpoint

    from sim2real_ros.cli.main import main as sim2real_cli
    from sim2real_ros.core.policy.checkpoint import checkpoint_hash
    from sim2real_ros.paths import share_dir
    from sim2real_ros.rl.teacher_checkpoint import TeacherSpec, encode_teacher, read_teacher, teacher_spec_dict

    path = tmp_path / "teacher.pt"
    torch.save({"actor": 1}, path)
    with pytest.raises(CheckpointError, match=r"teacher.pt: not a sim2real PPO teacher checkpoint .*pickle.*refusing"):
        load_teacher(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_teacher(tmp_path / "missing.safetensors")
    spec = TeacherSpec(joint_names=["j0", "j1"], observation_layout={"joint_pos": 2, "target": 3}, hidden_dims=[8],
                       activation="elu", env={}, rewards={"distance": 1.0}, sim_params_version="test")
    state = dict(build_actor(spec).state_dict())
    good = tmp_path / "good.safetensors"
    good.write_bytes(encode_teacher(spec, state))
    assert load_teacher(good).spec == spec
    # Tensors that are not the spec's network: refused before they are decoded.
    other = tmp_path / "other.safetensors"
    other.write_bytes(encode_teacher(spec, {**state, "mlp.0.weight": torch.zeros(8, 4)}))
    with pytest.raises(CheckpointError, match="other.safetensors: tensors do not match the spec's network"):
        load_teacher(other)
    # A student is no teacher, and the format before safetensors names the converter.
    with pytest.raises(CheckpointError, match="a policy checkpoint .*, not a PPO teacher checkpoint"):
        load_teacher(share_dir() / "policies" / "reach_default.safetensors")
    old = tmp_path / "old_teacher.pt"
    old.write_bytes(legacy_checkpoint(teacher_spec_dict(spec), state, teacher=True))
    with pytest.raises(CheckpointError, match="old format .*sim2real policy convert"):
        load_teacher(old)
    converted = tmp_path / "converted.safetensors"
    assert sim2real_cli(["policy", "convert", str(old), str(converted)]) == 0
    converted_spec, actor, _ = read_teacher(converted)
    assert converted_spec.provenance["converted"]["previous_hash"] == checkpoint_hash(old)
    assert actor.state_dict().keys() == state.keys()
    assert all(torch.equal(actor.state_dict()[name], tensor) for name, tensor in state.items())


# -- the PPO teacher as the student's labeller ---------------------------------------------------------
@pytest.fixture(scope="module")
def small_teacher(tmp_path_factory, ray_local):
    """A teacher from a few PPO iterations (what it has learned does not matter to these tests)."""
    out = tmp_path_factory.mktemp("teacher") / "teacher.pt"
    config = _config(env={"pushes": True}, num_envs=4, steps_per_env=8, iterations=2, eval_episodes=0, workers=0,
                     actor={"hidden_dims": [32, 32], "activation": "elu", "init_std": 0.5})
    TeacherTrainer(config, out, out.with_suffix(".work"), workers=0, log=lambda s: None).run(resume=False)
    return out


def test_the_ppo_labeller_rolls_the_teacher_out_and_leaves_the_world_as_it_was(small_teacher):
    from sim2real_ros.core.errors import ConfigError as Bad
    from sim2real_ros.rl.labeller import PPOChunkTeacher
    from sim2real_ros.sim.params import load_sim_params
    from sim2real_ros.sim.world import SimWorld

    teacher = load_teacher(small_teacher)
    world = SimWorld(load_sim_params(config_path("sim_params.yaml")), str(urdf_path()), seed=3, render=False,
                     pushes=True)
    try:
        world.reset(randomize=True, seed=11)
        world.set_command(world.joint_positions() + 0.05)
        world.step(120)
        labeller = PPOChunkTeacher(teacher, world, compensated_latency_s=0.02)
        q_before, t_before = world.joint_positions().copy(), world.time_ns
        chunk = labeller.chunk(q_before, None, 10, 0.05)
        assert chunk.shape == (10, 6) and np.all(np.isfinite(chunk))
        assert np.all(chunk >= world.lower - 1e-12) and np.all(chunk <= world.upper + 1e-12)
        # each point is one teacher decision away from the last: at most action_scale_rad apart
        steps = np.abs(np.diff(chunk, axis=0))
        assert steps.max() <= teacher.spec.env["action_scale_rad"] + 1e-9
        assert world.time_ns == t_before and np.array_equal(world.joint_positions(), q_before)
        # the same state labels the same chunk (deterministic teacher, exact restore)
        np.testing.assert_array_equal(labeller.chunk(q_before, None, 10, 0.05), chunk)
        # a latency of one decision shifts the chunk: point 0 is the command last sent
        shifted = PPOChunkTeacher(teacher, world, compensated_latency_s=0.05).chunk(q_before, None, 10, 0.05)
        np.testing.assert_allclose(shifted[0], world._queue.newest())
        np.testing.assert_array_equal(shifted[1:], chunk[:-1])
        with pytest.raises(Bad, match=r"env\.policy_hz.*dt_s = 0.1"):
            labeller.chunk(q_before, None, 10, 0.1)
    finally:
        world.close()


class _ConstantActions(torch.nn.Module):
    """A "teacher" that always asks for the same normalized action (n,)."""

    def __init__(self, action: np.ndarray) -> None:
        super().__init__()
        self.action = torch.as_tensor(action, dtype=torch.float32)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action.expand(obs.shape[0], -1)


def test_a_teacher_driving_through_chunks_keeps_its_own_pace(small_teacher):
    """Acting alone, a teacher adds each action to the command it set one decision ago. Driving
    through chunks (10 Hz, sampled at the tick + the compensated latency, interpolated, crossfaded),
    the newest command already leans toward the next point; starting each look-ahead from it ran the
    arm 40 % ahead of the teacher (the pick_lift teacher then grasped 0/4). The command after 1 s
    is 20 decisions of the constant action, within one decision, and the labeller sees the action."""
    from sim2real_ros.core.perception.preprocess import ImagePipeline
    from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
    from sim2real_ros.rl.labeller import PPOChunkTeacher
    from sim2real_ros.rl.teacher_checkpoint import LoadedTeacher
    from sim2real_ros.sim.params import load_sim_params
    from sim2real_ros.sim.world import SimWorld
    from sim2real_ros.training.rollout import RolloutConfig, run_episode

    loaded = load_teacher(small_teacher)
    action = np.array([0.25, 0.0, 0.0, 0.0, 0.0, 0.0])
    teacher = LoadedTeacher(loaded.spec, _ConstantActions(action), loaded.checkpoint_hash, "constant")
    scale = float(loaded.spec.env["action_scale_rad"])
    world = SimWorld(load_sim_params(config_path("sim_params.yaml")), str(urdf_path()), seed=3)
    try:
        labeller = PPOChunkTeacher(teacher, world, compensated_latency_s=0.05)
        config = RolloutConfig(obs_period_s=0.1, actuation_latency_s=0.05, inference_delay_s=0.02,
                               max_episode_s=1.0)
        pipeline = ImagePipeline(PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
        run_episode(world, pipeline, labeller, None, 10, 0.05, config, randomize=False, seed=4,
                    record_images=False)
        last = world.sent_at_or_before(world.time_ns)
        advance = float(last[0] - labeller.home_q[0])  # from the reset pose (home: randomize off)
        assert advance == pytest.approx(20 * scale * action[0], abs=scale * action[0]), advance
        _, seen = labeller.integrated_target()
        np.testing.assert_allclose(seen, action, atol=0.02)
    finally:
        world.close()


def test_train_with_a_ppo_teacher_labels_the_student_from_it(small_teacher, tmp_path):
    from sim2real_ros.training.config import load_train_config
    from sim2real_ros.training.trainer import Trainer

    config = load_train_config(config_path("train_reach.yaml"), teacher="ppo", teacher_checkpoint=str(small_teacher),
                               bc_episodes=2, dagger_rounds=1, dagger_episodes=1, epochs_bc=1, epochs_per_round=1,
                               eval_episodes=0, pushes=True)
    trainer = Trainer(config, tmp_path / "student.pt", tmp_path / "work", log=lambda s: None)
    try:
        result = trainer.run(resume=False)
        assert trainer.pool.labels_made() > 0
    finally:
        trainer.close()
    from sim2real_ros.core.policy.checkpoint import read_checkpoint

    spec, _, _ = read_checkpoint(result["checkpoint"])
    assert spec.provenance["teacher"]["kind"] == "ppo"
    assert spec.provenance["teacher"]["hash"] == load_teacher(small_teacher).checkpoint_hash
    with pytest.raises(ConfigError, match="teacher_checkpoint"):
        load_train_config(config_path("train_reach.yaml"), teacher="ppo", teacher_checkpoint=str(tmp_path / "none.pt"))


def test_eval_sim_on_two_ray_workers_gives_what_it_gives_in_process(ray_local):
    from sim2real_ros.paths import default_policy_path
    from sim2real_ros.training.evaluation import evaluate_in_sim

    rows = {}
    for workers in (0, 2):
        result = evaluate_in_sim(default_policy_path(), 5, perturb=True, pushes=True, seed=4242, workers=workers)
        rows[workers] = result["per_episode"]
    assert rows[0] == rows[2]
    assert len(rows[0]) == 5 and sum(r["pushes_applied"] for r in rows[0]) > 0


def test_train_teacher_resumes_from_its_work_directory(tmp_path):
    """A run stopped after 2 iterations continues at iteration 3 with the saved weights and
    optimizer (and plays new episodes), rather than starting over."""
    base = dict(env={"pushes": False}, num_envs=2, steps_per_env=4, eval_episodes=0, workers=0,
                actor={"hidden_dims": [16], "activation": "elu", "init_std": 0.5})
    lines: list[str] = []
    first = TeacherTrainer(_config(iterations=2, **base), tmp_path / "a.pt", tmp_path / "work", workers=0,
                           log=lines.append).run(resume=True)
    assert first["iterations"] == 2 and first["steps"] == 16
    second = TeacherTrainer(_config(iterations=3, **base), tmp_path / "b.pt", tmp_path / "work", workers=0,
                            log=lines.append).run(resume=True)
    assert any("resuming after iteration 2" in line for line in lines)
    assert second["iterations"] == 3 and second["steps"] == 24
    assert second["train_time_s"] > first["train_time_s"]  # the whole run's time, not this process's
    assert [row["iteration"] for row in second["history"]] == [1, 2, 3]
    # another config in the same folder starts fresh
    other = TeacherTrainer(_config(iterations=1, seed=5, **base), tmp_path / "c.pt", tmp_path / "work", workers=0,
                           log=lines.append).run(resume=True)
    assert other["iterations"] == 1 and any("holds a run of another config" in line for line in lines)


def test_a_run_resumed_late_keeps_its_episodes_apart_from_the_evaluation(tmp_path):
    """A run resumed after iteration 950 (past EVAL_EPISODE_BASE / 1,000,000) plays episodes of its
    own and still evaluates at its end; the checkpoint records each segment's range. A work
    directory saved without its ranges, that far on, refuses at start rather than after training."""
    import json

    from sim2real_ros.rl.ppo import EVAL_EPISODE_BASE, RESUME_EPISODE_BASE, RESUME_STRIDE

    base = dict(env={"pushes": False}, num_envs=2, steps_per_env=4, workers=0,
                actor={"hidden_dims": [16], "activation": "elu", "init_std": 0.5})
    work = tmp_path / "work"
    TeacherTrainer(_config(iterations=2, eval_episodes=0, **base), tmp_path / "a.pt", work, workers=0,
                   log=lambda s: None).run(resume=True)
    state_path = work / "ppo_state.json"
    state = json.loads(state_path.read_text())
    assert state["episode_ranges"] == [[0, 16 + 2]]
    state["iteration"] = 950  # as a long run's state would say (the ranges played stay what they were)
    state_path.write_text(json.dumps(state))
    result = TeacherTrainer(_config(iterations=951, eval_episodes=2, **base), tmp_path / "b.pt", work, workers=0,
                            log=lambda s: None).run(resume=True)
    assert result["iterations"] == 951 and result["evaluation"]["episodes"] == 2
    resumed = RESUME_EPISODE_BASE + 950 * RESUME_STRIDE
    recorded = load_teacher(tmp_path / "b.pt").spec.provenance["training_episodes"]
    assert recorded["index_ranges"] == [[0, 18], [resumed, resumed + 8 + 2]]
    assert all(last <= EVAL_EPISODE_BASE or first > EVAL_EPISODE_BASE + 2 for first, last in recorded["index_ranges"])

    del state["episode_ranges"]  # saved by the code before the ranges were kept
    state_path.write_text(json.dumps(state))
    progress = io.StringIO()
    with pytest.raises(ValueError, match="reach into the evaluation episodes.*--no-resume"):
        TeacherTrainer(_config(iterations=960, eval_episodes=2, **base), tmp_path / "c.pt", work, workers=0,
                       log=lambda s: None, stream=progress).run(resume=True)
    assert progress.getvalue() == ""  # refused before any iteration


def _refuse_a_pool_beyond_the_free_cpus() -> float:
    """Ask for more CPUs than the 2-CPU cluster has, then more than are free; the seconds the refusal took."""
    spec = _config(env={"pushes": False}).env_spec()
    with pytest.raises(RayClusterError, match="3 rollout workers need 3 CPUs; the Ray cluster has 2"):
        RolloutPool(spec, 4, 3)
    holder = RolloutPool(spec, 2, 1)
    try:
        start = time.monotonic()
        with pytest.raises(RayClusterError, match="1 of the Ray cluster's 2 are free"):
            RolloutPool(spec, 4, 2)
        return time.monotonic() - start
    finally:
        holder.close()


def test_a_pool_that_cannot_get_its_cpus_fails_instead_of_waiting(ray_local):
    _refuse_a_pool_beyond_the_free_cpus()


@pytest.mark.timing
def test_a_pool_that_cannot_get_its_cpus_fails_within_its_grace_period(ray_local):
    assert _refuse_a_pool_beyond_the_free_cpus() < 20  # pool.py waits 10 s for CPUs just given back


def test_ppo_labels_do_not_leak_a_push_that_starts_after_the_observation(small_teacher):
    """Issue 32: from the same state, a world whose next push starts within the chunk's horizon and
    the same world without pushes get the same labels: the look-ahead withholds the push the student
    could not have seen coming (before the fix the labels answered it)."""
    from sim2real_ros.rl.labeller import PPOChunkTeacher
    from sim2real_ros.sim.params import load_sim_params
    from sim2real_ros.sim.world import SimWorld

    teacher = load_teacher(small_teacher)
    params = load_sim_params(config_path("sim_params.yaml"))
    worlds = {on: SimWorld(params, str(urdf_path()), seed=3, render=False, pushes=on) for on in (True, False)}
    try:
        for seed in range(11, 40):
            schedule = worlds[True].reset(randomize=True, seed=seed).get("pushes", [])
            if schedule and schedule[0]["start_s"] >= 0.3:
                break
        else:
            pytest.fail("no episode with a push after 0.3 s in seeds 11-39")
        worlds[False].reset(randomize=True, seed=seed)
        # up to 0.1 s before the push: both worlds are in the same state (pushes draw from their own RNG)
        steps = int((schedule[0]["start_s"] - 0.1) * 1e9) // worlds[True].dt_ns
        for world in worlds.values():
            world.set_command(world.joint_positions() + 0.05)
            world.step(steps)
        np.testing.assert_array_equal(worlds[True].joint_positions(), worlds[False].joint_positions())
        assert worlds[True].pushes_applied() == 0
        # a 10-point chunk at 0.05 s looks 0.5 s ahead: past the push's start
        chunks = {on: PPOChunkTeacher(teacher, w, compensated_latency_s=0.02).chunk(w.joint_positions(), None, 10, 0.05)
                  for on, w in worlds.items()}
        np.testing.assert_array_equal(chunks[True], chunks[False])
        # the push itself still happens when the episode gets there
        worlds[True].step(int(0.2e9) // worlds[True].dt_ns)
        assert worlds[True].pushes_applied() == 1
    finally:
        for world in worlds.values():
            world.close()


# -- behaviour-cloning initialisation (rl/bc.py) -------------------------------------------------------
@pytest.mark.parametrize(("block", "field", "value"), [
    ({"episodes": 0}, "bc_init.episodes", "0"),
    ({"epochs": 2.5}, "bc_init.epochs", "2.5"),
    ({"learning_rate": -0.001}, "bc_init.learning_rate", "-0.001"),
    ({"learning_rate": "1e-3"}, "bc_init.learning_rate", "'1e-3'"),  # YAML 1.1 reads 1e-3 as a string
    ({"action_noise": -0.1}, "bc_init.action_noise", "-0.1"),
    ({"init_std": 0}, "bc_init.init_std", "0"),
    ({"critic": "yes"}, "bc_init.critic", "'yes'"),
    ({"expert": "replay"}, "bc_init.expert", "'replay'"),
    ({"expert": "reactive"}, "bc_init.expert", "'reactive'"),  # the default task (reach) has none
    ({"epoks": 5}, "bc_init.epoks", "5"),
    ([4000], "bc_init", r"\[4000\]"),
])
def test_a_bad_bc_init_field_fails_at_load_naming_it(tmp_path, block, field, value):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"bc_init": block}))
    with pytest.raises(ConfigError, match=rf"field '{re.escape(field)}' = {value}"):
        load_teacher_config(path)


def test_a_teacher_config_trains_on_the_sim_loop_it_names(tmp_path):
    """`sim_loop` runs the teacher's worlds (BC's expert episodes and PPO's) on that loop over the sim
    params' own and the checkpoint records that loop's version; a config without it hashes as before,
    and a bad one fails at load naming the field."""
    from sim2real_ros.sim.params import load_sim_params, with_sim_loop

    assert "sim_loop" not in _config().to_dict()
    loop = {"loop": "fast", "dt_s": 0.00625}
    config = _config(iterations=1, env={"pushes": False}, num_envs=2, steps_per_env=4, eval_episodes=0, workers=0,
                     actor={"hidden_dims": [16], "activation": "elu", "init_std": 0.5},
                     bc_init={"episodes": 2, "epochs": 1}, sim_loop=loop)
    assert config.to_dict()["sim_loop"] == loop and config.env_spec().sim_loop == loop
    assert BatchedEnv(config.env_spec(), 0, 1).envs[0].world.params.physics.loop == "fast"
    fast = with_sim_loop(load_sim_params(config.sim_params), "fast", 0.00625)
    TeacherTrainer(config, tmp_path / "t.pt", tmp_path / "work", workers=0, log=lambda _: None,
                   stream=io.StringIO()).run()
    assert load_teacher(tmp_path / "t.pt").spec.sim_params_version == fast.version != load_sim_params().version
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"sim_loop": {"loop": "fast", "dt_s": 0}}))
    with pytest.raises(ConfigError, match=r"bad.yaml: field 'sim_loop' = .*physics.dt_s = 0"):
        load_teacher_config(path)


def test_zero_ppo_iterations_need_bc_init(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"iterations": 0}))
    with pytest.raises(ConfigError, match=r"field 'iterations' = 0.*only with bc_init"):
        load_teacher_config(path)
    path.write_text(yaml.safe_dump({"iterations": 0, "bc_init": {"episodes": 8}}))
    assert load_teacher_config(path).bc().episodes == 8


def test_a_resumed_run_does_not_redo_bc_init(tmp_path):
    """BC (0 PPO iterations) saves the work directory at iteration 0; a second run with PPO
    iterations resumes from the cloned weights without collecting or regressing again, and its
    checkpoint still records BC's episodes and figures."""
    import json

    from sim2real_ros.rl.bc import BC_EPISODE_BASE

    base = dict(env={"pushes": False}, num_envs=2, steps_per_env=4, eval_episodes=0, workers=0,
                actor={"hidden_dims": [16], "activation": "elu", "init_std": 0.5},
                bc_init={"episodes": 2, "epochs": 3, "init_std": 0.3})
    work, lines, progress = tmp_path / "work", [], io.StringIO()
    first = TeacherTrainer(_config(iterations=0, **base), tmp_path / "a.pt", work, workers=0, log=lines.append,
                           stream=progress).run(resume=True)
    assert progress.getvalue().count("[bc] actor epoch") == 3 and first["iterations"] == 0
    saved = json.loads((work / "ppo_state.json").read_text())
    assert saved["iteration"] == 0 and saved["bc"] == first["bc_init"]
    cloned = read_teacher(tmp_path / "a.pt")[1].state_dict()
    assert int(cloned["obs_normalizer.count"]) == first["bc_init"]["pairs"]  # fitted on BC's observations

    lines, progress = [], io.StringIO()
    second = TeacherTrainer(_config(iterations=2, **base), tmp_path / "b.pt", work, workers=0, log=lines.append,
                            stream=progress).run(resume=True)
    assert "[bc]" not in progress.getvalue() and not any("expert episodes" in line for line in lines)
    assert any("[bc] done earlier" in line for line in lines) and any("resuming after iteration 0" in line
                                                                      for line in lines)
    assert second["iterations"] == 2 and second["bc_init"] == first["bc_init"]
    provenance = load_teacher(tmp_path / "b.pt").spec.provenance
    assert provenance["training_episodes"]["index_ranges"] == [[BC_EPISODE_BASE, BC_EPISODE_BASE + 2], [0, 16 + 2]]
    assert provenance["bc_init"] == first["bc_init"] and provenance["method"].startswith("behaviour cloning")
    # PPO went on from the cloned actor: its normaliser kept BC's statistics and added PPO's 2 x 4 x 2
    # observations; its std started at bc_init.init_std (0.3) rather than actor.init_std (0.5).
    after = read_teacher(tmp_path / "b.pt")[1].state_dict()
    assert int(after["obs_normalizer.count"]) == int(cloned["obs_normalizer.count"]) + 2 * 4 * 2
    np.testing.assert_allclose(cloned["distribution.std_param"].numpy(), 0.3, rtol=1e-6)
