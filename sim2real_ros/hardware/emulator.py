"""A Feetech STS servo bus on a pseudo-terminal: the real protocol, servo dynamics, bus timing, faults.

Any serial client (this stack's driver, LeRobot, Feetech's tools) opens the pty's path as if it were
the USB adapter of an SO-101. Each emulated servo has the STS3215 control table (protocol.REGISTERS),
answers ping (also broadcast: every servo in id order), read, write and sync read with checksummed
status packets and applies sync writes.

Timing: the replies to an instruction are written when they would have finished on a real bus:
after the instruction's own bytes, each servo's return delay (register 7, 2 us units) and each
reply's bytes at the baud rate (10 bits per byte), sync-read replies one after another.
Dynamics (sim/motor_model.py's servo model): a dead time, then a position loop whose speed,
gain * error, is limited to max_speed and changes at most at max_acceleration; the load register
reads what moving takes (a share for speed and one for acceleration), never near 100 % unless a
fault says so.

Faults (deterministic, counted in replies the servo would have sent):
  drop:ID:N      every Nth reply of servo ID is not sent
  corrupt:ID:N   every Nth reply of servo ID has a wrong checksum
  silent:ID:N    servo ID answers N replies, then never again
  overheat:ID:N  after N replies servo ID reads 85 degC and sets its overheat alarm bit
  overload:ID:N  after N replies servo ID reads 100 % load and sets its overload alarm bit (stalled)
  late:ID:N      the first N replies of servo ID come LATE_S late (a USB adapter or host that stalls while
                 the arm's computer starts up); the replies after it in the same transaction wait with it

A hand (a person moving a leader arm): HandMove(ID, TICKS, AT_S) moves servo ID toward TICKS from AT_S
seconds after the emulator started, at the servo's own speed and acceleration limits, but only while its
torque is off (a torqued servo holds its goal against the hand, as a real one does).

Goal log (`goal_log`, a text file or None): one line per goal position a WRITE or SYNC_WRITE puts on
the bus, `t_ns id ticks present`: t_ns the steady clock (time.monotonic_ns, CLOCK_MONOTONIC: shared
by every process on the machine) when the instruction was read from the pty, present the servo's
present position then [ticks]. What a logic analyser on the bus would show, for tests and benchmarks.
"""
from __future__ import annotations

import contextlib
import math
import os
import select
import time
import tty
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from ..core.errors import Sim2RealError
from ..sim.motor_model import LatencyQueue, ServoLoop
from . import protocol as p

RAD_PER_TICK = 2.0 * math.pi / p.TICKS_PER_TURN
FAULT_KINDS = ("drop", "corrupt", "silent", "overheat", "overload", "late")
LATE_S = 0.05  # [s] how late a `late` fault's replies come


@dataclass(frozen=True)
class ServoDynamics:
    """The emulated servo's response (sim/motor_model.py ServoLoop parameters, STS3215-like defaults):
    dead_time_s [s], max_speed [rad/s] (no load, 7.4 V: ~0.22 s per 60 deg), max_acceleration
    [rad/s^2], gain [1/s], step_s [s] the integration step; load_at_max_speed and
    load_at_max_acceleration: the load register's share (0..1) at full speed and full acceleration."""

    dead_time_s: float = 0.005
    max_speed: float = 4.7
    max_acceleration: float = 60.0
    gain: float = 25.0
    step_s: float = 0.001
    load_at_max_speed: float = 0.3
    load_at_max_acceleration: float = 0.5


def dynamics_from_sim_params(path: str, joints_by_id: dict[int, str]) -> dict[int, ServoDynamics]:
    """Per-servo dynamics from a sim params YAML whose actuator model is `servo` (what `sim2real sysid
    fit` writes): dead time = actuator.actuation_latency_s, and actuator.servo's max_speed,
    max_acceleration and gain for each servo's joint name. Raises Sim2RealError naming the file."""
    from ..sim.params import load_sim_params

    params = load_sim_params(path)
    servo = params.actuator.servo
    if servo is None:
        raise Sim2RealError(f"{path}: actuator.model is {params.actuator.model!r}; the emulator needs the servo "
                            f"model's parameters (actuator.model: servo, actuator.servo)")
    names = [joints_by_id[i] for i in sorted(joints_by_id)]
    speed, accel, gain = (v.resolve(names) for v in (servo.max_speed, servo.max_acceleration, servo.gain))
    return {i: ServoDynamics(dead_time_s=params.actuator.actuation_latency_s, max_speed=float(speed[k]),
                             max_acceleration=float(accel[k]), gain=float(gain[k]))
            for k, i in enumerate(sorted(joints_by_id))}


