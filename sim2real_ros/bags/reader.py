"""Read any rosbag2 bag: sqlite3 or MCAP, metadata versions 1..9, one file or many, damaged or not.

    for m in iter_messages("bags/run1", topics=["/joint_states"]):
        print(m.log_time_ns, m.msg.position)

The storage files are read directly (not through a bag library's reader), so what comes out is
what the files hold, whatever metadata.yaml says or whether it exists. Messages are deserialized
with rosbags (fields named as in ROS: `msg.header.stamp.sec`, `msg.position`, `msg.data`), using
the definitions stored in the bag, else the standard typestores. Only requested topics are
deserialized. A type nobody knows is skipped (or yielded undecoded), never fatal.
"""
from __future__ import annotations

import heapq
import logging
import re
import sqlite3
import struct
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import yaml
from mcap.exceptions import McapError

from ..core.errors import BagError
from .mcap_storage import MAGIC as MCAP_MAGIC
from .mcap_storage import McapFile
from .metadata import METADATA_FILE, BagMetadata, read_metadata
from .safe_files import create_exclusive, refuse_links
from .sqlite_storage import SQLITE_MAGIC, SqliteFile
from .storage import (
    MAX_DECOMPRESSED_BYTES,
    Connection,
    FileSummary,
    InflateError,
    InflateLimits,
    SizeError,
    StorageFile,
    TopicStats,
    inflate_zstd_file,
    zstd,
    zstd_decompress_bounded,
)
from .typestores import BagTypes

_log = logging.getLogger(__name__)

# What parsing untrusted bytes can raise beyond BagError; each becomes a BagError naming the file
# (a user gets one line saying which bag is bad, not a traceback).
_PARSE_ERRORS = (ValueError, KeyError, IndexError, TypeError, OverflowError, RecursionError, struct.error,
                 EOFError, OSError, sqlite3.Error, yaml.YAMLError, McapError)

STORAGE_SUFFIXES = {".db3": "sqlite3", ".mcap": "mcap"}


@dataclass(frozen=True, slots=True)
class BagMessage:
    """One message of a bag.

    log_time_ns: when the recorder received it [ns]. msg: the deserialized message (rosbags object
    with ROS field names), or None for a type that cannot be decoded (only when asked for).
    data: the serialized CDR bytes as stored.
    """

    topic: str
    msgtype: str
    log_time_ns: int
    msg: Any
    data: bytes | memoryview = b""


@dataclass(frozen=True)
class TopicInfo:
    """A topic of a bag: its type, messages actually in the files, whether it decodes."""

    name: str
    msgtype: str
    count: int
    decodable: bool
    serialization_format: str = "cdr"
    offered_qos_profiles: str = ""
    type_hash: str = ""
    metadata_count: int | None = None  # what metadata.yaml claims, None without metadata
    note: str = ""


def _describe(err: BaseException, limit: int = 300) -> str:
    """An unexpected parse error on one line (CLI output), cut to `limit` characters."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit] + "..."


def _states_over_cap(frame: bytes | memoryview) -> bool:
    """Whether a zstd frame's header states more than MAX_DECOMPRESSED_BYTES of content."""
    try:
        stated = zstd.get_frame_info(bytes(frame[:18])).decompressed_size
    except zstd.ZstdError:
        return False
    return stated is not None and stated > MAX_DECOMPRESSED_BYTES


def _split_index(path: Path) -> tuple[int, str]:
    """Sort key putting rosbag2 split files in order: name_2 before name_10."""
    match = re.search(r"_(\d+)\.(?:db3|mcap)", path.name)
    return (int(match.group(1)) if match else -1, path.name)


def storage_files_in(directory: Path) -> list[Path]:
    """Storage files of a bag folder without metadata, in split order (compressed ones too)."""
    found = [p for p in directory.iterdir()
             if p.is_file() and (p.suffix in STORAGE_SUFFIXES or p.name.endswith((".db3.zstd", ".mcap.zstd")))]
    return sorted(found, key=_split_index)


def _storage_of(path: Path) -> str:
    name = path.name.removesuffix(".zstd")
    for suffix, storage in STORAGE_SUFFIXES.items():
        if name.endswith(suffix):
            return storage
    raise BagError(f"{path}: not a rosbag2 storage file (expected .db3 or .mcap)")


