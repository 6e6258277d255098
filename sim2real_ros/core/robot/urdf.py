"""Read what the stack needs from a URDF: joints, limits, and the kinematic chain.

Joint names and limits always come from the URDF (docs/design.md §4), so nothing is wired to one robot.
Forward kinematics and the Jacobian are computed here (pure numpy), the one implementation in the
stack: the supervisor's Cartesian jogging, the scripted teacher's inverse kinematics and the viewers'
frame transforms (viz/kinematics.py only turns `joint_transform` into Foxglove frame transforms).
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UrdfError

MOVABLE_TYPES = ("revolute", "continuous", "prismatic")


@dataclass(frozen=True)
class JointLimits:
    """Limits of one joint: position [rad or m], velocity [rad/s or m/s], effort [N*m or N]."""

    lower: float
    upper: float
    velocity: float
    effort: float


@dataclass(frozen=True)
class UrdfJoint:
    """One URDF joint: its frame relative to the parent link and its motion axis."""

    name: str
    type: str
    parent: str
    child: str
    origin_xyz: tuple[float, float, float]
    origin_rpy: tuple[float, float, float]
    axis: tuple[float, float, float]
    limits: JointLimits | None

    @property
    def movable(self) -> bool:
        return self.type in MOVABLE_TYPES


def rpy_to_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Rotation matrix (3, 3) from URDF roll-pitch-yaw [rad] (fixed axes X, then Y, then Z)."""
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation matrix (3, 3) for `angle` [rad] about unit `axis` (Rodrigues)."""
    x, y, z = axis
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def parse_floats(text: str | None, default: tuple[float, ...], where: str) -> tuple[float, ...]:
    """A URDF attribute's numbers (as many as `default` has; `default` when absent); UrdfError naming
    `where` otherwise."""
    if text is None:
        return default
    try:
        values = tuple(float(v) for v in text.split())
    except ValueError as err:
        raise UrdfError(f"{where}: cannot parse numbers from {text!r}") from err
    if len(values) != len(default):
        raise UrdfError(f"{where}: expected {len(default)} numbers, got {text!r}")
    return values


def joint_origin(joint: UrdfJoint) -> np.ndarray:
    """Homogeneous transform (4, 4) parent link -> joint frame: the joint's <origin> [m, rad]."""
    origin = np.eye(4)
    origin[:3, :3] = rpy_to_matrix(*joint.origin_rpy)
    origin[:3, 3] = joint.origin_xyz
    return origin


def joint_axis(joint: UrdfJoint) -> np.ndarray:
    """Unit motion axis (3,) of `joint` in its own frame."""
    axis = np.asarray(joint.axis, dtype=float)
    return axis / np.linalg.norm(axis)


def joint_motion(joint: UrdfJoint, value: float) -> np.ndarray:
    """Homogeneous transform (4, 4) joint frame -> child link for position `value` [rad, or m for a
    prismatic joint]; the identity for a fixed joint."""
    motion = np.eye(4)
    if not joint.movable:
        return motion
    if joint.type == "prismatic":
        motion[:3, 3] = joint_axis(joint) * value
    else:
        motion[:3, :3] = _axis_angle(joint_axis(joint), value)
    return motion


def joint_transform(joint: UrdfJoint, value: float) -> np.ndarray:
    """Homogeneous transform (4, 4) parent link -> child link of `joint` at position `value`
    [rad, or m for a prismatic joint; ignored for a fixed joint]: its origin, then its motion."""
    return joint_origin(joint) @ joint_motion(joint, value)


