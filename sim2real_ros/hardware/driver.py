"""The Feetech driver's logic without ROS: start without a jump, read all servos in one sync read,
write all goals in one sync write, clamp and count, watch overload and overheat.

The node (nodes/feetech_driver.py) owns the timing and the topics; everything here takes the bus and
returns plain arrays, so it runs against the emulator or a real arm the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import protocol as p
from .bus import BusError, FeetechBus
from .calibration import CalibrationError, JointMap

# A servo gets this many tries to answer at start: some USB adapters lose the first bytes after the
# port opens, and one lost reply must not read as a missing servo.
START_ATTEMPTS = 3
# [s] the reply slack of the start-up transactions (the bus's own timeout_s when that is longer): the
# host is at its busiest while a graph's processes start, and no control loop waits yet, so a late
# reply there is waited for rather than retried (a reply arriving after its transaction gave up would
# be taken for the next one's, of the wrong length).
START_TIMEOUT_S = 0.1


@dataclass(frozen=True)
class DriverConfig:
    """Thresholds of the driver.

    stall_torque_nm [N*m]: torque at 100 % load (STS3215 at 7.4 V: ~1.9), for efforts;
    overload_fraction: |load| (fraction of max torque, 0..1) that counts as overload;
    overheat_c [degC]: temperature that counts as overheat;
    alarm_samples: consecutive samples past a threshold before the alarm is raised (50: 0.5 s at 100 Hz;
    a servo briefly reads near 100 % load while it accelerates, a stalled one stays there);
    check_homing_offset: compare each servo's homing offset register with the calibration file.
    """

    stall_torque_nm: float = 1.9
    overload_fraction: float = 0.9
    overheat_c: float = 65.0
    alarm_samples: int = 50
    check_homing_offset: bool = True

    def __post_init__(self) -> None:
        if not self.stall_torque_nm > 0:
            raise ValueError(f"stall_torque_nm must be > 0, got {self.stall_torque_nm}")
        if not 0 < self.overload_fraction <= 1:
            raise ValueError(f"overload_fraction must be in (0, 1], got {self.overload_fraction}")
        if self.alarm_samples < 1:
            raise ValueError(f"alarm_samples must be >= 1, got {self.alarm_samples}")


@dataclass(frozen=True)
class ServoFeedback:
    """One sync read, in the driver's joint order: positions [rad], velocities [rad/s], efforts [N*m],
    raw ticks, loads (fraction of max torque, signed), voltages [V], temperatures [degC], error bits."""

    positions: np.ndarray
    velocities: np.ndarray
    efforts: np.ndarray
    ticks: np.ndarray
    loads: np.ndarray
    voltages: np.ndarray
    temperatures: np.ndarray
    errors: np.ndarray


@dataclass
class DriverCounters:
    """What happened since start: reads, failed reads by kind, commands, clamps, rejects."""

    reads: int = 0
    read_failures: dict[str, int] = field(default_factory=dict)
    commands: int = 0
    commands_rejected: int = 0
    clamped: dict[str, int] = field(default_factory=dict)  # per joint: commands clamped to URDF limits
    servo_error_samples: dict[str, int] = field(default_factory=dict)  # per joint: replies with alarm bits


class AlarmMonitor:
    """Raises an alarm for a joint once a condition holds for `samples` consecutive samples, and
    clears it when the condition clears (a servo that cooled down); `events` counts raisings, so a
    reader that polls slowly still sees that one happened. The supervisor latches its own stop."""

    def __init__(self, joints: tuple[str, ...], samples: int) -> None:
        self._joints = joints
        self._samples = samples
        self._runs = {kind: np.zeros(len(joints), dtype=int) for kind in ("overload", "overheat")}
        self.active: dict[str, set[str]] = {kind: set() for kind in self._runs}
        self.events: dict[str, int] = {kind: 0 for kind in self._runs}

    def update(self, kind: str, over: np.ndarray) -> None:
        runs = self._runs[kind]
        runs[:] = np.where(over, runs + 1, 0)
        now = {self._joints[index] for index in np.flatnonzero(runs >= self._samples)}
        self.events[kind] += len(now - self.active[kind])
        self.active[kind] = now

    def reset(self) -> None:
        for kind in self._runs:
            self._runs[kind][:] = 0
            self.active[kind] = set()


def check_servos(bus: FeetechBus, maps: list[JointMap], check_homing_offset: bool) -> None:
    """Every servo of `maps` answers a ping (START_ATTEMPTS tries) and, with check_homing_offset, holds
    the calibration file's homing offset. Raises CalibrationError naming the motor."""
    for joint_map in maps:
        motor = joint_map.motor
        offset = None
        for attempt in range(START_ATTEMPTS):
            try:
                bus.ping(motor.servo_id)
                if check_homing_offset:
                    offset = bus.read(motor.servo_id, p.HOMING_OFFSET)
                break
            except BusError as err:
                if attempt + 1 == START_ATTEMPTS:
                    raise CalibrationError(f"motor '{motor.name}' (id {motor.servo_id}) does not answer on "
                                           f"{bus.port} ({START_ATTEMPTS} tries): {err}") from err
        if offset is not None and offset != motor.homing_offset:
            raise CalibrationError(
                f"motor '{motor.name}' (id {motor.servo_id}): the servo's homing offset is {offset}, the "
                f"calibration file says {motor.homing_offset}: this file is not this arm's calibration "
                f"(or the arm was recalibrated); use the matching file")


