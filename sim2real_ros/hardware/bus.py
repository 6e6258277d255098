"""A Feetech STS bus client on pyserial: ping, read, write, one sync read, one sync write.

Every transaction that expects replies waits at most `timeout_s` beyond the time the replies need on
the wire at the bus's baud rate; what is missing, corrupt or flagged by a servo comes back as a
BusError naming the servos (the caller decides whether to stop publishing), never as a hang.
"""
from __future__ import annotations

import select
import time
from dataclasses import dataclass, field

import serial

from ..core.errors import Sim2RealError
from . import protocol as p

try:
    import termios
except ImportError:  # not a POSIX system: pyserial raises its own errors there
    termios = None


# What a port that went away raises (a USB adapter unplugged, the emulator's pty closed): pyserial's
# own errors, OSError, and termios.error (EIO from tcflush), which is not an OSError.
PORT_ERRORS: tuple[type[BaseException], ...] = (serial.SerialException, OSError) + (
    (termios.error,) if termios is not None else ())


class BusError(Sim2RealError):
    """A transaction failed: `kind` is timeout, checksum, bad_reply or serial; `servo_ids` the servos."""

    def __init__(self, kind: str, servo_ids: list[int], detail: str) -> None:
        self.kind = kind
        self.servo_ids = list(servo_ids)
        super().__init__(f"bus {kind} (servos {self.servo_ids}): {detail}")


@dataclass
class BusCounters:
    """Transactions and failures since the bus opened."""

    transactions: int = 0
    timeouts: int = 0
    checksum_errors: int = 0
    bad_replies: int = 0
    by_servo: dict[int, int] = field(default_factory=dict)  # failed replies per servo id

    def failed(self, servo_ids: list[int]) -> None:
        for servo_id in servo_ids:
            self.by_servo[servo_id] = self.by_servo.get(servo_id, 0) + 1