class RobotModel:
    """Joints and kinematic chain of a URDF. Movable joints are listed in file order."""

    def __init__(self, joints: list[UrdfJoint], source: str) -> None:
        self.source = source
        self.joints = joints
        self._by_child = {j.child: j for j in joints}
        self.movable_joints = [j for j in joints if j.movable]
        if not self.movable_joints:
            raise UrdfError(f"{source}: no movable (revolute/continuous/prismatic) joints")

    @classmethod
    def from_file(cls, path: str | Path) -> RobotModel:
        """Parse a URDF file; raise UrdfError naming the file when it is unreadable."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise UrdfError(f"{path}: cannot read URDF: {err}") from err
        return cls.from_string(text, source=str(path))

    @classmethod
    def from_description(cls, description: str) -> RobotModel:
        """A `robot_description` parameter value: URDF XML text (starts with '<') or a file path."""
        if description.lstrip().startswith("<"):
            return cls.from_string(description, source="robot_description")
        return cls.from_file(description)

    @classmethod
    def from_string(cls, text: str, source: str = "<urdf>") -> RobotModel:
        try:
            root = ET.fromstring(text)
        except ET.ParseError as err:
            raise UrdfError(f"{source}: not valid XML: {err}") from err
        joints = []
        for el in root.findall("joint"):
            name = el.get("name", "")
            where = f"{source}: joint '{name}'"
            jtype = el.get("type", "")
            parent = el.find("parent")
            child = el.find("child")
            if parent is None or child is None:
                raise UrdfError(f"{where}: missing <parent> or <child>")
            origin = el.find("origin")
            xyz = parse_floats(origin.get("xyz") if origin is not None else None, (0.0, 0.0, 0.0), where)
            rpy = parse_floats(origin.get("rpy") if origin is not None else None, (0.0, 0.0, 0.0), where)
            axis_el = el.find("axis")
            axis = parse_floats(axis_el.get("xyz") if axis_el is not None else None, (1.0, 0.0, 0.0), where)
            limits = None
            limit_el = el.find("limit")
            if jtype in MOVABLE_TYPES:
                if jtype == "continuous":
                    lower, upper = -math.pi, math.pi
                elif limit_el is None:
                    raise UrdfError(f"{where}: a {jtype} joint needs a <limit> element")
                else:
                    lower = float(limit_el.get("lower", "0"))
                    upper = float(limit_el.get("upper", "0"))
                velocity = float(limit_el.get("velocity", "inf")) if limit_el is not None else math.inf
                effort = float(limit_el.get("effort", "inf")) if limit_el is not None else math.inf
                if not lower < upper:
                    raise UrdfError(f"{where}: limit lower={lower} must be < upper={upper}")
                if not velocity > 0:
                    raise UrdfError(f"{where}: velocity limit must be > 0, got {velocity}")
                limits = JointLimits(lower, upper, velocity, effort)
            joints.append(
                UrdfJoint(name, jtype, parent.get("link", ""), child.get("link", ""), xyz, rpy, axis, limits)
            )
        return cls(joints, source)

    # ----------------------------------------------------------------------------------------
    @property
    def joint_names(self) -> list[str]:
        """Names of the movable joints, in URDF order."""
        return [j.name for j in self.movable_joints]

    def limits_arrays(self, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Limits as arrays (n,) in the order of `names` (default: URDF order).

        Keys: lower, upper [rad], velocity [rad/s], effort [N*m].
        """
        by_name = {j.name: j for j in self.movable_joints}
        names = names or self.joint_names
        missing = [n for n in names if n not in by_name]
        if missing:
            raise UrdfError(f"{self.source}: joints {missing} not in URDF (it has {self.joint_names})")
        lims = [by_name[n].limits for n in names]
        return {
            "lower": np.array([lim.lower for lim in lims]),
            "upper": np.array([lim.upper for lim in lims]),
            "velocity": np.array([lim.velocity for lim in lims]),
            "effort": np.array([lim.effort for lim in lims]),
        }

    def chain(self, tip_link: str) -> list[UrdfJoint]:
        """Joints from the root link to `tip_link`, root first."""
        chain = []
        link = tip_link
        while link in self._by_child:
            joint = self._by_child[link]
            chain.append(joint)
            link = joint.parent
        if not chain:
            raise UrdfError(f"{self.source}: link '{tip_link}' is not the child of any joint")
        return chain[::-1]

    def link_names(self) -> list[str]:
        """Every link that is a joint's child (the root link is not one), in URDF order."""
        return [j.child for j in self.joints]

    def root_link(self) -> str:
        """The root link: a parent that is no joint's child."""
        children = {j.child for j in self.joints}
        roots = [j.parent for j in self.joints if j.parent not in children]
        return roots[0] if roots else self.joints[0].parent

    def forward_kinematics(
        self, q: np.ndarray, tip_link: str, names: list[str] | None = None
    ) -> tuple[np.ndarray, list[tuple[UrdfJoint, np.ndarray, np.ndarray]]]:
        """Pose of `tip_link` in the root frame for joint positions q (n,) ordered as `names`.

        Returns (T (4, 4), [(joint, joint origin p (3,) [m], joint axis in root frame (3,))]) for the
        movable joints of the chain, which is what the Jacobian needs.
        """
        names = names or self.joint_names
        q_by_name = dict(zip(names, np.asarray(q, dtype=float), strict=False))
        transform = np.eye(4)
        movable = []
        for joint in self.chain(tip_link):
            transform = transform @ joint_origin(joint)
            if joint.movable:
                movable.append((joint, transform[:3, 3].copy(), transform[:3, :3] @ joint_axis(joint)))
                transform = transform @ joint_motion(joint, q_by_name.get(joint.name, 0.0))
        return transform, movable

    def jacobian(self, q: np.ndarray, tip_link: str, names: list[str] | None = None) -> np.ndarray:
        """Geometric Jacobian (6, n) of `tip_link` in the root frame: rows vx, vy, vz, wx, wy, wz.

        Columns follow `names` (default URDF order); joints not on the chain have zero columns.
        """
        names = names or self.joint_names
        transform, movable = self.forward_kinematics(q, tip_link, names)
        p_tip = transform[:3, 3]
        jac = np.zeros((6, len(names)))
        index = {n: i for i, n in enumerate(names)}
        for joint, p_joint, axis in movable:
            if joint.name not in index:
                continue
            col = index[joint.name]
            if joint.type == "prismatic":
                jac[:3, col] = axis
            else:
                jac[:3, col] = np.cross(axis, p_tip - p_joint)
                jac[3:, col] = axis
        return jac


def damped_least_squares(jac: np.ndarray, twist: np.ndarray, damping: float = 0.05) -> np.ndarray:
    """Joint velocities dq (n,) that best produce `twist` (m,) through `jac` (m, n).

    dq = J^T (J J^T + lambda^2 I)^-1 twist: near a singularity the damping trades tracking accuracy
    for bounded joint speeds instead of blowing up.
    """
    jjt = jac @ jac.T
    return jac.T @ np.linalg.solve(jjt + (damping**2) * np.eye(jjt.shape[0]), twist)