def write_verified(bus: FeetechBus, register: p.Register, values: dict[int, int]) -> None:
    """Sync-write `register` and read it back from every servo (START_ATTEMPTS tries): a sync write has
    no reply, so a lost one shows only on reading back. Raises BusError when it never reads back."""
    wrong: dict[int, int] = {}
    for attempt in range(START_ATTEMPTS):
        bus.sync_write(register, values)
        try:
            replies = bus.sync_read(list(values), register.address, register.size)
        except BusError:
            if attempt + 1 == START_ATTEMPTS:
                raise
            continue
        wrong = {i: p.decode_value(register, data) for i, (_, data) in replies.items()
                 if p.decode_value(register, data) != values[i]}
        if not wrong:
            return
    raise BusError("bad_reply", sorted(wrong), f"{register.name} reads back {wrong}, written {values}")


class FeetechDriver:
    """Drives the servos of `maps` (one per joint, in the order of the joint list) over `bus`.

    lower, upper: URDF position limits [rad] in the same order. Commands are clamped to them and to the
    servo's calibrated range (range_min..range_max, where LeRobot found the joint's end stops),
    whichever is narrower: `self.lower`, `self.upper`.
    """

    def __init__(self, bus: FeetechBus, maps: list[JointMap], lower: np.ndarray, upper: np.ndarray,
                 config: DriverConfig | None = None) -> None:
        self.bus = bus
        self.maps = maps
        self.joints = tuple(m.joint for m in maps)
        self.ids = [m.motor.servo_id for m in maps]
        ends = np.sort(np.array([[float(m.to_radians(m.motor.range_min)), float(m.to_radians(m.motor.range_max))]
                                 for m in maps]), axis=1)
        self.urdf_lower = np.asarray(lower, dtype=float)
        self.urdf_upper = np.asarray(upper, dtype=float)
        self.lower = np.maximum(self.urdf_lower, ends[:, 0])
        self.upper = np.minimum(self.urdf_upper, ends[:, 1])
        if np.any(self.lower > self.upper):
            joint = self.joints[int(np.flatnonzero(self.lower > self.upper)[0])]
            raise CalibrationError(f"motor '{joint}': its calibrated range does not overlap the URDF limits")
        self.config = config or DriverConfig()
        self.counters = DriverCounters(clamped={j: 0 for j in self.joints},
                                       servo_error_samples={j: 0 for j in self.joints})
        self.alarms = AlarmMonitor(self.joints, self.config.alarm_samples)
        self.last_feedback: ServoFeedback | None = None
        self.last_goal_ticks: dict[int, int] = {}
        self.last_error: BusError | None = None

    # ------------------------------------------------------------------ start and stop
    def start(self, enable_torque: bool = True) -> ServoFeedback:
        """Check every servo answers and matches the calibration, then command exactly the present
        positions (in ticks, as read) before enabling torque: the arm does not move at start.

        Raises CalibrationError naming the motor (a servo that does not answer, or whose homing offset
        differs from the file), BusError for a bus that fails.
        """
        cyclic_timeout_s = self.bus.timeout_s
        self.bus.timeout_s = max(cyclic_timeout_s, START_TIMEOUT_S)
        try:
            check_servos(self.bus, self.maps, self.config.check_homing_offset)
            feedback = None
            for attempt in range(START_ATTEMPTS):
                try:
                    feedback = self.read()
                    break
                except BusError:
                    if attempt + 1 == START_ATTEMPTS:
                        raise
            assert feedback is not None
            hold = {servo_id: int(t) for servo_id, t in zip(self.ids, feedback.ticks, strict=True)}
            # A sync write has no reply: read the goals back before torque goes on, since a lost write
            # would leave a servo with whatever goal its register held (a jump).
            write_verified(self.bus, p.GOAL_POSITION, hold)
            self.last_goal_ticks = hold
            if enable_torque:
                write_verified(self.bus, p.TORQUE_ENABLE, {servo_id: 1 for servo_id in self.ids})
        finally:
            self.bus.timeout_s = cyclic_timeout_s
        return feedback

    def hold(self) -> None:
        """Command the last measured positions (nothing when none was measured)."""
        if self.last_feedback is not None:
            hold = {i: int(t) for i, t in zip(self.ids, self.last_feedback.ticks, strict=True)}
            self.bus.sync_write(p.GOAL_POSITION, hold)
            self.last_goal_ticks = hold

    def stop(self, disable_torque: bool) -> None:
        """Shutdown: hold position; release torque only when asked (an arm may fall when released)."""
        self.hold()
        if disable_torque:
            self.bus.sync_write(p.TORQUE_ENABLE, {servo_id: 0 for servo_id in self.ids})

    # ------------------------------------------------------------------ cyclic
    def read(self) -> ServoFeedback:
        """One sync read of position, speed, load, voltage and temperature of every servo.

        Raises BusError (counted by kind, kept in last_error) when any servo's reply is missing or corrupt.
        """
        try:
            replies = self.bus.sync_read(self.ids, p.FEEDBACK_START, p.FEEDBACK_LENGTH)
        except BusError as err:
            self.counters.read_failures[err.kind] = self.counters.read_failures.get(err.kind, 0) + 1
            self.last_error = err
            raise
        n = len(self.ids)
        ticks, speeds, loads = np.empty(n), np.empty(n), np.empty(n)
        volts, temps, errors = np.empty(n), np.empty(n), np.zeros(n, dtype=int)
        start = p.FEEDBACK_START
        for k, servo_id in enumerate(self.ids):
            error, block = replies[servo_id]
            ticks[k] = p.field(p.PRESENT_POSITION, block, start)
            speeds[k] = p.field(p.PRESENT_SPEED, block, start)
            loads[k] = p.field(p.PRESENT_LOAD, block, start) / 1000.0
            volts[k] = p.field(p.PRESENT_VOLTAGE, block, start) / 10.0
            temps[k] = p.field(p.PRESENT_TEMPERATURE, block, start)
            errors[k] = error
            if error:
                self.counters.servo_error_samples[self.joints[k]] += 1
        positions = np.array([m.to_radians(t) for m, t in zip(self.maps, ticks, strict=True)], dtype=float)
        velocities = np.array([m.speed_to_radians(s) for m, s in zip(self.maps, speeds, strict=True)], dtype=float)
        signs = np.array([m.sign for m in self.maps])
        efforts = signs * loads * self.config.stall_torque_nm
        self.alarms.update("overload", (np.abs(loads) >= self.config.overload_fraction) | ((errors & 0x20) != 0))
        self.alarms.update("overheat", (temps >= self.config.overheat_c) | ((errors & 0x04) != 0))
        self.counters.reads += 1
        self.last_error = None
        self.last_feedback = ServoFeedback(positions, velocities, efforts, ticks, loads, volts, temps, errors)
        return self.last_feedback

    def command(self, positions: np.ndarray) -> np.ndarray:
        """Write goal positions (n,) [rad] in joint order with one sync write; returns what was sent [rad].

        Values outside the limits (URDF and calibrated range) are clamped (counted per joint); a wrong
        length or a NaN/Inf is rejected (ValueError, counted) and nothing is written.
        """
        q = np.asarray(positions, dtype=float)
        if q.shape != (len(self.joints),) or not np.all(np.isfinite(q)):
            self.counters.commands_rejected += 1
            raise ValueError(f"command must be {len(self.joints)} finite positions, got {q.tolist()}")
        clamped = np.clip(q, self.lower, self.upper)
        for index in np.flatnonzero(clamped != q):
            self.counters.clamped[self.joints[index]] += 1
        goals = {m.motor.servo_id: m.to_ticks(v) for m, v in zip(self.maps, clamped, strict=True)}
        self.bus.sync_write(p.GOAL_POSITION, goals)
        self.last_goal_ticks = goals
        self.counters.commands += 1
        return np.array([float(m.to_radians(goals[m.motor.servo_id])) for m in self.maps])
