"""pick_lift: grasp a cube on the table with the gripper and hold it up (robots with a gripper).

Each episode draws a cube (size, mass, friction, colour, yaw, position: task.pick_lift ranges) from
the episode generator. Success: the cube's lowest point at least lift_height_m above the table while
it touches both jaws, for hold_s without a break; a cube pushed or flung up without both jaws on it
does not count. Failures: knocked_off_table (ends the episode at once), dropped (was held up,
then lost), collision (an arm link other than the jaws touched the table, no grasp), missed_grasp
(the jaws never held it), timeout (held, but not high or long enough).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import ConfigError
from ..robots import robot_for_joints
from .objects import CubeSpec, body_position, links_touching, remove_body, spawn_cube
from .params import TaskParams
from .pick_expert import PickLiftExpert
from .reactive_pick_expert import PickState, ReactivePickExpert, yaw_of_quaternion
from .task_base import (
    COLLISION,
    SUCCESS,
    TIMEOUT,
    HoldTimer,
    ScriptedExpert,
    arm_touches,
    moving_link_indices,
    target_in_base_frame,
)

if TYPE_CHECKING:
    from .world import SimWorld

KNOCKED_OFF = "knocked_off_table"
DROPPED = "dropped"
MISSED_GRASP = "missed_grasp"
LIFTED_M = 0.01  # [m] cube bottom above the table that counts as "it was up" (dropped vs missed)
FALLEN_M = 0.02  # [m] cube center below the table top: off the table


class PickLiftTask:
    """Lift a randomized cube with both jaws and hold it (see the module docstring)."""

    name = "pick_lift"
    failure_categories = (KNOCKED_OFF, DROPPED, COLLISION, MISSED_GRASP, TIMEOUT)

    def __init__(self, params: TaskParams) -> None:
        self.params = params
        self.pick = params.pick_lift
        self.cube = -1
        self.spec: CubeSpec | None = None
        self.rgba = (0.5, 0.5, 0.5, 1.0)
        self._jaws: set[int] = set()
        self._arm_links: set[int] = set()
        self.gripper_joint = ""
        self._timer = HoldTimer()
        self._was_up_in_hand = False
        self._collided = False
        self._held_s = 0.0

    def build(self, world: SimWorld) -> None:
        robot = robot_for_joints(world.all_joint_names)
        if robot is None or robot.gripper is None or not robot.jaw_links:
            raise ConfigError(world.params.source, "task.name", self.name,
                              f"needs a robot with a gripper and jaw links (so101); {world.model.source} has none")
        index = world._link_index  # noqa: SLF001 - the world's own link table
        missing = [n for n in robot.jaw_links if n not in index]
        if missing:
            raise ConfigError(world.params.source, "task.name", self.name,
                              f"jaw links {missing} not in {world.model.source}")
        self.gripper_joint = robot.gripper
        self._jaws = {index[n] for n in robot.jaw_links}
        self._arm_links = moving_link_indices(world, exclude=(*robot.jaw_links, world.ee_link))

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        p = self.pick
        size = float(rng.uniform(*p.size_m))
        rgb = rng.uniform(p.rgb[0], p.rgb[1], size=3)
        xy = [float(rng.uniform(*p.region[0])), float(rng.uniform(*p.region[1]))]
        self.spec = CubeSpec(size_m=size, mass_kg=float(rng.uniform(*p.mass_kg)),
                             lateral_friction=float(rng.uniform(*p.friction)),
                             rgba=(float(rgb[0]), float(rgb[1]), float(rgb[2]), 1.0),
                             position=(xy[0], xy[1], size / 2.0), yaw_rad=float(rng.uniform(*p.yaw_rad)))
        self.rgba = self.spec.rgba
        remove_body(world.client, self.cube)
        self.cube = spawn_cube(world.client, self.spec)
        self._timer.reset()
        self._was_up_in_hand = self._collided = False
        self._held_s = 0.0
        return {"target": list(self.spec.position), "cube": self.spec.summary()}

    def cube_position(self, world: SimWorld) -> np.ndarray:
        """Cube center (3,) [m], world frame."""
        return body_position(world.client, self.cube)

    def cube_bottom_height(self, world: SimWorld) -> float:
        """Lowest point of the cube above the table top (z = 0) [m]."""
        return float(world.client.getAABB(self.cube)[0][2])

    def jaws_touching_cube(self, world: SimWorld) -> tuple[int, int]:
        """(how many jaws touch the cube after the last physics step, how many jaws there are)."""
        return len(self._jaws & links_touching(world.client, self.cube, world.robot)), len(self._jaws)

    def jaws_touching_table(self, world: SimWorld) -> bool:
        """Whether a jaw touches the table after the last physics step."""
        return bool(self._jaws & links_touching(world.client, world.table, world.robot))

    def jaws_on_cube(self, world: SimWorld) -> bool:
        """Whether both jaws touch the cube after the last physics step."""
        return self._jaws <= links_touching(world.client, self.cube, world.robot)

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        # Every physics step: the cube's height only while both jaws touch it (the only time it can
        # count), the figures of the outcome only once the episode ends.
        center = self.cube_position(world)
        gripped = self.jaws_on_cube(world)
        bottom = self.cube_bottom_height(world) if gripped else None
        if gripped and bottom >= LIFTED_M:
            self._was_up_in_hand = True
        self._held_s = self._timer.update(gripped and bottom >= self.pick.lift_height_m, world.time_ns)
        if not self._collided and arm_touches(world, world.table, self._arm_links):
            self._collided = True

        def result() -> dict[str, Any]:
            return {"final_distance_m": float(np.linalg.norm(world.ee_position() - center)),
                    "cube_height_m": self.cube_bottom_height(world) if bottom is None else bottom,
                    "held_s": self._held_s}

        return self._episode_end(world, self._held_s >= self.pick.hold_s - 1e-9, center, result)

    def _episode_end(self, world: SimWorld, succeeded: bool, center: np.ndarray,
                     result: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """The outcome once the episode is over (success, the cube off the table, the time-out), else
        None; `center` (3,) [m] is the cube's, `result()` the task's figures for the outcome (made
        only for an outcome: this runs every physics step)."""
        if succeeded:
            return {"success": True, "reason": SUCCESS, **result()}
        if center[2] < -FALLEN_M:
            return {"success": False, "reason": KNOCKED_OFF, **result()}
        if world.episode_elapsed_s() >= self.params.timeout_s:
            return {"success": False, "reason": TIMEOUT, **result()}
        return None

    def target_position(self) -> np.ndarray:
        """The cube's spawn position (3,) [m] (the live position: cube_position)."""
        return np.zeros(3) if self.spec is None else np.asarray(self.spec.position, dtype=float)

    def classify_failure(self, world: SimWorld, outcome: dict[str, Any]) -> str:
        """success | knocked_off_table | dropped | collision | missed_grasp | timeout."""
        if outcome.get("success"):
            return SUCCESS
        if outcome.get("reason") == KNOCKED_OFF or self.cube_position(world)[2] < -FALLEN_M:
            return KNOCKED_OFF
        gripped_now = self.jaws_on_cube(world) and self.cube_bottom_height(world) >= LIFTED_M
        if self._was_up_in_hand and not gripped_now:
            return DROPPED
        if not self._was_up_in_hand:
            return COLLISION if self._collided else MISSED_GRASP
        return TIMEOUT

    def privileged_observation(self, world: SimWorld) -> dict[str, np.ndarray]:
        """cube_pos (3,) [m], cube_quat (4,) (x, y, z, w), cube_size_m, cube_mass_kg, cube_friction
        (1,) each, jaw_contacts (2,) 0/1 per jaw, hold_progress (1,), tool_pos (3,) [m]; world frame."""
        assert self.spec is not None
        touching = links_touching(world.client, self.cube, world.robot)
        quat = world.client.getBasePositionAndOrientation(self.cube)[1]
        return {"cube_pos": self.cube_position(world), "cube_quat": np.asarray(quat, dtype=float),
                "cube_size_m": np.array([self.spec.size_m]), "cube_mass_kg": np.array([self.spec.mass_kg]),
                "cube_friction": np.array([self.spec.lateral_friction]),
                "jaw_contacts": np.array([1.0 if j in touching else 0.0 for j in sorted(self._jaws)]),
                "hold_progress": np.array([min(1.0, self._held_s / self.pick.hold_s)]),
                "tool_pos": world.ee_position()}

    def reward_terms(self, world: SimWorld) -> dict[str, float]:
        """tool_to_cube_m [m]; grasp (1 while both jaws touch the cube); cube_height_m [m] of its
        lowest point, capped at lift_height_m; holding (1 while the success condition is met)."""
        return {"tool_to_cube_m": float(np.linalg.norm(world.ee_position() - self.cube_position(world))),
                "grasp": 1.0 if self.jaws_on_cube(world) else 0.0,
                "cube_height_m": min(self.pick.lift_height_m, self.cube_bottom_height(world)),
                "holding": 1.0 if self._timer.since_ns is not None else 0.0}

    def make_expert(self, world: SimWorld) -> ScriptedExpert:
        return PickLiftScriptedExpert(world, self)

    def make_reactive_expert(self, world: SimWorld) -> ScriptedExpert:
        """The expert that decides from the state alone (a DAgger labeller: teacher: expert)."""
        return PickLiftReactiveScriptedExpert(world, self)

    def state(self) -> Any:
        return self._timer.state(), self._was_up_in_hand, self._collided, self._held_s

    def restore(self, state: Any) -> None:
        timer, self._was_up_in_hand, self._collided, self._held_s = state
        self._timer.restore(timer)


