"""rosbag2 MCAP storage (`*.mcap`), read record by record so that damaged files stay readable.

A file closed properly has a summary section (chunk index, statistics) and is read through it.
A file whose writer was killed has no summary and may end inside a record: it is scanned from the
start, every complete chunk is used, and the truncated tail is reported (not fatal), because a
recording cut short by a crash is exactly the data a user most wants back.

Every length the file declares is checked before it is used: a record or chunk index must lie
inside the file, no record is read into memory beyond MAX_RECORD_BYTES, and a chunk decompresses
to exactly its declared uncompressed size and at most MAX_DECOMPRESSED_BYTES. A summary section
that fails these checks is not trusted (the file is scanned instead); a chunk that fails them is
reported and skipped like any damaged chunk.
"""
from __future__ import annotations

import heapq
import io
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.records import Channel, ChunkIndex, Schema, Statistics

from ..core.errors import BagError
from .storage import (
    MAX_DECOMPRESSED_BYTES,
    Connection,
    FileSummary,
    RawMessage,
    SizeError,
    TopicStats,
    lz4_decompress_bounded,
    zstd_decompress_bounded,
)

_log = logging.getLogger(__name__)
MAGIC = b"\x89MCAP0\r\n"
_RECORD_HEADER = struct.Struct("<BQ")  # opcode, record length
_MESSAGE_HEADER = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
_CHUNK_HEADER = struct.Struct("<QQQI")  # start time, end time, uncompressed size, uncompressed crc
_FOOTER_BODY = struct.Struct("<QQI")  # summary start, summary offset start, summary crc
_FOOTER_RECORD = _RECORD_HEADER.size + _FOOTER_BODY.size  # [bytes]
OP_FOOTER, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK = 0x02, 0x03, 0x04, 0x05, 0x06
OP_CHUNK_INDEX, OP_STATISTICS = 0x08, 0x0B
# Most bytes of one record (a compressed chunk, a message, the whole summary section) read into
# memory [bytes]; rosbag2 chunks are ~1 MiB, so only a damaged or hostile length gets near it.
MAX_RECORD_BYTES = MAX_DECOMPRESSED_BYTES
# What a damaged record raises while it is parsed (struct: short buffer; ValueError: bad UTF-8;
# McapError: the mcap library's record readers).
_PARSE_ERRORS = (BagError, McapError, struct.error, ValueError, EOFError)


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


def _decompress(compression: str, data: memoryview, declared: int, path: Path, offset: int) -> bytes | memoryview:
    """The records of a chunk: exactly `declared` bytes [bytes], never more than the cap."""
    if compression == "":
        return data  # stored as is: nothing to expand
    try:
        if compression == "zstd":
            return zstd_decompress_bounded(data, declared)
        if compression == "lz4":
            return lz4_decompress_bounded(data, declared)
    except SizeError as err:
        raise BagError(f"{path}: chunk at byte {offset} {err}") from err
    except Exception as err:  # noqa: BLE001 - every decoder error means the same: damaged chunk
        raise BagError(f"{path}: chunk at byte {offset} does not decompress ({compression}: {err})") from err
    raise BagError(f"{path}: chunk at byte {offset} uses unknown compression '{compression}'")


def _read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (size,) = struct.unpack_from("<I", buf, pos)
    pos += 4
    if pos + size > len(buf):
        raise ValueError(f"a {size} byte string where {len(buf) - pos} bytes are left")
    return str(buf[pos:pos + size], "utf-8"), pos + size


def _parse_chunk_body(body: memoryview, path: Path, offset: int) -> tuple[int, int, bytes | memoryview]:
    """(start time, end time, uncompressed records) of a Chunk record body."""
    start, end, declared_size, crc = _CHUNK_HEADER.unpack_from(body, 0)
    compression, pos = _read_string(body, _CHUNK_HEADER.size)
    (records_len,) = struct.unpack_from("<Q", body, pos)
    pos += 8
    records = body[pos:pos + records_len]
    if len(records) != records_len:
        raise BagError(f"{path}: chunk at byte {offset} is cut short (its records claim {records_len} bytes, "
                       f"{len(records)} are there)")
    data = _decompress(compression, records, declared_size, path, offset)
    if crc and zlib.crc32(data) != crc:
        raise BagError(f"{path}: chunk at byte {offset} fails its CRC check (damaged)")
    return start, end, data


def _iter_records(buf: bytes | memoryview, path: Path, offset: int) -> Iterator[tuple[int, memoryview]]:
    """(opcode, body) of each record in the uncompressed chunk at byte `offset` of `path`; BagError
    when a record claims more bytes than the chunk has left."""
    view = memoryview(buf)
    pos, size = 0, len(view)
    while pos + 9 <= size:
        opcode, length = _RECORD_HEADER.unpack_from(view, pos)
        pos += 9
        if length > size - pos:
            raise BagError(f"{path}: chunk at byte {offset} holds a record 0x{opcode:02x} claiming {length} bytes "
                           f"where {size - pos} are left (damaged)")
        yield opcode, view[pos:pos + length]
        pos += length


