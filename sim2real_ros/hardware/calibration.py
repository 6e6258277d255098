"""LeRobot calibration files and the map from raw servo ticks to URDF joint angles [rad].

A LeRobot calibration JSON holds, per motor name: id, drive_mode, homing_offset, range_min and
range_max. LeRobot writes homing_offset into the servo (register 31) when it calibrates, so the servo's
Present_Position already has it applied, and range_min/range_max are in that shifted frame. LeRobot
reports a joint in degrees as (ticks - mid) * 360 / 4095 with mid = (range_min + range_max) / 2, negated
when drive_mode is 1; the SO-101 URDF "new calibration" puts every arm joint's zero at that middle.

Here an arm joint is sign * (ticks - mid) * 2 pi / 4096 [rad] (4096 ticks per turn: the physical
encoder; LeRobot's 4095 differs by 0.02 %). The gripper (jaw) joint is not symmetric in the URDF:
its range_min end (closed, the end LeRobot's 0 % means) maps to the jaw joint's lower limit, and it
opens at the same 2 pi / 4096 rad per tick (the jaw is on the servo's horn).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import Sim2RealError
from .protocol import MAX_ID, TICKS_PER_TURN

RAD_PER_TICK = 2.0 * math.pi / TICKS_PER_TURN
FIELDS = ("id", "drive_mode", "homing_offset", "range_min", "range_max")
MAX_FILE_BYTES = 1 << 20  # a calibration file is a few hundred bytes; refuse anything absurd
GRIPPER_JOINTS = ("gripper",)


class CalibrationError(Sim2RealError):
    """A calibration file is missing, unreadable or does not match the robot; names file and motor."""


@dataclass(frozen=True)
class MotorCalibration:
    """One motor's LeRobot calibration entry (ticks in the servo's homed frame)."""

    name: str
    servo_id: int
    drive_mode: int
    homing_offset: int
    range_min: int
    range_max: int


@dataclass(frozen=True)
class JointMap:
    """Ticks <-> radians for one joint: q = anchor_rad + sign * (ticks - anchor_ticks) * RAD_PER_TICK."""

    joint: str
    motor: MotorCalibration
    sign: int
    anchor_ticks: float
    anchor_rad: float

    def to_radians(self, ticks: np.ndarray | int) -> np.ndarray:
        return self.anchor_rad + self.sign * (np.asarray(ticks, dtype=float) - self.anchor_ticks) * RAD_PER_TICK

    def to_ticks(self, radians: float) -> int:
        """The nearest tick to `radians`, kept inside the calibrated range [range_min, range_max]."""
        ticks = self.anchor_ticks + self.sign * (float(radians) - self.anchor_rad) / RAD_PER_TICK
        return int(min(max(round(ticks), self.motor.range_min), self.motor.range_max))

    def speed_to_radians(self, ticks_per_s: np.ndarray | int) -> np.ndarray:
        return self.sign * np.asarray(ticks_per_s, dtype=float) * RAD_PER_TICK


def load_calibration(path: str | Path) -> dict[str, MotorCalibration]:
    """Read a LeRobot calibration JSON; raises CalibrationError naming the file and the motor."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise CalibrationError(f"{path}: {path.stat().st_size} bytes is not a calibration file "
                                   f"(at most {MAX_FILE_BYTES})")
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise CalibrationError(f"{path}: calibration file not found (run LeRobot's calibration for this "
                               f"arm, or pass its file)") from err
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CalibrationError(f"{path}: not a readable calibration JSON: {err}") from err
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: expected an object of motors, got {type(data).__name__}")
    motors = {}
    seen_ids: dict[int, str] = {}
    for name, entry in data.items():
        where = f"{path}: motor '{name}'"
        if not isinstance(entry, dict):
            raise CalibrationError(f"{where}: expected an object with {FIELDS}, got {entry!r}")
        values = {}
        for key in FIELDS:
            value = entry.get(key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise CalibrationError(f"{where}: field '{key}' = {value!r}: must be an integer")
            values[key] = value
        motor = MotorCalibration(name, values["id"], values["drive_mode"], values["homing_offset"],
                                 values["range_min"], values["range_max"])
        if not 0 <= motor.servo_id <= MAX_ID:
            raise CalibrationError(f"{where}: field 'id' = {motor.servo_id}: must be in 0..{MAX_ID}")
        if motor.servo_id in seen_ids:
            raise CalibrationError(f"{where}: id {motor.servo_id} is also motor '{seen_ids[motor.servo_id]}'")
        seen_ids[motor.servo_id] = name
        if motor.drive_mode not in (0, 1):
            raise CalibrationError(f"{where}: field 'drive_mode' = {motor.drive_mode}: must be 0 or 1")
        if abs(motor.homing_offset) >= 2048:
            raise CalibrationError(f"{where}: field 'homing_offset' = {motor.homing_offset}: must be in -2047..2047")
        if not 0 <= motor.range_min < motor.range_max < TICKS_PER_TURN:
            raise CalibrationError(f"{where}: range_min = {motor.range_min}, range_max = {motor.range_max}: "
                                   f"need 0 <= range_min < range_max <= {TICKS_PER_TURN - 1}")
        motors[name] = motor
    return motors


def joint_maps(calibration: dict[str, MotorCalibration], joints: tuple[str, ...] | list[str],
               lower: np.ndarray, source: str = "calibration") -> list[JointMap]:
    """One JointMap per joint (motor name = joint name, as in LeRobot's SO-101); lower: the joints'
    URDF lower limits [rad] (the gripper's closed end). Raises CalibrationError naming the motor."""
    missing = [j for j in joints if j not in calibration]
    if missing:
        raise CalibrationError(f"{source}: no calibration for motor '{missing[0]}' (joints {list(joints)}; "
                               f"the file has motors {sorted(calibration)})")
    maps = []
    for joint, low in zip(joints, lower, strict=True):
        motor = calibration[joint]
        sign = -1 if motor.drive_mode else 1
        if joint in GRIPPER_JOINTS:
            anchor = motor.range_min if sign > 0 else motor.range_max
            maps.append(JointMap(joint, motor, sign, float(anchor), float(low)))
        else:
            maps.append(JointMap(joint, motor, sign, (motor.range_min + motor.range_max) / 2.0, 0.0))
    return maps


def write_calibration(path: str | Path, motors: list[MotorCalibration]) -> None:
    """Write a LeRobot-format calibration JSON (tests, the emulator's docs examples)."""
    Path(path).write_text(json.dumps({m.name: {"id": m.servo_id, "drive_mode": m.drive_mode,
                                               "homing_offset": m.homing_offset, "range_min": m.range_min,
                                               "range_max": m.range_max} for m in motors}, indent=4))


def calibration_covering(joints: list[str] | tuple[str, ...], lower: np.ndarray, upper: np.ndarray,
                         first_id: int = 1) -> list[MotorCalibration]:
    """A calibration for emulated servos whose ranges cover the URDF limits [rad]: ids first_id.., no
    homing offset, drive_mode 0. Arm joints: zero at tick 2048 (mid-range), the range symmetric about it
    and wide enough for the larger limit; the gripper: closed (its lower limit) at range_min. What
    LeRobot's calibration would write for an arm whose end stops lie just past the URDF limits."""
    mid = TICKS_PER_TURN // 2
    motors = []
    for k, (joint, low, high) in enumerate(zip(joints, lower, upper, strict=True)):
        if joint in GRIPPER_JOINTS:
            span = int(math.ceil((float(high) - float(low)) / RAD_PER_TICK))
            range_min = max(0, mid - span // 2)
            range_max = min(TICKS_PER_TURN - 1, range_min + span)
        else:
            half = int(math.ceil(max(abs(float(low)), abs(float(high))) / RAD_PER_TICK))
            range_min, range_max = max(0, mid - half), min(TICKS_PER_TURN - 1, mid + half)
        motors.append(MotorCalibration(joint, first_id + k, 0, 0, range_min, range_max))
    return motors
