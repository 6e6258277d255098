"""The scripted pick-and-lift teacher for arms with a position-commanded jaw (SO-101).

It knows the cube's true pose and size (privileged), and plays four phases on sim time from the
episode start: open the jaw and move above the cube, descend around it, close, lift. The joint goals
come from a damped-least-squares pose IK on the project's own kinematics (core/robot/urdf.py): tool
z axis pointing down, jaws closing across two opposite cube faces (the pair nearest the arm's radial
direction, so the wrist rolls least).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.robot.urdf import RobotModel, damped_least_squares


@dataclass(frozen=True)
class PickExpertConfig:
    """Phase durations [s]: approach (home -> above the cube), descend, close, squeeze (the jaw
    settles on the cube before the arm moves), lift (then hold).
    approach_height_m [m]: tool point above the cube top before descending. grasp_height_m [m]: tool
    point (the jaw tips) above the table when closing. lift_height_m [m]: tool point above the table
    at the end of the lift. jaw_open_rad / jaw_closed_rad [rad]: jaw commands (closed lies past the
    smallest cube, so the jaw squeezes). tilt_rad [rad]: the tool tips this much from vertical
    toward the moving jaw (0: straight down; tipping it raises the moving jaw's tip onto the cube's
    top edge, where it slips off). fixed_jaw_slant [m/m]: horizontal inset of the fixed jaw's inner
    face per metre above its tip with the tool vertical (its collision hull is a wedge).
    clearance_m [m]: gap kept between the fixed jaw and the cube while descending.
    orientation_weight [m/rad]: IK weight of the orientation error against the position error.
    line_step_m [m]: IK spacing along the vertical descent and lift."""

    approach_s: float = 1.5
    descend_s: float = 1.0
    close_s: float = 0.8
    squeeze_s: float = 0.4
    lift_s: float = 1.2
    approach_height_m: float = 0.035
    grasp_height_m: float = 0.006
    lift_height_m: float = 0.085
    jaw_open_rad: float = 1.2
    jaw_closed_rad: float = -0.15
    tilt_rad: float = 0.2
    fixed_jaw_slant: float = 0.43
    clearance_m: float = 0.004
    orientation_weight: float = 0.1
    line_step_m: float = 0.01
    ik_iterations: int = 200
    ik_damping: float = 0.01


@dataclass(frozen=True)
class GraspGeometry:
    """The tool poses of a top-down grasp, robot base frame: grasp (3,) [m] (the tool point where
    the jaw closes), above (3,) [m] (the same point above the cube's top, where the descent
    starts), lift (3,) [m] (where the lift ends), rotation (3, 3) (the tool's orientation
    throughout)."""

    grasp: np.ndarray
    above: np.ndarray
    lift: np.ndarray
    rotation: np.ndarray


def rotation_error(current: np.ndarray, desired: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) [rad] turning `current` (3, 3) into `desired` (3, 3), both in one frame."""
    delta = desired @ current.T
    cos = float(np.clip((np.trace(delta) - 1.0) / 2.0, -1.0, 1.0))
    angle = math.acos(cos)
    axis = np.array([delta[2, 1] - delta[1, 2], delta[0, 2] - delta[2, 0], delta[1, 0] - delta[0, 1]])
    norm = float(np.linalg.norm(axis))
    if norm < 1e-9:
        return np.zeros(3)
    return angle * axis / norm


def tool_down_rotation(closing_direction: np.ndarray, tilt_rad: float = 0.0) -> np.ndarray:
    """Tool frame (3, 3), base frame: z pointing down, tipped by tilt_rad [rad] toward
    `closing_direction` (the horizontal unit vector from the fixed jaw toward the moving jaw), and x
    opposite the closing direction (tilted alike)."""
    closing = np.array([closing_direction[0], closing_direction[1], 0.0])
    closing /= max(1e-9, float(np.linalg.norm(closing)))
    up = np.array([0.0, 0.0, 1.0])
    z_axis = math.sin(tilt_rad) * closing - math.cos(tilt_rad) * up
    x_axis = -(math.cos(tilt_rad) * closing + math.sin(tilt_rad) * up)
    y_axis = np.cross(z_axis, x_axis)
    return np.column_stack([x_axis, y_axis, z_axis])


