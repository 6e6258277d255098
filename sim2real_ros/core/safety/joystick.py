"""Joystick mapping (config/joystick.yaml) and the decoding of one sensor_msgs/Joy sample.

Pure Python/numpy. The mapping names which button does what and which axis jogs what; indices
follow the ROS 2 `joy` node (SDL game-controller layout) for an Xbox pad or a Logitech F710 in
XInput mode. -1 disables a button.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..errors import ConfigError

# Buttons the supervisor understands, with what they do (also documented in config/joystick.yaml).
BUTTON_ROLES = {
    "deadman": "must be held for the joystick to move anything (TELEOP jogging, SHARED corrections)",
    "estop": "e-stop source: latches ESTOP while pressed",
    "takeover": "press: the human takes over fully (TELEOP)",
    "shared": "press: toggle SHARED (policy + human corrections) <-> AUTONOMOUS",
    "arm": "press: arm / hand control back to the policy (AUTONOMOUS, with a ramp)",
    "hold": "press: HOLD and stay disarmed until armed again",
    "toggle_cartesian": "press: switch jogging between joint space and Cartesian (end effector)",
    "next_group": "press: jog the next group of joints",
}
CARTESIAN_AXES = ("vx", "vy", "vz", "wx", "wy", "wz")


@dataclass(frozen=True)
class JoystickMapping:
    """Which Joy button/axis index does what, and how fast jogging goes.

    buttons: role -> button index (-1: unused). joint_axes: axis index per jogged joint of a group;
    joint_axis_scales: sign/scale per joint axis; joint_speed_fraction: fraction of each joint's
    velocity limit at full stick; joint_groups: lists of joint indices (empty: consecutive groups of
    len(joint_axes)). cartesian_axes: twist component -> axis index; cartesian_axis_scales: sign per
    component; cartesian_linear_speed [m/s] and cartesian_angular_speed [rad/s] at full stick;
    cartesian_damping: damped least squares lambda [m]; deadzone: |axis| below it reads 0.
    """

    buttons: dict[str, int]
    joint_axes: tuple[int, ...] = (0, 1, 3)
    joint_axis_scales: tuple[float, ...] = (1.0, 1.0, 1.0)
    joint_speed_fraction: float = 0.25
    joint_groups: tuple[tuple[int, ...], ...] = ()
    cartesian_axes: dict[str, int] = field(default_factory=dict)
    cartesian_axis_scales: dict[str, float] = field(default_factory=dict)
    cartesian_linear_speed: float = 0.1
    cartesian_angular_speed: float = 0.5
    cartesian_damping: float = 0.05
    deadzone: float = 0.1
    source: str = "joystick mapping"

    def __post_init__(self) -> None:
        src = self.source
        for role, index in self.buttons.items():
            if role not in BUTTON_ROLES:
                raise ConfigError(src, f"buttons.{role}", index, f"unknown button role; known: {sorted(BUTTON_ROLES)}")
            if not isinstance(index, int) or isinstance(index, bool) or index < -1:
                raise ConfigError(src, f"buttons.{role}", index, "must be a button index >= 0, or -1 for unused")
        used = [i for i in self.buttons.values() if i >= 0]
        if len(set(used)) != len(used):
            raise ConfigError(src, "buttons", dict(self.buttons), "two roles share one button")
        if self.buttons.get("deadman", -1) < 0:
            raise ConfigError(src, "buttons.deadman", self.buttons.get("deadman"), "a deadman button is required")
        _check_indices(src, "joint_axes", self.joint_axes)
        if len(self.joint_axis_scales) != len(self.joint_axes):
            raise ConfigError(src, "joint_axis_scales", list(self.joint_axis_scales),
                              f"needs one value per joint axis ({len(self.joint_axes)})")
        if not 0.0 < self.joint_speed_fraction <= 1.0:
            raise ConfigError(src, "joint_speed_fraction", self.joint_speed_fraction, "must be in (0, 1]")
        for g, group in enumerate(self.joint_groups):
            if not group or len(group) > len(self.joint_axes):
                raise ConfigError(src, f"joint_groups[{g}]", list(group),
                                  f"needs 1..{len(self.joint_axes)} joint indices (one per joint axis)")
            _check_indices(src, f"joint_groups[{g}]", group)
        for key, index in self.cartesian_axes.items():
            if key not in CARTESIAN_AXES:
                raise ConfigError(src, f"cartesian_axes.{key}", index, f"unknown component; known: {CARTESIAN_AXES}")
            _check_indices(src, f"cartesian_axes.{key}", (index,))
        for key, scale in self.cartesian_axis_scales.items():
            if key not in self.cartesian_axes:
                raise ConfigError(src, f"cartesian_axis_scales.{key}", scale, "has no axis in cartesian_axes")
        for name in ("cartesian_linear_speed", "cartesian_angular_speed", "cartesian_damping"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < 10):
                raise ConfigError(src, name, value, "must be a number in (0, 10)")
        if not 0.0 <= self.deadzone < 1.0:
            raise ConfigError(src, "deadzone", self.deadzone, "must be in [0, 1)")

    def button(self, role: str) -> int:
        """Index of the button with `role`, -1 when unused."""
        return self.buttons.get(role, -1)

    @property
    def max_axis_index(self) -> int:
        return max([*self.joint_axes, *self.cartesian_axes.values(), -1])

    @property
    def max_button_index(self) -> int:
        return max([*self.buttons.values(), -1])

    def groups_for(self, n_joints: int) -> tuple[tuple[int, ...], ...]:
        """Joint groups for an arm of `n_joints` (validated against it)."""
        if self.joint_groups:
            for g, group in enumerate(self.joint_groups):
                bad = [j for j in group if j >= n_joints]
                if bad:
                    raise ConfigError(self.source, f"joint_groups[{g}]", list(group),
                                      f"joint indices {bad} >= number of joints {n_joints}")
            return self.joint_groups
        k = len(self.joint_axes)
        return tuple(tuple(range(s, min(s + k, n_joints))) for s in range(0, n_joints, k))


def _check_indices(src: str, field_name: str, values: Sequence[Any]) -> None:
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ConfigError(src, field_name, list(values), "indices must be integers >= 0")


def load_joystick_mapping(path: str | Path) -> JoystickMapping:
    """Read a joystick YAML; a missing file, bad YAML, or bad field is a ConfigError naming the file."""
    path = Path(path)
    src = str(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(src, "(file)", src, f"cannot read: {err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(src, "(file)", src, f"not valid YAML: {err}") from err
    return mapping_from_dict(data, src)


def mapping_from_dict(data: Any, source: str = "joystick mapping") -> JoystickMapping:
    """Build a JoystickMapping from parsed YAML, naming `source` in every error."""
    if not isinstance(data, dict):
        raise ConfigError(source, "(top level)", data, "must be a mapping")
    known = {"buttons", "deadzone", "joint_jog", "cartesian_jog"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(source, unknown[0], data[unknown[0]], f"unknown field; known: {sorted(known)}")
    buttons = data.get("buttons")
    if not isinstance(buttons, dict):
        raise ConfigError(source, "buttons", buttons, "must be a mapping role -> button index")
    joint = _section(data, "joint_jog", source, {"axes", "axis_scales", "speed_fraction", "groups"})
    cart = _section(data, "cartesian_jog", source,
                    {"axes", "axis_scales", "linear_speed", "angular_speed", "damping"})
    axes = joint.get("axes", [0, 1, 3])
    if not isinstance(axes, list) or not axes:
        raise ConfigError(source, "joint_jog.axes", axes, "must be a non-empty list of axis indices")
    scales = joint.get("axis_scales", [1.0] * len(axes))
    groups = joint.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        raise ConfigError(source, "joint_jog.groups", groups, "must be a list of lists of joint indices")
    cart_axes = cart.get("axes", {"vx": 1, "vy": 0, "vz": 3, "wz": 2})
    if not isinstance(cart_axes, dict):
        raise ConfigError(source, "cartesian_jog.axes", cart_axes, "must be a mapping component -> axis index")
    cart_scales = cart.get("axis_scales", {})
    if not isinstance(cart_scales, dict):
        raise ConfigError(source, "cartesian_jog.axis_scales", cart_scales, "must be a mapping component -> scale")
    try:
        return JoystickMapping(
            buttons=dict(buttons),
            joint_axes=tuple(axes),
            joint_axis_scales=tuple(_number(source, "joint_jog.axis_scales", s) for s in scales),
            joint_speed_fraction=_number(source, "joint_jog.speed_fraction", joint.get("speed_fraction", 0.25)),
            joint_groups=tuple(tuple(g) for g in groups),
            cartesian_axes=dict(cart_axes),
            cartesian_axis_scales={k: _number(source, f"cartesian_jog.axis_scales.{k}", v)
                                   for k, v in cart_scales.items()},
            cartesian_linear_speed=_number(source, "cartesian_jog.linear_speed", cart.get("linear_speed", 0.1)),
            cartesian_angular_speed=_number(source, "cartesian_jog.angular_speed", cart.get("angular_speed", 0.5)),
            cartesian_damping=_number(source, "cartesian_jog.damping", cart.get("damping", 0.05)),
            deadzone=_number(source, "deadzone", data.get("deadzone", 0.1)),
            source=source,
        )
    except TypeError as err:
        raise ConfigError(source, "(fields)", data, str(err)) from err


def _section(data: dict, key: str, source: str, known: set[str]) -> dict:
    section = data.get(key, {}) or {}
    if not isinstance(section, dict):
        raise ConfigError(source, key, section, "must be a mapping")
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(source, f"{key}.{unknown[0]}", section[unknown[0]], f"unknown field; known: {sorted(known)}")
    return section


def _number(source: str, field_name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise ConfigError(source, field_name, value, "must be a finite number")
    return float(value)


@dataclass(frozen=True)
class JoySample:
    """One decoded Joy message: which roles are pressed, and the axes after the deadzone."""

    pressed: frozenset[str]
    axes: np.ndarray

    def is_pressed(self, role: str) -> bool:
        return role in self.pressed


class JoyMessageError(ValueError):
    """A Joy message cannot be used with the mapping (too few axes/buttons, NaN...)."""


def decode_joy(mapping: JoystickMapping, axes: Sequence[float], buttons: Sequence[int]) -> JoySample:
    """Decode a Joy message's axes (values in [-1, 1]) and buttons (0/1) with `mapping`.

    Axes inside the deadzone read 0, the rest is rescaled so the output is continuous from 0.
    Raises JoyMessageError when an axis is NaN/Inf or a mapped index is missing from the message.
    """
    values = np.asarray(list(axes), dtype=float)
    if not np.all(np.isfinite(values)):
        raise JoyMessageError(f"axes contain NaN/Inf: {values.tolist()}")
    if len(values) <= mapping.max_axis_index:
        raise JoyMessageError(f"Joy has {len(values)} axes, the mapping uses axis {mapping.max_axis_index}")
    if len(buttons) <= mapping.max_button_index:
        raise JoyMessageError(f"Joy has {len(buttons)} buttons, the mapping uses button {mapping.max_button_index}")
    values = np.clip(values, -1.0, 1.0)
    magnitude = np.abs(values)
    dz = mapping.deadzone
    shaped = np.where(magnitude < dz, 0.0, np.sign(values) * (magnitude - dz) / (1.0 - dz))
    pressed = frozenset(role for role, idx in mapping.buttons.items() if idx >= 0 and buttons[idx])
    return JoySample(pressed, shaped)
