"""rosbag2 MCAP storage (`*.mcap`), read record by record so that damaged files stay readable.

A file closed properly has a summary section (chunk index, statistics) and is read through it.
A file whose writer was killed has no summary and may end inside a record: it is scanned from the
start, every complete chunk is used, and the truncated tail is reported (not fatal), because a
recording cut short by a crash is exactly the data a user most wants back.
"""
from __future__ import annotations

import heapq
import io
import logging
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import lz4.frame
from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.reader import SeekingReader
from mcap.records import Channel, Schema

from ..core.errors import BagError
from .storage import Connection, FileSummary, RawMessage, TopicStats, zstd_decompress

_log = logging.getLogger(__name__)
MAGIC = b"\x89MCAP0\r\n"
_RECORD_HEADER = struct.Struct("<BQ")  # opcode, record length
_MESSAGE_HEADER = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
_CHUNK_HEADER = struct.Struct("<QQQI")  # start time, end time, uncompressed size, uncompressed crc
OP_FOOTER, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK = 0x02, 0x03, 0x04, 0x05, 0x06


@dataclass
class _ChunkRef:
    """Where a chunk (or a message outside any chunk) lies in the file and what it covers."""

    start_ns: int
    end_ns: int
    offset: int  # of the record (opcode byte)
    length: int  # of the record body
    channel_ids: set[int] | None = None  # None: unknown, read it


@dataclass
class _Index:
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    chunks: list[_ChunkRef] = field(default_factory=list)
    counts: dict[int, TopicStats] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    has_summary: bool = False
    truncated: bool = False
    profile: str = ""


def _decompress(compression: str, data: memoryview, path: Path, offset: int) -> bytes | memoryview:
    if compression not in ("", "zstd", "lz4"):
        raise BagError(f"{path}: chunk at byte {offset} uses unknown compression '{compression}'")
    try:
        if compression == "zstd":
            return zstd_decompress(data)
        if compression == "lz4":
            return lz4.frame.decompress(bytes(data))
    except Exception as err:  # noqa: BLE001 - every decoder error means the same: damaged chunk
        raise BagError(f"{path}: chunk at byte {offset} does not decompress ({compression}: {err})") from err
    return data


def _read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (size,) = struct.unpack_from("<I", buf, pos)
    pos += 4
    return str(buf[pos:pos + size], "utf-8"), pos + size


def _parse_chunk_body(body: memoryview, path: Path, offset: int) -> tuple[int, int, bytes | memoryview]:
    """(start time, end time, uncompressed records) of a Chunk record body."""
    start, end, _size, crc = _CHUNK_HEADER.unpack_from(body, 0)
    compression, pos = _read_string(body, _CHUNK_HEADER.size)
    (records_len,) = struct.unpack_from("<Q", body, pos)
    pos += 8
    records = body[pos:pos + records_len]
    if len(records) != records_len:
        raise BagError(f"{path}: chunk at byte {offset} is cut short")
    data = _decompress(compression, records, path, offset)
    if crc and zlib.crc32(data) != crc:
        raise BagError(f"{path}: chunk at byte {offset} fails its CRC check (damaged)")
    return start, end, data


def _iter_records(buf: bytes | memoryview) -> Iterator[tuple[int, memoryview]]:
    """(opcode, body) of each record in an uncompressed chunk."""
    view = memoryview(buf)
    pos, size = 0, len(view)
    while pos + 9 <= size:
        opcode, length = _RECORD_HEADER.unpack_from(view, pos)
        pos += 9
        yield opcode, view[pos:pos + length]
        pos += length


def _parse_schema(body: memoryview) -> Schema:
    return Schema.read(ReadDataStream(io.BytesIO(bytes(body))))


def _parse_channel(body: memoryview) -> Channel:
    return Channel.read(ReadDataStream(io.BytesIO(bytes(body))))


