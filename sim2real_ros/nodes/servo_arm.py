"""What the servo-bus nodes (feetech_driver, leader_arm) read from their parameters the same way: the
arm's joints from the URDF, their limits, and the LeRobot calibration's tick maps."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ConfigError, Sim2RealError
from ..core.robot.joint_list import resolve_joint_list
from ..core.robot.urdf import RobotModel
from ..hardware.calibration import JointMap, joint_maps, load_calibration


@dataclass(frozen=True)
class ServoArm:
    """joints in command order, their URDF limits [rad] and their calibration's tick <-> radian maps."""

    joints: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    maps: list[JointMap]


def servo_arm_from_parameters(values: dict[str, Any], source: str, calibration_needed: str) -> ServoArm:
    """The arm a node's `calibration`, `robot_description` and `joints` parameters describe; ConfigError
    naming the parameter (calibration_needed: what the missing calibration must be, in words)."""
    if not values["calibration"]:
        raise ConfigError(source, "calibration", "", f"{calibration_needed} is required")
    try:
        model = RobotModel.from_description(values["robot_description"])
    except Sim2RealError as err:
        raise ConfigError(source, "robot_description", values["robot_description"][:80], str(err)) from err
    joints = tuple(resolve_joint_list(values["joints"], model, source))
    limits = model.limits_arrays(list(joints))
    maps = joint_maps(load_calibration(values["calibration"]), joints, limits["lower"], values["calibration"])
    return ServoArm(joints, limits["lower"], limits["upper"], maps)


def wait_for_next_period(deadline: float, period_s: float) -> tuple[float, bool]:
    """Sleep until `deadline` [s, time.monotonic]; (the next period's deadline, whether this one overran).
    A late cycle starts a fresh schedule from now rather than bursting to catch up."""
    wait = deadline - time.monotonic()
    if wait > 0:
        time.sleep(wait)
        return deadline + period_s, False
    return time.monotonic() + period_s, True
