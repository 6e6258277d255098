"""The privileged task environment: one SimWorld stepped at the teacher's policy rate.

The teacher sees what the student cannot: joint positions and velocities, the tool point and the
true target, the episode's randomized physics (gain, damping, friction and mass scales, actuation
latency, gravity), the push acting on the arm, its own last action, and the task's own privileged
terms (sim/task_base.Task.privileged_observation: the hold progress of reach_hold; the cube's pose,
size, mass, friction and the jaw contacts of pick_lift). Its action is a change of the joint
position targets, integrated and sent through `SimWorld.set_command`: the same latency queue and
PD (or servo) actuator model the sim node runs, so the teacher learns under the robot's latency.
Time is the world's sim time; nothing here reads a wall clock.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ConfigError
from ..sim.params import SimParams, with_task
from ..sim.world import SimWorld, episode_seed
from .rewards import RewardConfig, StepState


@dataclass(frozen=True)
class EnvConfig:
    """policy_hz: teacher decisions per second [Hz] (the chunk spacing of the student is 1/policy_hz).
    episode_s: episode time limit [s] (a time-out, bootstrapped by PPO, not a failure signal).
    action_scale_rad: joint target change for an action of 1 [rad per decision].
    randomize: per-episode domain randomization from the sim params. pushes: random pushes on.
    task: sim/tasks.py task name ("" = the sim params' task.name).
    observe_time: the fraction of the episode left is part of the observation. False holds it at
    1: a teacher cloned from a scripted expert otherwise learns *when* to act (close the jaw at
    2.7 s) rather than *where* (the jaw around the cube), and an arm that started 0.1 s late (the
    graph's start hold and hand-over ramp) closes short of the cube.
    """

    policy_hz: float = 20.0
    episode_s: float = 5.0
    action_scale_rad: float = 0.08
    randomize: bool = True
    pushes: bool = True
    task: str = ""
    observe_time: bool = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, source: str = "env") -> EnvConfig:
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        for key in data:
            if key not in known:
                raise ConfigError(source, f"env.{key}", data[key], f"unknown field (known: {sorted(known)})")
        config = cls(**data)
        for name in ("policy_hz", "episode_s", "action_scale_rad"):
            value = getattr(config, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(source, f"env.{name}", value, "must be a number > 0")
        if not isinstance(config.task, str):
            raise ConfigError(source, "env.task", config.task, "must be a task name (sim/tasks.py) or empty")
        if not isinstance(config.observe_time, bool):
            raise ConfigError(source, "env.observe_time", config.observe_time, "must be true or false")
        return config

    def time_term(self, time_left: float) -> float:
        """The observation's time term for `time_left` (fraction of the episode left, [0, 1])."""
        return time_left if self.observe_time else 1.0

    def params_for(self, params: SimParams, source: str = "env.task") -> SimParams:
        """The sim params with this env's task (unchanged when task is empty)."""
        return with_task(params, self.task, source) if self.task else params


# Task terms the base layout already holds (in the robot base frame): not repeated.
_BASE_TASK_TERMS = ("target_pos", "tool_pos")


def task_observation_terms(world: SimWorld) -> dict[str, np.ndarray]:
    """The task's privileged terms beyond target and tool point (name -> values, world frame, SI
    units), in the task's order; names prefixed `task_` in the layout. Empty for reach."""
    return {f"task_{name}": np.asarray(value, dtype=float).ravel()
            for name, value in world.task.privileged_observation(world).items() if name not in _BASE_TASK_TERMS}


def observation_layout(n_joints: int, n_links: int, task_terms: Mapping[str, int] | None = None) -> dict[str, int]:
    """Names and sizes of the teacher's observation terms, in order (what its checkpoint records);
    task_terms (name -> size, from task_observation_terms) come last."""
    return {
        "joint_pos": n_joints,        # [rad] relative to the home pose
        "joint_vel": n_joints,        # [rad/s] x 0.1
        "command_offset": n_joints,   # [rad] integrated target - measured position
        "tool_pos": 3,                # [m] robot base frame
        "target_pos": 3,              # [m] robot base frame
        "target_minus_tool": 3,       # [m]
        "kp_scale": n_joints, "kd_scale": n_joints, "damping_scale": n_joints, "friction_scale": n_joints,
        "mass_scale": n_links,
        "latency": 1,                 # [s] x 10
        "gravity": 3,                 # [m/s^2] / 9.81
        "push_force": 3,              # [N] x 0.1, world frame, the push acting now (0 between pushes)
        "last_action": n_joints,      # normalized [-1, 1]
        "time_left": 1,               # fraction of episode_s left
        **dict(task_terms or {}),
    }


class TaskEnv:
    """One privileged episode of the world's task at a time on its own SimWorld (no rendering).

    Episode m of the env in slot `slot` of a batch of `num_slots` has index
    episode_base + m * num_slots + slot and seed episode_seed(run_seed, index): the same episodes
    whatever the number of workers.
    """

    def __init__(self, params: SimParams, robot_description: str, config: EnvConfig, rewards: RewardConfig,
                 run_seed: int, slot: int = 0, num_slots: int = 1, episode_base: int = 0,
                 first_episode: int = 0) -> None:
        self.config = config
        self.rewards = rewards
        self.run_seed = int(run_seed)
        self.slot = int(slot)
        self.num_slots = int(num_slots)
        self.episode_base = int(episode_base)
        params = config.params_for(params)
        self.world = SimWorld(params, robot_description, seed=run_seed, render=False, pushes=config.pushes)
        self.n = len(self.world.joint_names)
        physics_dt = params.physics.dt_s
        self.physics_per_step = max(1, int(round(1.0 / (config.policy_hz * physics_dt))))
        self.step_s = self.physics_per_step * physics_dt
        self.max_steps = int(round(config.episode_s / self.step_s))
        self.home = params.home_pose(self.world.joint_names)
        self.home_q = np.clip([self.home.get(name, 0.0) for name in self.world.joint_names],
                              self.world.lower, self.world.upper)
        self.layout = observation_layout(self.n, len(self.world.randomization.mass_scale),
                                         {k: v.size for k, v in task_observation_terms(self.world).items()})
        rewards.check_task(self.world.task.name, self.world.task.reward_terms(self.world))
        self.obs_dim = sum(self.layout.values())
        self.episodes_started = int(first_episode)  # > 0: a replacement worker continues the slot
        self.info: dict[str, Any] = {}
        self.reset()

    # -- episodes ---------------------------------------------------------------------------------
    def reset(self, index: int | None = None) -> np.ndarray:
        """Start the slot's next episode (or episode `index` of the run); returns the observation."""
        if index is None:
            index = self.episode_base + self.episodes_started * self.num_slots + self.slot
            self.episodes_started += 1
        self.info = self.world.reset(randomize=self.config.randomize, seed=episode_seed(self.run_seed, index))
        self.info["index"] = int(index)
        self.target = self.world.joint_positions().copy()
        self.world.set_command(self.target)
        self.last_action = np.zeros(self.n)
        self.steps = 0
        self.base_inverse = np.linalg.inv(self.world.link_pose(self.world._root_link_name()))  # noqa: SLF001
        return self.observe()

    # -- observation ------------------------------------------------------------------------------
    def _in_base(self, point: np.ndarray) -> np.ndarray:
        return (self.base_inverse @ np.append(point, 1.0))[:3]

    def observe(self) -> np.ndarray:
        """The privileged observation (obs_dim,) float32, terms in `layout` order."""
        return privileged_observation(self.world, self.home_q, self.base_inverse, self.target, self.last_action,
                                      self.config.time_term(1.0 - self.steps / self.max_steps))

    def pushes_started(self, elapsed_s: float) -> int:
        """Pushes of this episode that started by `elapsed_s` [s]."""
        return sum(1 for push in self.info.get("pushes", ()) if push["start_s"] <= elapsed_s)

    # -- stepping ---------------------------------------------------------------------------------
    def command_for(self, action: np.ndarray) -> np.ndarray:
        """The joint targets (n,) [rad] an action (n,) produces from the current integrated target."""
        a = np.clip(np.nan_to_num(np.asarray(action, dtype=float), nan=0.0), -1.0, 1.0)
        return np.clip(self.target + self.config.action_scale_rad * a, self.world.lower, self.world.upper)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Apply one action for 1/policy_hz of sim time.

        Returns (observation, reward, terminated (success), truncated (time limit), info); info has
        the reward terms and, when the episode ended, `episode` (index, seed, success, steps,
        final distance [m], pushes applied). The caller resets (see BatchedEnv).
        """
        a = np.clip(np.nan_to_num(np.asarray(action, dtype=float), nan=0.0), -1.0, 1.0)
        self.target = self.command_for(a)
        w = self.world
        w.set_command(self.target)
        w.step(self.physics_per_step)
        self.steps += 1
        outcome = w.episode_outcome()
        success = bool(outcome and outcome.get("success"))
        tool = w.ee_position()
        distance = float(np.linalg.norm(tool - w.target_position()))
        state = StepState(distance_m=distance, success=success, action=a, last_action=self.last_action,
                          q=w.joint_positions(), qd=w.joint_velocities(), lower=w.lower, upper=w.upper,
                          tool_height_m=float(tool[2]), task=w.task.reward_terms(w))
        reward, terms = self.rewards.reward(state)
        self.last_action = a
        terminated = success
        truncated = not terminated and (self.steps >= self.max_steps or outcome is not None)
        info: dict[str, Any] = {"terms": terms}
        if terminated or truncated:
            ended = outcome or {"success": False, "final_distance_m": distance}  # cut by episode_s
            info["episode"] = {"index": self.info["index"], "seed": self.info["seed"], "success": success,
                               "steps": self.steps, "duration_s": self.steps * self.step_s,
                               "final_distance_m": distance, "failure": w.task.classify_failure(w, ended),
                               "pushes_applied": self.pushes_started(w.episode_elapsed_s())}
        return self.observe(), reward, terminated, truncated, info

    def close(self) -> None:
        self.world.close()


def push_force_at(schedule: list[dict[str, Any]], elapsed_s: float) -> np.ndarray:
    """The push force acting at `elapsed_s` [s] into the episode (3,) [N], world frame (0 if none)."""
    force = np.zeros(3)
    for push in schedule:
        if push["start_s"] <= elapsed_s < push["start_s"] + push["duration_s"]:
            force += np.asarray(push["force_n"], dtype=float)
    return force


def privileged_observation(world: SimWorld, home_q: np.ndarray, base_inverse: np.ndarray, command: np.ndarray,
                           last_action: np.ndarray, time_left: float) -> np.ndarray:
    """The teacher's observation of `world` now (obs_dim,) float32, terms in observation_layout order.

    home_q (n,) [rad]; base_inverse (4, 4): world -> robot base; command (n,) [rad]: the integrated
    joint target; last_action (n,) normalized; time_left: fraction of the episode left [0, 1].
    """
    n = len(world.joint_names)
    q = world.joint_positions()
    rand = world.randomization

    def in_base(point: np.ndarray) -> np.ndarray:
        return (base_inverse @ np.append(point, 1.0))[:3]

    tool, target = in_base(world.ee_position()), in_base(world.target_position())
    parts = [
        q - home_q, 0.1 * world.joint_velocities(), command - q, tool, target, target - tool,
        np.broadcast_to(rand.kp_scale, (n,)), np.broadcast_to(rand.kd_scale, (n,)),
        np.broadcast_to(rand.damping_scale, (n,)), np.broadcast_to(rand.friction_scale, (n,)),
        rand.mass_scale, [10.0 * world.actuation_latency_s], np.asarray(rand.gravity) / 9.81,
        0.1 * push_force_at(world.push_schedule(), world.episode_elapsed_s()), last_action, [time_left],
        *task_observation_terms(world).values(),
    ]
    return np.concatenate([np.asarray(p, dtype=float).ravel() for p in parts]).astype(np.float32)