class PickLiftExpert:
    """Joint targets for a top-down pick of a cube; `command(t, q_now)` is a pure function of the
    plan made by `plan` (cube pose and size) and the time t [s] since the episode start."""

    def __init__(self, model: RobotModel, joint_names: list[str], gripper: str, tool_link: str,
                 home_q: np.ndarray, config: PickExpertConfig | None = None) -> None:
        self.model = model
        self.joint_names = list(joint_names)
        self.gripper_index = self.joint_names.index(gripper)
        self.arm_index = [i for i in range(len(self.joint_names)) if i != self.gripper_index]
        self.tool_link = tool_link
        self.home_q = np.asarray(home_q, dtype=float)
        self.config = config or PickExpertConfig()
        limits = model.limits_arrays(self.joint_names)
        margin = 0.02 * (limits["upper"] - limits["lower"])
        self.lower = limits["lower"] + margin
        self.upper = limits["upper"] - margin
        self._waypoints: list[np.ndarray] = []
        self._descent = np.zeros((0, len(self.joint_names)))
        self._lift = np.zeros((0, len(self.joint_names)))
        self.grasp_point = self.lift_point = np.zeros(3)
        self.tool_rotation = np.eye(3)

    def solve_ik(self, position: np.ndarray, rotation: np.ndarray, *seeds: np.ndarray) -> np.ndarray:
        """The best of _solve_ik from each seed (smallest weighted pose error)."""
        best_q, best_error = None, math.inf
        for seed in seeds:
            q, error = self._solve_ik(position, rotation, seed)
            if error < best_error:
                best_q, best_error = q, error
        assert best_q is not None, "solve_ik needs a seed"
        return best_q

    def _solve_ik(self, position: np.ndarray, rotation: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, float]:
        """Joints (n,) [rad] (the jaw kept at the seed's) putting the tool at `position` (3,) [m] with
        `rotation` (3, 3), base frame; damped least squares from `seed`, orientation weighted by
        orientation_weight [m/rad] (a 5-joint arm cannot match every pose exactly); also the final
        weighted error norm."""
        cfg = self.config
        q = np.clip(np.asarray(seed, dtype=float), self.lower, self.upper)
        weights = np.array([1.0, 1.0, 1.0, cfg.orientation_weight, cfg.orientation_weight, cfg.orientation_weight])
        previous = math.inf
        for _ in range(cfg.ik_iterations):
            transform = self.model.forward_kinematics(q, self.tool_link, self.joint_names)[0]
            error = np.concatenate([position - transform[:3, 3], rotation_error(transform[:3, :3], rotation)])
            size = float(np.linalg.norm(weights * error))
            # Converged, or stalled where five joints cannot do better (limits, unreachable roll).
            if size < 5e-4 or previous - size < 1e-7:
                break
            previous = size
            jac = self.model.jacobian(q, self.tool_link, self.joint_names)[:, self.arm_index]
            step = damped_least_squares(weights[:, None] * jac, weights * error, cfg.ik_damping)
            scale = min(1.0, 0.2 / max(1e-9, float(np.max(np.abs(step)))))
            q[self.arm_index] = np.clip(q[self.arm_index] + scale * step, self.lower[self.arm_index],
                                        self.upper[self.arm_index])
        transform = self.model.forward_kinematics(q, self.tool_link, self.joint_names)[0]
        error = np.concatenate([position - transform[:3, 3], rotation_error(transform[:3, :3], rotation)])
        return q, float(np.linalg.norm(weights * error))

    def grasp_geometry(self, cube_center: np.ndarray, cube_yaw_rad: float, cube_size_m: float,
                       table_z: float | None = None, closing_hint_rad: float | None = None) -> GraspGeometry:
        """The tool poses (base frame) for a top-down grasp of a cube at `cube_center` (3,) [m] with
        edge `cube_size_m` [m] and yaw `cube_yaw_rad` [rad]; table_z [m]: the table top's height
        (default: under the cube, which lies on it). closing_hint_rad [rad]: the direction the jaw
        closes in now; the face pair nearest it is kept while it lies within 60 degrees of the
        radial direction (a choice made afresh at every call flips by 90 degrees on a cube turned
        45 degrees: two wrist rolls for one state)."""
        cfg = self.config
        center = np.asarray(cube_center, dtype=float)
        radial = math.atan2(center[1], center[0])
        reference = radial
        if closing_hint_rad is not None and abs(_wrap(closing_hint_rad - radial)) < math.radians(60.0):
            reference = closing_hint_rad
        # The face normal nearest the reference (the radial direction: the wrist rolls at most 45 degrees).
        turns = round((reference - cube_yaw_rad) / (math.pi / 2))
        closing_angle = cube_yaw_rad + turns * math.pi / 2
        closing = np.array([math.cos(closing_angle), math.sin(closing_angle), 0.0])
        rotation = tool_down_rotation(closing, cfg.tilt_rad)
        table_z = center[2] - cube_size_m / 2.0 if table_z is None else float(table_z)
        # The fixed jaw's face leans inward with height: keep it clear of the cube's top edge.
        slant = max(0.0, math.tan(math.atan(cfg.fixed_jaw_slant) - cfg.tilt_rad))
        inset = slant * max(0.0, cube_size_m - cfg.grasp_height_m)
        offset = cube_size_m / 2.0 + inset + cfg.clearance_m
        grasp = center - offset * closing
        grasp[2] = table_z + cfg.grasp_height_m
        above = grasp.copy()
        above[2] = table_z + cube_size_m + cfg.approach_height_m
        lift = grasp.copy()
        lift[2] = table_z + cfg.lift_height_m
        return GraspGeometry(grasp=grasp, above=above, lift=lift, rotation=rotation)

    def plan(self, cube_center: np.ndarray, cube_yaw_rad: float, cube_size_m: float) -> None:
        """Joint waypoints (above, grasp, lift) for a cube at `cube_center` (3,) [m] (base frame)
        with edge `cube_size_m` [m] and yaw `cube_yaw_rad` [rad]."""
        pose = self.grasp_geometry(cube_center, cube_yaw_rad, cube_size_m)
        q_above = self.solve_ik(pose.above, pose.rotation, self.home_q)
        # Straight vertical lines (IK every few mm): a joint-space line between two poses bulges
        # sideways, enough for a jaw to hit the cube on the way down or shake it loose on the way up.
        self._descent = self._line(q_above, pose.above, pose.grasp, pose.rotation)
        self._lift = self._line(self._descent[-1], pose.grasp, pose.lift, pose.rotation)
        self._waypoints = [q_above, self._descent[-1], self._lift[-1]]
        # The tool poses of the plan (base frame), for a task that goes on from the lift.
        self.grasp_point, self.lift_point, self.tool_rotation = pose.grasp, pose.lift, pose.rotation

    def _line(self, seed: np.ndarray, start: np.ndarray, end: np.ndarray,
                       rotation: np.ndarray) -> np.ndarray:
        """Joint waypoints (m, n) [rad] along the straight line start -> end (3,) [m] (vertical for
        the pick; the place also carries along a horizontal one), every
        line_step_m or closer, each IK solution seeding the next."""
        count = max(2, int(math.ceil(float(np.linalg.norm(end - start)) / self.config.line_step_m)) + 1)
        points = [seed]
        for fraction in np.linspace(0.0, 1.0, count)[1:]:
            points.append(self.solve_ik(start + fraction * (end - start), rotation, points[-1]))
        return np.array(points)

    def command(self, t_s: float, q_now: np.ndarray) -> np.ndarray:
        """The joint targets (n,) [rad] for time t_s [s] after the episode start (plan first)."""
        if not self._waypoints:
            raise RuntimeError("PickLiftExpert.command before plan")
        cfg = self.config
        q_above, q_grasp, _ = self._waypoints
        t_descend = cfg.approach_s
        t_close = t_descend + cfg.descend_s
        t_squeeze = t_close + cfg.close_s
        t_lift = t_squeeze + cfg.squeeze_s
        if t_s < t_descend:
            fraction = min(1.0, t_s / cfg.approach_s)
            target = self.home_q + _smooth(fraction) * (q_above - self.home_q)
            jaw = cfg.jaw_open_rad
        elif t_s < t_close:
            target = _along(self._descent, _smooth((t_s - t_descend) / cfg.descend_s))
            jaw = cfg.jaw_open_rad
        elif t_s < t_lift:
            target = q_grasp.copy()
            fraction = min(1.0, (t_s - t_close) / cfg.close_s)
            jaw = cfg.jaw_open_rad + _smooth(fraction) * (cfg.jaw_closed_rad - cfg.jaw_open_rad)
        else:
            target = _along(self._lift, _smooth(min(1.0, (t_s - t_lift) / cfg.lift_s)))
            jaw = cfg.jaw_closed_rad
        target = target.copy()
        target[self.gripper_index] = jaw
        return target


