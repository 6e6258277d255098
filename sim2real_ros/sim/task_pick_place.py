"""pick_place: grasp the pick_lift cube, carry it to a zone marked on the table, put it down and let go.

Each episode draws the cube as pick_lift does (task.pick_lift ranges) and then a square zone
(task.pick_place: half-side, region, at least min_separation_m from the cube), drawn on the table as
a flat coloured patch the camera sees (visual only: the cube rests on the table under it). Success:
the cube, once lifted in both jaws, with its center over the zone, resting on the table, touched by
neither jaw and still (slower than settle_speed_m_s), for settle_s without a break: a cube still
held, or one slid or shoved into the zone without a lift, does not count. Failures:
knocked_off_table, dropped (let go of more than DROP_HEIGHT_M above the table), misplaced (put
down outside the zone), collision, missed_grasp, timeout (never let go, or not settled in the zone
in time).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .objects import body_velocity, links_touching
from .params import TaskParams
from .pick_expert import PickPlaceExpert
from .task_base import COLLISION, SUCCESS, TIMEOUT, HoldTimer, ScriptedExpert, arm_touches, target_in_base_frame
from .task_pick_lift import DROPPED, FALLEN_M, KNOCKED_OFF, LIFTED_M, MISSED_GRASP, PickLiftScriptedExpert, PickLiftTask

if TYPE_CHECKING:
    from .world import SimWorld

MISPLACED = "misplaced"
DROP_HEIGHT_M = 0.03  # [m] cube bottom above the table when the jaws let go: above this it was dropped
ZONE_THICKNESS_M = 0.001  # [m] the drawn patch (visual only)
ZONE_DRAWS = 64  # zone centers tried for the separation before taking the farthest one


class PickPlaceTask(PickLiftTask):
    """Put the randomized cube down inside a randomized zone and let go (see the module docstring)."""

    name = "pick_place"
    failure_categories = (KNOCKED_OFF, DROPPED, MISPLACED, COLLISION, MISSED_GRASP, TIMEOUT)

    def __init__(self, params: TaskParams) -> None:
        super().__init__(params)
        self.place = params.pick_place
        self.zone_center = np.zeros(3)
        self._zone = -1
        self._settle = HoldTimer()
        self._settled_s = 0.0
        self._in_hand = False
        self._release_height_m: float | None = None

    def build(self, world: SimWorld) -> None:
        super().build(world)
        client = world.client
        half = [self.place.zone_half_m, self.place.zone_half_m, ZONE_THICKNESS_M / 2.0]
        shape = client.createVisualShape(client.GEOM_BOX, halfExtents=half, rgbaColor=list(self.place.zone_rgba))
        # Visual only: the cube must rest on the table, not on the patch.
        self._zone = client.createMultiBody(baseMass=0.0, baseCollisionShapeIndex=-1, baseVisualShapeIndex=shape,
                                            basePosition=[0.0, 0.0, -1.0])

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        info = super().reset(world, rng)
        cube_xy = np.asarray(info["target"][:2], dtype=float)
        region = np.asarray(self.place.zone_region, dtype=float)
        best, best_gap = np.zeros(2), -1.0
        for _ in range(ZONE_DRAWS):
            xy = rng.uniform(region[:, 0], region[:, 1])
            gap = float(np.linalg.norm(xy - cube_xy))
            if gap > best_gap:
                best, best_gap = xy, gap
            if gap >= self.place.min_separation_m:
                break
        self.zone_center = np.array([best[0], best[1], 0.0])
        world.client.resetBasePositionAndOrientation(
            self._zone, [best[0], best[1], ZONE_THICKNESS_M / 2.0], [0.0, 0.0, 0.0, 1.0])
        self._settle.reset()
        self._settled_s = 0.0
        self._in_hand = False
        self._release_height_m = None
        return {"target": self.zone_center.tolist(), "cube": info["cube"],
                "zone": {"center": self.zone_center.tolist(), "half_m": self.place.zone_half_m}}

    def target_position(self) -> np.ndarray:
        """The zone's center on the table top (3,) [m], world frame (the cube: cube_position)."""
        return self.zone_center.copy()

    def cube_in_zone(self, world: SimWorld) -> bool:
        """Whether the cube's center lies over the zone (the zone is square, world axis-aligned)."""
        offset = self.cube_position(world)[:2] - self.zone_center[:2]
        return bool(np.all(np.abs(offset) <= self.place.zone_half_m))

    def cube_to_zone_m(self, world: SimWorld) -> float:
        """Horizontal distance from the cube's center to the zone's [m]."""
        return float(np.linalg.norm(self.cube_position(world)[:2] - self.zone_center[:2]))

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        center = self.cube_position(world)
        bottom = self.cube_bottom_height(world)
        touching = links_touching(world.client, self.cube, world.robot)
        gripped = self._jaws <= touching
        if gripped and bottom >= LIFTED_M:
            self._was_up_in_hand = True
            self._in_hand = True
            self._release_height_m = None
        elif self._in_hand and not gripped:
            self._in_hand = False
            self._release_height_m = bottom  # where it was let go (the last time)
        settled = (not (touching & self._jaws) and bottom <= self.place.rest_height_m and self.cube_in_zone(world)
                   and float(np.linalg.norm(body_velocity(world.client, self.cube))) < self.place.settle_speed_m_s)
        self._settled_s = self._settle.update(settled, world.time_ns)
        if not self._collided and arm_touches(world, world.table, self._arm_links):
            self._collided = True
        settled_s = self._settled_s

        def result() -> dict[str, Any]:
            return {"final_distance_m": self.cube_to_zone_m(world), "cube_height_m": bottom, "settled_s": settled_s}

        # A pick and place: a cube slid or shoved into the zone without being lifted does not count.
        placed = self._settled_s >= self.place.settle_s - 1e-9 and self._was_up_in_hand
        return self._episode_end(world, placed, center, result)

    def classify_failure(self, world: SimWorld, outcome: dict[str, Any]) -> str:
        """success | knocked_off_table | dropped | misplaced | collision | missed_grasp | timeout."""
        if outcome.get("success"):
            return SUCCESS
        if outcome.get("reason") == KNOCKED_OFF or self.cube_position(world)[2] < -FALLEN_M:
            return KNOCKED_OFF
        if not self._was_up_in_hand:
            return COLLISION if self._collided else MISSED_GRASP
        if self._in_hand:
            return TIMEOUT  # never let go
        if self._release_height_m is not None and self._release_height_m > DROP_HEIGHT_M:
            return DROPPED
        return TIMEOUT if self.cube_in_zone(world) else MISPLACED

    def privileged_observation(self, world: SimWorld) -> dict[str, np.ndarray]:
        """pick_lift's terms (cube pose, size, mass, friction, jaw contacts, tool point) with
        hold_progress the settled time / settle_s; the zone is the target (target_position)."""
        return {**super().privileged_observation(world),
                "hold_progress": np.array([min(1.0, self._settled_s / self.place.settle_s)])}

    def reward_terms(self, world: SimWorld) -> dict[str, float]:
        """pick_lift's (tool_to_cube_m, grasp, cube_height_m) plus cube_to_zone_m [m] (horizontal)
        and holding (1 while the cube rests in the zone, let go)."""
        return {**super().reward_terms(world), "cube_to_zone_m": self.cube_to_zone_m(world),
                "holding": 1.0 if self._settle.since_ns is not None else 0.0}

    def make_expert(self, world: SimWorld) -> ScriptedExpert:
        return PickPlaceScriptedExpert(world, self)

    # pick_lift's reactive expert lifts and stops: no place yet (rl/labeller.ScriptedChunkTeacher refuses it).
    make_reactive_expert = None

    def state(self) -> Any:
        return super().state(), self._settle.state(), self._settled_s, self._in_hand, self._release_height_m

    def restore(self, state: Any) -> None:
        lift, settle, self._settled_s, self._in_hand, self._release_height_m = state
        super().restore(lift)
        self._settle.restore(settle)


class PickPlaceScriptedExpert(PickLiftScriptedExpert):
    """sim/pick_expert.PickPlaceExpert on the task's privileged cube pose and zone (robot base frame)."""

    task: PickPlaceTask
    expert: PickPlaceExpert

    def __init__(self, world: SimWorld, task: PickPlaceTask) -> None:
        super().__init__(world, task, PickPlaceExpert)

    def start(self, world: SimWorld) -> None:
        cube, yaw, size = self.cube_in_base(world)
        zone = self.task.zone_center.copy()
        zone[2] = self.task.cube_position(world)[2]  # the cube's center height at rest: the place mirrors the pick
        self.expert.plan_place(cube, yaw, size, target_in_base_frame(world, zone))
