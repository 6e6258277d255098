"""The tasks, behind one interface (sim/task_base.Task), and the registry that makes them by name.

reach (the original, kept as it was: success latched on the first step the tool point is within
success_radius_m of the target sphere), reach_hold (reach it, then stay: within radius_m, slower
than max_speed_m_s, for hold_s without a break, while pushes keep coming), pick_lift
(sim/task_pick_lift.py: lift a cube with a gripper and hold it) and pick_place
(sim/task_pick_place.py: carry that cube into a zone on the table and let go).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .expert import ReachExpert
from .params import TaskParams
from .task_base import (
    COLLISION,
    SUCCESS,
    TIMEOUT,
    HoldTimer,
    ScriptedExpert,
    Task,
    arm_touches,
    moving_link_indices,
    target_in_base_frame,
    tool_speed,
)

if TYPE_CHECKING:
    from .world import SimWorld

__all__ = ["EXPERT_KINDS", "REACTIVE_EXPERT_TASKS", "SUCCESS", "TIMEOUT", "ReachHoldTask", "ReachTask", "Task",
           "make_scripted_expert", "make_task"]

# The scripted experts a task may have: "timed" (Task.make_expert: every task, a plan fixed at the
# start) and "reactive" (Task.make_reactive_expert: the phase decided from the state at every call,
# so it recovers; only the tasks below have one).
EXPERT_KINDS = ("timed", "reactive")
REACTIVE_EXPERT_TASKS = ("pick_lift",)


class ReachScriptedExpert:
    """The IK reach teacher as a controller: from the episode's start pose to the IK goal of the
    target along a smooth joint-space line (ReachExpert's speed), then holds the goal."""

    def __init__(self, world: SimWorld) -> None:
        home = world.params.home_pose(world.joint_names)
        self.home_q = np.clip([home.get(n, 0.0) for n in world.joint_names], world.lower, world.upper)
        self.expert = ReachExpert(world.model, world.joint_names, world.ee_link, self.home_q)
        self._start = self.home_q.copy()
        self._goal = self.home_q.copy()
        self._duration_s = 1.0

    def start(self, world: SimWorld) -> None:
        self._start = world.joint_positions()
        self._goal = self.expert.solve_ik(target_in_base_frame(world, world.target_position()))
        distance = float(np.max(np.abs(self._goal - self._start)))
        cfg = self.expert.config
        self._duration_s = max(cfg.min_duration_s, distance / cfg.speed_rad_s)

    def command(self, world: SimWorld) -> np.ndarray:
        f = min(1.0, world.episode_elapsed_s() / self._duration_s)
        f = f * f * (3.0 - 2.0 * f)
        return self._start + f * (self._goal - self._start)


class ReachTask:
    """Bring the tool point within success_radius_m of a colored sphere placed at random on the table."""

    name = "reach"
    failure_categories = ("joint_limit", "table_contact", "timeout_near", "timeout_far")

    def __init__(self, params: TaskParams) -> None:
        self.params = params
        self._body = -1
        self._target = np.zeros(3)
        self.rgba = tuple(params.target_rgba)

    def build(self, world: SimWorld) -> None:
        client = world.client
        shape = client.createVisualShape(client.GEOM_SPHERE, radius=self.params.target_radius_m,
                                         rgbaColor=list(self.params.target_rgba))
        # Visual only: the arm must not push the goal away.
        self._body = client.createMultiBody(baseMass=0.0, baseCollisionShapeIndex=-1,
                                            baseVisualShapeIndex=shape, basePosition=[0.0, 0.0, -1.0])

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        region = np.asarray(self.params.target_region, dtype=float)
        self.set_target(world, rng.uniform(region[:, 0], region[:, 1]))
        return {"target": self._target.tolist()}

    def set_target(self, world: SimWorld, position: np.ndarray) -> None:
        """Move the target to `position` (3,) [m] (world frame), e.g. to replay a recorded episode."""
        self._target = np.asarray(position, dtype=float).reshape(3).copy()
        world.client.resetBasePositionAndOrientation(self._body, self._target.tolist(), [0.0, 0.0, 0.0, 1.0])

    def set_color(self, world: SimWorld, rgba: tuple[float, float, float, float]) -> None:
        self.rgba = tuple(float(c) for c in rgba)
        world.client.changeVisualShape(self._body, -1, rgbaColor=list(self.rgba))

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        distance = float(np.linalg.norm(world.ee_position() - self._target))
        if distance <= self.params.success_radius_m:
            return {"success": True, "reason": SUCCESS, "final_distance_m": distance}
        if world.episode_elapsed_s() >= self.params.timeout_s:
            return {"success": False, "reason": TIMEOUT, "final_distance_m": distance}
        return None

    def target_position(self) -> np.ndarray:
        return self._target.copy()

    def classify_failure(self, world: SimWorld, outcome: dict[str, Any]) -> str:
        """success | joint_limit | table_contact | timeout_near | timeout_far (from the final state)."""
        if outcome.get("success"):
            return SUCCESS
        q = world.joint_positions()
        span = world.upper - world.lower
        if np.any((q - world.lower < 0.01 * span) | (world.upper - q < 0.01 * span)):
            return "joint_limit"
        if world.ee_position()[2] < 0.005:
            return "table_contact"
        distance = float(outcome.get("final_distance_m", np.inf))
        return "timeout_near" if distance < 0.10 else "timeout_far"

    def privileged_observation(self, world: SimWorld) -> dict[str, np.ndarray]:
        """target_pos (3,) [m] and tool_pos (3,) [m], world frame."""
        return {"target_pos": self.target_position(), "tool_pos": world.ee_position()}

    def reward_terms(self, world: SimWorld) -> dict[str, float]:
        """distance_m [m]: tool point to target."""
        return {"distance_m": float(np.linalg.norm(world.ee_position() - self._target))}

    def make_expert(self, world: SimWorld) -> ScriptedExpert:
        return ReachScriptedExpert(world)

    def state(self) -> Any:
        """What snapshots keep of the task beyond its target (nothing for reach)."""
        return None

    def restore(self, state: Any) -> None:
        """Undo to a state() (nothing for reach)."""


class ReachHoldTask(ReachTask):
    """Reach the target sphere, then hold there: tool point within reach_hold.radius_m [m] and slower
    than reach_hold.max_speed_m_s [m/s] for reach_hold.hold_s [s] without a break. A swipe through
    the target does not count; pushes (when on) keep coming during the hold."""

    name = "reach_hold"
    failure_categories = (COLLISION, "unsteady", TIMEOUT)

    def __init__(self, params: TaskParams) -> None:
        super().__init__(params)
        self.hold = params.reach_hold
        self._timer = HoldTimer()
        self._collided = False
        self._reached = False
        self._arm_links: set[int] = set()
        self._held_s = 0.0

    def build(self, world: SimWorld) -> None:
        super().build(world)
        self._arm_links = moving_link_indices(world)

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        self._timer.reset()
        self._collided = self._reached = False
        self._held_s = 0.0
        return super().reset(world, rng)

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        distance = float(np.linalg.norm(world.ee_position() - self._target))
        inside = distance <= self.hold.radius_m
        self._reached = self._reached or inside
        steady = inside and tool_speed(world) < self.hold.max_speed_m_s
        self._held_s = self._timer.update(steady, world.time_ns)
        if not self._collided and arm_touches(world, world.table, self._arm_links):
            self._collided = True
        if self._held_s >= self.hold.hold_s - 1e-9:
            return {"success": True, "reason": SUCCESS, "final_distance_m": distance, "held_s": self._held_s}
        if world.episode_elapsed_s() >= self.params.timeout_s:
            return {"success": False, "reason": TIMEOUT, "final_distance_m": distance, "held_s": self._held_s}
        return None

    def classify_failure(self, world: SimWorld, outcome: dict[str, Any]) -> str:
        """success | collision (an arm link touched the table) | unsteady (reached, never held
        hold_s) | timeout (never within radius_m)."""
        if outcome.get("success"):
            return SUCCESS
        if self._collided:
            return COLLISION
        return "unsteady" if self._reached else TIMEOUT

    def privileged_observation(self, world: SimWorld) -> dict[str, np.ndarray]:
        """target_pos, tool_pos (3,) [m] world frame; hold_progress (1,): held time / hold_s."""
        return {**super().privileged_observation(world),
                "hold_progress": np.array([min(1.0, self._held_s / self.hold.hold_s)])}

    def reward_terms(self, world: SimWorld) -> dict[str, float]:
        """distance_m [m]; tool_speed_m_s [m/s]; holding (1 while the hold condition is met);
        arm_table_contact (1 while an arm link touches the table: what ends as `collision`)."""
        return {**super().reward_terms(world), "tool_speed_m_s": tool_speed(world),
                "holding": 1.0 if self._timer.since_ns is not None else 0.0,
                "arm_table_contact": 1.0 if arm_touches(world, world.table, self._arm_links) else 0.0}

    def state(self) -> Any:
        return self._timer.state(), self._collided, self._held_s, self._reached

    def restore(self, state: Any) -> None:
        timer, self._collided, self._held_s, self._reached = state
        self._timer.restore(timer)


def make_scripted_expert(world: SimWorld, kind: str = "timed") -> ScriptedExpert:
    """The world's task's scripted expert of `kind` (EXPERT_KINDS); ValueError naming the task
    when it has none of that kind."""
    if kind == "timed":
        return world.task.make_expert(world)
    make = getattr(world.task, "make_reactive_expert", None) if kind == "reactive" else None
    if make is None:
        raise ValueError(f"task {world.task.name!r} has no {kind!r} scripted expert "
                         f"(reactive: {', '.join(REACTIVE_EXPERT_TASKS)}; kinds: {', '.join(EXPERT_KINDS)})")
    return make(world)


def make_task(params: TaskParams) -> Task:
    """The task named in the sim params (task.name)."""
    if params.name == "reach":
        return ReachTask(params)
    if params.name == "reach_hold":
        return ReachHoldTask(params)
    if params.name == "pick_lift":
        from .task_pick_lift import PickLiftTask

        return PickLiftTask(params)
    if params.name == "pick_place":
        from .task_pick_place import PickPlaceTask

        return PickPlaceTask(params)
    raise ValueError(f"unknown task {params.name!r}")
