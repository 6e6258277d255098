"""The Feetech STS/SMS serial-bus protocol (protocol 0): packets, checksums, registers, encodings.

An instruction packet is `FF FF id length instruction params... checksum`, a status (reply) packet
`FF FF id length error params... checksum`; length = len(params) + 2 and checksum = ~(id + length +
instruction-or-error + sum(params)) & 0xFF. Multi-byte registers are little-endian. Signed registers
use sign-magnitude: a sign bit (15 for speeds, 10 for the load, 11 for the homing offset) and the
magnitude in the bits below it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import Sim2RealError

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE
MAX_ID = 0xFD

PING = 0x01
READ = 0x02
WRITE = 0x03
SYNC_READ = 0x82
SYNC_WRITE = 0x83
INSTRUCTIONS = {PING: "ping", READ: "read", WRITE: "write", SYNC_READ: "sync_read", SYNC_WRITE: "sync_write"}

TICKS_PER_TURN = 4096  # STS3215: 12-bit magnetic encoder, 0..4095
STS3215_MODEL_NUMBER = 777

# Status packet error bits (the servo's alarm flags).
ERROR_BITS = {
    0x01: "input_voltage",
    0x02: "angle_sensor",
    0x04: "overheat",
    0x08: "overcurrent",
    0x20: "overload",
}


@dataclass(frozen=True)
class Register:
    """One control-table entry: address, size [bytes] and sign bit (None: unsigned)."""

    name: str
    address: int
    size: int
    sign_bit: int | None = None


# STS3215 control table (the entries this stack uses; Feetech's STS memory table, as LeRobot's tables.py).
MODEL_NUMBER = Register("model_number", 3, 2)
ID = Register("id", 5, 1)
BAUD_RATE = Register("baud_rate", 6, 1)
RETURN_DELAY = Register("return_delay", 7, 1)  # units of 2 us
MIN_POSITION_LIMIT = Register("min_position_limit", 9, 2)
MAX_POSITION_LIMIT = Register("max_position_limit", 11, 2)
MAX_TEMPERATURE_LIMIT = Register("max_temperature_limit", 13, 1)  # [degC]
HOMING_OFFSET = Register("homing_offset", 31, 2, sign_bit=11)
TORQUE_ENABLE = Register("torque_enable", 40, 1)
ACCELERATION = Register("acceleration", 41, 1)
GOAL_POSITION = Register("goal_position", 42, 2, sign_bit=15)
GOAL_SPEED = Register("goal_speed", 46, 2, sign_bit=15)
LOCK = Register("lock", 55, 1)
PRESENT_POSITION = Register("present_position", 56, 2, sign_bit=15)
PRESENT_SPEED = Register("present_speed", 58, 2, sign_bit=15)  # [ticks/s]
PRESENT_LOAD = Register("present_load", 60, 2, sign_bit=10)  # [0.1 % of max torque]
PRESENT_VOLTAGE = Register("present_voltage", 62, 1)  # [0.1 V]
PRESENT_TEMPERATURE = Register("present_temperature", 63, 1)  # [degC]
STATUS = Register("status", 65, 1)
MOVING = Register("moving", 66, 1)
REGISTERS = (MODEL_NUMBER, ID, BAUD_RATE, RETURN_DELAY, MIN_POSITION_LIMIT, MAX_POSITION_LIMIT,
             MAX_TEMPERATURE_LIMIT, HOMING_OFFSET, TORQUE_ENABLE, ACCELERATION, GOAL_POSITION, GOAL_SPEED,
             LOCK, PRESENT_POSITION, PRESENT_SPEED, PRESENT_LOAD, PRESENT_VOLTAGE, PRESENT_TEMPERATURE,
             STATUS, MOVING)

# One sync read covers position, speed, load, voltage and temperature: addresses 56..63 are contiguous,
# so the two slow values cost 2 bytes per servo and need no second transaction.
FEEDBACK_START = PRESENT_POSITION.address
FEEDBACK_LENGTH = PRESENT_TEMPERATURE.address + 1 - FEEDBACK_START


class ProtocolError(Sim2RealError):
    """A malformed packet or a value that does not fit its register."""


def checksum(body: bytes) -> int:
    """~sum & 0xFF over the bytes after the header (id, length, instruction/error, params)."""
    return (~sum(body)) & 0xFF


def _packet(servo_id: int, code: int, params: bytes) -> bytes:
    if not 0 <= servo_id <= BROADCAST_ID:
        raise ProtocolError(f"servo id {servo_id} is outside 0..{BROADCAST_ID}")
    if len(params) > 250:
        raise ProtocolError(f"{len(params)} parameter bytes do not fit one packet (at most 250)")
    body = bytes((servo_id, len(params) + 2, code)) + params
    return HEADER + body + bytes((checksum(body),))


def build_instruction(servo_id: int, instruction: int, params: bytes = b"") -> bytes:
    """An instruction packet for `servo_id` (BROADCAST_ID for sync read/write)."""
    return _packet(servo_id, instruction, bytes(params))


def build_status(servo_id: int, error: int, params: bytes = b"") -> bytes:
    """A servo's status (reply) packet: its error bits and the data read."""
    return _packet(servo_id, error, bytes(params))


