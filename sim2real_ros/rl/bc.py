"""Behaviour-cloning initialisation of the PPO teacher from the task's scripted expert.

The expert (sim/task_base.ScriptedExpert: IK goal, smooth joint-space line, hold) plays whole
episodes in the privileged env worlds PPO trains on (rl/env.TaskEnv, the same randomization and
pushes), through the rollout pool (Ray workers or in process). Each decision gives a pair
(privileged observation, the env action that moves the integrated joint target to the expert's
target, clipped to [-1, 1]). The actor's observation normaliser is fitted on those observations,
then its mean is regressed on the actions (MSE), and the critic on the expert's discounted returns,
so PPO starts from the expert's behaviour with a value function that already knows what it earns.

Episode indices: from BC_EPISODE_BASE on, apart from PPO's training (0 on; resumed segments from
1,000,000,000) and evaluation (900,000,000 on) episodes; the teacher's provenance records them.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import ConfigError
from ..sim.tasks import EXPERT_KINDS, make_scripted_expert

if TYPE_CHECKING:
    import torch

    from .env import TaskEnv

# Past any fresh PPO run (which plays one index per env step: 800 M steps would be ~500 days on
# this VM) and below the evaluation episodes (rl/ppo.EVAL_EPISODE_BASE = 900,000,000).
BC_EPISODE_BASE = 800_000_000


@dataclass(frozen=True)
class BCConfig:
    """episodes: expert episodes collected; epochs: passes over the pairs; batch_size: pairs per
    gradient step; learning_rate: Adam's, for the regression only (PPO keeps its own);
    action_noise: std of Gaussian noise added to the action the expert's episode executes (the
    label stays the clean expert action), so the pairs cover states a little off the expert's path
    and their labels steer back to it (DART; on reach_hold 0.1 jitters the tool above the hold's
    5 cm/s and no expert episode succeeds, 0.02 leaves 75 % of them successful); init_std: the
    exploration noise PPO starts from after BC (None: actor.init_std); critic: also fit the critic
    to the expert's discounted returns; expert: which scripted expert plays the episodes, "timed"
    (Task.make_expert: a plan fixed at the start, timed) or "reactive" (Task.make_reactive_expert:
    the phase decided from the state at every call, with retries after an empty grasp; the tasks in
    sim/tasks.REACTIVE_EXPERT_TASKS)."""

    episodes: int = 256
    epochs: int = 50
    batch_size: int = 512
    learning_rate: float = 1e-3
    action_noise: float = 0.02
    init_std: float | None = None
    critic: bool = True
    expert: str = "timed"

    @classmethod
    def from_dict(cls, data: Any, source: str) -> BCConfig:
        """Validate a teacher YAML's `bc_init` block; ConfigError names the field and the value."""
        if not isinstance(data, Mapping):
            raise ConfigError(source, "bc_init", data, "must be a mapping (e.g. {episodes: 256, epochs: 50})")
        known = set(cls.__dataclass_fields__)
        for key in data:
            if key not in known:
                raise ConfigError(source, f"bc_init.{key}", data[key], f"unknown field (known: {sorted(known)})")
        config = cls(**dict(data))
        for name in ("episodes", "epochs", "batch_size"):
            _check_int(source, name, getattr(config, name))
        _check_number(source, "learning_rate", config.learning_rate, low=0.0, low_open=True)
        _check_number(source, "action_noise", config.action_noise, low=0.0, low_open=False)
        if config.init_std is not None:
            _check_number(source, "init_std", config.init_std, low=0.0, low_open=True)
        if not isinstance(config.critic, bool):
            raise ConfigError(source, "bc_init.critic", config.critic, "must be true or false")
        if config.expert not in EXPERT_KINDS:
            raise ConfigError(source, "bc_init.expert", config.expert, f"must be one of {', '.join(EXPERT_KINDS)}")
        return config

    def index_range(self, num_envs: int) -> list[int]:
        """[first, last) episode indices BC may have used: its episodes, and the first episode
        every slot of the collection pool starts when it is built (num_envs of them)."""
        return [BC_EPISODE_BASE, BC_EPISODE_BASE + max(self.episodes, num_envs)]