def open_storage_file(path: Path, storage: str | None = None) -> StorageFile:
    """Open one storage file; BagError names the file when it is missing or not a bag file."""
    if not path.is_file():
        raise BagError(f"{path}: storage file is missing")
    storage = storage or _storage_of(path)
    if storage == "sqlite3":
        return SqliteFile(path)
    if storage == "mcap":
        return McapFile(path)
    raise BagError(f"{path}: unknown storage '{storage}' (this tool reads sqlite3 and mcap)")


class BagReader:
    """An open bag. Use as a context manager or call close().

    `path` is a rosbag2 folder (with or without metadata.yaml) or a single .db3/.mcap file.
    Raises BagError (naming the file and what is wrong) for damage that loses data: an unreadable
    metadata.yaml, a listed file that is missing, a file that is not a bag. A recording cut short
    (no metadata.yaml, MCAP without summary or with a truncated last chunk) is read as far as it
    goes; `problems` says what is wrong and `needs_repair` is set.
    """

    def __init__(self, path: str | Path, inflate_limits: InflateLimits | None = None) -> None:
        self.path = Path(path)
        self.metadata: BagMetadata | None = None
        self.problems: list[str] = []
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._files: list[StorageFile] = []
        self.decode_errors: Counter[str] = Counter()
        self.skipped_undecodable: Counter[str] = Counter()
        self.inflated_bytes = 0  # [bytes] message-compressed payloads decompressed so far
        self._message_budget_bytes: int | None = None
        try:
            # Compressed files and messages inflate within a budget (storage.InflateLimits).
            self.inflate_limits = inflate_limits or InflateLimits.from_env()
            self._open()
        except _PARSE_ERRORS as err:
            self.close()
            _log.debug("%s: open failed", self.path, exc_info=True)
            raise BagError(f"{self.path}: unreadable bag ({_describe(err)})") from err
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening
    def _open(self) -> None:
        if not self.path.exists():
            raise BagError(f"{self.path}: no such bag (folder or .db3/.mcap file)")
        paths = [self.path] if self.path.is_file() else self._paths_of_folder()
        self.message_compression = bool(self.metadata and self.metadata.compression_mode.lower() == "message")
        for p in paths:
            self._files.append(self._open_file(p))
        self.file_summaries: list[FileSummary] = [f.summary() for f in self._files]
        for summary in self.file_summaries:
            self.problems.extend(summary.problems)
        self.needs_repair = any(s.needs_repair for s in self.file_summaries) or (
            self.path.is_dir() and self.metadata is None)
        self._merge_topics()
        distro = (self.metadata.ros_distro if self.metadata else "") or next(
            (s.ros_distro for s in self.file_summaries if s.ros_distro), "")
        self.ros_distro = distro
        self.types = BagTypes(list(self._connections.values()), distro)
        self._check_metadata_counts()

    def _paths_of_folder(self) -> list[Path]:
        refuse_links(self.path, "reading")  # bags travel as tarballs, which keep links
        meta_path = self.path / METADATA_FILE
        if meta_path.is_file():
            self.metadata = read_metadata(meta_path)
            if not self.metadata.relative_file_paths:
                raise BagError(f"{meta_path}: lists no storage files (relative_file_paths is empty)")
            paths = []
            for rel in self.metadata.relative_file_paths:
                paths.append(self._listed_file(rel, meta_path))
            return paths
        paths = storage_files_in(self.path)
        if not paths:
            raise BagError(f"{self.path}: no metadata.yaml and no .db3/.mcap files; not a rosbag2 bag")
        self.problems.append(
            f"{meta_path.name} is missing (the recorder never closed the bag); the files were read directly. "
            f"`sim2real bag repair {self.path}` rebuilds it")
        return paths

    def _listed_file(self, rel: str, meta_path: Path) -> Path:
        """The storage file `rel` of metadata.yaml, inside the bag folder (never outside it: an
        absolute path or '..' is refused, so a bag cannot make the tools read other files)."""
        rel_path = Path(rel)
        escapes = rel_path.is_absolute() or ".." in rel_path.parts
        if not escapes and (self.path / rel_path).is_file():
            return self.path / rel_path
        if (self.path / rel_path.name).is_file():
            return self.path / rel_path.name  # older rosbag2 wrote the folder into the path
        if escapes:
            raise BagError(f"{meta_path}: lists '{rel}', outside the bag folder {self.path}")
        raise BagError(f"{self.path / rel_path}: listed in {meta_path} but missing")

    def _open_file(self, path: Path) -> StorageFile:
        """Open one storage file; a file-compressed one (`*.zstd`) is inflated within its budget."""
        if not path.name.endswith(".zstd"):
            return open_storage_file(path)
        if not path.is_file():
            raise BagError(f"{path}: storage file is missing")
        storage = _storage_of(path)
        compressed = path.stat().st_size
        limit = self.inflate_limits.budget(compressed)
        magic, kind = (MCAP_MAGIC, "MCAP") if storage == "mcap" else (SQLITE_MAGIC, "sqlite3")
        if storage == "mcap":
            # An anonymous temp file (O_TMPFILE, or unlinked at once): nothing is left on disk
            # however the process ends, SIGKILL included.
            stream = tempfile.TemporaryFile(prefix="sim2real_bag_")  # noqa: SIM115 - owned by McapFile
            try:
                self._inflate(path, stream, limit, magic, kind, compressed)
                stream.flush()
                return McapFile(path, stream=stream)
            except BaseException:
                stream.close()
                raise
        # SQLite opens files by name: a private folder (mode 0700), the copy unlinked as soon as
        # SQLite holds it open; close() removes the folder, so does every error path.
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="sim2real_bag_")
        target = Path(self._tmp.name) / path.name.removesuffix(".zstd")
        try:
            with create_exclusive(target) as stream:
                self._inflate(path, stream, limit, magic, kind, compressed)
            return SqliteFile(path, source=target)
        finally:
            target.unlink(missing_ok=True)

    def _inflate(self, path: Path, stream: BinaryIO, limit: int, magic: bytes, kind: str, compressed: int) -> None:
        try:
            inflate_zstd_file(path, stream, limit, magic, kind)
        except SizeError as err:
            raise BagError(f"{path}: {err}, the limit for this file ({self.inflate_limits.describe(compressed)}); "
                           "nothing was kept") from err
        except InflateError as err:
            raise BagError(f"{path}: {err}") from err
        except OSError as err:
            raise BagError(f"{err.filename or path}: cannot inflate ({err.strerror or err})") from err

    def _merge_topics(self) -> None:
        self._connections: dict[str, Connection] = {}
        self._stats: dict[str, TopicStats] = {}
        for summary in self.file_summaries:
            for topic, conn in summary.connections.items():
                known = self._connections.setdefault(topic, conn)
                if known.msgtype != conn.msgtype:
                    self.problems.append(f"{summary.path.name}: topic {topic} has type {conn.msgtype}, "
                                         f"other files say {known.msgtype}; using {known.msgtype}")
                if not known.msgdef and conn.msgdef:
                    self._connections[topic] = conn
            for topic, stats in summary.stats.items():
                self._stats.setdefault(topic, TopicStats()).add(stats.count, stats.start_ns, stats.end_ns)
        if self.metadata is not None:
            for t in self.metadata.topics:  # topics declared but without a connection in the files
                if t.name not in self._connections:
                    self._connections[t.name] = Connection(t.name, t.type, t.serialization_format,
                                                           t.offered_qos_profiles, type_hash=t.type_description_hash)
                    self._stats.setdefault(t.name, TopicStats())

    def _check_metadata_counts(self) -> None:
        if self.metadata is None:
            return
        claimed = self.metadata.message_count
        if claimed != self.message_count:
            self.problems.append(f"metadata.yaml says {claimed} messages, the files hold {self.message_count}")

    # ------------------------------------------------------------------ queries
    @property
    def storage(self) -> str:
        kinds = sorted({s.storage for s in self.file_summaries})
        return kinds[0] if len(kinds) == 1 else "+".join(kinds)

    @property
    def files(self) -> list[Path]:
        return [s.path for s in self.file_summaries]

    @property
    def message_count(self) -> int:
        return sum(s.count for s in self._stats.values())

    @property
    def start_ns(self) -> int | None:
        starts = [s.start_ns for s in self._stats.values() if s.start_ns is not None]
        return min(starts) if starts else None

    @property
    def end_ns(self) -> int | None:
        ends = [s.end_ns for s in self._stats.values() if s.end_ns is not None]
        return max(ends) if ends else None

    def topic_types(self) -> dict[str, str]:
        return {topic: conn.msgtype for topic, conn in self._connections.items()}

    def topics(self) -> list[TopicInfo]:
        claimed = {t.name: t.message_count for t in self.metadata.topics} if self.metadata else {}
        out = []
        for topic, conn in self._connections.items():
            decodable = conn.serialization_format == "cdr" and self.types.decodable(conn.msgtype)
            note = self.types.notes.get(conn.msgtype, "")
            if conn.serialization_format != "cdr":
                note = f"serialization format '{conn.serialization_format}' (only cdr decodes)"
            out.append(TopicInfo(
                name=topic, msgtype=conn.msgtype, count=self._stats[topic].count, decodable=decodable,
                serialization_format=conn.serialization_format, offered_qos_profiles=conn.offered_qos_profiles,
                type_hash=conn.type_hash, metadata_count=claimed.get(topic) if self.metadata else None, note=note,
            ))
        return out

    def decodable(self, topic: str) -> bool:
        conn = self._connections.get(topic)
        return conn is not None and conn.serialization_format == "cdr" and self.types.decodable(conn.msgtype)

    # ------------------------------------------------------------------ messages
    def raw_messages(self, topics: Iterable[str] | None = None) -> Iterator[tuple[int, str, bytes | memoryview]]:
        """(log time [ns], topic, CDR bytes) of `topics` (None: all), in log-time order across files."""
        wanted = None if topics is None else set(topics)
        streams = [f.messages(wanted) for f in self._files]
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda m: m[0])
        try:
            if not self.message_compression:
                yield from merged
                return
            for log_time, topic, data in merged:
                left = self._message_budget - self.inflated_bytes
                try:
                    plain = zstd_decompress_bounded(data, None, cap=min(MAX_DECOMPRESSED_BYTES, left))
                except SizeError as err:
                    # Over what is left of the budget, though within the per-message cap: the
                    # budget ran out (a frame stating more than the cap is one bad message).
                    if err.over_limit and left < MAX_DECOMPRESSED_BYTES and not _states_over_cap(data):
                        raise BagError(self._budget_spent()) from err
                    self._count_bad_message(topic, f"does not decompress ({err})")
                    continue
                except (ValueError, zstd.ZstdError) as err:
                    self._count_bad_message(topic, f"does not decompress ({err})")
                    continue
                self.inflated_bytes += len(plain)
                yield log_time, topic, plain
        except _PARSE_ERRORS as err:
            raise BagError(f"{self.path}: unreadable messages ({_describe(err)})") from err
        finally:
            for f in self._files:  # damaged chunks found (and skipped) while reading
                self.problems.extend(p for p in getattr(f, "damaged", ()) if p not in self.problems)

    def messages(self, topics: Iterable[str] | None = None, *, skip_undecodable: bool = True) -> Iterator[BagMessage]:
        """Deserialized messages of `topics` (None: all) in log-time order.

        Messages of types that cannot be decoded are skipped (counted in `skipped_undecodable`), or
        yielded with msg=None when skip_undecodable is False. A message whose bytes do not decode
        is counted in `decode_errors`, logged, and skipped.
        """
        wanted = None if topics is None else [t for t in topics]
        if wanted is not None:
            unknown = [t for t in wanted if t not in self._connections]
            if unknown:
                _log.warning("%s: no topic(s) %s in the bag (it has %s)", self.path, unknown, sorted(self._connections))
        plan = {t: (c.msgtype, self.decodable(t)) for t, c in self._connections.items()}
        for topic, (msgtype, ok) in plan.items():
            if not ok and (wanted is None or topic in wanted) and skip_undecodable:
                _log.info("%s: skipping %s (%s): %s", self.path, topic, msgtype,
                          self.types.notes.get(msgtype, "not decodable"))
        if skip_undecodable:
            selected = [t for t, (_, ok) in plan.items() if ok and (wanted is None or t in wanted)]
            for t, (_, ok) in plan.items():
                if not ok and (wanted is None or t in wanted):
                    self.skipped_undecodable[t] += self._stats[t].count
            source = self.raw_messages(selected)
        else:
            source = self.raw_messages(wanted)
        decoders = {t: self.types.decoder(c.msgtype) for t, c in self._connections.items() if plan[t][1]}
        for log_time, topic, data in source:
            msgtype, ok = plan[topic]
            if not ok:
                yield BagMessage(topic, msgtype, log_time, None, data)
                continue
            decoder = decoders[topic]
            try:
                msg = decoder.decode(data)
            except Exception as err:  # noqa: BLE001 - one bad message must not end the read
                self._count_bad_message(topic, f"does not decode as {msgtype}: {err}")
                continue
            yield BagMessage(topic, msgtype, log_time, msg, data)

    @property
    def _compressed_bytes(self) -> int:
        """Size on disk of the bag's storage files [bytes]: what the message budget scales with."""
        return sum(s.path.stat().st_size for s in self.file_summaries if s.path.is_file())

    @property
    def _message_budget(self) -> int:
        """Most bytes [bytes] this reader decompresses from message-compressed payloads, all reads
        together: a bag of a million small bombs costs no more than one honest bag's worth."""
        if self._message_budget_bytes is None:
            self._message_budget_bytes = self.inflate_limits.budget(self._compressed_bytes)
        return self._message_budget_bytes

    def _budget_spent(self) -> str:
        return (f"{self.path}: message-compressed payloads inflate to more than {self._message_budget} bytes "
                f"in all, the limit for this bag ({self.inflate_limits.describe(self._compressed_bytes)}); "
                f"read stopped after {self.inflated_bytes} bytes")

    def _count_bad_message(self, topic: str, why: str) -> None:
        """Count a message that cannot be used in `decode_errors`; log the 1st, 10th, 100th, 1000th."""
        self.decode_errors[topic] += 1
        if self.decode_errors[topic] in (1, 10, 100, 1000):
            _log.warning("%s: %d message(s) on %s skipped; the last %s", self.path, self.decode_errors[topic],
                         topic, why)

    def check_decoding(self, topic: str) -> str:
        """Decode the first message of `topic`; '' when it decodes (or has no messages), else why not."""
        conn = self._connections.get(topic)
        if conn is None:
            return "no such topic"
        if not self.decodable(topic):
            return self.types.notes.get(conn.msgtype, "not decodable")
        first = next(self.raw_messages([topic]), None)
        if first is None:
            return ""
        decoder = self.types.decoder(conn.msgtype)
        try:
            decoder.decode(first[2])
        except Exception as err:  # noqa: BLE001 - reported, not raised
            return f"first message does not decode: {err}"
        if decoder.switched_to:
            return f"stored definition does not match the data; decodes with the {decoder.switched_to} definition"
        return ""

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_messages(path: str | Path, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
    """Deserialized messages of `topics` (None: every decodable topic) in log-time order, across
    every file of the bag. Types that cannot be decoded are skipped (see BagReader.messages)."""
    with BagReader(path) as reader:
        yield from reader.messages(topics)


def topic_types(path: str | Path) -> dict[str, str]:
    """Topic name -> message type ("sensor_msgs/msg/JointState") of every topic of the bag."""
    with BagReader(path) as reader:
        return reader.topic_types()


def publish_records(path: str | Path, topics: Iterable[str]) -> dict[str, np.ndarray]:
    """Per topic, the (log time [ns], publish time [ns], sequence) rows (K, 3) sorted by log time,
    from the bag's MCAP files (sqlite3 has neither field: those topics get an empty array). A
    recorder that stores each message's DDS source timestamp (`sim2real record`) puts it in the
    publish time and the DDS publication sequence number (the publisher's count, 0 when unknown) in
    the sequence; other writers repeat the log time and count the file's messages. Rows with one
    log time keep file order, as `iter_messages` does, so the k-th row belongs to the k-th message
    (a frozen sim clock gives many messages one log time)."""
    wanted = set(topics)
    rows_by_topic: dict[str, list[tuple[int, int, int]]] = {t: [] for t in wanted}
    with BagReader(path) as reader:
        for storage in reader._files:  # noqa: SLF001 - same module family
            if hasattr(storage, "publish_records"):
                for topic, rows in storage.publish_records(wanted).items():
                    rows_by_topic[topic].extend(rows)
    return {t: np.array(sorted(rows, key=lambda row: row[0]), dtype=np.int64).reshape(-1, 3)
            for t, rows in rows_by_topic.items()}


def publish_times(path: str | Path, topics: Iterable[str]) -> dict[str, np.ndarray]:
    """Per topic, the (log time, publish time) [ns] pairs (K, 2) sorted by log time: the first two
    columns of `publish_records`."""
    return {t: rows[:, :2] for t, rows in publish_records(path, topics).items()}
