"""LeRobot SO-101 joint units <-> URDF radians (datasets/lerobot_units.py), checked against LeRobot's
own normalisation written out independently here, and against the feetech driver's tick map."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.datasets.lerobot_units import UnitsError, dataset_units
from sim2real_ros.hardware.calibration import (
    CalibrationError,
    MotorCalibration,
    joint_maps,
    load_calibration,
    write_calibration,
)
from sim2real_ros.robots import get_robot

NAMES = ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos"]
# A calibration as LeRobot writes one for an SO-101 follower (ranges of a real arm's size).
MOTORS = [MotorCalibration("shoulder_pan", 1, 0, -1470, 800, 3280),
          MotorCalibration("shoulder_lift", 2, 0, 1398, 900, 3150),
          MotorCalibration("elbow_flex", 3, 1, 1290, 950, 3120),
          MotorCalibration("wrist_flex", 4, 0, -935, 950, 3100),
          MotorCalibration("wrist_roll", 5, 0, 1547, 250, 3800),
          MotorCalibration("gripper", 6, 0, 1300, 2030, 3250)]


def lerobot_normalize(ticks: float, motor: MotorCalibration, mode: str) -> float:
    """LeRobot's MotorsBus._normalize for one value (motors_bus.py), written out for the test."""
    lo, hi = motor.range_min, motor.range_max
    bounded = min(hi, max(lo, ticks))
    if mode == "range":
        norm = (bounded - lo) / (hi - lo) * 200 - 100
        return -norm if motor.drive_mode else norm
    if mode == "percent":
        norm = (bounded - lo) / (hi - lo) * 100
        return 100 - norm if motor.drive_mode else norm
    return (ticks - (lo + hi) / 2) * 360 / 4095


@pytest.fixture
def so101(tmp_path):
    path = tmp_path / "follower.json"
    write_calibration(path, MOTORS)
    model = RobotModel.from_file(get_robot("so101").urdf_path())
    limits = model.limits_arrays([motor.name for motor in MOTORS])
    return path, dict(zip([m.name for m in MOTORS], limits["lower"], strict=True)), limits


@pytest.mark.parametrize("joint_units", ["range", "degrees"])
def test_units_match_the_driver_and_round_trip(so101, joint_units):
    path, lower, _ = so101
    units = dataset_units(path, NAMES, lower, joint_units)
    maps = joint_maps(load_calibration(path), [m.name for m in MOTORS], np.array(list(lower.values())))
    rng = np.random.default_rng(3)
    ticks = np.stack([rng.uniform(m.range_min, m.range_max, 50) for m in MOTORS], axis=1)
    values = np.array([[lerobot_normalize(t, m, "percent" if m.name == "gripper" else joint_units)
                        for t, m in zip(row, MOTORS, strict=True)] for row in ticks])
    radians = units.to_radians(values)
    driver = np.stack([maps[i].to_radians(ticks[:, i]) for i in range(len(MOTORS))], axis=1)
    np.testing.assert_allclose(radians, driver, atol=1e-9)  # what the driver publishes for those ticks
    np.testing.assert_allclose(units.from_radians(radians), values, atol=1e-9)


def test_calibrated_ranges_land_inside_the_urdf_limits(so101):
    """LeRobot's -100..100 of each arm joint spans its calibrated range, which on this arm lies within
    the URDF's limits; 0 is the middle of the range, the URDF's zero (new calibration)."""
    path, lower, limits = so101
    units = dataset_units(path, NAMES, lower)
    ends = units.to_radians(np.array([[-100] * 5 + [0], [100] * 5 + [100], [0] * 5 + [0]], dtype=float))
    assert np.all(ends[:2] >= limits["lower"]) and np.all(ends[:2] <= limits["upper"])
    np.testing.assert_allclose(ends[2, :5], 0.0, atol=1e-12)
    assert ends[0, 5] == pytest.approx(limits["lower"][5])  # gripper 0 % = closed = the jaw's lower limit
    # drive_mode 1 (elbow_flex): the servo turns the other way; LeRobot's +100 stays the joint's positive
    # end, which is now the servo's range_min
    assert ends[1, 2] > 0 > ends[0, 2]
    assert units.joints[2].to_ticks(np.array(100.0)) == MOTORS[2].range_min


def test_wrong_units_or_file_are_named(so101, tmp_path):
    path, lower, _ = so101
    units = dataset_units(path, NAMES, lower, "range")
    degrees = np.array([[170.0, 0, 0, 0, 0, 50]])  # degrees stored, read as range units
    with pytest.raises(UnitsError, match=r"joint 'shoulder_pan.pos' holds values 170.*--joint-units"):
        units.to_radians(degrees)
    with pytest.raises(CalibrationError, match=r"short.json: no calibration for motor 'wrist_roll'"):
        write_calibration(tmp_path / "short.json", MOTORS[:4] + MOTORS[5:])
        dataset_units(tmp_path / "short.json", NAMES, lower)
    with pytest.raises(UnitsError, match="--joint-units 'ticks'"):
        dataset_units(path, NAMES, lower, "ticks")
    with pytest.raises(UnitsError, match="'joint1' is not a joint of the robot"):
        dataset_units(path, ["joint1.pos"], lower)