def _parse_record(kind: type, body: memoryview):  # noqa: ANN202 - returns an instance of `kind`
    """An mcap library record (Schema, Channel, ChunkIndex, Statistics) from its body bytes; reading
    from a copy of the body keeps every length inside it bounded by the record's size."""
    return kind.read(ReadDataStream(io.BytesIO(bytes(body))))


def _parse_schema(body: memoryview) -> Schema:
    return _parse_record(Schema, body)


def _parse_channel(body: memoryview) -> Channel:
    return _parse_record(Channel, body)


def _reason(err: BaseException, path: Path) -> str:
    """An error's text without the file name in front (the caller's message names the file)."""
    text = str(err) or type(err).__name__
    return text.removeprefix(f"{path}: ")


def _check_chunk_indexes(chunk_indexes: list[ChunkIndex], data_end: int) -> None:
    """BagError when a chunk index points outside the data section [8, data_end) [bytes], overlaps
    another chunk, or declares a chunk over the size limits; nothing is read for a lying index."""
    previous_end = len(MAGIC)
    for ci in sorted(chunk_indexes, key=lambda c: c.chunk_start_offset):
        where = f"chunk index of the chunk at byte {ci.chunk_start_offset}"
        if ci.chunk_start_offset < previous_end or ci.chunk_length < 9 + _CHUNK_HEADER.size:
            raise BagError(f"{where} overlaps another chunk or the header, or is too short ({ci.chunk_length} bytes)")
        if ci.chunk_length > data_end - ci.chunk_start_offset:
            raise BagError(f"{where} claims {ci.chunk_length} bytes, past the end of the data section "
                           f"(byte {data_end})")
        if ci.chunk_length - 9 > MAX_RECORD_BYTES or ci.uncompressed_size > MAX_DECOMPRESSED_BYTES:
            raise BagError(f"{where} claims {ci.chunk_length} bytes, {ci.uncompressed_size} uncompressed, "
                           f"more than the {MAX_DECOMPRESSED_BYTES} byte limit")
        previous_end = ci.chunk_start_offset + ci.chunk_length


