"""Write rosbag2 bags that `ros2 bag info/play` and Foxglove read: MCAP (default) or sqlite3.

Crash safety: the writer closes the MCAP chunk in progress (sqlite3: commits) at least every
`flush_period_ns`, so a recorder killed with SIGKILL loses at most about that much. metadata.yaml
is written on close(); `sim2real bag repair` rebuilds it for a bag whose writer never closed.
Long recordings can be split into several files (`max_file_bytes`, `max_file_duration_ns`).

Pure: no rclpy; time comes in as arguments ([ns]).
"""
from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter

from ..core.errors import BagError
from ..core.timebase import NS_PER_S
from .metadata import FileEntry, TopicMetadata, metadata_document, write_metadata
from .safe_files import create_exclusive
from .typestores import _base_store, installed_definition, store_order

LIBRARY = "sim2real_ros bags"
# Infinite durations as rosbag2 writes them in offered_qos_profiles.
_INFINITE = {"sec": 9223372036, "nsec": 854775807}


def message_definition(msgtype: str, ros_distro: str = "kilted") -> tuple[str, str]:
    """(ros2msg definition text with its dependencies, RIHS01 type hash) from the standard stores.

    A type no standard store knows (a robot's custom messages) is looked up in the installed
    message packages; ('', '') when it is not there either: the bag then stores no definition and
    readers need the type installed to decode it.
    """
    for store in store_order(ros_distro):
        base = _base_store(store)
        if msgtype in base.fielddefs:
            try:
                return base.generate_msgdef(msgtype, ros_version=2)[0], base.hash_rihs01(msgtype)
            except Exception:  # noqa: BLE001, S112 - try the next store
                continue
    return installed_definition(msgtype)


def qos_profiles_yaml(profiles: list[dict[str, Any]]) -> str:
    """rosbag2's `offered_qos_profiles` text (metadata v8 and MCAP channel metadata) from dicts with
    keys history, depth, reliability, durability (rmw enum values), deadline, lifespan,
    liveliness_lease_duration ({sec, nsec}), liveliness, avoid_ros_namespace_conventions."""
    out = []
    for p in profiles:
        out.append({
            "history": int(p.get("history", 1)),
            "depth": int(p.get("depth", 0)),
            "reliability": int(p.get("reliability", 1)),
            "durability": int(p.get("durability", 2)),
            "deadline": dict(p.get("deadline") or _INFINITE),
            "lifespan": dict(p.get("lifespan") or _INFINITE),
            "liveliness": int(p.get("liveliness", 1)),
            "liveliness_lease_duration": dict(p.get("liveliness_lease_duration") or _INFINITE),
            "avoid_ros_namespace_conventions": bool(p.get("avoid_ros_namespace_conventions", False)),
        })
    return yaml.safe_dump(out, default_flow_style=False, sort_keys=False).strip() if out else ""


@dataclass
class _Topic:
    name: str
    msgtype: str
    offered_qos_profiles: str
    msgdef: str
    type_hash: str
    count: int = 0


@dataclass
class _FileStats:
    path: Path
    count: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    bytes_written: int = 0

    def add(self, log_time_ns: int, size: int) -> None:
        self.count += 1
        self.bytes_written += size
        self.start_ns = log_time_ns if self.start_ns is None else min(self.start_ns, log_time_ns)
        self.end_ns = log_time_ns if self.end_ns is None else max(self.end_ns, log_time_ns)

    def entry(self) -> FileEntry:
        start = self.start_ns or 0
        return FileEntry(self.path.name, start, (self.end_ns or start) - start, self.count)


class _McapFileWriter:
    def __init__(self, path: Path, topics: list[_Topic], compression: str) -> None:
        self._stream = create_exclusive(path)  # closed in close(); never through a link
        kind = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "": CompressionType.NONE}[compression]
        # Chunks close on time (flush) or at 8 MiB, whichever comes first.
        self._writer = McapWriter(self._stream, chunk_size=8 << 20, compression=kind)
        self._writer.start(profile="ros2", library=LIBRARY)
        self._channels: dict[str, int] = {}
        self._schemas: dict[str, int] = {}
        self._sequence = 0
        for topic in topics:
            self.add_topic(topic)

    def add_topic(self, topic: _Topic) -> None:
        schema_id = self._schemas.get(topic.msgtype)
        if schema_id is None:
            encoding = "ros2msg" if topic.msgdef else ""
            schema_id = self._writer.register_schema(topic.msgtype, encoding, topic.msgdef.encode("utf-8"))
            self._schemas[topic.msgtype] = schema_id
        metadata = {"offered_qos_profiles": topic.offered_qos_profiles}
        if topic.type_hash:
            metadata["topic_type_hash"] = topic.type_hash
        self._channels[topic.name] = self._writer.register_channel(topic.name, "cdr", schema_id, metadata)

    def write(self, topic: str, log_time_ns: int, data: bytes, publish_time_ns: int | None = None,
              sequence: int | None = None) -> None:
        self._sequence += 1
        publish = log_time_ns if publish_time_ns is None else publish_time_ns
        # MCAP's sequence is the publisher's message counter when there is one (the DDS publication
        # sequence number), else ours (one count over the file).
        seq = self._sequence if sequence is None else int(sequence) & 0xFFFFFFFF
        self._writer.add_message(self._channels[topic], log_time_ns, data, publish, seq)

    def flush(self) -> None:
        self._writer.flush()  # closes the chunk in progress and flushes the file

    def close(self) -> None:
        self._writer.finish()
        self._stream.close()