@dataclass(frozen=True)
class Fault:
    kind: str
    servo_id: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Fault:
        """'kind:ID:N' (see the module docstring); raises Sim2RealError naming the text."""
        parts = text.split(":")
        if len(parts) != 3 or parts[0] not in FAULT_KINDS or not parts[1].isdigit() or not parts[2].isdigit():
            raise Sim2RealError(f"fault {text!r}: expected KIND:ID:N with KIND one of {FAULT_KINDS}")
        fault = cls(parts[0], int(parts[1]), int(parts[2]))
        if fault.kind in ("drop", "corrupt", "late") and fault.count < 1:
            raise Sim2RealError(f"fault {text!r}: N must be >= 1 for {fault.kind}")
        return fault


@dataclass(frozen=True)
class HandMove:
    """A hand moves servo `servo_id` toward `ticks` from `at_s` [s] after the emulator started."""

    servo_id: int
    ticks: int
    at_s: float

    @classmethod
    def parse(cls, text: str) -> HandMove:
        """'ID:TICKS:AT_S'; raises Sim2RealError naming the text."""
        parts = text.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            move = cls(int(parts[0]), int(parts[1]), float(parts[2]))
        except ValueError as err:
            raise Sim2RealError(f"hand move {text!r}: expected ID:TICKS:AT_S") from err
        if not (0 <= move.ticks < p.TICKS_PER_TURN and move.at_s >= 0 and math.isfinite(move.at_s)):
            raise Sim2RealError(f"hand move {text!r}: TICKS must be in 0..{p.TICKS_PER_TURN - 1}, AT_S >= 0")
        return move


