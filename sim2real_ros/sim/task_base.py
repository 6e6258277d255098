"""What every task declares (the Task protocol) and the pieces tasks share.

A task builds its bodies once, draws each episode's layout from the episode generator (its reset
distribution), exposes its privileged state (the teacher's observation terms and reward terms),
says each physics step whether the episode is over (success held over time, or a failure in one of
its named categories), and provides a scripted expert that solves it from privileged state.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..core.timebase import NS_PER_S

if TYPE_CHECKING:
    from .world import SimWorld

SUCCESS = "success"
TIMEOUT = "timeout"
COLLISION = "collision"


class ScriptedExpert(Protocol):
    """A privileged controller: plans at the episode start, then gives joint targets."""

    def start(self, world: SimWorld) -> None:
        """Plan the episode from the world's privileged state (call right after world.reset)."""

    def command(self, world: SimWorld) -> np.ndarray:
        """Joint targets (n,) [rad] over world.joint_names for now (world.episode_elapsed_s)."""


class Task(Protocol):
    """What SimWorld (and the rollouts, evaluations and experts) need from a task."""

    name: str
    failure_categories: tuple[str, ...]

    def build(self, world: SimWorld) -> None:
        """Create the task's bodies in the world (once)."""

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        """Start an episode: place objects (drawn from rng); return what was chosen."""

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        """Called once per physics step: None while the episode runs; {success, reason,
        final_distance_m, ...} once it is over."""

    def target_position(self) -> np.ndarray:
        """The privileged goal position (3,) [m], world frame."""

    def classify_failure(self, world: SimWorld, outcome: dict[str, Any]) -> str:
        """The category of a finished (or cut) episode: 'success' or one of failure_categories."""

    def privileged_observation(self, world: SimWorld) -> dict[str, np.ndarray]:
        """The task's terms of the teacher's observation (name -> array, world frame, SI units)."""

    def reward_terms(self, world: SimWorld) -> dict[str, float]:
        """The task's shaping quantities now (name -> value; a training config weights them)."""

    def make_expert(self, world: SimWorld) -> ScriptedExpert:
        """The scripted expert for this world's robot."""

    def state(self) -> Any:
        """The task's own progress within the episode (hold timers, flags), for world snapshots."""

    def restore(self, state: Any) -> None:
        """Go back to a state() of this episode."""


class HoldTimer:
    """How long a condition has held without a break, in sim time [ns] (success over time, not on
    one sample)."""

    def __init__(self) -> None:
        self.since_ns: int | None = None
        self.ever = False

    def reset(self) -> None:
        self.since_ns = None
        self.ever = False

    def update(self, holds: bool, now_ns: int) -> float:
        """Feed the condition at sim time now_ns [ns]; returns how long it has held [s] (0 on a break)."""
        if not holds:
            self.since_ns = None
            return 0.0
        self.ever = True
        if self.since_ns is None:
            self.since_ns = now_ns
        return (now_ns - self.since_ns) / NS_PER_S

    def state(self) -> tuple[int | None, bool]:
        return self.since_ns, self.ever

    def restore(self, state: tuple[int | None, bool]) -> None:
        self.since_ns, self.ever = state


def moving_link_indices(world: SimWorld, exclude: tuple[str, ...] = ()) -> set[int]:
    """PyBullet link indices of the robot links some movable joint moves, minus the links named in
    `exclude` (a collision test: the base and what is fixed to it stand on the table)."""
    model = world.model
    moved = {j.child for j in model.joints if any(k.movable for k in model.chain(j.child))}
    index = world._link_index  # noqa: SLF001 - the world's own link table
    return {index[name] for name in moved if name in index and name not in exclude}


def tool_speed(world: SimWorld) -> float:
    """Speed of the tool point [m/s] (world frame) after the last physics step."""
    index = world._ee_index  # noqa: SLF001 - the world's own tool link
    if index < 0:
        return float(np.linalg.norm(world.client.getBaseVelocity(world.robot)[0]))
    state = world.client.getLinkState(world.robot, index, computeLinkVelocity=1, computeForwardKinematics=True)
    return float(np.linalg.norm(state[6]))


def arm_touches(world: SimWorld, body: int, links: set[int]) -> bool:
    """Whether any of the robot's `links` touches `body` after the last physics step."""
    return any(int(p[4]) in links for p in world.client.getContactPoints(bodyA=body, bodyB=world.robot))


def target_in_base_frame(world: SimWorld, point: np.ndarray) -> np.ndarray:
    """A world point (3,) [m] in the robot base frame (what the IK experts work in)."""
    base = world.link_pose(world._root_link_name())  # noqa: SLF001 - the world's own root frame
    return np.linalg.solve(base, np.append(np.asarray(point, dtype=float), 1.0))[:3]
