"""The SO-101 leader arm without ROS: the same servos and bus as the follower, read only, torque off.

A leader arm is moved by a person's hand; its joint positions (mapped to the follower's URDF radians
through the leader's own LeRobot calibration file) are what the follower should do. This reads it with
the follower's driver code (FeetechDriver.read: one sync read of every servo, the same tick-to-radian
map, alarms and counters) and adds what a leader needs:

- torque is never enabled: at start every servo's torque-enable register is written 0 and read back
  (a servo left torqued by another tool would fight the hand), and no goal position is ever written;
- a position outside the follower's URDF limits is clamped to them and counted per joint (the leader's
  range is its own; the follower cannot go there);
- with the follower's calibration, the gripper maps by fraction of travel, as LeRobot's teleoperation
  does (0..100 % of the leader handle's calibrated range -> the same % of the follower jaw's range):
  a handle whose travel differs from the jaw's still closes and opens it fully. Without it, the
  gripper maps like the follower's own reading (closed end to the jaw's lower limit, then radians
  per tick).

The node (nodes/leader_arm.py) paces the reads and publishes them as command/teleop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import protocol as p
from .bus import BusError, FeetechBus
from .calibration import GRIPPER_JOINTS, RAD_PER_TICK, CalibrationError, JointMap, MotorCalibration
from .driver import (
    START_ATTEMPTS,
    AlarmMonitor,
    DriverConfig,
    DriverCounters,
    FeetechDriver,
    ServoFeedback,
    check_servos,
    write_verified,
)


@dataclass(frozen=True)
class LeaderSample:
    """One read of the leader, in joint order: positions [rad] clamped to the follower's URDF limits,
    the unclamped positions [rad], velocities [rad/s], and which joints were clamped."""

    positions: np.ndarray
    raw_positions: np.ndarray
    velocities: np.ndarray
    clamped: tuple[str, ...]


class LeaderArm:
    """Reads the leader servos of `maps` over `bus`; lower, upper: the follower's URDF limits [rad];
    follower: the follower's calibration (by motor name), for the gripper's map by fraction (None:
    by angle). Raises CalibrationError when `follower` lacks a gripper motor.

    `counters` (the driver's: reads, read failures by kind, servo alarm samples) and `clamped` (per
    joint: samples clamped to the URDF limits) say what happened since start.
    """

    def __init__(self, bus: FeetechBus, maps: list[JointMap], lower: np.ndarray, upper: np.ndarray,
                 config: DriverConfig | None = None,
                 follower: dict[str, MotorCalibration] | None = None) -> None:
        # Only read() of the driver is used: never start(), command(), hold() or stop(), which write goals
        # or torque.
        self._servos = FeetechDriver(bus, maps, lower, upper, config)
        self.bus = bus
        self.joints = self._servos.joints
        self.ids = list(self._servos.ids)
        self.lower = np.asarray(lower, dtype=float)
        self.upper = np.asarray(upper, dtype=float)
        self.clamped = {joint: 0 for joint in self.joints}
        self.last_sample: LeaderSample | None = None
        # Gripper joints mapped by fraction: (index, leader motor, follower jaw span [rad]).
        self._by_fraction: list[tuple[int, MotorCalibration, float]] = []
        for k, joint_map in enumerate(maps):
            if follower is not None and joint_map.joint in GRIPPER_JOINTS:
                if joint_map.joint not in follower:
                    raise CalibrationError(f"follower calibration: no motor '{joint_map.joint}' (it has "
                                           f"{sorted(follower)})")
                motor = follower[joint_map.joint]
                self._by_fraction.append((k, joint_map.motor, (motor.range_max - motor.range_min) * RAD_PER_TICK))

    @property
    def counters(self) -> DriverCounters:
        return self._servos.counters

    @property
    def alarms(self) -> AlarmMonitor:
        return self._servos.alarms

    @property
    def last_error(self) -> BusError | None:
        return self._servos.last_error

    @property
    def last_feedback(self) -> ServoFeedback | None:
        return self._servos.last_feedback

    def start(self) -> LeaderSample:
        """Check every servo answers and matches the calibration, release torque (written 0 and read back),
        then read once. Raises CalibrationError naming the motor, BusError for a bus that fails."""
        check_servos(self.bus, self._servos.maps, self._servos.config.check_homing_offset)
        write_verified(self.bus, p.TORQUE_ENABLE, {servo_id: 0 for servo_id in self.ids})
        for attempt in range(START_ATTEMPTS):
            try:
                return self.read()
            except BusError:
                if attempt + 1 == START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def read(self) -> LeaderSample:
        """One sync read: positions clamped to the follower's URDF limits (counted per joint).

        Raises BusError (counted by kind in `counters.read_failures`) when any servo's reply is missing
        or corrupt: the caller publishes nothing for that read.
        """
        feedback = self._servos.read()
        raw = feedback.positions.copy()
        velocities = feedback.velocities.copy()
        for k, motor, span_rad in self._by_fraction:
            leader_span = motor.range_max - motor.range_min  # [ticks]
            opened = (feedback.ticks[k] - motor.range_min) / leader_span
            if motor.drive_mode:
                opened = 1.0 - opened  # closed at range_max (LeRobot: 100 - %)
            raw[k] = self.lower[k] + opened * span_rad
            velocities[k] *= span_rad / (leader_span * RAD_PER_TICK)  # the same sign, the jaw's scale
        positions = np.clip(raw, self.lower, self.upper)
        clamped = tuple(self.joints[k] for k in np.flatnonzero(positions != raw))
        for joint in clamped:
            self.clamped[joint] += 1
        self.last_sample = LeaderSample(positions, raw, velocities, clamped)
        return self.last_sample