class _SqliteFileWriter:
    """rosbag2 sqlite3 schema 4 (Jazzy/Kilted), readable by Humble's reader too."""

    def __init__(self, path: Path, topics: list[_Topic], ros_distro: str) -> None:
        create_exclusive(path).close()  # the file is ours before SQLite opens it (never a link)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.executescript("""
            CREATE TABLE schema(schema_version INTEGER PRIMARY KEY, ros_distro TEXT NOT NULL);
            CREATE TABLE metadata(id INTEGER PRIMARY KEY, metadata_version INTEGER NOT NULL, metadata TEXT NOT NULL);
            CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL,
                serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL,
                type_description_hash TEXT NOT NULL);
            CREATE TABLE message_definitions(id INTEGER PRIMARY KEY, topic_type TEXT NOT NULL,
                encoding TEXT NOT NULL, encoded_message_definition TEXT NOT NULL,
                type_description_hash TEXT NOT NULL);
            CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL, timestamp INTEGER NOT NULL,
                data BLOB NOT NULL);
            CREATE INDEX timestamp_idx ON messages (timestamp ASC);
        """)
        self._db.execute("INSERT INTO schema VALUES (4, ?)", (ros_distro,))
        self._ids: dict[str, int] = {}
        self._defined: set[str] = set()
        for topic in topics:
            self.add_topic(topic)

    def add_topic(self, topic: _Topic) -> None:
        cursor = self._db.execute(
            "INSERT INTO topics (name, type, serialization_format, offered_qos_profiles, type_description_hash) "
            "VALUES (?, ?, 'cdr', ?, ?)", (topic.name, topic.msgtype, topic.offered_qos_profiles, topic.type_hash))
        self._ids[topic.name] = int(cursor.lastrowid or 0)
        if topic.msgtype not in self._defined:
            self._defined.add(topic.msgtype)
            self._db.execute(
                "INSERT INTO message_definitions (topic_type, encoding, encoded_message_definition, "
                "type_description_hash) VALUES (?, ?, ?, ?)",
                (topic.msgtype, "ros2msg" if topic.msgdef else "unknown", topic.msgdef, topic.type_hash))

    def write(self, topic: str, log_time_ns: int, data: bytes, publish_time_ns: int | None = None,
              sequence: int | None = None) -> None:
        # rosbag2's sqlite3 schema has no publish time or sequence: only the receive time is stored.
        self._db.execute("INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)",
                         (self._ids[topic], log_time_ns, data))

    def flush(self) -> None:
        self._db.commit()

    def close(self) -> None:
        self._db.commit()
        self._db.close()


@dataclass
class BagWriter:
    """Write a new rosbag2 folder at `path` (it must not exist).

    storage: "mcap" or "sqlite3". flush_period_ns: the most data [ns of wall time, as passed to
    maybe_flush/write] a crash may lose. max_file_bytes / max_file_duration_ns: split into
    `<name>_<i>.<ext>` files when exceeded (0: never). compression: MCAP chunk compression.
    """

    path: Path
    storage: str = "mcap"
    flush_period_ns: int = NS_PER_S
    max_file_bytes: int = 0
    max_file_duration_ns: int = 0
    compression: str = "zstd"
    ros_distro: str = "kilted"
    _topics: dict[str, _Topic] = field(default_factory=dict, init=False)
    _files: list[_FileStats] = field(default_factory=list, init=False)
    _current: Any = field(default=None, init=False)
    _last_flush_ns: int | None = field(default=None, init=False)
    _dirty: bool = field(default=False, init=False)
    _closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.storage not in ("mcap", "sqlite3"):
            raise BagError(f"{self.path}: storage '{self.storage}' not supported for writing (mcap or sqlite3)")
        if self.compression not in ("zstd", "lz4", ""):
            raise BagError(f"{self.path}: compression '{self.compression}' not supported (zstd, lz4 or '')")
        if os.path.lexists(self.path):  # a dangling link too: it would point the bag elsewhere
            raise BagError(f"{self.path}: exists already; a bag is never overwritten")
        self.path.mkdir(parents=True)  # fails if the name appeared meanwhile: the folder is ours
        self._open_next_file()

    # ------------------------------------------------------------------ files
    def _open_next_file(self) -> None:
        suffix = ".mcap" if self.storage == "mcap" else ".db3"
        file_path = self.path / f"{self.path.name}_{len(self._files)}{suffix}"
        topics = list(self._topics.values())
        if self.storage == "mcap":
            self._current = _McapFileWriter(file_path, topics, self.compression)
        else:
            self._current = _SqliteFileWriter(file_path, topics, self.ros_distro)
        self._files.append(_FileStats(file_path))

    def _split_due(self) -> bool:
        stats = self._files[-1]
        if not stats.count:
            return False
        if self.max_file_bytes and stats.bytes_written >= self.max_file_bytes:
            return True
        return bool(self.max_file_duration_ns and stats.start_ns is not None and stats.end_ns is not None
                    and stats.end_ns - stats.start_ns >= self.max_file_duration_ns)

    # ------------------------------------------------------------------ topics and messages
    def add_topic(self, name: str, msgtype: str, *, offered_qos_profiles: str = "", msgdef: str | None = None,
                  type_hash: str | None = None) -> None:
        """Declare a topic before writing to it. Without `msgdef` the standard definition is stored."""
        if name in self._topics:
            known = self._topics[name]
            if known.msgtype != msgtype:
                raise BagError(f"{self.path}: topic {name} already recorded as {known.msgtype}, not {msgtype}")
            return
        if msgdef is None:
            msgdef, standard_hash = message_definition(msgtype, self.ros_distro)
            type_hash = type_hash or standard_hash
        topic = _Topic(name, msgtype, offered_qos_profiles, msgdef, type_hash or "")
        self._topics[name] = topic
        self._current.add_topic(topic)

    @property
    def topics(self) -> dict[str, str]:
        return {name: t.msgtype for name, t in self._topics.items()}

    def write(self, topic: str, log_time_ns: int, data: bytes | memoryview, now_ns: int | None = None,
              publish_time_ns: int | None = None, sequence: int | None = None) -> None:
        """Append one serialized (CDR) message received at `log_time_ns`. `now_ns` (default: the log
        time) drives the periodic flush. `publish_time_ns` [ns]: when the publisher sent it (the DDS
        source timestamp), stored as the MCAP publish time (default: the log time; sqlite3 bags
        have no such field). `sequence`: the publisher's count of this message (the DDS publication
        sequence number, 0: unknown), stored as the MCAP sequence modulo 2**32 (default: a count of
        the file's messages; sqlite3 bags have no such field)."""
        if self._closed:
            raise BagError(f"{self.path}: write after close")
        entry = self._topics.get(topic)
        if entry is None:
            raise BagError(f"{self.path}: topic {topic} was not added before writing")
        if self._split_due():
            self._current.close()
            self._open_next_file()
            self._last_flush_ns = None
        payload = bytes(data)
        self._current.write(topic, log_time_ns, payload, publish_time_ns, sequence)
        self._files[-1].add(log_time_ns, len(payload))
        entry.count += 1
        self._dirty = True
        self.maybe_flush(log_time_ns if now_ns is None else now_ns)

    def maybe_flush(self, now_ns: int) -> bool:
        """Flush when `flush_period_ns` has passed since the last flush; True when it flushed."""
        if self._last_flush_ns is None:
            self._last_flush_ns = now_ns
        if self._dirty and now_ns - self._last_flush_ns >= self.flush_period_ns:
            self.flush()
            self._last_flush_ns = now_ns
            return True
        return False

    def flush(self) -> None:
        """Make everything written so far readable after a crash (closes the MCAP chunk)."""
        if not self._closed and self._dirty:
            self._current.flush()
            self._dirty = False

    @property
    def message_count(self) -> int:
        return sum(f.count for f in self._files)

    @property
    def file_paths(self) -> list[Path]:
        return [f.path for f in self._files]

    def close(self) -> Path:
        """Finish the files (MCAP summary) and write metadata.yaml. Returns the bag folder."""
        if self._closed:
            return self.path
        self._closed = True
        self._current.close()
        topics = [TopicMetadata(t.name, t.msgtype, "cdr", t.offered_qos_profiles, t.type_hash, t.count)
                  for t in self._topics.values()]
        write_metadata(self.path, metadata_document(self.storage, [f.entry() for f in self._files], topics,
                                                    self.ros_distro))
        return self.path

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
