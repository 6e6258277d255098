"""The `joints` parameter every node takes, checked against the robot (no rclpy).

A joint list maps positions to joints by index (the controller's Float64MultiArray has no names), so
a name that appears twice or is not a movable joint of the robot would send one joint's value, with
its limits, to another joint. Every node that takes a joint list resolves it here at start-up.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from .urdf import RobotModel


def resolve_joint_list(requested: Sequence[str], model: RobotModel, source: str,
                       field: str = "joints") -> tuple[str, ...]:
    """The joint names a node uses: `requested` in its order, or the URDF's movable joints when empty.

    Raises ConfigError(source, field, requested, ...) for an empty name, a name that appears more than
    once, or a name that is not a movable joint of `model` (a fixed joint or an unknown name); the
    message names the first offending entry and the robot's movable joints.
    """
    names = [str(name) for name in requested]
    movable = model.joint_names
    if not names:
        return tuple(movable)
    seen: set[str] = set()
    for index, name in enumerate(names):
        if not name.strip():
            raise ConfigError(source, field, names, f"entry {index} is an empty joint name")
        if name in seen:
            raise ConfigError(source, field, names, f"duplicate joint '{name}' (entries {names.index(name)} and "
                                                    f"{index}): each joint may be named once")
        seen.add(name)
        if name not in movable:
            fixed = any(joint.name == name for joint in model.joints)
            what = "is a fixed joint of" if fixed else "is not a joint of"
            raise ConfigError(source, field, names,
                              f"'{name}' {what} {model.source}; its movable joints are {movable}")
    return tuple(names)
