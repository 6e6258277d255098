"""k reach environments stepped together in one process, with automatic resets.

Slots are global: a batch holding slots [first, first + k) of a run with `num_slots` envs in all
gives every episode the same index and seed whichever process holds it, so results do not depend on
how the slots are spread over workers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sim.params import load_sim_params
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


class BatchedEnv:
    """Envs in slots [first_slot, first_slot + count) of a run."""

    def __init__(self, spec: EnvSpec, first_slot: int, count: int, started: list[int] | None = None) -> None:
        """started: per env, episodes its slot already started elsewhere (None: none)."""
        params = load_sim_params(spec.sim_params)
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

    def close(self) -> None:
        for env in self.envs:
            env.close()
