"""Frame transforms of every URDF joint from joint positions, and the tool point's planned path.

The kinematics are core/robot/urdf.py's (`joint_transform`, `RobotModel.forward_kinematics`): the
same the supervisor's jogging and the scripted teacher use. This module only keeps the viewers'
state (the last joint positions) and turns each joint's parent -> child matrix into a frame transform
(translation, quaternion), so a viewer composes the whole tree; the root link hangs off `world` by an
identity transform (the sim loads the arm's base at the world origin).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.robot.urdf import RobotModel, joint_transform

WORLD_FRAME = "world"


@dataclass(frozen=True)
class LinkTransform:
    """One parent -> child frame transform: translation (3,) [m], rotation quaternion (x, y, z, w)."""

    parent: str
    child: str
    translation: tuple[float, float, float]
    rotation: tuple[float, float, float, float]


def matrix_to_quaternion(rotation: np.ndarray) -> tuple[float, float, float, float]:
    """Unit quaternion (x, y, z, w) of a rotation matrix (3, 3) (Shepperd's method, w >= 0)."""
    m = np.asarray(rotation, dtype=float)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0.0:
        s = 2.0 * np.sqrt(trace + 1.0)
        q = (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s
    x, y, z, w = (float(v) for v in q)
    norm = float(np.sqrt(x * x + y * y + z * z + w * w))
    sign = -1.0 if w < 0.0 else 1.0
    return (sign * x / norm, sign * y / norm, sign * z / norm, sign * w / norm)


def quaternion_to_matrix(q: tuple[float, float, float, float]) -> np.ndarray:
    """Rotation matrix (3, 3) of a quaternion (x, y, z, w) (normalized first)."""
    x, y, z, w = np.asarray(q, dtype=float) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


class ArmKinematics:
    """Forward kinematics of a URDF for the viewers: per-joint transforms and tool-point positions.

    names: the joint order of incoming position vectors (joint_states.name, a chunk's joint_names);
    joints missing from a vector keep their last known position (0 [rad] at first).
    """

    def __init__(self, model: RobotModel, tool_link: str) -> None:
        if tool_link not in model.link_names():
            raise ValueError(f"{model.source}: tool link {tool_link!r} is not a link of the URDF "
                             f"(links: {model.link_names()})")
        self.model = model
        self.tool_link = tool_link
        self.root = model.root_link()
        self._last: dict[str, float] = {j.name: 0.0 for j in model.movable_joints}

    def update(self, names: list[str] | tuple[str, ...], positions: np.ndarray) -> None:
        """Take new joint positions [rad or m]; names not in the URDF are ignored."""
        for name, value in zip(names, np.asarray(positions, dtype=float), strict=False):
            if name in self._last and np.isfinite(value):
                self._last[name] = float(value)

    def transforms(self) -> list[LinkTransform]:
        """world -> root (identity), then parent -> child for every URDF joint, at the last positions."""
        out = [LinkTransform(WORLD_FRAME, self.root, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))]
        for joint in self.model.joints:
            matrix = joint_transform(joint, self._last.get(joint.name, 0.0))
            out.append(LinkTransform(joint.parent, joint.child, tuple(float(v) for v in matrix[:3, 3]),
                                     matrix_to_quaternion(matrix[:3, :3])))
        return out

    def tool_position(self, names: list[str] | tuple[str, ...] | None = None,
                      positions: np.ndarray | None = None) -> np.ndarray:
        """Tool point (3,) [m] in the root frame, at `positions` (ordered as `names`) or the last ones."""
        values = dict(self._last)
        if names is not None and positions is not None:
            values.update({n: float(v) for n, v in zip(names, np.asarray(positions, dtype=float), strict=False)
                           if n in values})
        names_in_order = list(values)
        transform, _ = self.model.forward_kinematics(np.array([values[n] for n in names_in_order]),
                                                     self.tool_link, names_in_order)
        return transform[:3, 3].copy()

    def tool_path(self, names: list[str] | tuple[str, ...], positions: np.ndarray) -> np.ndarray:
        """Tool point (K, 3) [m], root frame, for each row of `positions` (K, n) ordered as `names`
        (an action chunk's targets); joints the chunk leaves out stay at their last measured value."""
        rows = np.atleast_2d(np.asarray(positions, dtype=float))
        return np.array([self.tool_position(names, row) for row in rows]).reshape(-1, 3)


def compose(transforms: list[LinkTransform], parent: str, child: str) -> np.ndarray:
    """The (4, 4) transform parent -> child through a list of LinkTransforms (a viewer's tf tree):
    what a Foxglove client does with /tf, used by the tests to find the tool point."""
    by_child = {t.child: t for t in transforms}
    matrix = np.eye(4)
    frame = child
    while frame != parent:
        if frame not in by_child:
            raise ValueError(f"no transform chain from {parent!r} to {child!r} (stuck at {frame!r})")
        t = by_child[frame]
        step = np.eye(4)
        step[:3, :3] = quaternion_to_matrix(t.rotation)
        step[:3, 3] = t.translation
        matrix = step @ matrix
        frame = t.parent
    return matrix