def _along(points: np.ndarray, fraction: float) -> np.ndarray:
    """The point at `fraction` in [0, 1] of the piecewise-linear path through points (m, n)."""
    position = min(1.0, max(0.0, fraction)) * (len(points) - 1)
    k = min(int(position), len(points) - 2)
    return points[k] + (position - k) * (points[k + 1] - points[k])


def _wrap(angle_rad: float) -> float:
    """angle_rad [rad] wrapped into [-pi, pi)."""
    return (angle_rad + math.pi) % (2.0 * math.pi) - math.pi


def _smooth(fraction: float) -> float:
    """Smoothstep of fraction in [0, 1] (zero speed at both ends)."""
    f = min(1.0, max(0.0, float(fraction)))
    return f * f * (3.0 - 2.0 * f)


@dataclass(frozen=True)
class PlaceExpertConfig:
    """The place phases after the grasp [s]: lift (to carry_height_m), carry (a straight line at
    that height to above the zone), lower (to the place height), release (the jaw opens to
    jaw_release_rad [rad]), retreat (the tool rises to retreat_height_m).
    carry_height_m [m]: tool point above the table while carrying. place_gap_m [m]: the cube's
    lowest point above the table when the jaw opens (it drops that far onto the zone).
    retreat_height_m [m]: tool point above the table after the release."""

    lift_s: float = 0.8
    carry_s: float = 1.2
    lower_s: float = 0.8
    release_s: float = 0.4
    retreat_s: float = 0.5
    carry_height_m: float = 0.07
    place_gap_m: float = 0.003
    retreat_height_m: float = 0.07
    jaw_release_rad: float = 0.8


