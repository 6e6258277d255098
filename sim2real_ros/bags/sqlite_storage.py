"""rosbag2 sqlite3 storage (`*.db3`), read directly with the standard library.

Reading the tables ourselves (rather than through a bag library) is what makes every bag readable:
the `topics` and `messages` tables have been the same since ROS 2 Dashing, whatever metadata.yaml
says, and the counts come from the file itself.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import BagError
from .storage import Connection, FileSummary, RawMessage, TopicStats

# How the sqlite3 tables of rosbag2 look from Dashing (schema 1) to Kilted (schema 4).
_REQUIRED_TABLES = ("topics", "messages")


SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_VERSION = 2  # file format write/read version bytes (offsets 18, 19) of a WAL-mode database


def _wal_mode(path: Path) -> bool:
    """Whether `path` is an SQLite file in WAL journal mode (from its 100-byte header)."""
    try:
        with open(path, "rb") as stream:
            header = stream.read(20)
    except OSError:
        return False  # the connection attempt reports it
    return header[:16] == SQLITE_MAGIC and len(header) == 20 and _WAL_VERSION in (header[18], header[19])


class SqliteFile:
    """One rosbag2 `.db3` file opened read-only."""

    storage = "sqlite3"

    def __init__(self, path: Path, source: Path | None = None) -> None:
        """Open `path`; or open `source`, a private inflated copy of `path` (a `*.db3.zstd` file),
        read-only and immutable, and name `path` in every message."""
        self.path = Path(path)
        self._source = self.path if source is None else Path(source)
        self._private_copy = source is not None
        self._db = self._connect()
        # Damaged text (names, QoS) must not make a whole file unreadable: replace undecodable bytes.
        self._db.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
        self.problems: list[str] = []
        try:
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            missing = [t for t in _REQUIRED_TABLES if t not in tables]
            if missing:
                raise BagError(f"{self.path}: sqlite3 file without the rosbag2 table(s) {missing}; not a rosbag2 bag")
            self._tables = tables
            self._topic_by_id: dict[int, Connection] = dict(self._read_topics())
        except (sqlite3.Error, UnicodeDecodeError, TypeError, ValueError) as err:
            self._db.close()
            raise BagError(f"{self.path}: not a readable rosbag2 sqlite3 file ({err})") from err
        except BagError:
            self._db.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        uri = self._source.resolve().as_uri()
        if self._private_copy or (
                _wal_mode(self._source) and not self._source.with_name(self._source.name + "-wal").exists()):
            # Every committed page is in the main file. Opened any other way (mode=ro too), SQLite
            # creates -wal and -shm beside a WAL-mode file and a reader cannot remove them again;
            # immutable=1 reads without creating, locking or changing anything.
            try:
                return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            except sqlite3.Error as err:
                raise BagError(f"{self.path}: not a readable rosbag2 sqlite3 file ({err})") from err
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            # A hot journal left by a killed writer in a read-only folder: read the committed pages as they are.
            db = sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
            raise BagError(f"{self.path}: not a readable rosbag2 sqlite3 file ({err})") from err
        return db

    def _read_topics(self) -> list[tuple[int, Connection]]:
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(topics)")]
        wanted = ["id", "name", "type", "serialization_format", "offered_qos_profiles", "type_description_hash"]
        present = [c for c in wanted if c in columns]
        for needed in ("id", "name", "type"):
            if needed not in present:
                raise BagError(f"{self.path}: table 'topics' has no column '{needed}' (columns: {columns})")
        definitions = self._read_definitions()
        out = []
        for row in self._db.execute(f"SELECT {', '.join(present)} FROM topics ORDER BY id"):  # noqa: S608 - fixed names
            values = dict(zip(present, row, strict=True))
            if not isinstance(values["id"], int):
                self.problems.append(f"{self.path.name}: damaged row in table 'topics' ({row!r}); skipped")
                continue
            msgtype = str(values["type"])
            msgdef, encoding = definitions.get(msgtype, ("", ""))
            out.append((values["id"], Connection(
                topic=str(values["name"]),
                msgtype=msgtype,
                serialization_format=str(values.get("serialization_format") or "cdr"),
                offered_qos_profiles=str(values.get("offered_qos_profiles") or ""),
                msgdef=msgdef,
                msgdef_encoding=encoding,
                type_hash=str(values.get("type_description_hash") or ""),
            )))
        return out

    def _read_definitions(self) -> dict[str, tuple[str, str]]:
        """Stored message definitions (rosbag2 Iron and newer): type -> (text, encoding)."""
        if "message_definitions" not in self._tables:
            return {}
        out = {}
        try:
            rows = self._db.execute(
                "SELECT topic_type, encoding, encoded_message_definition FROM message_definitions").fetchall()
        except sqlite3.Error as err:
            self.problems.append(f"{self.path.name}: message_definitions table unreadable ({err}); ignored")
            return {}
        for topic_type, encoding, text in rows:
            if text and encoding in ("ros2msg", "ros2idl"):
                out[str(topic_type)] = (str(text), str(encoding))
        return out

    def ros_distro(self) -> str:
        if "schema" not in self._tables:
            return ""
        try:
            row = self._db.execute("SELECT ros_distro FROM schema ORDER BY schema_version DESC LIMIT 1").fetchone()
        except sqlite3.Error:
            return ""
        return str(row[0]) if row and row[0] else ""

    def summary(self) -> FileSummary:
        result = FileSummary(path=self.path, storage=self.storage, ros_distro=self.ros_distro(),
                             problems=list(self.problems))
        for conn in self._topic_by_id.values():
            result.connections.setdefault(conn.topic, conn)
            result.stats.setdefault(conn.topic, TopicStats())
        try:
            rows = self._db.execute(
                "SELECT topic_id, COUNT(*), MIN(timestamp), MAX(timestamp) FROM messages GROUP BY topic_id"
            ).fetchall()
        except sqlite3.Error as err:
            raise BagError(f"{self.path}: cannot count messages ({err})") from err
        for topic_id, count, start, end in rows:
            if not all(isinstance(v, int) for v in (topic_id, count, start, end)):
                result.problems.append(
                    f"{self.path.name}: {count} damaged message rows (topic id {topic_id!r}); skipped")
                continue
            conn = self._topic_by_id.get(topic_id)
            if conn is None:
                result.problems.append(f"{self.path.name}: {count} messages of unknown topic id {topic_id} (skipped)")
                continue
            result.stats[conn.topic].add(int(count), int(start), int(end))
        return result

    def messages(self, topics: set[str] | None) -> Iterator[RawMessage]:
        ids = {tid: conn.topic for tid, conn in self._topic_by_id.items() if topics is None or conn.topic in topics}
        if not ids:
            return
        query = "SELECT topic_id, timestamp, data FROM messages"
        params: tuple[int, ...] = ()
        if topics is not None:
            params = tuple(ids)
            query += f" WHERE topic_id IN ({','.join('?' * len(params))})"
        query += " ORDER BY timestamp, id"
        try:
            cursor = self._db.execute(query, params)
            while rows := cursor.fetchmany(256):
                for topic_id, timestamp, data in rows:
                    topic = ids.get(topic_id)
                    if topic is not None and isinstance(timestamp, int) and isinstance(data, bytes):
                        yield timestamp, topic, data
        except sqlite3.Error as err:
            raise BagError(f"{self.path}: damaged messages table ({err})") from err

    def close(self) -> None:
        self._db.close()