class PickLiftScriptedExpert:
    """sim/pick_expert.PickLiftExpert (or a subclass: `expert_class`) on the task's privileged cube
    pose (robot base frame)."""

    def __init__(self, world: SimWorld, task: PickLiftTask,
                 expert_class: type[PickLiftExpert] = PickLiftExpert) -> None:
        home = world.params.home_pose(world.joint_names)
        home_q = np.clip([home.get(n, 0.0) for n in world.joint_names], world.lower, world.upper)
        self.task = task
        self.expert = expert_class(world.model, world.joint_names, task.gripper_joint, world.ee_link, home_q)

    def cube_in_base(self, world: SimWorld) -> tuple[np.ndarray, float, float]:
        """The cube's center (3,) [m] and yaw [rad] in the robot base frame, and its edge [m]."""
        spec = self.task.spec
        assert spec is not None, "start after world.reset"
        base = world.link_pose(world._root_link_name())  # noqa: SLF001 - the world's own root frame
        base_yaw = float(np.arctan2(base[1, 0], base[0, 0]))
        return target_in_base_frame(world, self.task.cube_position(world)), spec.yaw_rad - base_yaw, spec.size_m

    def start(self, world: SimWorld) -> None:
        self.expert.plan(*self.cube_in_base(world))

    def command(self, world: SimWorld) -> np.ndarray:
        return self.expert.command(world.episode_elapsed_s(), world.joint_positions())


