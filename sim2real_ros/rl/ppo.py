"""PPO for the privileged teacher, with rsl_rl's algorithm over the Ray-batched worlds.

`RolloutPool` (Ray actors holding k worlds each) is wrapped as rsl_rl's `VecEnv`; rsl_rl's PPO
(actor-critic MLPs with observation normalization, GAE, clipped surrogate, adaptive learning rate)
does the learning. The loop around it is ours: progress with steps/s, success rate and reward, a
resumable state in a work directory, the teacher's evaluation on fixed episode seeds, and the
safe teacher checkpoint (rl/teacher_checkpoint.py).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ..core.errors import ConfigError
from ..core.hashing import content_hash
from ..core.policy.training_log import TrainingLog
from ..core.stats import wilson_interval
from ..paths import share_dir
from ..provenance import assert_unseen_episodes, portable_provenance, sim_params_version, training_git_state
from ..robots import DEFAULT_ROBOT, get_robot, robot_description_for, sim_params_for
from ..sim.params import load_sim_params, with_sim_loop_override
from ..sim.tasks import REACTIVE_EXPERT_TASKS
from .batch import EnvSpec
from .bc import BCConfig, ExpertPairs, fit_normalizer, regress, set_exploration_std
from .cluster import default_workers
from .env import EnvConfig
from .pool import RolloutPool
from .rewards import RewardConfig, success_outweighs_staying
from .teacher_checkpoint import TeacherSpec, save_teacher

EVAL_EPISODE_BASE = 900_000_000  # evaluation episodes never overlap training ones
# A run resumed after iteration i plays its episodes from RESUME_EPISODE_BASE + i * RESUME_STRIDE: a
# block per iteration (one iteration plays num_envs * steps_per_env episodes at most, far fewer),
# all past the evaluation episodes, however long the run.
RESUME_EPISODE_BASE = 1_000_000_000
RESUME_STRIDE = 1_000_000
BC_ROUNDS_PER_LINE = 4  # BC's expert episodes per progress line: this many per slot

DEFAULT_PPO: dict[str, Any] = {
    "learning_rate": 1e-3, "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2, "gamma": 0.98,
    "lam": 0.95, "value_loss_coef": 1.0, "entropy_coef": 0.005, "max_grad_norm": 1.0, "schedule": "adaptive",
    "desired_kl": 0.01,
}


@dataclass(frozen=True)
class TeacherConfig:
    """seed; robot (robots.ROBOTS name, default arm6: its URDF and sim params are the defaults);
    robot_description / sim_params (paths); env (rl/env.EnvConfig); rewards (term -> weight);
    num_envs: worlds in all; steps_per_env: policy steps per env per PPO iteration; iterations: the
    most PPO iterations; target_success: stop once the success over the last `success_window`
    episodes reaches it (0 = never stop early); actor: hidden_dims, activation, init_std; ppo: rsl_rl
    PPO arguments (DEFAULT_PPO); eval_episodes: teacher evaluation after training; workers: Ray
    rollout workers (0 = in this process; default one per core); bc_init: behaviour cloning of the
    actor from the task's scripted expert before PPO (rl/bc.BCConfig; None = PPO from scratch;
    with it, iterations may be 0: the BC actor is the teacher); sim_loop: the sim loop its worlds run,
    over the sim params' own (`{loop: fast, dt_s: 0.005, substeps: 2}`, sim.params.with_sim_loop_override;
    {} keeps the file's)."""

    source: str
    seed: int = 0
    robot: str = DEFAULT_ROBOT
    robot_description: str = ""  # "" = the robot's URDF
    sim_params: str = ""  # "" = the robot's sim params
    env: dict[str, Any] = field(default_factory=dict)
    rewards: dict[str, float] = field(default_factory=lambda: {"distance": 2.0, "distance_fine": 1.0,
                                                                "success": 10.0, "action_rate": 0.02,
                                                                "joint_limit": 1.0})
    num_envs: int = 32
    steps_per_env: int = 32
    iterations: int = 200
    target_success: float = 0.0
    success_window: int = 200
    actor: dict[str, Any] = field(default_factory=lambda: {"hidden_dims": [256, 128, 64], "activation": "elu",
                                                            "init_std": 0.6})
    ppo: dict[str, Any] = field(default_factory=dict)
    eval_episodes: int = 40
    workers: int = field(default_factory=default_workers)
    bc_init: dict[str, Any] | None = None
    sim_loop: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        get_robot(self.robot, self.source)
        object.__setattr__(self, "robot_description", robot_description_for(self.robot, self.robot_description))
        object.__setattr__(self, "sim_params", sim_params_for(self.robot, self.sim_params))
        if self.bc_init is not None:
            BCConfig.from_dict(self.bc_init, self.source)
        for name in ("num_envs", "steps_per_env", "success_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(self.source, name, value, "must be an integer >= 1")
        for name in ("eval_episodes", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(self.source, name, value, "must be an integer >= 0")
        least = 0 if self.bc_init is not None else 1  # 0 PPO iterations: the BC actor alone
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations < least:
            raise ConfigError(self.source, "iterations", self.iterations, f"must be an integer >= {least}"
                              + ("" if least == 0 else " (0 only with bc_init)"))
        if not 0.0 <= float(self.target_success) <= 1.0:
            raise ConfigError(self.source, "target_success", self.target_success, "must be in [0, 1]")
        for name in ("robot_description", "sim_params"):
            if not Path(getattr(self, name)).is_file():
                raise ConfigError(self.source, name, getattr(self, name), "file not found")
        if self.sim_loop:  # checked here, not in the first worker: the error names this file's field
            with_sim_loop_override(load_sim_params(self.sim_params), self.sim_loop, self.source)
        env_config = EnvConfig.from_dict(self.env, self.source)
        RewardConfig.from_dict(self.rewards, self.source)
        bc = self.bc()
        if bc is not None and bc.expert == "reactive":
            task = env_config.task or load_sim_params(self.sim_params).task.name
            if task not in REACTIVE_EXPERT_TASKS:
                raise ConfigError(self.source, "bc_init.expert", bc.expert, f"task {task!r} has no reactive "
                                  f"scripted expert ({', '.join(REACTIVE_EXPERT_TASKS)} have)")
        unknown = sorted(set(self.ppo) - set(DEFAULT_PPO))
        if unknown:
            raise ConfigError(self.source, f"ppo.{unknown[0]}", self.ppo[unknown[0]],
                              f"unknown PPO setting (known: {sorted(DEFAULT_PPO)})")
        hidden = self.actor.get("hidden_dims", [])
        if not isinstance(hidden, list) or not hidden or not all(isinstance(h, int) and h > 0 for h in hidden):
            raise ConfigError(self.source, "actor.hidden_dims", hidden, "must be a list of positive integers")

    def to_dict(self) -> dict[str, Any]:
        """The config as recorded (provenance, work directory hash); without bc_init when it is
        None and sim_loop when empty, so runs and work directories of configs without them keep
        their hashes."""
        out = {k: v for k, v in asdict(self).items() if k != "source"}
        if out["bc_init"] is None:
            del out["bc_init"]
        if not out["sim_loop"]:
            del out["sim_loop"]
        return out

    def bc(self) -> BCConfig | None:
        """The validated bc_init block (None: PPO from scratch)."""
        return None if self.bc_init is None else BCConfig.from_dict(self.bc_init, self.source)

    def env_spec(self, episode_base: int = 0) -> EnvSpec:
        return EnvSpec(self.sim_params, self.robot_description, dict(self.env), dict(self.rewards), self.seed,
                       self.num_envs, episode_base, sim_loop=dict(self.sim_loop) or None)


def load_teacher_config(path: str | Path, **overrides: Any) -> TeacherConfig:
    """Read and validate a teacher YAML (paths relative to its folder); `overrides` win when not None."""
    path = Path(path)
    source = str(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(source, "<file>", None, f"cannot read teacher config: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(source, "<file>", data, "expected a mapping")
    known = set(TeacherConfig.__dataclass_fields__) - {"source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(source, unknown[0], data[unknown[0]], f"unknown field (known: {sorted(known)})")
    data.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("robot") is not None:
        # Another robot: the YAML's files were its robot's; the overriding robot's own replace them.
        for key in ("robot_description", "sim_params"):
            if overrides.get(key) is None:
                data.pop(key, None)
    for key in ("robot_description", "sim_params"):
        if data.get(key):
            value = Path(str(data[key]))
            data[key] = str(value if value.is_absolute() else (path.parent / value).resolve())
    return TeacherConfig(source=source, **data)


class PoolVecEnv:
    """A RolloutPool as rsl_rl's VecEnv: observations in a TensorDict group 'policy', dones as
    terminated | truncated, extras['time_outs'] for PPO's bootstrapping of time limits."""

    def __init__(self, pool: RolloutPool, max_episode_length: int, cfg: dict[str, Any]) -> None:
        from rsl_rl.env import VecEnv

        VecEnv.register(type(self))  # rsl_rl checks nothing but the interface; declare it all the same
        self.pool = pool
        self.num_envs = pool.num_envs
        self.num_actions = pool.num_actions
        self.max_episode_length = max_episode_length
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self.device = "cpu"
        self.cfg = cfg
        self._obs = pool.observations()
        self.finished: list[dict[str, Any]] = []
        self.term_sums: dict[str, float] = {}

    def _wrap(self, obs: np.ndarray) -> Any:
        from tensordict import TensorDict

        return TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[self.num_envs])

    def get_observations(self) -> Any:
        return self._wrap(self._obs)

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict]:
        result = self.pool.step(actions.detach().cpu().numpy())
        self._obs = result.obs
        self.finished += result.episodes
        for name, value in result.terms.items():
            self.term_sums[name] = self.term_sums.get(name, 0.0) + value
        done = result.terminated | result.truncated
        self.episode_length_buf += 1
        self.episode_length_buf[torch.from_numpy(done)] = 0
        extras = {"time_outs": torch.from_numpy(result.truncated.astype(np.float32))}
        return (self._wrap(result.obs), torch.from_numpy(result.rewards),
                torch.from_numpy(done.astype(np.float32)), extras)


    def collect(self, alg: Any, steps: int, noise_key: list[int]) -> float:
        """One PPO rollout of `steps` steps per env into `alg`'s storage, the policy acting in the
        rollout workers (RolloutPool.rollout: one call per worker per iteration), then the returns.
        Returns the sum over steps of the mean reward. The storage gets what alg.act and
        process_env_step would have stored for the same actions (record_transition)."""
        from tensordict import TensorDict

        rollout = self.pool.rollout(alg.actor.as_jit().eval(), gaussian_std(alg.actor), steps, noise_key)

        def wrap(obs: np.ndarray) -> Any:
            return TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[self.num_envs])

        for t in range(steps):
            record_transition(alg, wrap(rollout.obs[t]), torch.from_numpy(rollout.actions[t]))
            done = rollout.terminated[t] | rollout.truncated[t]
            extras = {"time_outs": torch.from_numpy(rollout.truncated[t].astype(np.float32))}
            alg.process_env_step(wrap(rollout.obs[t + 1]), torch.from_numpy(rollout.rewards[t]),
                                 torch.from_numpy(done.astype(np.float32)), extras)
            self.episode_length_buf += 1
            self.episode_length_buf[torch.from_numpy(done)] = 0
        self._obs = rollout.obs[-1]
        alg.compute_returns(wrap(rollout.obs[-1]))
        self.finished += rollout.episodes
        for name, value in rollout.terms.items():
            self.term_sums[name] = self.term_sums.get(name, 0.0) + value
        return float(rollout.rewards.mean(axis=1).sum())


def gaussian_std(actor: Any) -> np.ndarray:
    """(n,) the standard deviation of the actor's Gaussian (rsl_rl's GaussianDistribution: one per
    action, the same for every observation)."""
    from rsl_rl.modules.distribution import GaussianDistribution

    if not isinstance(actor.distribution, GaussianDistribution):
        raise TypeError(f"rollouts in the workers sample a Gaussian; the actor has {type(actor.distribution).__name__}")
    with torch.inference_mode():
        actor.distribution.update(torch.zeros(1, actor.distribution.output_dim))
        return actor.output_std[0].double().numpy().copy()


def record_transition(alg: Any, obs: Any, actions: torch.Tensor) -> None:
    """What rsl_rl's PPO.act(obs) stores in alg.transition, for actions sampled elsewhere (by the
    rollout workers from the same actor): hidden states, actions, values, their log-probability
    and distribution parameters under the actor, the observations."""
    actor = alg.actor
    alg.transition.hidden_states = (actor.get_hidden_state(), alg.critic.get_hidden_state())
    actor.distribution.update(actor.mlp(actor.get_latent(obs)))
    alg.transition.actions = actions
    alg.transition.values = alg.critic(obs).detach()
    alg.transition.actions_log_prob = actor.get_output_log_prob(actions).detach()
    alg.transition.distribution_params = tuple(p.detach() for p in actor.output_distribution_params)
    alg.transition.observations = obs


def rsl_config(config: TeacherConfig) -> dict[str, Any]:
    """The rsl_rl runner-style config PPO.construct_algorithm reads."""
    actor = dict(config.actor)
    hidden, activation = list(actor.get("hidden_dims")), str(actor.get("activation", "elu"))
    return {
        "algorithm": {"class_name": "PPO", **DEFAULT_PPO, **config.ppo},
        "actor": {"class_name": "MLPModel", "hidden_dims": hidden, "activation": activation,
                  "obs_normalization": True,
                  "distribution_cfg": {"class_name": "GaussianDistribution",
                                       "init_std": float(actor.get("init_std", 0.6))}},
        "critic": {"class_name": "MLPModel", "hidden_dims": hidden, "activation": activation,
                   "obs_normalization": True},
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "num_steps_per_env": config.steps_per_env,
        "multi_gpu": None,
    }


def _progress_line(it: int, total: int, steps: int, steps_per_s: float, success: float | None, reward: float,
                   elapsed: float) -> str:
    rate = "  n/a" if success is None else f"{success:5.0%}"
    return (f"[ppo] it {it}/{total} | {steps:,} steps | {steps_per_s:,.0f} steps/s | success {rate} | "
            f"reward/step {reward:+.3f} | {elapsed:5.0f} s")


class TeacherTrainer:
    """Runs PPO to a teacher checkpoint; state in `work_dir` (resumable: weights, optimizer, iteration)."""

    def __init__(self, config: TeacherConfig, out: Path, work_dir: Path, workers: int | None = None,
                 log: Callable[[str], None] = print, stream: Any = None) -> None:
        self.config = config
        self.out = Path(out)
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.workers = config.workers if workers is None else workers
        self.log = log
        self.stream = stream or sys.stderr
        self.params = with_sim_loop_override(load_sim_params(config.sim_params), config.sim_loop, config.source)
        # What behaviour cloning did (rl/bc.py), kept in the work directory: a resumed run does not redo it.
        self.bc_record: dict[str, Any] | None = None

    def _state_path(self) -> Path:
        return self.work_dir / "ppo_state.pt"

    def _hash(self) -> str:
        later = {"iterations", "eval_episodes", "workers", "target_success"}
        return content_hash({k: v for k, v in self.config.to_dict().items() if k not in later})

    def _load_state(self, alg: Any) -> tuple[int, int, list[dict[str, Any]], list[list[int]], float]:
        """(iteration, steps, history, episode ranges played, training time so far [s]) of the run in
        the work directory."""
        path = self._state_path()
        meta_path = self.work_dir / "ppo_state.json"
        if not path.exists() or not meta_path.exists():
            return 0, 0, [], [], 0.0
        meta = json.loads(meta_path.read_text())
        if meta.get("config_hash") != self._hash():
            self.log(f"[ppo] {self.work_dir} holds a run of another config; starting fresh")
            return 0, 0, [], [], 0.0
        alg.load(torch.load(path, weights_only=True), None, strict=True)
        self.bc_record = meta.get("bc")
        if self.bc_record:
            self.log(f"[bc] done earlier in {self.work_dir} ({self.bc_record['pairs']:,} pairs, action MSE "
                     f"{self.bc_record['action_mse']:.4f}); not repeated")
        self.log(f"[ppo] resuming after iteration {meta['iteration']} from {self.work_dir}")
        iteration, steps = int(meta["iteration"]), int(meta["steps"])
        played = meta.get("episode_ranges")
        if played is None:  # saved before the ranges were kept: every resume at or before `iteration`
            played = legacy_training_ranges(iteration, steps, self.config.num_envs)
        return (iteration, steps, list(meta.get("history", [])), [list(map(int, r)) for r in played],
                float(meta.get("train_time_s", 0.0)))

    def _save_state(self, alg: Any, iteration: int, steps: int, history: list[dict[str, Any]],
                    episode_ranges: list[list[int]], train_time_s: float) -> None:
        torch.save(alg.save(), self._state_path())
        (self.work_dir / "ppo_state.json").write_text(json.dumps(
            {"config_hash": self._hash(), "iteration": iteration, "steps": steps, "history": history,
             "episode_ranges": episode_ranges, "train_time_s": train_time_s, "bc": self.bc_record}, indent=1))

    def _training_ranges(self, segment: Segment, steps: int) -> list[list[int]]:
        """Every episode range the run played: behaviour cloning's (if any), then PPO's segments."""
        bc = [list(self.bc_record["index_range"])] if self.bc_record else []
        return [*bc, *segment.ranges(steps, self.config)]

    def _behaviour_clone(self, alg: Any, bc: BCConfig, curves: TrainingLog, clock: Callable[[], float]) -> None:
        """Initialise alg's actor (normaliser and mean) and critic from the scripted expert, on the
        training worlds (a pool of its own over BC's episode indices), then save the work directory
        at iteration 0 so a resumed run starts from here. Progress per epoch on the stream."""
        c = self.config
        tick = time.monotonic()
        gamma = float({**DEFAULT_PPO, **c.ppo}["gamma"])
        first, last = bc.index_range(c.num_envs)
        pool = RolloutPool(c.env_spec(episode_base=first), c.num_envs, self.workers, log=self.log)
        indices = list(range(first, first + bc.episodes))
        # In blocks of whole rounds of the slots, for a progress line: slot j still plays its
        # indices in the same order on the same world, so the pairs are those of one call.
        block = c.num_envs * BC_ROUNDS_PER_LINE
        parts = []
        try:
            for start in range(0, len(indices), block):
                parts.append(pool.expert_pairs(indices[start:start + block], gamma, bc.action_noise, bc.expert))
                done = min(len(indices), start + block)
                wins = sum(bool(e["success"]) for part in parts for e in part.episodes)
                self.log(f"[bc] expert episodes {done}/{len(indices)} | {wins} successes | "
                         f"{time.monotonic() - tick:.0f} s")
        finally:
            pool.close()
        pairs = ExpertPairs.concatenate(parts)
        wins = sum(bool(e["success"]) for e in pairs.episodes)
        collect_s = time.monotonic() - tick
        self.log(f"[bc] {bc.episodes} expert episodes ({wins} successes), {len(pairs.obs):,} pairs, "
                 f"{collect_s:.0f} s")
        obs, actions = torch.from_numpy(pairs.obs), torch.from_numpy(pairs.actions)
        returns = torch.from_numpy(pairs.returns)[:, None]
        for model in (alg.actor, alg.critic):  # both normalise the same observations
            fit_normalizer(model, obs)

        def progress(what: str, tag: str) -> Callable[[int, float], None]:
            def on_epoch(epoch: int, loss: float) -> None:
                curves.add(epoch, {tag: loss})
                self.stream.write(f"[bc] {what} epoch {epoch}/{bc.epochs} | {len(obs):,} pairs | mse {loss:.5f} | "
                                  f"{clock():5.0f} s\n")
                self.stream.flush()
            return on_epoch

        action_mse = regress(alg.actor, obs, actions, bc, c.seed, progress("actor", "bc/loss"))
        value_mse = regress(alg.critic, obs, returns, bc, c.seed + 1, progress("critic", "bc/critic_loss")) \
            if bc.critic else None
        if bc.init_std is not None:
            set_exploration_std(alg.actor, bc.init_std)
        self.bc_record = {"episodes": bc.episodes, "expert_successes": wins, "pairs": len(obs),
                          "index_range": [first, last], "epochs": bc.epochs, "action_mse": action_mse,
                          "value_mse": value_mse, "return_var": float(returns.var()), "init_std": bc.init_std,
                          "time_s": round(time.monotonic() - tick, 1)}
        critic = "" if value_mse is None else \
            f", critic value MSE {value_mse:.4f} (the returns' variance {self.bc_record['return_var']:.4f})"
        self.log(f"[bc] actor action MSE {action_mse:.5f}{critic} ({self.bc_record['time_s']:.0f} s)")
        self._save_state(alg, 0, 0, [], [], clock())

    def run(self, resume: bool = True) -> dict[str, Any]:
        from rsl_rl.algorithms import PPO

        c = self.config
        torch.manual_seed(c.seed)
        start = time.monotonic()
        cfg = rsl_config(c)
        env_config = EnvConfig.from_dict(c.env, c.source)
        probe = RolloutPool(c.env_spec(), 1, 0)  # the sizes, without starting every worker
        obs_dim, n_actions = probe.obs_dim, probe.num_actions
        joint_names = list(probe._local[0].batch.envs[0].world.joint_names)  # noqa: SLF001
        layout = dict(probe._local[0].batch.observation_layout)  # noqa: SLF001 - with the task's own terms
        task_name = probe._local[0].batch.envs[0].world.task.name  # noqa: SLF001 - recorded in env.task
        max_steps = probe._local[0].batch.envs[0].max_steps  # noqa: SLF001
        lift_cap_m = probe._local[0].batch.envs[0].world.params.task.pick_lift.lift_height_m  # noqa: SLF001
        probe.close()
        warning = success_outweighs_staying(c.rewards, float({**DEFAULT_PPO, **c.ppo}["gamma"]), lift_cap_m)
        if warning:
            self.log(f"[ppo] warning: {warning}")
        # The algorithm is built on a dummy batch so its state can be resumed before workers start.
        from tensordict import TensorDict

        dummy_env = type("Sizes", (), {"num_envs": c.num_envs, "num_actions": n_actions})()
        dummy_obs = TensorDict({"policy": torch.zeros(c.num_envs, obs_dim)}, batch_size=[c.num_envs])
        with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints the models; keep stdout for JSON
            alg = PPO.construct_algorithm(dummy_obs, dummy_env, cfg, "cpu")
        first_it, steps, history, earlier, earlier_s = self._load_state(alg) if resume else (0, 0, [], [], 0.0)
        git = training_git_state(self.work_dir, share_dir(), fresh=first_it == 0)
        segment = Segment(episode_base(first_it), steps, earlier)
        try:  # before any training: a work directory whose episodes cannot be told apart from the evaluation's
            training_episodes(c, earlier)
        except ValueError as err:
            raise ValueError(f"{err} (a run resumed past iteration 900 before {self.work_dir} kept its episode "
                             f"ranges); start it again with --no-resume") from None
        recent: deque[bool] = deque(maxlen=c.success_window)
        for row in history[-1:]:
            recent.extend([True] * int(row.get("window_successes", 0)))
            recent.extend([False] * (int(row.get("window_episodes", 0)) - int(row.get("window_successes", 0))))
        curves = TrainingLog(self.work_dir, f"sim2real train-teacher: {c.source}")

        def run_s() -> float:
            """[s] the whole run's training time, its earlier segments included."""
            return earlier_s + time.monotonic() - start

        bc = c.bc()
        pool: RolloutPool | None = None
        try:
            if bc is not None and self.bc_record is None:  # a resumed run's BC is in its saved weights
                self._behaviour_clone(alg, bc, curves, run_s)
            pool = RolloutPool(c.env_spec(episode_base=segment.base), c.num_envs, self.workers, log=self.log)
            env = PoolVecEnv(pool, max_steps, {"env": c.env, "rewards": c.rewards})
            alg.train_mode()
            it = first_it
            stop_reason = "iterations"
            for it in range(first_it + 1, c.iterations + 1):
                tick = time.monotonic()
                rewards_sum = 0.0
                with torch.inference_mode():
                    rewards_sum = env.collect(alg, c.steps_per_env, [c.seed, segment.base, it])
                collect_s = time.monotonic() - tick
                losses = alg.update()
                steps += c.num_envs * c.steps_per_env
                for episode in env.finished:
                    recent.append(bool(episode["success"]))
                episodes, env.finished = len(env.finished), []
                success = sum(recent) / len(recent) if recent else None
                row = {"iteration": it, "steps": steps, "episodes": episodes,
                       "window_episodes": len(recent), "window_successes": int(sum(recent)),
                       "success": success, "reward_per_step": rewards_sum / c.steps_per_env,
                       "steps_per_s": c.num_envs * c.steps_per_env / max(collect_s, 1e-9),
                       "learn_s": time.monotonic() - tick - collect_s,
                       "losses": {k: float(v) for k, v in losses.items() if math.isfinite(float(v))},
                       "reward_terms": {k: v / (c.num_envs * c.steps_per_env) for k, v in env.term_sums.items()}}
                env.term_sums = {}
                history.append(row)
                curves.add(steps, {"train/success": success, "train/reward_per_step": row["reward_per_step"],
                                   "train/episodes": episodes, "perf/steps_per_s": row["steps_per_s"],
                                   "perf/learn_s": row["learn_s"],
                                   "train/learning_rate": float(getattr(alg, "learning_rate", float("nan"))),
                                   **{f"loss/{k}": v for k, v in row["losses"].items()},
                                   **{f"reward/{k}": v for k, v in row["reward_terms"].items()}})
                self.stream.write(_progress_line(it, c.iterations, steps, row["steps_per_s"], success,
                                                 row["reward_per_step"], time.monotonic() - start) + "\n")
                self.stream.flush()
                if it % 10 == 0 or it == c.iterations:
                    self._save_state(alg, it, steps, history, segment.ranges(steps, c), run_s())
                if c.target_success and success is not None and len(recent) >= c.success_window \
                        and success >= c.target_success:
                    stop_reason = f"target success {c.target_success:.0%} reached"
                    self._save_state(alg, it, steps, history, segment.ranges(steps, c), run_s())
                    break
            train_s = run_s()
            self.log(f"[ppo] stopped after iteration {it} ({stop_reason}), {steps:,} steps, {train_s:.0f} s")
            alg.eval_mode()
            actor = alg.get_policy()
            policy = actor.as_jit().eval()
            evaluation = {}
            if c.eval_episodes:
                assert_unseen_episodes(c.seed, range(EVAL_EPISODE_BASE, EVAL_EPISODE_BASE + c.eval_episodes),
                                       training_episodes(c, self._training_ranges(segment, steps)), c.source)
                evaluation = evaluate_policy(pool, policy, c.eval_episodes)
            if evaluation:
                self.log(f"[ppo] teacher success {evaluation['successes']}/{evaluation['episodes']} (95% CI "
                         f"{evaluation['ci95'][0]:.2f}-{evaluation['ci95'][1]:.2f}), pushes applied "
                         f"{evaluation['pushes_applied']}")
        finally:
            if pool is not None:
                pool.close()
            written = curves.close()
        self.log(f"[ppo] curves: tensorboard --logdir {written['tensorboard']}; summary {written['png']}")
        # Paths relative to the repository (or name + content hash), core/provenance.py.
        config = portable_provenance(c.to_dict(), [share_dir()])
        provenance = {
            "robot": c.robot,
            "method": ("behaviour cloning of the scripted expert, then " if self.bc_record else "")
            + "PPO (rsl_rl) with privileged observations over Ray-batched randomized sims",
            **({"bc_init": self.bc_record} if self.bc_record else {}),
            "rsl_rl": _version("rsl-rl-lib"), "ray": _version("ray"),
            "config": config, "config_hash": content_hash(config), "iterations": it, "steps": steps,
            "stop": stop_reason, "train_time_s": round(train_s, 1), "workers": self.workers,
            "evaluation": evaluation, "training_episodes": training_episodes(c, self._training_ranges(segment, steps)),
            "sim_params_file": config["sim_params"],
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **git,
            "final_success_window": history[-1]["success"] if history else None,
        }
        spec = TeacherSpec(joint_names=joint_names, observation_layout=layout,
                           hidden_dims=list(cfg["actor"]["hidden_dims"]), activation=cfg["actor"]["activation"],
                           env={**asdict(env_config), "task": task_name}, rewards=dict(c.rewards),
                           sim_params_version=self.params.version if c.sim_loop else sim_params_version(c.sim_params),
                           provenance=provenance)
        if spec.obs_dim != obs_dim:
            raise RuntimeError(f"observation layout {spec.obs_dim} != env observation size {obs_dim}")
        digest = save_teacher(self.out, actor, spec)
        self.log(f"[ppo] wrote {self.out} (hash {digest})")
        (self.work_dir / "history.json").write_text(json.dumps(history, indent=1))
        return {"checkpoint": str(self.out), "hash": digest, "iterations": it, "steps": steps,
                "train_time_s": round(train_s, 1), "evaluation": evaluation, "history": history, "curves": written,
                **({"bc_init": self.bc_record} if self.bc_record else {})}


def episode_base(resumed_after: int) -> int:
    """First episode index of a run segment: 0 for a fresh run, a block of its own past the
    evaluation episodes for a run resumed after iteration `resumed_after`."""
    return 0 if resumed_after == 0 else RESUME_EPISODE_BASE + resumed_after * RESUME_STRIDE


def legacy_training_ranges(iteration: int, steps: int, num_envs: int) -> list[list[int]]:
    """Episode ranges of a work directory saved before they were kept: resumes (if any) happened
    after iterations 1..`iteration`, at i * 1,000,000 as the code then played them."""
    return [[0, steps + num_envs], [1_000_000, iteration * 1_000_000 + steps + num_envs]]


@dataclass
class Segment:
    """The episodes this process plays: from `base` on, one per slot per step at most, after
    `first_step` env steps of the run; `earlier`: the ranges of the segments before it."""

    base: int
    first_step: int
    earlier: list[list[int]]

    def ranges(self, steps: int, config: TeacherConfig) -> list[list[int]]:
        """[first, last) episode index ranges played once the run is at `steps` env steps."""
        return [*self.earlier, [self.base, self.base + steps - self.first_step + config.num_envs]]


def training_episodes(config: TeacherConfig, ranges: list[list[int]]) -> dict[str, Any]:
    """The episode indices PPO may have played (run seed config.seed), as [first, last) ranges; raises
    ValueError where one reaches into the evaluation episodes."""
    for first, last in ranges:
        if first < EVAL_EPISODE_BASE + max(config.eval_episodes, 1) and last > EVAL_EPISODE_BASE:
            raise ValueError(f"{config.source}: training episodes {first}-{last} reach into the evaluation "
                             f"episodes from {EVAL_EPISODE_BASE}")
    return {"seed": config.seed, "index_ranges": [list(r) for r in ranges]}


def evaluate_policy(pool: RolloutPool, policy: Any, episodes: int) -> dict[str, Any]:
    """Success of a deterministic teacher on fixed evaluation episodes (the same for every run)."""
    rows = pool.run_episodes(range(EVAL_EPISODE_BASE, EVAL_EPISODE_BASE + episodes), policy)
    wins = sum(bool(r["success"]) for r in rows)
    return {"episodes": episodes, "successes": wins, "success_rate": wins / max(episodes, 1),
            "ci95": list(wilson_interval(wins, episodes)),
            "pushes_applied": int(sum(r.get("pushes_applied", 0) for r in rows)),
            "median_duration_s": float(np.median([r["duration_s"] for r in rows])) if rows else None,
            "per_episode": rows}


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def describe_terms(weights: Mapping[str, float]) -> str:
    from .rewards import TERMS

    return ", ".join(f"{name} x{weight:g} ({TERMS[name][1]})" for name, weight in weights.items())
