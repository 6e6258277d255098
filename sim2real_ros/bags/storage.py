"""What every storage backend (sqlite3, MCAP) hands the bag reader: connections, counts, raw messages.

Pure Python, no rclpy. One `StorageFile` is one file of a bag; the reader merges several.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from ..core.errors import BagError

if sys.version_info >= (3, 14):  # pragma: no cover - the stdlib module arrived in 3.14
    from compression import zstd
else:
    from backports import zstd

# (log time [ns], topic, serialized CDR bytes)
RawMessage = tuple[int, str, "bytes | memoryview"]


@dataclass
class Connection:
    """A topic as one storage file declares it.

    `msgdef` is the message definition stored in the file (rosbag2 MCAP schemas, the sqlite3
    `message_definitions` table of Iron and newer), empty when the file stores none.
    `offered_qos_profiles` is the rosbag2 YAML text of the publishers' QoS (may be empty).
    """

    topic: str
    msgtype: str
    serialization_format: str = "cdr"
    offered_qos_profiles: str = ""
    msgdef: str = ""
    msgdef_encoding: str = ""  # "ros2msg", "ros2idl" or ""
    type_hash: str = ""


@dataclass
class TopicStats:
    """Messages of one topic actually present in a file, and their log-time range [ns]."""

    count: int = 0
    start_ns: int | None = None
    end_ns: int | None = None

    def add(self, count: int, start_ns: int | None, end_ns: int | None) -> None:
        self.count += count
        if start_ns is not None:
            self.start_ns = start_ns if self.start_ns is None else min(self.start_ns, start_ns)
        if end_ns is not None:
            self.end_ns = end_ns if self.end_ns is None else max(self.end_ns, end_ns)


@dataclass
class FileSummary:
    """What one storage file holds: its connections, per-topic counts, and what is wrong with it."""

    path: Path
    storage: str
    connections: dict[str, Connection] = field(default_factory=dict)
    stats: dict[str, TopicStats] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    ros_distro: str = ""
    # True when the file was not closed properly (no MCAP summary / truncated last record):
    # readable, but `sim2real bag repair` should rewrite it.
    needs_repair: bool = False

    @property
    def message_count(self) -> int:
        return sum(s.count for s in self.stats.values())

    @property
    def start_ns(self) -> int | None:
        starts = [s.start_ns for s in self.stats.values() if s.start_ns is not None]
        return min(starts) if starts else None

    @property
    def end_ns(self) -> int | None:
        ends = [s.end_ns for s in self.stats.values() if s.end_ns is not None]
        return max(ends) if ends else None


class StorageFile(Protocol):
    """One open storage file of a bag."""

    path: Path

    def summary(self) -> FileSummary:
        """Connections and exact per-topic message counts of the file."""
        ...

    def messages(self, topics: set[str] | None) -> Iterator[RawMessage]:
        """Raw messages of `topics` (None: all) in log-time order."""
        ...

    def close(self) -> None:
        ...


# Untrusted bytes may claim (or expand to) any size: nothing a bag declares is allocated or
# decompressed beyond this. rosbag2 chunks are ~1 MiB and one message rarely passes 100 MiB
# (a 4K RGB image is 25 MiB), so real bags stay far below it.
MAX_DECOMPRESSED_BYTES = 256 * 2**20  # [bytes], one MCAP chunk or one compressed message


class SizeError(ValueError):
    """Compressed data that would expand beyond its declared size or the cap (over_limit), or
    whose frame ends early or differs from its declared size (not over_limit: damaged)."""

    def __init__(self, message: str, over_limit: bool = True) -> None:
        super().__init__(message)
        self.over_limit = over_limit


def zstd_decompress_bounded(data: bytes | memoryview, declared: int | None,
                            cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress one zstd frame of at most `cap` bytes; exactly `declared` bytes when given.

    Never produces more than min(declared, cap) + 1 bytes, so a frame that expands to gigabytes
    (a decompression bomb) costs no more memory than an honest one. Raises SizeError when the
    output differs from `declared` or passes `cap`, zstd.ZstdError when the frame is damaged.
    """
    limit = _checked_limit(declared, cap)
    if declared is None:
        # The frame header usually states the size: refuse before decompressing anything.
        stated = zstd.get_frame_info(bytes(data[:18])).decompressed_size
        if stated is not None and stated > cap:
            raise SizeError(f"declares {stated} bytes decompressed, more than the {cap} byte limit")
    decompressor = zstd.ZstdDecompressor()
    out = decompressor.decompress(data, max_length=limit + 1)
    _check_output(len(out), declared, limit, complete=decompressor.eof)
    return out


