"""Reward terms of the privileged reach environment, named and weighted in YAML.

A training config lists the terms it wants with a weight each:

    rewards:
      distance: 2.0          # -||tool - target|| [m]
      distance_fine: 1.0     # exp(-||tool - target|| / 0.05 m), in [0, 1]
      success: 10.0          # 1 on the step the task reports success
      action_rate: 0.05      # -||a_t - a_{t-1}||^2 (normalized actions)
      joint_limit: 1.0       # -sum over joints of how far inside the last 10 % of the range [0, 1]

Tasks add their own quantities (sim/task_base.Task.reward_terms), weighted the same way: `holding`
(reach_hold, pick_lift, pick_place: 1 while the success condition holds), `tool_speed` (reach_hold),
`grasp`, `cube_height` and `tool_to_cube` (pick_lift, pick_place), `cube_to_zone` (pick_place).
The reward of a policy step is the sum of weight * term. Unknown names, and a task term the env's
task does not provide, fail at start-up naming the field; weights must be finite numbers.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import ConfigError

FINE_DISTANCE_SCALE_M = 0.05  # [m] length scale of the fine distance kernel
JOINT_LIMIT_MARGIN = 0.1  # fraction of each joint's range counted as "near the limit"


@dataclass(frozen=True)
class StepState:
    """What the reward terms see after one policy step.

    distance_m [m] tool point to target; success: the task reported success this step;
    action, last_action: normalized actions (n,) in [-1, 1]; q (n,) [rad] measured joints;
    lower, upper (n,) [rad] joint limits; qd (n,) [rad/s]; tool_height_m [m] above the table;
    task: the task's reward quantities now (Task.reward_terms: name -> value, SI units).
    """

    distance_m: float
    success: bool
    action: np.ndarray
    last_action: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    tool_height_m: float
    task: Mapping[str, float] = field(default_factory=dict)


def _distance(s: StepState) -> float:
    return -s.distance_m


def _distance_fine(s: StepState) -> float:
    return math.exp(-s.distance_m / FINE_DISTANCE_SCALE_M)


def _success(s: StepState) -> float:
    return 1.0 if s.success else 0.0


def _action_rate(s: StepState) -> float:
    return -float(np.sum((s.action - s.last_action) ** 2))


def _joint_limit(s: StepState) -> float:
    span = s.upper - s.lower
    inside = np.minimum(s.q - s.lower, s.upper - s.q) / np.maximum(span, 1e-9)
    return -float(np.sum(np.clip((JOINT_LIMIT_MARGIN - inside) / JOINT_LIMIT_MARGIN, 0.0, None)))


def _joint_velocity(s: StepState) -> float:
    return -float(np.sum(s.qd ** 2))


def _table_contact(s: StepState) -> float:
    return -1.0 if s.tool_height_m < 0.005 else 0.0


def _arm_contact(s: StepState) -> float:
    return -float(s.task["arm_table_contact"])


def _holding(s: StepState) -> float:
    return float(s.task["holding"])


def _tool_speed(s: StepState) -> float:
    return -float(s.task["tool_speed_m_s"])


def _grasp(s: StepState) -> float:
    return float(s.task["grasp"])


def _cube_height(s: StepState) -> float:
    return float(s.task["cube_height_m"])


def _tool_to_cube(s: StepState) -> float:
    return -float(s.task["tool_to_cube_m"])


def _cube_to_zone(s: StepState) -> float:
    return -float(s.task["cube_to_zone_m"])


# Terms computed from a task's own quantity: term -> the Task.reward_terms key it needs.
TASK_QUANTITY = {"arm_contact": "arm_table_contact", "holding": "holding", "tool_speed": "tool_speed_m_s",
                 "grasp": "grasp",
                 "cube_height": "cube_height_m", "tool_to_cube": "tool_to_cube_m",
                 "cube_to_zone": "cube_to_zone_m"}

# name -> (term, one-line description with units)
TERMS: dict[str, tuple[Callable[[StepState], float], str]] = {
    "distance": (_distance, "-||tool - target|| [m]"),
    "distance_fine": (_distance_fine, f"exp(-||tool - target|| / {FINE_DISTANCE_SCALE_M} m) in [0, 1]"),
    "success": (_success, "1 on the step the task reports success"),
    "action_rate": (_action_rate, "-||a_t - a_(t-1)||^2 of the normalized actions"),
    "joint_limit": (_joint_limit, f"-sum of how deep each joint is in the outer {JOINT_LIMIT_MARGIN:.0%} of its range"),
    "joint_velocity": (_joint_velocity, "-||qd||^2 [rad^2/s^2]"),
    "table_contact": (_table_contact, "-1 while the tool point is within 5 mm of the table"),
    "arm_contact": (_arm_contact, "-1 while an arm link touches the table, sampled at each decision (reach_hold)"),
    "holding": (_holding, "1 while the task's success condition holds (reach_hold, pick_lift, pick_place)"),
    "tool_speed": (_tool_speed, "-speed of the tool point [m/s] (reach_hold)"),
    "grasp": (_grasp, "1 while both jaws touch the cube (pick_lift)"),
    "cube_height": (_cube_height, "height of the cube's lowest point [m], capped at the lift height (pick_lift)"),
    "tool_to_cube": (_tool_to_cube, "-||tool - cube|| [m] (pick_lift, pick_place)"),
    "cube_to_zone": (_cube_to_zone, "-horizontal distance cube -> zone center [m] (pick_place)"),
}


# The most each term can pay in one step, per unit weight (0: it never pays; None: no bound known),
# for success_outweighs_staying. cube_height is capped at pick_lift's lift height, 0.05 m by default.
STEP_MAX: dict[str, float | None] = {
    "distance": 0.0, "distance_fine": 1.0, "action_rate": 0.0, "joint_limit": 0.0, "joint_velocity": 0.0,
    "table_contact": 0.0, "arm_contact": 0.0, "holding": 1.0, "tool_speed": 0.0, "grasp": 1.0, "cube_height": None,
    "tool_to_cube": 0.0, "cube_to_zone": 0.0,
}


def success_outweighs_staying(weights: Mapping[str, float], gamma: float,
                              cube_height_cap_m: float = 0.05) -> str | None:
    """None, or why PPO may learn not to succeed. An episode ends at success (terminated, nothing
    after it), so a policy that stays just short of success keeps earning the positive per-step terms:
    up to R per step, R / (1 - gamma) over the discount horizon. When the success weight is below
    that, not succeeding pays more (a reach_hold teacher went from 88/100 after 150 PPO iterations to
    38/100 after 600 while its reward per step kept rising)."""
    per_step = 0.0
    for name, weight in weights.items():
        if name == "success" or weight <= 0:
            continue
        bound = cube_height_cap_m if name == "cube_height" else STEP_MAX.get(name)
        per_step += weight * (bound or 0.0)
    if per_step <= 0:
        return None
    horizon_value = per_step / max(1e-9, 1.0 - gamma)
    success = weights.get("success", 0.0)
    if success >= horizon_value:
        return None
    return (f"rewards.success = {success:g} is less than the positive per-step terms pay an episode that "
            f"never succeeds (up to {per_step:g} per step, {horizon_value:.0f} discounted at gamma {gamma:g}): "
            f"PPO may learn to stay short of success; give success at least {horizon_value:.0f}, or make the "
            f"shaping terms non-positive")


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward terms in use (name -> weight)."""

    weights: dict[str, float]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, source: str = "rewards") -> RewardConfig:
        if not isinstance(data, Mapping) or not data:
            raise ConfigError(source, "rewards", data, f"expected a mapping of reward terms to weights "
                                                       f"(known terms: {sorted(TERMS)})")
        weights = {}
        for name, weight in data.items():
            if name not in TERMS:
                raise ConfigError(source, f"rewards.{name}", weight,
                                  f"unknown reward term (known: {sorted(TERMS)})")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                raise ConfigError(source, f"rewards.{name}", weight, "weight must be a finite number")
            weights[str(name)] = float(weight)
        return cls(weights)

    def check_task(self, task_name: str, quantities: Mapping[str, float]) -> None:
        """Refuse (ConfigError naming the term) a task term the env's task does not provide."""
        for name in self.weights:
            key = TASK_QUANTITY.get(name)
            if key is not None and key not in quantities:
                raise ConfigError("rewards", f"rewards.{name}", self.weights[name],
                                  f"task {task_name!r} has no {key!r} (it provides: {sorted(quantities)})")

    def terms(self, state: StepState) -> dict[str, float]:
        """Each weighted term's contribution this step (name -> weight * value)."""
        return {name: weight * TERMS[name][0](state) for name, weight in self.weights.items()}

    def reward(self, state: StepState) -> tuple[float, dict[str, float]]:
        """(total reward, per-term contributions) of one policy step."""
        parts = self.terms(state)
        return float(sum(parts.values())), parts