@dataclass
class EmulatedServo:
    """One servo: its control table (256 bytes), its loop state and its fault schedule."""

    servo_id: int
    initial_ticks: int
    dynamics: ServoDynamics
    homing_offset: int = 0
    faults: list[Fault] = field(default_factory=list)
    replies: int = 0
    stalled: bool = False
    memory: bytearray = field(default_factory=lambda: bytearray(256))

    def __post_init__(self) -> None:
        def put(register: p.Register, value: int) -> None:
            self.memory[register.address:register.address + register.size] = p.encode_value(register, value)
        put(p.MODEL_NUMBER, p.STS3215_MODEL_NUMBER)
        put(p.ID, self.servo_id)
        put(p.RETURN_DELAY, 0)
        put(p.MIN_POSITION_LIMIT, 0)
        put(p.MAX_POSITION_LIMIT, p.TICKS_PER_TURN - 1)
        put(p.MAX_TEMPERATURE_LIMIT, 70)
        put(p.HOMING_OFFSET, self.homing_offset)
        put(p.GOAL_POSITION, self.initial_ticks)
        put(p.PRESENT_POSITION, self.initial_ticks)
        put(p.PRESENT_VOLTAGE, 74)
        put(p.PRESENT_TEMPERATURE, 32)
        self._put = put
        self._delay = LatencyQueue(np.array([self.initial_ticks * RAD_PER_TICK]))

    def get(self, register: p.Register) -> int:
        return p.decode_value(register, bytes(self.memory[register.address:register.address + register.size]))

    def put(self, register: p.Register, value: int) -> None:
        self._put(register, value)

    def write_memory(self, address: int, data: bytes, now_ns: int) -> None:
        """A WRITE or SYNC_WRITE: store the bytes; a new goal enters the dead-time queue."""
        self.memory[address:address + len(data)] = data
        goal = self.get(p.GOAL_POSITION)
        if address <= p.GOAL_POSITION.address < address + len(data) and self.get(p.TORQUE_ENABLE):
            self._delay.push(now_ns, int(self.dynamics.dead_time_s * 1e9), np.array([goal * RAD_PER_TICK]))
        elif address <= p.TORQUE_ENABLE.address < address + len(data) and self.get(p.TORQUE_ENABLE):
            # Torque on: the loop heads for the stored goal (the driver stores the present position first).
            self._delay.reset(np.array([goal * RAD_PER_TICK]))

    def target(self, now_ns: int) -> float:
        """The goal in effect after the dead time [rad]."""
        return float(self._delay.update(now_ns)[0])

    def show(self, reference: float, speed: float, acceleration: float) -> None:
        """Put the loop's state in the present-value registers."""
        torque = bool(self.get(p.TORQUE_ENABLE))
        d = self.dynamics
        self._put(p.PRESENT_POSITION, max(-32767, min(32767, int(round(reference / RAD_PER_TICK)))))
        ticks_per_s = int(round(speed / RAD_PER_TICK))
        self._put(p.PRESENT_SPEED, max(-32767, min(32767, ticks_per_s)))
        load = (d.load_at_max_speed * speed / d.max_speed
                + d.load_at_max_acceleration * acceleration / d.max_acceleration) if torque else 0.0
        if self.stalled:
            load = 1.0
        self._put(p.PRESENT_LOAD, int(round(1000 * max(-1.0, min(1.0, load)))))
        self._put(p.MOVING, int(ticks_per_s != 0))

    def reply_fate(self) -> str:
        """What happens to the next reply: 'send', 'drop', 'corrupt' or 'late' (and the overheat fault's effect)."""
        self.replies += 1
        fate = "send"
        for fault in self.faults:
            if fault.kind == "silent" and self.replies > fault.count:
                return "drop"
            if fault.kind == "drop" and self.replies % fault.count == 0:
                fate = "drop"
            if fault.kind == "corrupt" and self.replies % fault.count == 0 and fate == "send":
                fate = "corrupt"
            if fault.kind == "late" and self.replies <= fault.count and fate == "send":
                fate = "late"
            if fault.kind == "overheat" and self.replies > fault.count:
                self._put(p.PRESENT_TEMPERATURE, 85)
            if fault.kind == "overload" and self.replies > fault.count:
                self.stalled = True
                self._put(p.PRESENT_LOAD, 1000)
        return fate

    def error_bits(self) -> int:
        overheat = 0x04 if self.get(p.PRESENT_TEMPERATURE) > self.get(p.MAX_TEMPERATURE_LIMIT) else 0
        return overheat | (0x20 if self.stalled else 0)


