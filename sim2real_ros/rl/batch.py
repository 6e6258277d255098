"""k reach environments stepped together in one process, with automatic resets.

Slots are global: a batch holding slots [first, first + k) of a run with `num_slots` envs in all
gives every episode the same index and seed whichever process holds it, so results do not depend on
how the slots are spread over workers. A whole PPO rollout can run here too (`BatchedEnv.rollout`):
the policy acts where the worlds are, so a Ray worker answers once per iteration, not once per step,
and the exploration noise is drawn per slot, so it does not depend on the layout either.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sim.params import load_sim_params, with_sim_loop_override
from .env import EnvConfig, TaskEnv
from .rewards import RewardConfig


@dataclass(frozen=True)
class EnvSpec:
    """Everything a worker needs to build its environments (plain values: it crosses to Ray workers)."""

    sim_params: str
    robot_description: str
    env: dict[str, Any]
    rewards: dict[str, float]
    run_seed: int
    num_slots: int
    episode_base: int = 0  # added to every episode index (a resumed run plays new episodes)
    sim_loop: dict[str, Any] | None = None  # over the sim params' physics (sim.params.with_sim_loop_override)


@dataclass
class StepResult:
    """One step of k envs: observations (k, obs_dim) float32 (after any reset), rewards (k,),
    terminated (k,) bool (success), truncated (k,) bool (time limit), finished episodes' info."""

    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episodes: list[dict[str, Any]] = field(default_factory=list)
    terms: dict[str, float] = field(default_factory=dict)


@dataclass
class Rollout:
    """`steps` policy steps of k envs: obs (steps + 1, k, obs_dim) float32 (obs[t] is what action t
    was chosen on; obs[t + 1] is after any reset), actions (steps, k, n) float32 (as sent to the
    envs, before their clip), rewards (steps, k) float32, terminated / truncated (steps, k) bool,
    finished episodes' info, reward terms summed over the rollout."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episodes: list[dict[str, Any]] = field(default_factory=list)
    terms: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def concatenate(parts: list[Rollout]) -> Rollout:
        """Rollouts of consecutive slot ranges (same steps) as one, slots in order."""
        terms: dict[str, float] = {}
        for part in parts:
            for name, value in part.terms.items():
                terms[name] = terms.get(name, 0.0) + value
        return Rollout(*(np.concatenate([getattr(p, name) for p in parts], axis=1)
                         for name in ("obs", "actions", "rewards", "terminated", "truncated")),
                       [e for p in parts for e in p.episodes], terms)


def slot_noise(noise_key: list[int], slot: int, steps: int, num_actions: int) -> np.ndarray:
    """(steps, num_actions) standard normal draws for one slot of one rollout: a function of the
    run's key (run seed, iteration) and the slot only, whichever worker holds the slot."""
    return np.random.default_rng([*map(int, noise_key), int(slot)]).standard_normal((steps, num_actions))


class BatchedEnv:
    """Envs in slots [first_slot, first_slot + count) of a run."""

    def __init__(self, spec: EnvSpec, first_slot: int, count: int, started: list[int] | None = None) -> None:
        """started: per env, episodes its slot already started elsewhere (None: none)."""
        params = with_sim_loop_override(load_sim_params(spec.sim_params), spec.sim_loop or {}, "env spec")
        env_config = EnvConfig.from_dict(spec.env)
        rewards = RewardConfig.from_dict(spec.rewards)
        self.envs = [TaskEnv(params, spec.robot_description, env_config, rewards, spec.run_seed,
                             slot=first_slot + i, num_slots=spec.num_slots, episode_base=spec.episode_base,
                             first_episode=started[i] if started else 0)
                     for i in range(count)]
        self.obs_dim = self.envs[0].obs_dim
        self.observation_layout = dict(self.envs[0].layout)
        self.num_actions = self.envs[0].n

    def observations(self) -> np.ndarray:
        return np.stack([env.observe() for env in self.envs])

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every env with its row of `actions` (k, n); finished envs start their next episode."""
        obs, rewards, terminated, truncated, episodes = [], [], [], [], []
        terms: dict[str, float] = {}
        for env, action in zip(self.envs, np.asarray(actions), strict=True):
            o, r, term, trunc, info = env.step(action)
            for name, value in info["terms"].items():
                terms[name] = terms.get(name, 0.0) + value
            if term or trunc:
                episodes.append(info["episode"])
                o = env.reset()
            obs.append(o)
            rewards.append(r)
            terminated.append(term)
            truncated.append(trunc)
        return StepResult(np.stack(obs), np.asarray(rewards, dtype=np.float32), np.asarray(terminated),
                          np.asarray(truncated), episodes, terms)

    def rollout(self, policy: Any, std: np.ndarray, steps: int, noise_key: list[int]) -> Rollout:
        """`steps` steps with actions mean + std * noise: `policy` (a torch module, observations ->
        mean action, its own normalisation inside) picks the mean, `std` (n,) is the Gaussian's
        standard deviation, the noise is slot_noise(noise_key, slot) (rsl_rl's Gaussian sampling,
        drawn per slot)."""
        import torch

        std = np.asarray(std, dtype=np.float64).reshape(1, -1)
        noise = np.stack([slot_noise(noise_key, env.slot, steps, self.num_actions) for env in self.envs], axis=1)
        obs = [self.observations()]
        actions, rewards, terminated, truncated = [], [], [], []
        episodes: list[dict[str, Any]] = []
        terms: dict[str, float] = {}
        for t in range(steps):
            # One row at a time: a matrix product's rounding depends on the batch size, and the
            # rollout must not depend on how many envs this worker holds.
            with torch.inference_mode():
                mean = np.concatenate([policy(torch.from_numpy(row[None])).numpy() for row in obs[-1]])
            mean = mean.astype(np.float64)
            action = (mean + std * noise[t]).astype(np.float32)
            result = self.step(action)
            obs.append(result.obs)
            actions.append(action)
            rewards.append(result.rewards)
            terminated.append(result.terminated)
            truncated.append(result.truncated)
            episodes += result.episodes
            for name, value in result.terms.items():
                terms[name] = terms.get(name, 0.0) + value
        return Rollout(np.stack(obs).astype(np.float32), np.stack(actions), np.stack(rewards),
                       np.stack(terminated), np.stack(truncated), episodes, terms)

    def close(self) -> None:
        for env in self.envs:
            env.close()
