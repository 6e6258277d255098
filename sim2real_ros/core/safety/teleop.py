"""Joystick jogging: a decoded Joy sample -> joint velocities [rad/s].

Two ways to jog, switched with the `toggle_cartesian` button:
- joint space: each mapped axis drives one joint of the selected group (`next_group` cycles);
- Cartesian: the sticks give a twist of the end effector in the robot's base frame, turned into
  joint velocities through the URDF Jacobian with damped least squares (bounded near singularities).
Joint velocities are scaled down uniformly (direction kept) so no joint exceeds its jog speed.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from ..robot.urdf import RobotModel, damped_least_squares
from .joystick import CARTESIAN_AXES, JoySample, JoystickMapping
from .limits import SafetyLimits


def default_ee_link(model: RobotModel) -> str:
    """The end-effector link: the child of the last revolute/prismatic-arm joint, followed down
    through fixed joints while a link has exactly one child joint (panda: panda_hand)."""
    revolute = [j for j in model.movable_joints if j.type in ("revolute", "continuous")]
    link = (revolute or model.movable_joints)[-1].child
    while True:
        children = [j for j in model.joints if j.parent == link]
        if len(children) != 1 or children[0].type != "fixed":
            return link
        link = children[0].child


class Jogger:
    """Turns joystick axes into joint velocities (n,) [rad/s] for the configured joints."""

    def __init__(self, mapping: JoystickMapping, limits: SafetyLimits,
                 model: RobotModel | None = None, ee_link: str = "") -> None:
        self.mapping = mapping
        self.limits = limits
        self.model = model
        self.groups = mapping.groups_for(limits.n)
        self.group_index = 0
        self.cartesian = False
        self.ee_link = ee_link
        if model is not None:
            self.ee_link = ee_link or default_ee_link(model)
            if self.ee_link not in model.link_names():
                raise ConfigError("parameters", "ee_link", ee_link, f"not a link of {model.source}")
        # Full stick moves each joint at this speed [rad/s]; Cartesian output is scaled to fit in it.
        self.jog_speed = limits.velocity * mapping.joint_speed_fraction

    @property
    def mode_name(self) -> str:
        return "cartesian" if self.cartesian else f"joints{list(self.groups[self.group_index])}"

    def next_group(self) -> None:
        self.group_index = (self.group_index + 1) % len(self.groups)

    def toggle_cartesian(self) -> None:
        """Switch joint <-> Cartesian jogging (Cartesian needs the robot model)."""
        if self.model is not None:
            self.cartesian = not self.cartesian

    def joint_velocity(self, sample: JoySample, q: np.ndarray) -> np.ndarray:
        """Joint velocities (n,) [rad/s] asked by `sample` at joint positions q (n,) [rad]."""
        if self.cartesian:
            return self._cartesian_velocity(sample, q)
        dq = np.zeros(self.limits.n)
        for axis, scale, joint in zip(self.mapping.joint_axes, self.mapping.joint_axis_scales,
                                      self.groups[self.group_index], strict=False):
            dq[joint] = float(sample.axes[axis]) * scale * self.jog_speed[joint]
        return np.clip(dq, -self.jog_speed, self.jog_speed)

    def twist(self, sample: JoySample) -> np.ndarray:
        """End-effector twist (6,) [m/s, rad/s] in the base frame: vx, vy, vz, wx, wy, wz."""
        out = np.zeros(6)
        for k, key in enumerate(CARTESIAN_AXES):
            if key in self.mapping.cartesian_axes:
                speed = self.mapping.cartesian_linear_speed if k < 3 else self.mapping.cartesian_angular_speed
                scale = self.mapping.cartesian_axis_scales.get(key, 1.0)
                out[k] = float(sample.axes[self.mapping.cartesian_axes[key]]) * scale * speed
        return out

    def _cartesian_velocity(self, sample: JoySample, q: np.ndarray) -> np.ndarray:
        assert self.model is not None
        twist = self.twist(sample)
        if not np.any(twist):
            return np.zeros(self.limits.n)
        # Zero angular components mean "keep the orientation", so the full 6-D twist is solved.
        jac = self.model.jacobian(q, self.ee_link, list(self.limits.joint_names))
        dq = damped_least_squares(jac, twist, damping=self.mapping.cartesian_damping)
        return scale_to_limits(dq, self.jog_speed)


def scale_to_limits(dq: np.ndarray, max_speed: Sequence[float] | np.ndarray) -> np.ndarray:
    """dq (n,) scaled by one factor <= 1 so that |dq_i| <= max_speed_i (keeps the direction)."""
    dq = np.asarray(dq, dtype=float)
    ratio = np.max(np.abs(dq) / np.asarray(max_speed, dtype=float))
    return dq / ratio if ratio > 1.0 else dq