@dataclass(frozen=True)
class Packet:
    """A parsed packet: id, instruction (or error bits, for a status packet) and parameters."""

    servo_id: int
    code: int
    params: bytes

    def __len__(self) -> int:
        return len(self.params) + 6


class PacketReader:
    """Splits a byte stream into packets, resynchronizing on the header after garbage.

    A packet whose checksum fails is dropped and counted (checksum_errors); bytes skipped while
    looking for a header are counted too (skipped_bytes). Memory is bounded: a packet is at most
    255 + 4 bytes, and everything before a header is discarded.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.checksum_errors = 0
        self.skipped_bytes = 0

    def feed(self, data: bytes) -> list[Packet]:
        """Add received bytes; return the complete packets they finish, in order."""
        self._buffer += data
        packets = []
        while True:
            packet = self._next()
            if packet is None:
                return packets
            packets.append(packet)

    def pending(self) -> int:
        """Bytes held that do not yet form a packet."""
        return len(self._buffer)

    def clear(self) -> None:
        self._buffer.clear()

    def _next(self) -> Packet | None:
        buf = self._buffer
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # Keep a trailing 0xFF: it may be the first half of the next header.
                keep = 1 if buf[-1:] == b"\xff" else 0
                self.skipped_bytes += len(buf) - keep
                del buf[:len(buf) - keep]
                return None
            if start:
                self.skipped_bytes += start
                del buf[:start]
            # "FF FF FF id": the first FF is noise (an id of 0xFF is not valid).
            if len(buf) >= 3 and buf[2] == 0xFF:
                self.skipped_bytes += 1
                del buf[:1]
                continue
            if len(buf) < 4:
                return None
            length = buf[3]
            if length < 2:
                self.skipped_bytes += 2
                del buf[:2]
                continue
            total = 4 + length
            if len(buf) < total:
                return None
            body = bytes(buf[2:total - 1])
            if checksum(body) != buf[total - 1]:
                self.checksum_errors += 1
                self.skipped_bytes += 2
                del buf[:2]
                continue
            del buf[:total]
            return Packet(body[0], body[2], body[3:])


def encode_value(register: Register, value: int) -> bytes:
    """`value` as the register's little-endian bytes (sign-magnitude for signed registers)."""
    value = int(value)
    if register.sign_bit is not None:
        magnitude = abs(value)
        if magnitude >= 1 << register.sign_bit:
            raise ProtocolError(f"{register.name}: {value} does not fit {register.sign_bit} magnitude bits")
        value = magnitude | ((1 << register.sign_bit) if value < 0 else 0)
    if not 0 <= value < 1 << (8 * register.size):
        raise ProtocolError(f"{register.name}: {value} does not fit {register.size} byte(s)")
    return value.to_bytes(register.size, "little")


def decode_value(register: Register, data: bytes) -> int:
    """The register's value from its bytes (sign-magnitude decoded for signed registers)."""
    if len(data) != register.size:
        raise ProtocolError(f"{register.name}: expected {register.size} byte(s), got {len(data)}")
    raw = int.from_bytes(data, "little")
    if register.sign_bit is not None:
        magnitude = raw & ((1 << register.sign_bit) - 1)
        return -magnitude if raw & (1 << register.sign_bit) else magnitude
    return raw


def field(register: Register, block: bytes, start: int) -> int:
    """Decode `register` out of a block of bytes read from address `start`."""
    offset = register.address - start
    return decode_value(register, block[offset:offset + register.size])


def error_names(error: int) -> list[str]:
    """Names of the alarm bits set in a status packet's error byte."""
    return [name for bit, name in ERROR_BITS.items() if error & bit] + (
        [f"unknown_0x{error & ~sum(ERROR_BITS):02x}"] if error & ~sum(ERROR_BITS) & 0xFF else [])


def read_params(register_or_start: Register | int, length: int | None = None) -> bytes:
    """Parameters of a READ: start address and byte count."""
    if isinstance(register_or_start, Register):
        return bytes((register_or_start.address, register_or_start.size))
    return bytes((register_or_start, int(length or 0)))


def sync_read_params(start: int, length: int, ids: list[int]) -> bytes:
    """Parameters of a SYNC_READ: start address, byte count per servo, then the ids in reply order."""
    return bytes((start, length, *ids))


def sync_write_params(register: Register, values: dict[int, int]) -> bytes:
    """Parameters of a SYNC_WRITE of one register: address, size, then id + data for each servo."""
    out = bytearray((register.address, register.size))
    for servo_id, value in values.items():
        out.append(servo_id)
        out += encode_value(register, value)
    return bytes(out)


def byte_time_s(baudrate: int) -> float:
    """Time one byte takes on the wire [s]: 8N1 framing, 10 bits per byte."""
    return 10.0 / float(baudrate)