class FeetechBus:
    """One serial port with Feetech STS servos on it (protocol 0, 8N1).

    timeout_s [s]: slack allowed beyond the expected reply time (return delays, USB latency and the
    host's scheduling included); a USB adapter at low latency (FTDI latency_timer 1 ms) answers well
    within the default 0.02 s, which a busy host also meets.
    """

    def __init__(self, port: str, baudrate: int = 1_000_000, timeout_s: float = 0.02) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.port = port
        self.baudrate = int(baudrate)
        self.timeout_s = float(timeout_s)
        self.counters = BusCounters()
        self._reader = p.PacketReader()
        self._last_replies: dict[int, tuple[int, bytes]] = {}
        try:
            self._serial = serial.Serial(port, self.baudrate, timeout=0, write_timeout=0.5)
        except (serial.SerialException, OSError, ValueError) as err:
            raise BusError("serial", [], f"cannot open {port} at {baudrate} baud: {err}") from err
        self._byte_s = p.byte_time_s(self.baudrate)

    def close(self) -> None:
        self._serial.close()

    def __enter__(self) -> FeetechBus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    def ping(self, servo_id: int) -> int:
        """Ping a servo; returns its error bits (raises BusError when it does not answer)."""
        return self._transact(p.build_instruction(servo_id, p.PING), [servo_id], 0)[servo_id][0]

    def scan(self, expected_ids: list[int]) -> dict[int, int]:
        """Broadcast ping; returns {id: error bits} of the servos that answered (any of expected_ids
        missing is not an error here: the caller compares)."""
        packet = p.build_instruction(p.BROADCAST_ID, p.PING)
        try:
            return {i: error for i, (error, _) in self._transact(packet, expected_ids, 0).items()}
        except BusError:
            return {i: error for i, (error, _) in self._last_replies.items()}

    def read(self, servo_id: int, register: p.Register) -> int:
        """Read one register of one servo."""
        error, data = self._transact(p.build_instruction(servo_id, p.READ, p.read_params(register)),
                                     [servo_id], register.size)[servo_id]
        return p.decode_value(register, data)

    def read_block(self, servo_id: int, start: int, length: int) -> tuple[int, bytes]:
        """Read `length` bytes from `start`; returns (error bits, data)."""
        return self._transact(p.build_instruction(servo_id, p.READ, p.read_params(start, length)),
                              [servo_id], length)[servo_id]

    def write(self, servo_id: int, register: p.Register, value: int) -> int:
        """Write one register of one servo and wait for its acknowledgement; returns its error bits."""
        params = bytes((register.address,)) + p.encode_value(register, value)
        return self._transact(p.build_instruction(servo_id, p.WRITE, params), [servo_id], 0)[servo_id][0]

    def sync_read(self, servo_ids: list[int], start: int, length: int) -> dict[int, tuple[int, bytes]]:
        """One SYNC_READ: every servo answers in turn with `length` bytes from `start`.

        Returns {id: (error bits, data)}; raises BusError (timeout / checksum / bad_reply) naming
        the servos whose reply did not come back intact.
        """
        packet = p.build_instruction(p.BROADCAST_ID, p.SYNC_READ, p.sync_read_params(start, length, servo_ids))
        return self._transact(packet, servo_ids, length)

    def sync_write(self, register: p.Register, values: dict[int, int]) -> None:
        """One SYNC_WRITE of `register` for every servo in `values` (no replies on the bus)."""
        packet = p.build_instruction(p.BROADCAST_ID, p.SYNC_WRITE, p.sync_write_params(register, values))
        self.counters.transactions += 1
        self._send(packet)

    # ------------------------------------------------------------------ internals
    def _send(self, packet: bytes) -> None:
        try:
            # Replies to an earlier, timed-out transaction must not be taken for this one's.
            self._serial.reset_input_buffer()
            self._reader.clear()
            self._serial.write(packet)
        except PORT_ERRORS as err:
            raise BusError("serial", [], f"write on {self.port} failed: {err}") from err

    def _transact(self, packet: bytes, servo_ids: list[int], length: int) -> dict[int, tuple[int, bytes]]:
        self.counters.transactions += 1
        self._send(packet)
        reply_bytes = len(servo_ids) * (6 + length)
        deadline = time.monotonic() + (len(packet) + reply_bytes) * self._byte_s + self.timeout_s
        replies: dict[int, tuple[int, bytes]] = {}
        wanted = set(servo_ids)
        checksum_before = self._reader.checksum_errors
        bad: list[int] = []
        while wanted - replies.keys() - set(bad):
            # Past the deadline select() still looks once without waiting: a thread that lost the
            # CPU (or the GIL) past it finds the replies that came meanwhile waiting in the port's
            # buffer, and they are no timeout. It never waits beyond the deadline.
            remaining = max(0.0, deadline - time.monotonic())
            try:
                # select() rather than pyserial's timeout: changing that re-applies termios each call.
                ready, _, _ = select.select([self._serial.fileno()], [], [], remaining)
                data = self._serial.read(4096) if ready else b""
            except PORT_ERRORS as err:
                raise BusError("serial", servo_ids, f"read on {self.port} failed: {err}") from err
            if remaining == 0.0 and not data:  # (a port that reads empty must not keep it here)
                break
            for reply in self._reader.feed(data):
                if reply.servo_id not in wanted or reply.servo_id in replies:
                    continue
                if len(reply.params) != length:
                    bad.append(reply.servo_id)
                    continue
                replies[reply.servo_id] = (reply.code, reply.params)
        self._last_replies = replies
        missing = [i for i in servo_ids if i not in replies]
        if not missing:
            return replies
        self.counters.failed(missing)
        if bad:
            self.counters.bad_replies += 1
            raise BusError("bad_reply", missing, f"reply of the wrong length (expected {length} data bytes)")
        if self._reader.checksum_errors > checksum_before:
            self.counters.checksum_errors += 1
            raise BusError("checksum", missing, "a reply failed its checksum")
        self.counters.timeouts += 1
        raise BusError("timeout", missing, f"no reply within {self.timeout_s * 1e3:.1f} ms of the expected time")