class PickLiftReactiveScriptedExpert:
    """sim/reactive_pick_expert.ReactivePickExpert on the task's privileged state, read afresh at
    every command (robot base frame): it plans nothing at the start and recovers from a miss."""

    def __init__(self, world: SimWorld, task: PickLiftTask) -> None:
        home = world.params.home_pose(world.joint_names)
        home_q = np.clip([home.get(n, 0.0) for n in world.joint_names], world.lower, world.upper)
        self.task = task
        self.expert = ReactivePickExpert(world.model, world.joint_names, task.gripper_joint, world.ee_link, home_q)

    def state(self, world: SimWorld) -> PickState:
        """The expert's view of the world now (base frame)."""
        spec = self.task.spec
        assert spec is not None, "command after world.reset"
        base = world.link_pose(world._root_link_name())  # noqa: SLF001 - the world's own root frame
        base_yaw = float(np.arctan2(base[1, 0], base[0, 0]))
        quat = world.client.getBasePositionAndOrientation(self.task.cube)[1]
        touching, jaws = self.task.jaws_touching_cube(world)
        center = self.task.cube_position(world)
        table = target_in_base_frame(world, np.array([center[0], center[1], 0.0]))
        return PickState(q=world.joint_positions(),
                         cube_center=target_in_base_frame(world, center),
                         cube_yaw_rad=yaw_of_quaternion(np.asarray(quat)) - base_yaw, cube_size_m=spec.size_m,
                         table_z=float(table[2]), jaws_on_cube=touching == jaws, jaw_touches_cube=touching > 0,
                         jaw_touches_table=self.task.jaws_touching_table(world))

    def start(self, world: SimWorld) -> None:
        """Nothing to plan: every command reads the state."""

    def command(self, world: SimWorld) -> np.ndarray:
        return self.expert.target(self.state(world))
