"""What every storage backend (sqlite3, MCAP) hands the bag reader: connections, counts, raw messages.

Pure Python, no rclpy. One `StorageFile` is one file of a bag; the reader merges several.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

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
    """Compressed data that would expand beyond its declared size or the cap."""


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
        raise SizeError(f"the compressed frame ends early, after {size} bytes (cut short or damaged)")
    if declared is not None and size != declared:
        raise SizeError(f"decompresses to {size} bytes, not the {declared} it declares (damaged)")


def zstd_decompress(data: bytes | memoryview) -> bytes:
    """Decompress one rosbag2 message compressed with zstd (compression_mode: message), at most
    MAX_DECOMPRESSED_BYTES; raises SizeError or zstd.ZstdError for a damaged or oversized frame."""
    return zstd_decompress_bounded(data, None)


def zstd_decompress_file(src: Path, dst: Path) -> None:
    """Decompress a rosbag2 file-compressed storage file (`*.db3.zstd`, `*.mcap.zstd`)."""
    with zstd.open(src, "rb") as infile, open(dst, "wb") as outfile:
        while block := infile.read(1 << 20):
            outfile.write(block)