class BusEmulator:
    """Servos `ids` behind a pseudo-terminal; `path` is what a client opens. Call serve_forever()."""

    def __init__(self, ids: list[int], baudrate: int = 1_000_000,
                 dynamics: ServoDynamics | dict[int, ServoDynamics] | None = None,
                 faults: list[Fault] | None = None, initial_ticks: dict[int, int] | None = None,
                 homing_offsets: dict[int, int] | None = None, hand: list[HandMove] | None = None) -> None:
        if not ids or any(not 0 <= i <= p.MAX_ID for i in ids) or len(set(ids)) != len(ids):
            raise Sim2RealError(f"servo ids {ids}: need distinct ids in 0..{p.MAX_ID}")
        faults = faults or []
        unknown = [f for f in faults if f.servo_id not in ids]
        if unknown:
            raise Sim2RealError(f"fault on servo {unknown[0].servo_id}, which is not on the bus (ids {ids})")
        strangers = [m for m in hand or [] if m.servo_id not in ids]
        if strangers:
            raise Sim2RealError(f"hand move of servo {strangers[0].servo_id}, which is not on the bus (ids {ids})")
        self.baudrate = int(baudrate)
        self.byte_s = p.byte_time_s(self.baudrate)
        dynamics = dynamics or ServoDynamics()
        per_servo = dynamics if isinstance(dynamics, dict) else {i: dynamics for i in ids}
        if set(per_servo) != set(ids):
            raise Sim2RealError(f"dynamics given for servos {sorted(per_servo)}, the bus has {ids}")
        initial_ticks = initial_ticks or {}
        homing_offsets = homing_offsets or {}
        self.servos = {i: EmulatedServo(i, int(initial_ticks.get(i, p.TICKS_PER_TURN // 2)), per_servo[i],
                                        int(homing_offsets.get(i, 0)), [f for f in faults if f.servo_id == i])
                       for i in ids}
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        tty.setraw(self._master)
        self.path = os.ttyname(self._slave)
        order = sorted(self.servos)
        self._order = order
        self._loop = ServoLoop(np.array([self.servos[i].initial_ticks * RAD_PER_TICK for i in order]))
        # The loop's parameters as arrays over the servos (sorted by id), per servo.
        ordered = [self.servos[i].dynamics for i in order]
        self._step_ns = int(min(d.step_s for d in ordered) * 1e9)
        self._limits = (np.array([d.max_speed for d in ordered]), np.array([d.max_acceleration for d in ordered]),
                        np.array([d.gain for d in ordered]), np.full(len(order), 0.5 * RAD_PER_TICK))
        self._reader = p.PacketReader()
        self._last_ns = time.monotonic_ns()
        start_ns = self._last_ns
        # Per servo (sorted by id): its hand moves as (start [ns], ticks), in time order.
        self._hand = [sorted((start_ns + int(m.at_s * 1e9), m.ticks) for m in hand or [] if m.servo_id == i)
                      for i in order]
        self._bus_free_ns = 0
        self.instructions = 0
        self.goal_log: TextIO | None = None  # see the module docstring
        self._goal_lines: list[str] = []

    def close(self) -> None:
        for fd in (self._master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    def serve_forever(self, stop_after_s: float | None = None) -> None:
        end = None if stop_after_s is None else time.monotonic() + stop_after_s
        while end is None or time.monotonic() < end:
            # Idle, the loop still runs (every 2 ms), so no reply waits for a long catch-up.
            ready, _, _ = select.select([self._master], [], [], 0.002)
            if not ready:
                self._advance(time.monotonic_ns())
                continue
            data = os.read(self._master, 4096)
            arrived_ns = time.monotonic_ns()
            for packet in self._reader.feed(data):
                self.handle(packet, arrived_ns)

    # ------------------------------------------------------------------ protocol
    def _advance(self, now_ns: int) -> None:
        """Run every servo's loop from the last update to now_ns [ns] in steps of dynamics.step_s."""
        servos = [self.servos[i] for i in self._order]
        step_ns = self._step_ns
        # After a long gap the loop has settled anyway: simulate at most its last 0.5 s.
        t = max(self._last_ns, now_ns - 500_000_000)
        limits = self._limits
        target = np.array([s.target(t) for s in servos])
        torque = np.array([bool(s.get(p.TORQUE_ENABLE)) for s in servos])
        start_speed = self._loop.speed.copy()
        elapsed_s = max((now_ns - t) * 1e-9, 1e-9)
        while t < now_ns:
            dt_ns = min(step_ns, now_ns - t)
            t += dt_ns
            target = np.array([s.target(t) for s in servos])
            reference = self._loop.reference.copy()
            hand = self._hand_targets(t)
            # Torque off: the horn stays where it is unless a hand moves it (which the torque resists).
            moved = torque | ~np.isnan(hand)
            self._loop.update(np.where(torque, target, np.where(moved, hand, reference)), dt_ns * 1e-9, *limits)
            self._loop.reference[:] = np.where(moved, self._loop.reference, reference)
            self._loop.speed[:] = np.where(moved, self._loop.speed, 0.0)
        for k, servo in enumerate(servos):
            acceleration = float(self._loop.speed[k] - start_speed[k]) / elapsed_s
            servo.show(float(self._loop.reference[k]), float(self._loop.speed[k]), acceleration)
        self._last_ns = max(self._last_ns, now_ns)

    def _hand_targets(self, now_ns: int) -> np.ndarray:
        """Where a hand moves each servo at now_ns [rad] (NaN: no hand on it yet), sorted by id."""
        out = np.full(len(self._order), np.nan)
        for k, moves in enumerate(self._hand):
            for start_ns, ticks in moves:
                if start_ns <= now_ns:
                    out[k] = ticks * RAD_PER_TICK
        return out

    def handle(self, packet: p.Packet, arrived_ns: int) -> None:
        """Act on one instruction packet and send the replies it asks for, at their bus times."""
        self.instructions += 1
        # The instruction occupied the bus for its own bytes before any servo can answer.
        cursor = max(arrived_ns, self._bus_free_ns) + int(len(packet) * self.byte_s * 1e9)
        self._advance(cursor)
        code, params = packet.code, packet.params
        replies: list[tuple[EmulatedServo, bytes]] = []
        if code == p.SYNC_WRITE and packet.servo_id == p.BROADCAST_ID and len(params) >= 2:
            address, size = params[0], params[1]
            for offset in range(2, len(params) - size, size + 1):
                servo = self.servos.get(params[offset])
                if servo is not None:
                    self._log_goal(servo, address, bytes(params[offset + 1:offset + 1 + size]), arrived_ns)
                    servo.write_memory(address, bytes(params[offset + 1:offset + 1 + size]), cursor)
        elif code == p.SYNC_READ and packet.servo_id == p.BROADCAST_ID and len(params) >= 2:
            address, size = params[0], params[1]
            for servo_id in params[2:]:
                servo = self.servos.get(servo_id)
                if servo is not None:
                    replies.append((servo, bytes(servo.memory[address:address + size])))
        elif code == p.PING and packet.servo_id == p.BROADCAST_ID:
            # A broadcast ping (LeRobot's and Feetech's bus scan): every servo answers, in id order.
            replies.extend((self.servos[i], b"") for i in self._order)
        elif packet.servo_id in self.servos:
            servo = self.servos[packet.servo_id]
            if code == p.PING:
                replies.append((servo, b""))
            elif code == p.READ and len(params) == 2:
                replies.append((servo, bytes(servo.memory[params[0]:params[0] + params[1]])))
            elif code == p.WRITE and params:
                self._log_goal(servo, params[0], bytes(params[1:]), arrived_ns)
                servo.write_memory(params[0], bytes(params[1:]), cursor)
                replies.append((servo, b""))
        self._bus_free_ns = cursor
        if self._goal_lines and self.goal_log is not None:
            # One write per instruction, flushed: a reader sees whole instructions.
            self.goal_log.write("".join(self._goal_lines))
            self.goal_log.flush()
            self._goal_lines.clear()
        out = bytearray()
        for servo, data in replies:
            fate = servo.reply_fate()
            if fate == "drop":
                # The client waits for a reply that never starts; the bus stays idle meanwhile.
                continue
            reply = bytearray(p.build_status(servo.servo_id, servo.error_bits(), data))
            if fate == "corrupt":
                reply[-1] ^= 0x5A
            if fate == "late":
                cursor += int(LATE_S * 1e9)
            cursor += servo.get(p.RETURN_DELAY) * 2000 + int(len(reply) * self.byte_s * 1e9)
            out += reply
        # One write when the last reply would have ended: a USB adapter hands the host whole chunks
        # too, and one wake-up per transaction keeps the emulator's own CPU use small.
        if out:
            self._send_at(bytes(out), cursor)
        self._bus_free_ns = cursor

    def _log_goal(self, servo: EmulatedServo, address: int, data: bytes, arrived_ns: int) -> None:
        """Append a goal position this write carries to goal_log (before it is applied)."""
        goal = p.GOAL_POSITION
        if self.goal_log is None or not address <= goal.address <= address + len(data) - goal.size:
            return
        start = goal.address - address
        ticks = p.decode_value(goal, data[start:start + goal.size])
        self._goal_lines.append(f"{arrived_ns} {servo.servo_id} {ticks} {servo.get(p.PRESENT_POSITION)}\n")

    def _send_at(self, data: bytes, due_ns: int) -> None:
        """Write `data` when its last byte would have left a real servo."""
        wait_s = (due_ns - time.monotonic_ns()) * 1e-9
        if wait_s > 0.0002:
            time.sleep(wait_s - 0.0001)
        while time.monotonic_ns() < due_ns:
            pass
        os.write(self._master, data)