class McapFile:
    """One rosbag2 `.mcap` file, with or without its summary section."""

    storage = "mcap"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as err:
            raise BagError(f"{self.path}: cannot open ({err.strerror})") from err
        self._size = self.path.stat().st_size
        head = self._file.read(len(MAGIC))
        if head != MAGIC:
            self._file.close()
            raise BagError(f"{self.path}: not an MCAP file (starts with {head[:8]!r}, expected the MCAP magic)")
        self._index = self._index_from_summary() or self._index_by_scanning()
        self.damaged: list[str] = []  # chunks found damaged while reading messages

    # ------------------------------------------------------------------ indexing
    def _index_from_summary(self) -> _Index | None:
        if self._size < 2 * len(MAGIC) + 9 + 20 or self._read_at(self._size - len(MAGIC), len(MAGIC)) != MAGIC:
            return None
        try:
            self._file.seek(0)
            summary = SeekingReader(self._file).get_summary()
        except (McapError, struct.error, ValueError, OSError):
            return None
        if summary is None:
            return None
        index = _Index(schemas=dict(summary.schemas), channels=dict(summary.channels), has_summary=True)
        if summary.statistics is None or (summary.statistics.message_count and not summary.chunk_indexes):
            return None  # no statistics or messages outside chunks: count them by scanning
        for ci in summary.chunk_indexes:
            index.chunks.append(_ChunkRef(ci.message_start_time, ci.message_end_time, ci.chunk_start_offset,
                                          ci.chunk_length - 9, set(ci.message_index_offsets) or None))
        stats = summary.statistics
        for channel_id, count in stats.channel_message_counts.items():
            index.counts[channel_id] = TopicStats(count=count)
        # Per-topic time ranges come from the chunks that hold the topic (exact at chunk granularity).
        for ref in index.chunks:
            for channel_id in ref.channel_ids or ():
                if channel_id in index.counts:
                    index.counts[channel_id].add(0, ref.start_ns, ref.end_ns)
        if stats.message_count:
            # The file-level range is exact; tighten the topic ranges to it.
            for topic_stats in index.counts.values():
                if topic_stats.start_ns is not None:
                    topic_stats.start_ns = max(topic_stats.start_ns, stats.message_start_time)
                    topic_stats.end_ns = min(topic_stats.end_ns or stats.message_end_time, stats.message_end_time)
        return index

    def _read_at(self, offset: int, size: int) -> bytes:
        self._file.seek(offset)
        return self._file.read(size)

    def _index_by_scanning(self) -> _Index:
        """Walk every record from the start; stop at the footer or where the file is cut short."""
        index = _Index()
        pos = len(MAGIC)
        while True:
            if pos == self._size:
                index.truncated = True
                index.problems.append(f"{self.path.name}: no summary section (the writer never closed the file)")
                break
            if pos + 9 > self._size:
                index.truncated = True
                index.problems.append(
                    f"{self.path.name}: truncated at byte {pos} of {self._size}: the last record is cut short "
                    "and no summary section (the writer never closed the file)")
                break
            opcode, length = _RECORD_HEADER.unpack(self._read_at(pos, 9))
            if pos + 9 + length > self._size:
                index.truncated = True
                index.problems.append(
                    f"{self.path.name}: truncated at byte {pos} of {self._size}: record 0x{opcode:02x} needs "
                    f"{length} bytes, {self._size - pos - 9} are left; no summary section "
                    "(the writer never closed the file)")
                break
            if opcode == OP_FOOTER:
                break
            if opcode in (OP_CHUNK, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE):
                body = memoryview(self._read_at(pos + 9, length))
                try:
                    self._index_record(index, opcode, body, pos, length)
                except (BagError, struct.error, ValueError, McapError, RuntimeError) as err:
                    index.problems.append(f"{self.path.name}: damaged record 0x{opcode:02x} at byte {pos} ({err}); "
                                          "skipped")
            elif opcode == 0 or opcode > 0x0F:
                index.truncated = True
                index.problems.append(f"{self.path.name}: garbage at byte {pos} (opcode 0x{opcode:02x}); "
                                      "the rest of the file is ignored")
                break
            pos += 9 + length
        return index

    def _index_record(self, index: _Index, opcode: int, body: memoryview, offset: int, length: int) -> None:
        if opcode == OP_SCHEMA:
            schema = _parse_schema(body)
            index.schemas[schema.id] = schema
        elif opcode == OP_CHANNEL:
            channel = _parse_channel(body)
            index.channels[channel.id] = channel
        elif opcode == OP_MESSAGE:
            channel_id, _seq, log_time, _pub = _MESSAGE_HEADER.unpack_from(body, 0)
            index.counts.setdefault(channel_id, TopicStats()).add(1, log_time, log_time)
            index.chunks.append(_ChunkRef(log_time, log_time, offset, length, {channel_id}))
        elif opcode == OP_CHUNK:
            start, end, records = _parse_chunk_body(body, self.path, offset)
            channel_ids: set[int] = set()
            for inner_op, inner in _iter_records(records):
                if inner_op == OP_MESSAGE:
                    channel_id, _seq, log_time, _pub = _MESSAGE_HEADER.unpack_from(inner, 0)
                    channel_ids.add(channel_id)
                    index.counts.setdefault(channel_id, TopicStats()).add(1, log_time, log_time)
                elif inner_op == OP_SCHEMA:
                    schema = _parse_schema(inner)
                    index.schemas[schema.id] = schema
                elif inner_op == OP_CHANNEL:
                    channel = _parse_channel(inner)
                    index.channels[channel.id] = channel
            if channel_ids:
                index.chunks.append(_ChunkRef(start, end, offset, length, channel_ids))

    # ------------------------------------------------------------------ public
    @property
    def needs_repair(self) -> bool:
        return not self._index.has_summary

    def _connection(self, channel: Channel) -> Connection:
        schema = self._index.schemas.get(channel.schema_id)
        msgdef, encoding, msgtype = "", "", ""
        if schema is not None:
            msgtype = schema.name
            if schema.encoding in ("ros2msg", "ros2idl") and schema.data:
                msgdef, encoding = schema.data.decode("utf-8", errors="replace"), schema.encoding
        metadata = dict(channel.metadata or {})
        return Connection(
            topic=channel.topic,
            msgtype=msgtype,
            serialization_format=channel.message_encoding or "cdr",
            offered_qos_profiles=metadata.get("offered_qos_profiles", ""),
            msgdef=msgdef,
            msgdef_encoding=encoding,
            type_hash=metadata.get("topic_type_hash", ""),
        )

    def summary(self) -> FileSummary:
        result = FileSummary(path=self.path, storage=self.storage, problems=list(self._index.problems),
                             needs_repair=self.needs_repair)
        for channel_id, channel in sorted(self._index.channels.items()):
            result.connections.setdefault(channel.topic, self._connection(channel))
            stats = result.stats.setdefault(channel.topic, TopicStats())
            got = self._index.counts.get(channel_id)
            if got is not None:
                stats.add(got.count, got.start_ns, got.end_ns)
        unknown = sum(s.count for cid, s in self._index.counts.items() if cid not in self._index.channels)
        if unknown:
            result.problems.append(f"{self.path.name}: {unknown} messages on channels never declared (skipped)")
        return result

    def messages(self, topics: set[str] | None) -> Iterator[RawMessage]:
        """Raw messages in log-time order: chunks may overlap in time, so merge them lazily."""
        wanted = {cid: ch.topic for cid, ch in self._index.channels.items() if topics is None or ch.topic in topics}
        if not wanted:
            return
        refs = sorted((r for r in self._index.chunks if r.channel_ids is None or r.channel_ids & wanted.keys()),
                      key=lambda r: (r.start_ns, r.offset))
        heap: list[tuple[int, int, str, memoryview]] = []
        order = 0  # ties keep file order
        next_ref = 0
        while next_ref < len(refs) or heap:
            while next_ref < len(refs) and (not heap or refs[next_ref].start_ns <= heap[0][0]):
                for log_time, channel_id, data in self._read_ref_or_skip(refs[next_ref]):
                    topic = wanted.get(channel_id)
                    if topic is not None:
                        heapq.heappush(heap, (log_time, order, topic, data))
                        order += 1
                next_ref += 1
            if heap:
                log_time, _, topic, data = heapq.heappop(heap)
                yield log_time, topic, data

    def _read_ref_or_skip(self, ref: _ChunkRef) -> list[tuple[int, int, memoryview]]:
        """The messages of one chunk; a damaged chunk is reported and skipped, the rest still reads."""
        try:
            return list(self._read_ref(ref))
        except (BagError, struct.error, ValueError) as err:
            problem = str(err) if isinstance(err, BagError) else f"{self.path}: damaged record at byte {ref.offset}"
            self.damaged.append(problem)
            _log.warning("%s; its messages are skipped", problem)
            return []

    def _read_ref(self, ref: _ChunkRef) -> Iterator[tuple[int, int, memoryview]]:
        record = self._read_at(ref.offset, 9 + ref.length)
        if len(record) < 9 + ref.length:
            raise BagError(f"{self.path}: record at byte {ref.offset} is cut short")
        opcode = record[0]
        body = memoryview(record)[9:]
        if opcode == OP_MESSAGE:
            channel_id, _seq, log_time, _pub = _MESSAGE_HEADER.unpack_from(body, 0)
            yield log_time, channel_id, body[_MESSAGE_HEADER.size:]
            return
        if opcode != OP_CHUNK:
            raise BagError(f"{self.path}: expected a chunk at byte {ref.offset}, found record 0x{opcode:02x}")
        _start, _end, records = _parse_chunk_body(body, self.path, ref.offset)
        for inner_op, inner in _iter_records(records):
            if inner_op == OP_MESSAGE:
                channel_id, _seq, log_time, _pub = _MESSAGE_HEADER.unpack_from(inner, 0)
                yield log_time, channel_id, inner[_MESSAGE_HEADER.size:]

    def raw_records(self) -> tuple[dict[int, Schema], dict[int, Channel]]:
        """Schemas and channels of the file (for repair)."""
        return dict(self._index.schemas), dict(self._index.channels)

    def close(self) -> None:
        self._file.close()