def _check_int(source: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(source, f"bc_init.{name}", value, "must be an integer >= 1")


def _check_number(source: str, name: str, value: Any, low: float, low_open: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) \
        and (value > low if low_open else value >= low)
    if not ok:
        bound = f"{'>' if low_open else '>='} {low:g}"
        raise ConfigError(source, f"bc_init.{name}", value, f"must be a finite number {bound}")


# -- collection (runs in the rollout workers) ------------------------------------------------------
@dataclass
class ExpertPairs:
    """What the expert's episodes gave: obs (N, obs_dim) float32, the observed privileged state;
    actions (N, n) float32 in [-1, 1], the expert's env action there; returns (N,) float32, the
    discounted reward from there to the episode's end; episodes: the env's episode info."""

    obs: np.ndarray
    actions: np.ndarray
    returns: np.ndarray
    episodes: list[dict[str, Any]]

    @staticmethod
    def concatenate(parts: list[ExpertPairs]) -> ExpertPairs:
        return ExpertPairs(np.concatenate([p.obs for p in parts]), np.concatenate([p.actions for p in parts]),
                           np.concatenate([p.returns for p in parts]), [e for p in parts for e in p.episodes])


def expert_action(env: TaskEnv, command: np.ndarray) -> np.ndarray:
    """The env action (n,) in [-1, 1] that moves the env's integrated target toward the expert's
    joint targets `command` (n,) [rad]: the change over action_scale_rad, clipped (the env clips
    the same way, so a clipped label is what the env could have done in one decision)."""
    change = np.asarray(command, dtype=float) - env.target
    return np.clip(change / env.config.action_scale_rad, -1.0, 1.0)


def discounted_returns(rewards: list[float], gamma: float) -> np.ndarray:
    """sum_k gamma^k r_{t+k} to the episode's end, for every t (N,) float32."""
    out = np.zeros(len(rewards), dtype=np.float32)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def expert_episode(env: TaskEnv, index: int, gamma: float, action_noise: float,
                   expert_kind: str = "timed") -> ExpertPairs:
    """Episode `index` of the env's run played by the task's scripted expert (expert_kind: "timed"
    or "reactive", BCConfig.expert), with N(0, action_noise) added to each executed action (seeded
    by the run seed and index: the same pairs on any worker)."""
    rng = np.random.default_rng([env.run_seed, int(index), 0x0BC])
    obs = env.reset(index=int(index))
    expert = make_scripted_expert(env.world, expert_kind)
    expert.start(env.world)
    observed, labels, rewards = [], [], []
    while True:
        label = expert_action(env, expert.command(env.world))
        executed = label + action_noise * rng.standard_normal(label.shape) if action_noise > 0 else label
        observed.append(obs)
        labels.append(label)
        obs, reward, terminated, truncated, info = env.step(executed)
        rewards.append(float(reward))
        if terminated or truncated:
            break
    return ExpertPairs(np.stack(observed).astype(np.float32), np.stack(labels).astype(np.float32),
                       discounted_returns(rewards, gamma), [info["episode"]])


# -- regression (in the trainer's process) ---------------------------------------------------------
def fit_normalizer(model: Any, obs: torch.Tensor) -> None:
    """Set an rsl_rl model's observation normaliser to the mean and variance of `obs` (N, obs_dim)
    (no-op without one): one update from empty statistics is exactly the batch's moments."""
    from tensordict import TensorDict

    model.train()
    model.update_normalization(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))


def regress(model: Any, obs: torch.Tensor, target: torch.Tensor, config: BCConfig, seed: int,
            on_epoch: Callable[[int, float], None]) -> float:
    """Fit model(obs) (the actor's mean, or the critic's value) to `target` by MSE with Adam over
    the model's MLP (not the exploration std); on_epoch(epoch, mean loss) after each epoch.
    Returns the final MSE over all pairs (eval mode, no noise)."""
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(int(seed))
    optimizer = torch.optim.Adam(model.mlp.parameters(), lr=config.learning_rate)
    n = obs.shape[0]

    def predict(batch: torch.Tensor) -> torch.Tensor:
        return model(TensorDict({"policy": batch}, batch_size=[batch.shape[0]]))

    model.train()
    for epoch in range(1, config.epochs + 1):
        order, total = torch.randperm(n, generator=generator), 0.0
        for first in range(0, n, config.batch_size):
            rows = order[first:first + config.batch_size]
            loss = torch.nn.functional.mse_loss(predict(obs[rows]), target[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(rows)
        on_epoch(epoch, total / n)
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(predict(obs), target))


def set_exploration_std(actor: Any, std: float) -> None:
    """Set an rsl_rl Gaussian head's standard deviation to `std` (its scalar or log parameter)."""
    import torch

    distribution = actor.distribution
    with torch.no_grad():
        if hasattr(distribution, "std_param"):
            distribution.std_param.fill_(float(std))
        else:
            distribution.log_std_param.fill_(math.log(float(std)))