class McapFile:
    """One rosbag2 `.mcap` file, with or without its summary section."""

    storage = "mcap"

    def __init__(self, path: Path, stream: BinaryIO | None = None) -> None:
        """Open `path`; or read the open file `stream` (owned from now on: closed in close()) and
        name `path` in every message (a `*.mcap.zstd` file inflated into an anonymous temp file)."""
        self.path = Path(path)
        # The records of the chunk read last, by its byte offset: a tool that looks at a bag's
        # first messages (its joint names) and then reads it through inflates that chunk once.
        self._last_chunk: tuple[int, bytes | memoryview] | None = None
        if stream is not None:
            self._file = stream
        else:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
            except OSError as err:
                raise BagError(f"{self.path}: cannot open ({err.strerror})") from err
        try:
            self._size = os.fstat(self._file.fileno()).st_size  # [bytes]; bounds every declared length
            self._file.seek(0)
            head = self._file.read(len(MAGIC))
            if head != MAGIC:
                raise BagError(f"{self.path}: not an MCAP file (starts with {head[:8]!r}, expected the MCAP magic)")
            self._index = self._build_index()
        except BaseException as err:
            self._file.close()
            if isinstance(err, OSError):
                raise BagError(f"{self.path}: cannot read ({err})") from err
            raise
        self.damaged: list[str] = []  # chunks found damaged while reading messages

    # ------------------------------------------------------------------ indexing
    def _build_index(self) -> _Index:
        """The index from the summary section when there is a trustworthy one, else by scanning."""
        try:
            index = self._index_from_summary()
        except _PARSE_ERRORS as err:
            # A summary that lies about where things are (or cannot be parsed) is not used: the
            # records themselves are still there to scan.
            index = self._index_by_scanning()
            index.problems.insert(0, f"{self.path.name}: summary section unusable ({_reason(err, self.path)}); "
                                     "the file was scanned instead")
            return index
        return index or self._index_by_scanning()

    def _summary_bounds(self) -> tuple[int, int] | None:
        """(first byte, end byte) of the summary section; None when the file has none or no footer."""
        if self._size < 2 * len(MAGIC) + _FOOTER_RECORD:
            return None
        footer_at = self._size - len(MAGIC) - _FOOTER_RECORD
        tail = self._read_at(footer_at, _FOOTER_RECORD + len(MAGIC))
        opcode, length = _RECORD_HEADER.unpack_from(tail, 0)
        if tail[-len(MAGIC):] != MAGIC or opcode != OP_FOOTER or length != _FOOTER_BODY.size:
            return None  # no footer: the writer never closed the file
        summary_start, _offsets_start, _crc = _FOOTER_BODY.unpack_from(tail, _RECORD_HEADER.size)
        if summary_start == 0:
            return None  # closed without a summary
        if not len(MAGIC) <= summary_start <= footer_at:
            raise BagError(f"the footer puts the summary at byte {summary_start}, outside the "
                           f"{footer_at} bytes before it")
        if footer_at - summary_start > MAX_RECORD_BYTES:
            raise BagError(f"the summary section claims {footer_at - summary_start} bytes, more than the "
                           f"{MAX_RECORD_BYTES} byte limit")
        return summary_start, footer_at

    def _summary_records(self, start: int, end: int) -> Iterator[tuple[int, int, memoryview]]:
        """(opcode, file offset, body) of each record of the summary section [start, end) [bytes]."""
        view = memoryview(self._read_at(start, end - start))
        pos = 0
        while pos < len(view):
            if pos + 9 > len(view):
                raise BagError(f"summary record at byte {start + pos} is cut short")
            opcode, length = _RECORD_HEADER.unpack_from(view, pos)
            if length > len(view) - pos - 9:
                raise BagError(f"summary record 0x{opcode:02x} at byte {start + pos} claims {length} bytes, "
                               f"{len(view) - pos - 9} are left before the footer")
            yield opcode, start + pos, view[pos + 9:pos + 9 + length]
            pos += 9 + length

    def _index_from_summary(self) -> _Index | None:
        """The index the summary section gives; None when there is none or it cannot give exact
        counts. Raises a _PARSE_ERRORS error when the summary is damaged or lies about the file."""
        bounds = self._summary_bounds()
        if bounds is None:
            return None
        index = _Index(has_summary=True)
        chunk_indexes: list[ChunkIndex] = []
        stats: Statistics | None = None
        for opcode, offset, body in self._summary_records(*bounds):
            if opcode in (OP_SCHEMA, OP_CHANNEL):
                self._index_record(index, opcode, body, offset, len(body))
            elif opcode == OP_CHUNK_INDEX:
                chunk_indexes.append(_parse_record(ChunkIndex, body))
            elif opcode == OP_STATISTICS:
                stats = _parse_record(Statistics, body)
        if stats is None or (stats.message_count and not chunk_indexes):
            return None  # no statistics or messages outside chunks: count them by scanning
        _check_chunk_indexes(chunk_indexes, data_end=bounds[0])
        for ci in chunk_indexes:
            index.chunks.append(_ChunkRef(ci.message_start_time, ci.message_end_time, ci.chunk_start_offset,
                                          ci.chunk_length - 9, set(ci.message_index_offsets) or None))
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
            if opcode in (OP_CHUNK, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE) and length > MAX_RECORD_BYTES:
                index.problems.append(f"{self.path.name}: record 0x{opcode:02x} at byte {pos} claims {length} bytes, "
                                      f"more than the {MAX_RECORD_BYTES} byte limit; skipped")
            elif opcode in (OP_CHUNK, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE):
                body = memoryview(self._read_at(pos + 9, length))
                try:
                    self._index_record(index, opcode, body, pos, length)
                except (*_PARSE_ERRORS, RuntimeError) as err:
                    index.problems.append(f"{self.path.name}: damaged record 0x{opcode:02x} at byte {pos} "
                                          f"({_reason(err, self.path)}); skipped")
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
            # Parse the whole chunk before counting anything: a chunk damaged halfway counts for nothing.
            start, end, records = _parse_chunk_body(body, self.path, offset)
            times: list[tuple[int, int]] = []  # (channel id, log time [ns]) of each message
            schemas: list[Schema] = []
            channels: list[Channel] = []
            for inner_op, inner in _iter_records(records, self.path, offset):
                if inner_op == OP_MESSAGE:
                    channel_id, _seq, log_time, _pub = _MESSAGE_HEADER.unpack_from(inner, 0)
                    times.append((channel_id, log_time))
                elif inner_op == OP_SCHEMA:
                    schemas.append(_parse_schema(inner))
                elif inner_op == OP_CHANNEL:
                    channels.append(_parse_channel(inner))
            index.schemas.update((schema.id, schema) for schema in schemas)
            index.channels.update((channel.id, channel) for channel in channels)
            for channel_id, log_time in times:
                index.counts.setdefault(channel_id, TopicStats()).add(1, log_time, log_time)
            if times:
                index.chunks.append(_ChunkRef(start, end, offset, length, {cid for cid, _ in times}))

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
        # Ties keep file order (the chunk's byte offset, then its place in the chunk), not the order
        # the chunks were read in: after a clock stepped back, a later chunk can start earlier, and
        # the messages one publisher sent at one frozen sim time must come out as they were written.
        heap: list[tuple[int, int, int, str, memoryview]] = []
        next_ref = 0
        while next_ref < len(refs) or heap:
            while next_ref < len(refs) and (not heap or refs[next_ref].start_ns <= heap[0][0]):
                ref = refs[next_ref]
                for place, (log_time, channel_id, data) in enumerate(self._read_ref_or_skip(ref)):
                    topic = wanted.get(channel_id)
                    if topic is not None:
                        heapq.heappush(heap, (log_time, ref.offset, place, topic, data))
                next_ref += 1
            if heap:
                log_time, _, _, topic, data = heapq.heappop(heap)
                yield log_time, topic, data

    def publish_records(self, topics: set[str]) -> dict[str, list[tuple[int, int, int]]]:
        """(log time, publish time [ns], sequence) of every message of `topics`, in file order. A
        recorder that stores the DDS source timestamp puts it in the publish time, others repeat the
        log time; `sim2real record` stores the DDS publication sequence number as the sequence."""
        wanted = {cid: ch.topic for cid, ch in self._index.channels.items() if ch.topic in topics}
        out: dict[str, list[tuple[int, int]]] = {t: [] for t in topics}
        for ref in sorted(self._index.chunks, key=lambda r: r.offset):
            if ref.channel_ids is not None and not ref.channel_ids & wanted.keys():
                continue
            try:
                for log_time, channel_id, _data, publish, seq in self._read_ref(ref, with_publish=True):
                    if channel_id in wanted:
                        out[wanted[channel_id]].append((log_time, publish, seq))
            except (*_PARSE_ERRORS, RuntimeError, OSError):
                continue  # damaged: messages() reports it
        return out

    def _read_ref_or_skip(self, ref: _ChunkRef) -> list[tuple[int, int, memoryview]]:
        """The messages of one chunk; a damaged chunk is reported and skipped, the rest still reads."""
        try:
            return list(self._read_ref(ref))
        except (*_PARSE_ERRORS, RuntimeError, OSError) as err:
            problem = str(err) if isinstance(err, BagError) else f"{self.path}: damaged record at byte {ref.offset}"
            self.damaged.append(problem)
            _log.warning("%s; its messages are skipped", problem)
            return []

    def _read_ref(self, ref: _ChunkRef, with_publish: bool = False) -> Iterator[tuple]:
        last = self._last_chunk
        if last is not None and last[0] == ref.offset:
            yield from self._chunk_messages(last[1], ref.offset, with_publish)
            return
        # The index was checked against the file; check again here so that no path reads more.
        if ref.length > MAX_RECORD_BYTES or ref.offset + 9 + ref.length > self._size:
            raise BagError(f"{self.path}: record at byte {ref.offset} claims {ref.length} bytes, "
                           f"past the end of the file ({self._size} bytes) or the {MAX_RECORD_BYTES} byte limit")
        record = self._read_at(ref.offset, 9 + ref.length)
        if len(record) < 9 + ref.length:
            raise BagError(f"{self.path}: record at byte {ref.offset} is cut short")
        opcode = record[0]
        body = memoryview(record)[9:]
        if opcode == OP_MESSAGE:
            channel_id, seq, log_time, pub = _MESSAGE_HEADER.unpack_from(body, 0)
            yield (log_time, channel_id, body[_MESSAGE_HEADER.size:]) + ((pub, seq) if with_publish else ())
            return
        if opcode != OP_CHUNK:
            raise BagError(f"{self.path}: expected a chunk at byte {ref.offset}, found record 0x{opcode:02x}")
        _start, _end, records = _parse_chunk_body(body, self.path, ref.offset)
        self._last_chunk = (ref.offset, records)
        yield from self._chunk_messages(records, ref.offset, with_publish)

    def _chunk_messages(self, records: bytes | memoryview, offset: int, with_publish: bool) -> Iterator[tuple]:
        for inner_op, inner in _iter_records(records, self.path, offset):
            if inner_op == OP_MESSAGE:
                channel_id, seq, log_time, pub = _MESSAGE_HEADER.unpack_from(inner, 0)
                yield (log_time, channel_id, inner[_MESSAGE_HEADER.size:]) + ((pub, seq) if with_publish else ())

    def raw_records(self) -> tuple[dict[int, Schema], dict[int, Channel]]:
        """Schemas and channels of the file (for repair)."""
        return dict(self._index.schemas), dict(self._index.channels)

    def close(self) -> None:
        self._last_chunk = None
        self._file.close()
