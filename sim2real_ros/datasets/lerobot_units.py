"""LeRobot's joint units <-> URDF radians for datasets recorded on servo arms (the SO-101).

LeRobot stores an SO-101's joints as its motor bus reports them, not in radians:
- arm joints in "range" units, -100..100 over the calibrated range (LeRobot's default,
  `MotorNormMode.RANGE_M100_100`, negated when the motor's drive_mode is 1), or in degrees from the
  middle of the range (`use_degrees: true`, `MotorNormMode.DEGREES`: (ticks - mid) * 360 / 4095,
  drive_mode not applied);
- the gripper in 0..100 over its range (`MotorNormMode.RANGE_0_100`, 0 = range_min, mirrored when
  drive_mode is 1).
A LeRobot calibration file (per motor: id, drive_mode, homing_offset, range_min, range_max) gives the
ticks behind each value; the feetech driver's map (hardware.calibration.JointMap) turns ticks into
URDF radians, so a dataset imported here and the driver's `joint_states` of the same arm agree.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import Sim2RealError
from ..hardware.calibration import GRIPPER_JOINTS, RAD_PER_TICK, JointMap, joint_maps, load_calibration

JOINT_UNITS = ("range", "degrees")  # how the arm joints were stored (LeRobot's use_degrees false / true)
LEROBOT_MAX_RES = 4095  # LeRobot's degrees: 360 degrees per 4095 ticks (its model resolution - 1)
POSITION_SUFFIX = ".pos"  # LeRobot names an SO-101 joint "<motor>.pos"


class UnitsError(Sim2RealError):
    """A dataset's joints cannot be mapped with the calibration: names the file, joint and value."""


def motor_name(feature_name: str) -> str:
    """LeRobot's feature name of a joint ("shoulder_pan.pos") -> the motor / URDF joint name."""
    return feature_name.removesuffix(POSITION_SUFFIX)


@dataclass(frozen=True)
class JointUnits:
    """One joint: LeRobot value <-> servo ticks <-> URDF radians."""

    joint: JointMap
    mode: str  # "range" (-100..100), "degrees" or "percent" (gripper, 0..100)

    def to_ticks(self, values: np.ndarray) -> np.ndarray:
        m = self.joint.motor
        span = float(m.range_max - m.range_min)
        v = np.asarray(values, dtype=np.float64)
        if self.mode == "range":
            v = -v if m.drive_mode else v
            return m.range_min + (v + 100.0) / 200.0 * span
        if self.mode == "percent":
            v = 100.0 - v if m.drive_mode else v
            return m.range_min + v / 100.0 * span
        return (m.range_min + m.range_max) / 2.0 + v * LEROBOT_MAX_RES / 360.0

    def from_ticks(self, ticks: np.ndarray) -> np.ndarray:
        m = self.joint.motor
        span = float(m.range_max - m.range_min)
        t = np.asarray(ticks, dtype=np.float64)
        if self.mode == "range":
            v = (t - m.range_min) / span * 200.0 - 100.0
            return -v if m.drive_mode else v
        if self.mode == "percent":
            v = (t - m.range_min) / span * 100.0
            return 100.0 - v if m.drive_mode else v
        return (t - (m.range_min + m.range_max) / 2.0) * 360.0 / LEROBOT_MAX_RES

    def to_radians(self, values: np.ndarray) -> np.ndarray:
        return self.joint.to_radians(self.to_ticks(values))

    def from_radians(self, radians: np.ndarray) -> np.ndarray:
        j = self.joint
        ticks = j.anchor_ticks + j.sign * (np.asarray(radians, dtype=np.float64) - j.anchor_rad) / RAD_PER_TICK
        return self.from_ticks(ticks)

    def bounds(self) -> tuple[float, float]:
        """The values LeRobot can report for this joint (it clamps ticks to the calibrated range)."""
        ends = self.from_ticks(np.array([self.joint.motor.range_min, self.joint.motor.range_max], dtype=float))
        return float(ends.min()), float(ends.max())


@dataclass(frozen=True)
class DatasetUnits:
    """The unit map of a dataset's joint vector (one entry per feature name, in the dataset's order)."""

    source: str  # the calibration file
    names: tuple[str, ...]  # the dataset's feature names
    joints: tuple[JointUnits, ...]

    def to_radians(self, values: np.ndarray, where: str = "") -> np.ndarray:
        """(frames, joints) LeRobot values -> radians; a value LeRobot could not have reported (outside
        its unit's range by more than 1 %) is an error naming the joint: the wrong --joint-units or file."""
        values = np.asarray(values, dtype=np.float64)
        out = np.empty_like(values)
        for i, (name, units) in enumerate(zip(self.names, self.joints, strict=True)):
            column = values[:, i]
            low, high = units.bounds()
            slack = 0.01 * (high - low)
            finite = column[np.isfinite(column)]
            if finite.size and (finite.min() < low - slack or finite.max() > high + slack):
                raise UnitsError(f"{where or self.source}: joint '{name}' holds values {finite.min():.4g}.."
                                 f"{finite.max():.4g}, outside what LeRobot reports in '{units.mode}' units "
                                 f"({low:.4g}..{high:.4g}) with calibration {self.source}: another arm's "
                                 f"calibration, or the wrong --joint-units")
            out[:, i] = units.to_radians(column)
        return out

    def from_radians(self, radians: np.ndarray) -> np.ndarray:
        radians = np.asarray(radians, dtype=np.float64)
        return np.stack([u.from_radians(radians[:, i]) for i, u in enumerate(self.joints)], axis=1)


def dataset_units(calibration: str | Path, names: list[str] | tuple[str, ...], lower_limits: dict[str, float],
                  joint_units: str = "range") -> DatasetUnits:
    """The unit map for a dataset's joint features `names` ("shoulder_pan.pos", ...) from a LeRobot
    calibration file; `lower_limits`: URDF lower limit [rad] per joint (the gripper's closed end)."""
    if joint_units not in JOINT_UNITS:
        raise UnitsError(f"--joint-units {joint_units!r}: must be one of {JOINT_UNITS}")
    motors = [motor_name(n) for n in names]
    unknown = [m for m in motors if m not in lower_limits]
    if unknown:
        raise UnitsError(f"{calibration}: dataset joint '{unknown[0]}' is not a joint of the robot's URDF "
                         f"(joints {sorted(lower_limits)})")
    maps = joint_maps(load_calibration(calibration), motors, np.array([lower_limits[m] for m in motors]),
                      source=str(calibration))
    modes = ["percent" if m in GRIPPER_JOINTS else joint_units for m in motors]
    return DatasetUnits(str(calibration), tuple(names), tuple(JointUnits(j, mode) for j, mode in
                                                              zip(maps, modes, strict=True)))


def robot_lower_limits(robot: str) -> dict[str, float]:
    """URDF lower limit [rad] of each movable joint of a registered robot (the gripper's closed end)."""
    from ..core.robot.urdf import RobotModel
    from ..robots import get_robot

    model = RobotModel.from_file(get_robot(robot, "--robot").urdf_path())
    names = model.joint_names
    return dict(zip(names, model.limits_arrays(names)["lower"].tolist(), strict=True))


def looks_like_motor_units(names: list[str] | tuple[str, ...]) -> bool:
    """LeRobot names a motor-bus arm's joints "<motor>.pos": its values are in motor units, not radians."""
    return bool(names) and all(str(n).endswith(POSITION_SUFFIX) for n in names)
