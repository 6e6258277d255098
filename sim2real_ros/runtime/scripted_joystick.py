"""A scripted human on the joystick: sensor_msgs/Joy messages built from the supervisor's mapping.

The demo uses it to take over mid-episode and hand back; the validation tooling uses it as a
scripted teleoperator (the privileged teacher driving through the joystick and the supervisor).
Buttons act on edges (supervisor), so a press is one message with the button down after one with
it up; the deadman must stay down while jogging.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sensor_msgs.msg import Joy

from ..conversions import ns_to_stamp
from ..core.safety.joystick import JoystickMapping


class ScriptedJoystick:
    """Builds Joy messages with the mapping's button and axis indices."""

    def __init__(self, mapping: JoystickMapping) -> None:
        self.mapping = mapping
        self.n_axes = max(8, mapping.max_axis_index + 1)
        self.n_buttons = max(15, mapping.max_button_index + 1)

    def message(self, stamp_ns: int, pressed: Iterable[str] = (), axes: dict[int, float] | None = None) -> Joy:
        """A Joy with the buttons of the given roles down and raw axis values (-1..1)."""
        msg = Joy()
        msg.header.stamp = ns_to_stamp(stamp_ns)
        buttons = [0] * self.n_buttons
        for role in pressed:
            index = self.mapping.button(role)
            if index < 0:
                raise ValueError(f"the joystick mapping has no '{role}' button")
            buttons[index] = 1
        values = [0.0] * self.n_axes
        for index, value in (axes or {}).items():
            values[index] = float(np.clip(value, -1.0, 1.0))
        msg.buttons = buttons
        msg.axes = values
        return msg

    def raw_axis(self, normalized: float) -> float:
        """The raw stick value that reads as `normalized` (-1..1) after the deadzone rescaling."""
        dz = self.mapping.deadzone
        u = float(np.clip(normalized, -1.0, 1.0))
        return 0.0 if u == 0.0 else float(np.sign(u) * (dz + abs(u) * (1.0 - dz)))

    def cartesian_axes(self, velocity_xyz: np.ndarray) -> dict[int, float]:
        """Stick positions for an end-effector velocity (3,) [m/s] in the base frame (clipped to the
        mapping's linear speed at full stick)."""
        out: dict[int, float] = {}
        speed = self.mapping.cartesian_linear_speed
        for component, value in zip(("vx", "vy", "vz"), velocity_xyz, strict=True):
            index = self.mapping.cartesian_axes.get(component)
            if index is None:
                continue
            scale = self.mapping.cartesian_axis_scales.get(component, 1.0)
            out[index] = self.raw_axis(float(value) / speed / scale)
        return out

    def joint_axes(self, joint_velocity: np.ndarray, jog_speed: np.ndarray) -> dict[int, float]:
        """Stick positions that jog the selected joint group (the first group after start-up) at
        `joint_velocity` (group size,) [rad/s], given the supervisor's full-stick speed per joint [rad/s]."""
        out: dict[int, float] = {}
        for axis, scale, velocity, speed in zip(self.mapping.joint_axes, self.mapping.joint_axis_scales,
                                                joint_velocity, jog_speed, strict=False):
            out[axis] = self.raw_axis(float(velocity) / float(speed) / scale)
        return out

    def jog_toward(self, stamp_ns: int, ee_xyz: np.ndarray, target_xyz: np.ndarray, gain: float = 2.0,
                   extra: Iterable[str] = ()) -> Joy:
        """Deadman held, Cartesian stick deflection proportional to the remaining distance [m]."""
        velocity = gain * (np.asarray(target_xyz) - np.asarray(ee_xyz))
        return self.message(stamp_ns, ("deadman", *extra), self.cartesian_axes(velocity))
