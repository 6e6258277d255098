"""Tasks behind one small interface, so push/pick tasks can be added next to the reach task.

A task builds its bodies once, places them at each episode reset, and says when the episode is over.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .params import TaskParams

if TYPE_CHECKING:
    from .world import SimWorld

SUCCESS = "success"
TIMEOUT = "timeout"


class Task(Protocol):
    """What SimWorld needs from a task."""

    name: str

    def build(self, world: SimWorld) -> None:
        """Create the task's bodies in the world (once)."""

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        """Start an episode: place objects (drawn from rng); return what was chosen."""

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        """None while the episode runs; {success, reason, final_distance_m} once it is over."""

    def target_position(self) -> np.ndarray:
        """The privileged goal position (3,) [m], world frame."""


class ReachTask:
    """Bring the tool point within success_radius_m of a colored sphere placed at random on the table."""

    name = "reach"

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


def make_task(params: TaskParams) -> Task:
    """The task named in the sim params."""
    if params.name == "reach":
        return ReachTask(params)
    raise ValueError(f"unknown task {params.name!r}")