class PickPlaceExpert(PickLiftExpert):
    """PickLiftExpert's grasp, then carry the cube to a zone and put it down: lift, a straight line
    at the carry height to above the zone (the tool keeps the grasp's orientation, so the cube
    lands with the yaw it had), lower, open, rise. `command(t, q_now)` is a pure function of the plan
    and t [s]."""

    def __init__(self, model: RobotModel, joint_names: list[str], gripper: str, tool_link: str,
                 home_q: np.ndarray, config: PickExpertConfig | None = None,
                 place: PlaceExpertConfig | None = None) -> None:
        self.place = place or PlaceExpertConfig()
        pick = config or PickExpertConfig()
        # The grasp's lift ends at the carry height, in the place's time.
        pick = PickExpertConfig(**{**pick.__dict__, "lift_s": self.place.lift_s,
                                   "lift_height_m": self.place.carry_height_m})
        super().__init__(model, joint_names, gripper, tool_link, home_q, pick)
        self._carry = np.zeros((0, len(self.joint_names)))
        self._lower = np.zeros((0, len(self.joint_names)))
        self._retreat = np.zeros((0, len(self.joint_names)))

    def plan_place(self, cube_center: np.ndarray, cube_yaw_rad: float, cube_size_m: float,
                   zone_center: np.ndarray) -> None:
        """The pick (PickLiftExpert.plan) and the place of its cube at `zone_center` (3,) [m] (base
        frame, on the table top), all lines solved now."""
        self.plan(cube_center, cube_yaw_rad, cube_size_m)
        lift_tool, rotation = self.lift_point, self.tool_rotation
        # The tool point keeps its offset from the cube center across the carry.
        tool_from_cube = self.grasp_point - np.asarray(cube_center, dtype=float)
        zone = np.asarray(zone_center, dtype=float)
        table_z = float(cube_center[2]) - cube_size_m / 2.0
        above_zone = zone + tool_from_cube
        above_zone[2] = lift_tool[2]
        place = above_zone.copy()
        place[2] = table_z + self.config.grasp_height_m + self.place.place_gap_m
        retreat = place.copy()
        retreat[2] = table_z + self.place.retreat_height_m
        self._carry = self._line(self._lift[-1], lift_tool, above_zone, rotation)
        self._lower = self._line(self._carry[-1], above_zone, place, rotation)
        self._retreat = self._line(self._lower[-1], place, retreat, rotation)

    def command(self, t_s: float, q_now: np.ndarray) -> np.ndarray:
        """The joint targets (n,) [rad] for time t_s [s] after the episode start (plan_place first)."""
        if not len(self._carry):
            raise RuntimeError("PickPlaceExpert.command before plan_place")
        cfg, place = self.config, self.place
        t_carry = cfg.approach_s + cfg.descend_s + cfg.close_s + cfg.squeeze_s + cfg.lift_s
        if t_s < t_carry:
            return super().command(t_s, q_now)
        t_lower = t_carry + place.carry_s
        t_release = t_lower + place.lower_s
        t_retreat = t_release + place.release_s
        jaw = cfg.jaw_closed_rad
        if t_s < t_lower:
            target = _along(self._carry, _smooth((t_s - t_carry) / place.carry_s))
        elif t_s < t_release:
            target = _along(self._lower, _smooth((t_s - t_lower) / place.lower_s))
        elif t_s < t_retreat:
            target = self._lower[-1]
            jaw = cfg.jaw_closed_rad + _smooth((t_s - t_release) / place.release_s) * (
                place.jaw_release_rad - cfg.jaw_closed_rad)
        else:
            target = _along(self._retreat, _smooth(min(1.0, (t_s - t_retreat) / place.retreat_s)))
            jaw = place.jaw_release_rad
        target = target.copy()
        target[self.gripper_index] = jaw
        return target