def lz4_decompress_bounded(data: bytes | memoryview, declared: int | None,
                           cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress one LZ4 frame like zstd_decompress_bounded (same limits, same errors)."""
    import lz4.frame  # only MCAP files with lz4 chunks need it

    limit = _checked_limit(declared, cap)
    decompressor = lz4.frame.LZ4FrameDecompressor()
    out = decompressor.decompress(bytes(data), max_length=limit + 1)
    _check_output(len(out), declared, limit, complete=decompressor.eof)
    return out


def _checked_limit(declared: int | None, cap: int) -> int:
    """Most bytes the output may have [bytes]; SizeError when `declared` passes `cap`."""
    if declared is None:
        return cap
    if declared > cap:
        raise SizeError(f"declares {declared} bytes decompressed, more than the {cap} byte limit")
    return declared


def _check_output(size: int, declared: int | None, limit: int, complete: bool) -> None:
    """SizeError unless `size` [bytes] of output is a whole frame within `limit` and `declared`."""
    if size > limit:
        what = f"the {declared} bytes it declares" if declared is not None else f"the {limit} byte limit"
        raise SizeError(f"decompresses to more than {what}")
    if not complete:
        raise SizeError(f"the compressed frame ends early, after {size} bytes (cut short or damaged)", over_limit=False)
    if declared is not None and size != declared:
        raise SizeError(f"decompresses to {size} bytes, not the {declared} it declares (damaged)", over_limit=False)


# ---------------------------------------------------------------------------- inflating bags
MIB = 2**20  # [bytes]
INFLATE_RATIO_ENV = "SIM2REAL_BAG_INFLATE_RATIO"
INFLATE_MAX_ENV = "SIM2REAL_BAG_INFLATE_MAX_MIB"


@dataclass(frozen=True)
class InflateLimits:
    """How much a compressed bag may inflate to [bytes], from the compressed size it has on disk.

    budget = min(max_bytes, max(min_bytes, ratio * compressed bytes)). rosbag2's zstd compresses
    camera and joint-state bags 2 to 20 times, so 100 leaves room for very regular data while a
    65 KB file can no longer expand to gigabytes (zstd reaches ~30000:1 on zeros). The same budget
    bounds a file-compressed storage file (`*.mcap.zstd`, `*.db3.zstd`, inflated to a temp file:
    disk) and the sum of all message-compressed messages one reader decompresses (CPU time).
    Raise it with the environment variables SIM2REAL_BAG_INFLATE_RATIO / _MAX_MIB.
    """

    ratio: float = 100.0
    min_bytes: int = 256 * MIB  # [bytes] always allowed (small bags), unless max_bytes is lower
    max_bytes: int = 64 * 1024 * MIB  # [bytes] never more (disk), whatever the ratio gives

    def budget(self, compressed_bytes: int) -> int:
        """Most bytes [bytes] `compressed_bytes` of compressed data may inflate to."""
        return int(min(self.max_bytes, max(self.min_bytes, self.ratio * compressed_bytes)))

    def describe(self, compressed_bytes: int) -> str:
        """Where the budget for `compressed_bytes` comes from, and how to raise it (error messages)."""
        return (f"{self.budget(compressed_bytes)} bytes: {self.ratio:g} x the {compressed_bytes} compressed bytes, "
                f"at least {self.min_bytes}, at most {self.max_bytes}; set {INFLATE_RATIO_ENV} or "
                f"{INFLATE_MAX_ENV} to allow more")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> InflateLimits:
        """The defaults, changed by SIM2REAL_BAG_INFLATE_RATIO (> 0) and SIM2REAL_BAG_INFLATE_MAX_MIB
        (> 0, [MiB]); a bad value is a BagError naming the variable and the value."""
        env = os.environ if environ is None else environ
        limits = cls()
        ratio_text, max_text = env.get(INFLATE_RATIO_ENV, ""), env.get(INFLATE_MAX_ENV, "")
        try:
            ratio = float(ratio_text) if ratio_text else limits.ratio
            max_bytes = int(float(max_text) * MIB) if max_text else limits.max_bytes
        except ValueError:
            ratio, max_bytes = 0.0, 0
        if not (0 < ratio < float("inf")) or max_bytes <= 0:
            raise BagError(f"environment {INFLATE_RATIO_ENV}={ratio_text!r} {INFLATE_MAX_ENV}={max_text!r}: "
                           "each must be a number > 0 (or unset)")
        return cls(ratio=ratio, min_bytes=min(limits.min_bytes, max_bytes), max_bytes=max_bytes)


class InflateError(ValueError):
    """A file-compressed storage file that is damaged, inflates past its budget, or is not what its
    name says."""


_READ_BLOCK = 1 << 16  # [bytes] compressed bytes read at a time
_OUT_BLOCK = 1 << 20  # [bytes] most inflated bytes produced (and held) at a time


def inflate_zstd_file(src: Path, dst: BinaryIO, limit: int, magic: bytes, kind: str) -> int:
    """Inflate the zstd file `src` (one frame or several) into the open file `dst`; returns the
    bytes written. Streams 1 MiB at a time, so memory stays flat whatever the file declares.

    Raises SizeError as soon as the output passes `limit` [bytes] (nothing more is written); InflateError when
    the first inflated bytes are not `magic` (the file is not the `kind` its name says: checked
    after the first block, before anything else is written), or when the frames are damaged or cut
    short. OSError when `src` cannot be read or `dst` written (a full disk).
    """
    decompressor = zstd.ZstdDecompressor()
    written = 0
    head = b""
    with open(src, "rb") as infile:
        while True:
            if decompressor.eof:  # a frame ended: another may follow
                data = decompressor.unused_data or infile.read(_READ_BLOCK)
                if not data:
                    break
                decompressor = zstd.ZstdDecompressor()
            elif decompressor.needs_input:
                data = infile.read(_READ_BLOCK)
                if not data:
                    raise InflateError(f"is empty or cut short inside a zstd frame (after {written} inflated bytes)")
            else:
                data = b""  # the decompressor still holds output for the data it has
            try:
                out = decompressor.decompress(data, max_length=_OUT_BLOCK)
            except zstd.ZstdError as err:
                raise InflateError(f"is not valid zstd data after {written} inflated bytes ({err})") from err
            if len(head) < len(magic):
                head += out[:len(magic) - len(head)]
                if len(head) >= len(magic) and head != magic:
                    raise InflateError(f"does not inflate to a {kind} file (starts with {head!r}, expected {magic!r})")
            written += len(out)
            if written > limit:
                raise SizeError(f"inflates to more than {limit} bytes")
            dst.write(out)
    if len(head) < len(magic):
        raise InflateError(f"inflates to {written} bytes, too short for a {kind} file")
    return written
