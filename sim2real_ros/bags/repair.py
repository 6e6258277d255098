"""`sim2real bag repair`: make a bag whose recorder died readable by every ROS 2 tool again.

- MCAP files without a summary section, or cut short inside a record (recorder killed): every
  complete chunk is copied into a new, properly closed file; the damaged original is kept next to
  it as `<file>.damaged` (nothing is thrown away, not even the unreadable tail).
- sqlite3 files with a hot journal: opened read-write once so SQLite rolls the journal back.
- metadata.yaml missing, unreadable, or disagreeing with the files: rebuilt from the files (the
  old one is kept as metadata.yaml.bak).

A bag folder comes from elsewhere (a tarball keeps symbolic links): one that holds a link is
refused, naming it, before anything is read or written; temp files are created exclusively and
renamed into place, backups are hard links that never overwrite an earlier backup (safe_files.py).
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter

from ..core.errors import BagError
from .mcap_storage import McapFile
from .metadata import METADATA_FILE, FileEntry, TopicMetadata, metadata_document, read_metadata, write_metadata
from .reader import BagReader, storage_files_in
from .safe_files import create_temp, keep_backup, refuse_links, replace
from .writer import LIBRARY


@dataclass
class RepairReport:
    path: Path
    actions: list[str] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # originals kept as backups

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def _rewrite_mcap(path: Path, keep_original: bool, report: RepairReport) -> None:
    source = McapFile(path)
    tmp = path.with_name(path.name + ".repairing")
    created = False
    try:
        schemas, channels = source.raw_records()
        with create_temp(tmp) as stream:
            created = True
            writer = McapWriter(stream, compression=CompressionType.ZSTD)
            writer.start(profile="ros2", library=LIBRARY)
            schema_ids = {sid: writer.register_schema(s.name, s.encoding, s.data) for sid, s in schemas.items()}
            channel_of_topic: dict[str, int] = {}
            for channel in channels.values():
                if channel.topic not in channel_of_topic:
                    channel_of_topic[channel.topic] = writer.register_channel(
                        channel.topic, channel.message_encoding, schema_ids.get(channel.schema_id, 0),
                        dict(channel.metadata or {}))
            count = 0
            for log_time, topic, data in source.messages(None):
                count += 1
                writer.add_message(channel_of_topic[topic], log_time, bytes(data), log_time, count)
            writer.finish()
        if keep_original:
            report.kept.append(keep_backup(path, ".damaged"))
        replace(tmp, path)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # ours: created exclusively above
        raise
    finally:
        source.close()
    report.actions.append(f"{path.name}: rewrote {count} messages from its complete chunks into a closed MCAP file")


def _recover_sqlite(path: Path, report: RepairReport) -> None:
    journals = [p for p in (path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal")) if p.exists()]
    if not journals:
        return
    try:
        db = sqlite3.connect(path)
        db.execute("SELECT count(*) FROM messages").fetchone()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
    except sqlite3.DatabaseError as err:
        raise BagError(f"{path}: cannot recover the sqlite3 journal ({err})") from err
    report.actions.append(f"{path.name}: recovered the sqlite3 journal ({', '.join(p.name for p in journals)})")


def _metadata_is_consistent(bag: Path, reader: BagReader) -> str:
    """'' when metadata.yaml matches the files, else what disagrees."""
    meta_path = bag / METADATA_FILE
    if not meta_path.is_file():
        return "metadata.yaml is missing"
    try:
        meta = read_metadata(meta_path)
    except BagError as err:
        return str(err)
    if [Path(p).name for p in meta.relative_file_paths] != [p.name for p in reader.files]:
        return f"metadata.yaml lists {meta.relative_file_paths}, the folder holds {[p.name for p in reader.files]}"
    if meta.message_count != reader.message_count:
        return f"metadata.yaml says {meta.message_count} messages, the files hold {reader.message_count}"
    counts = {t.name: t.count for t in reader.topics()}
    for t in meta.topics:
        if counts.get(t.name, 0) != t.message_count:
            return f"metadata.yaml says {t.message_count} messages on {t.name}, the files hold {counts.get(t.name, 0)}"
    return ""


def repair_bag(path: str | Path, keep_originals: bool = True) -> RepairReport:
    """Repair the bag folder at `path` in place; see the module docstring. Raises BagError when
    the bag is damaged beyond what repair can do (not a bag, a file that is not MCAP/sqlite3) or
    the folder cannot be written."""
    try:
        return _repair(Path(path), keep_originals)
    except OSError as err:  # a read-only folder, a full disk: name the file, no traceback
        raise BagError(f"{err.filename or path}: cannot repair ({err.strerror or err})") from err


def _repair(bag: Path, keep_originals: bool) -> RepairReport:
    if not bag.is_dir():
        raise BagError(f"{bag}: repair works on a bag folder (the one holding metadata.yaml and the files)")
    refuse_links(bag, "repair")
    report = RepairReport(bag)
    files = storage_files_in(bag)
    if not files:
        raise BagError(f"{bag}: no .db3 or .mcap files; nothing to repair")
    for f in files:
        if f.suffix == ".mcap":
            probe = McapFile(f)
            broken = probe.needs_repair
            probe.close()
            if broken:
                _rewrite_mcap(f, keep_originals, report)
        elif f.suffix == ".db3":
            _recover_sqlite(f, report)

    # Read the files without trusting metadata.yaml: move it aside while counting.
    meta_path = bag / METADATA_FILE
    with _reader_ignoring_metadata(bag) as reader:
        why = _metadata_is_consistent(bag, reader)
        if not why:
            return report
        topics = [TopicMetadata(t.name, t.msgtype, t.serialization_format, t.offered_qos_profiles, t.type_hash, t.count)
                  for t in reader.topics()]
        entries = [FileEntry(s.path.name, s.start_ns or 0, (s.end_ns or 0) - (s.start_ns or 0), s.message_count)
                   for s in reader.file_summaries]
        document = metadata_document(reader.storage, entries, topics, reader.ros_distro)
    if meta_path.is_file():
        report.kept.append(keep_backup(meta_path, ".bak"))
    write_metadata(bag, document)
    report.actions.append(f"metadata.yaml rebuilt from {len(entries)} file(s), {sum(e.message_count for e in entries)} "
                          f"messages ({why})")
    return report


@contextlib.contextmanager
def _reader_ignoring_metadata(bag: Path):
    """A reader over the storage files of `bag`, whatever metadata.yaml says (or whether it parses)."""
    files = storage_files_in(bag)
    readers = [BagReader(f) for f in files]
    try:
        yield _MergedView(readers)
    finally:
        for r in readers:
            r.close()


class _MergedView:
    """The few BagReader queries repair needs, over several single-file readers."""

    def __init__(self, readers: list[BagReader]) -> None:
        self._readers = readers
        self.file_summaries = [s for r in readers for s in r.file_summaries]
        self.files = [s.path for s in self.file_summaries]
        self.message_count = sum(r.message_count for r in readers)
        kinds = sorted({r.storage for r in readers})
        self.storage = kinds[0] if len(kinds) == 1 else "+".join(kinds)
        self.ros_distro = next((r.ros_distro for r in readers if r.ros_distro), "")

    def topics(self):
        merged: dict = {}
        for r in self._readers:
            for t in r.topics():
                if t.name in merged:
                    known = merged[t.name]
                    merged[t.name] = type(known)(**{**known.__dict__, "count": known.count + t.count})
                else:
                    merged[t.name] = t
        return list(merged.values())
