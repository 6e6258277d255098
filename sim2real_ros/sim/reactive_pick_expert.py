"""A pick-and-lift teacher that decides from the measured state, so it recovers.

sim/pick_expert.PickLiftExpert plays a plan on the clock: when the arm lags, a push moves it or the
cube shifts, it goes on with the plan and closes on nothing. As a DAgger labeller that is the wrong
teacher: the student's states are off that plan, and a clone of it asked to stay put wherever the
clock would have stood still (the wrist students stalled 2 cm above the grasp, docs/learning.md).

ReactivePickExpert picks its phase from what is true now, every call, with no memory:
- lift: both jaws on the cube, the jaw no longer open -> straight up from where the tool is, jaw
  closed (one jaw slipping for a moment while the cube is up changes nothing);
- close: the tool at the grasp point -> hold it there, jaw closed;
  the jaw closed on nothing -> rise and open (then the rules below start over);
- descend: the tool above the grasp point, the jaw open -> straight down along the vertical line;
- approach: otherwise -> rise vertically first if the tool is low and off the line, else to the
  point above the cube, jaw open.
A jaw on the cube above grasp height (a jaw landed on its top) also sends the tool up. The grasp
point comes from the cube's live pose, so a cube that moved is re-approached where it is.
Targets are tool poses at most step_m ahead along straight lines (a carrot), turned into joints by
the same damped-least-squares IK as the timed expert, seeded from the measured joints.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.robot.urdf import RobotModel
from .pick_expert import GraspGeometry, PickExpertConfig, PickLiftExpert

APPROACH = "approach"
RISE = "rise"
DESCEND = "descend"
CLOSE = "close"
RETRY = "retry"
LIFT = "lift"


@dataclass(frozen=True)
class ReactivePickConfig:
    """align_m [m]: horizontal tool-to-grasp error under which the descent starts (and over twice
    which a low tool rises before moving sideways). grasp_reached_m [m]: tool height over the grasp
    point at which the jaw closes. stalled_m [m]: tool height over the grasp point within which a
    closing jaw goes on closing (and a shut one retries). jaw_open_margin_rad [rad]: the jaw counts
    as open within this of jaw_open_rad. missed_jaw_rad [rad]: a jaw within this of jaw_closed_rad
    without the cube between has missed.
    high_contact_m [m]: a jaw touching the cube with the tool this far over the grasp height sits on
    the cube's top (rise). cube_up_m [m]: the cube's bottom over the table that counts as lifted.
    step_m [m]: the carrot's distance ahead along a line; lift_step_m [m] while lifting the cube
    (slower: a fast start shakes it loose). side_clearance_m [m]: the tool's height over the cube's
    top under which it rises before moving sideways. reach_check_m [m]: within this of the grasp
    point horizontally, alignment is measured against the point the IK can reach."""

    align_m: float = 0.006
    grasp_reached_m: float = 0.004
    stalled_m: float = 0.015
    jaw_open_margin_rad: float = 0.2
    missed_jaw_rad: float = 0.12
    high_contact_m: float = 0.012
    cube_up_m: float = 0.005
    step_m: float = 0.02
    lift_step_m: float = 0.01
    side_clearance_m: float = 0.015
    reach_check_m: float = 0.03


@dataclass(frozen=True)
class PickState:
    """What the expert sees, robot base frame: q (n,) [rad] the measured joints (no speeds: the
    sim's joint velocities read tens of rad/s while a jaw presses on the table or its limit);
    cube_center (3,) [m], cube_yaw_rad [rad], cube_size_m [m]; table_z [m] the table top's height;
    jaws_on_cube (both jaws touch it); jaw_touches_cube (at least one does); jaw_touches_table (a
    jaw is on the table: the tool is as low as it gets)."""

    q: np.ndarray
    cube_center: np.ndarray
    cube_yaw_rad: float
    cube_size_m: float
    table_z: float
    jaws_on_cube: bool
    jaw_touches_cube: bool
    jaw_touches_table: bool


class ReactivePickExpert(PickLiftExpert):
    """Joint targets for a top-down pick from the state alone (module docstring); the IK, grasp
    geometry and jaw commands are PickLiftExpert's."""

    def __init__(self, model: RobotModel, joint_names: list[str], gripper: str, tool_link: str,
                 home_q: np.ndarray, config: PickExpertConfig | None = None,
                 reactive: ReactivePickConfig | None = None) -> None:
        super().__init__(model, joint_names, gripper, tool_link, home_q, config)
        self.reactive = reactive or ReactivePickConfig()
        self._above_cache: tuple[np.ndarray, np.ndarray] | None = None
        self.last_phase = APPROACH

    def tool_position(self, q: np.ndarray) -> np.ndarray:
        """The tool point (3,) [m], base frame, at joints q (n,) [rad]."""
        return self.model.forward_kinematics(q, self.tool_link, self.joint_names)[0][:3, 3]

    def phase(self, state: PickState) -> tuple[str, GraspGeometry, np.ndarray]:
        """(the phase for `state`, the grasp geometry of the cube where it is, the tool point (3,) [m])."""
        cfg, rc = self.config, self.reactive
        transform = self.model.forward_kinematics(state.q, self.tool_link, self.joint_names)[0]
        tool = transform[:3, 3]
        pose = self.grasp_geometry(state.cube_center, state.cube_yaw_rad, state.cube_size_m, state.table_z,
                                   closing_direction(transform[:3, :3]))
        jaw = float(state.q[self.gripper_index])
        horizontal = float(np.linalg.norm(tool[:2] - pose.grasp[:2]))
        if horizontal < rc.reach_check_m:
            # Aligned with what the arm can reach: five joints cannot always put the tool on the
            # grasp point in the grasp's orientation (the IK's best leaves millimetres), and waiting
            # for a point it cannot reach is a stall.
            reach = self.tool_position(self.solve_ik(pose.grasp, pose.rotation, np.asarray(state.q, dtype=float)))
            horizontal = float(np.linalg.norm(tool[:2] - reach[:2]))
        height = float(tool[2] - pose.grasp[2])  # over the grasp point
        jaw_open = jaw >= cfg.jaw_open_rad - rc.jaw_open_margin_rad
        if state.jaws_on_cube:
            return (CLOSE if jaw_open else LIFT), pose, tool
        cube_up = float(state.cube_center[2]) - state.cube_size_m / 2.0 - state.table_z > rc.cube_up_m
        if state.jaw_touches_cube and not jaw_open and cube_up:
            return LIFT, pose, tool  # one jaw slipping for a moment while it is up: keep on
        if state.jaw_touches_cube and height > rc.high_contact_m and jaw_open:
            return RISE, pose, tool  # an open jaw on the cube's top: off it (a closing one rides up on it)
        at_grasp = horizontal <= 2.0 * rc.align_m and height <= rc.stalled_m
        if at_grasp and not jaw_open:
            # Closing there: go on until the jaw has shut on nothing.
            return (RETRY if jaw <= cfg.jaw_closed_rad + rc.missed_jaw_rad else CLOSE), pose, tool
        if not jaw_open and height <= rc.stalled_m + cfg.approach_height_m:
            return RETRY, pose, tool  # a shut jaw low near the cube: up and open first
        if height <= rc.grasp_reached_m and (
                horizontal <= rc.align_m
                or (horizontal <= 2.0 * rc.align_m and state.jaw_touches_table)):
            # Aligned, or as near as the arm gets (a jaw on the table stops it): closing sooner, the
            # moving jaw flings a cube it meets off-center.
            return CLOSE, pose, tool
        top = pose.above[2] - pose.grasp[2]
        # The descent starts aligned and goes on a little off the line (the carrot pulls it back).
        if jaw_open and ((horizontal <= rc.align_m and height <= top + 0.01)
                         or (horizontal <= 2.0 * rc.align_m and height < top - 0.005)):
            return DESCEND, pose, tool
        cube_top = state.table_z + state.cube_size_m - pose.grasp[2]  # over the grasp point
        if horizontal > 2.0 * rc.align_m and height < cube_top + rc.side_clearance_m:
            return RISE, pose, tool  # low beside the cube: up before any sideways move
        return APPROACH, pose, tool

    def target(self, state: PickState) -> np.ndarray:
        """The joint targets (n,) [rad] for `state` (the phase it chose: last_phase)."""
        cfg, rc = self.config, self.reactive
        phase, pose, tool = self.phase(state)
        self.last_phase = phase
        q = np.asarray(state.q, dtype=float)
        jaw = cfg.jaw_open_rad
        if phase == LIFT:
            point = np.array([tool[0], tool[1], min(pose.lift[2], tool[2] + rc.lift_step_m)])
            point[2] = max(point[2], min(tool[2], pose.lift[2]))
            # Up in the tool's own orientation: the cube's (turning in the hand) would twist the wrist.
            rotation = self.model.forward_kinematics(q, self.tool_link, self.joint_names)[0][:3, :3]
            target, jaw = self.solve_ik(point, rotation, q), cfg.jaw_closed_rad
        elif phase == CLOSE:
            target, jaw = self.solve_ik(pose.grasp, pose.rotation, q), cfg.jaw_closed_rad
        elif phase in (RISE, RETRY):
            point = np.array([tool[0], tool[1], min(pose.above[2], tool[2] + rc.step_m)])
            point[2] = max(point[2], tool[2])
            target = self.solve_ik(point, pose.rotation, q)
        elif phase == DESCEND:
            point = np.array([pose.grasp[0], pose.grasp[1], max(pose.grasp[2], tool[2] - rc.step_m)])
            target = self.solve_ik(point, pose.rotation, q)
        elif tool[2] >= pose.above[2] - rc.side_clearance_m:
            target = self.above_joints(pose)  # high enough: a joint-space move (the timed expert's)
        else:
            # Low (after a miss): up and over along a straight line that never descends, so the
            # move cannot dip back under the height where the rule to rise first applies.
            point = _toward(tool, pose.above, rc.step_m)
            point[2] = max(point[2], tool[2])
            target = self.solve_ik(point, pose.rotation, q, self.above_joints(pose))
        target = target.copy()
        target[self.gripper_index] = jaw
        return target

    def above_joints(self, pose: GraspGeometry) -> np.ndarray:
        """IK of the point above the cube (from home, as the timed expert's plan; kept while the
        cube stays within a millimetre, so the approach target does not wander between calls)."""
        if self._above_cache is not None and float(np.linalg.norm(self._above_cache[0] - pose.above)) < 1e-3:
            return self._above_cache[1]
        q = self.solve_ik(pose.above, pose.rotation, self.home_q)
        self._above_cache = (pose.above.copy(), q)
        return q


def closing_direction(tool_rotation: np.ndarray) -> float | None:
    """The horizontal direction [rad] the jaw closes in for a tool pointing down (its x axis is
    opposite the closing direction, tool_down_rotation), None for one that does not point down."""
    if tool_rotation[2, 2] > -0.7:
        return None
    return math.atan2(-tool_rotation[1, 0], -tool_rotation[0, 0])


def _toward(start: np.ndarray, goal: np.ndarray, step_m: float) -> np.ndarray:
    """The point at most step_m [m] from `start` (3,) on the straight line to `goal` (3,) [m]."""
    gap = goal - start
    distance = float(np.linalg.norm(gap))
    return goal.copy() if distance <= step_m else start + gap * (step_m / distance)


def yaw_of_quaternion(quat_xyzw: np.ndarray) -> float:
    """Yaw [rad] (rotation about z) of an (x, y, z, w) quaternion."""
    x, y, z, w = (float(v) for v in quat_xyzw)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
