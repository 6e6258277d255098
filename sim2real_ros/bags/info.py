"""`sim2real bag info`: what a bag really holds, counted from its files, and what is wrong with it."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .reader import BagReader, TopicInfo


@dataclass
class FileInfo:
    path: Path
    message_count: int
    size_bytes: int
    needs_repair: bool


@dataclass
class BagInfo:
    """Summary of a bag. Counts are the messages actually in the files, not what metadata claims."""

    path: Path
    storage: str
    metadata_version: int | None  # None: no metadata.yaml
    ros_distro: str
    message_count: int
    start_ns: int | None
    end_ns: int | None
    files: list[FileInfo]
    topics: list[TopicInfo]
    problems: list[str] = field(default_factory=list)
    needs_repair: bool = False

    @property
    def duration_s(self) -> float:
        """Time from the first to the last message [s] (0 for an empty bag)."""
        if self.start_ns is None or self.end_ns is None:
            return 0.0
        return (self.end_ns - self.start_ns) * 1e-9

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: storage, duration_s, message_count, topics [{name, type, count, decodable}], ..."""
        return {
            "path": str(self.path),
            "storage": self.storage,
            "metadata_version": self.metadata_version,
            "ros_distro": self.ros_distro,
            "duration_s": self.duration_s,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "message_count": self.message_count,
            "topics": [
                {
                    "name": t.name,
                    "type": t.msgtype,
                    "count": t.count,
                    "decodable": t.decodable,
                    "serialization_format": t.serialization_format,
                    "metadata_count": t.metadata_count,
                    "note": t.note,
                }
                for t in self.topics
            ],
            "files": [
                {"path": str(f.path), "message_count": f.message_count, "size_bytes": f.size_bytes,
                 "needs_repair": f.needs_repair}
                for f in self.files
            ],
            "problems": list(self.problems),
            "needs_repair": self.needs_repair,
        }


def bag_info(path: str | Path, verify_decoding: bool = True) -> BagInfo:
    """Inspect a bag (folder or single file). `verify_decoding` decodes the first message of each
    topic, so `decodable` means "decodes", not only "the type is known". Raises BagError."""
    with BagReader(path) as reader:
        topics = reader.topics()
        if verify_decoding:
            checked = []
            for t in topics:
                problem = reader.check_decoding(t.name) if t.decodable else ""
                if problem:
                    decodable = problem.startswith("stored definition does not match")
                    t = TopicInfo(**{**t.__dict__, "decodable": decodable, "note": problem})
                checked.append(t)
            topics = checked
        problems = list(reader.problems)
        for t in topics:
            if t.metadata_count is not None and t.metadata_count != t.count:
                problems.append(f"{t.name}: metadata.yaml says {t.metadata_count} messages, the files hold {t.count}")
        files = [FileInfo(s.path, s.message_count, s.path.stat().st_size if s.path.exists() else 0, s.needs_repair)
                 for s in reader.file_summaries]
        return BagInfo(
            path=Path(path), storage=reader.storage,
            metadata_version=reader.metadata.version if reader.metadata else None,
            ros_distro=reader.ros_distro, message_count=reader.message_count,
            start_ns=reader.start_ns, end_ns=reader.end_ns, files=files,
            topics=sorted(topics, key=lambda t: t.name), problems=problems, needs_repair=reader.needs_repair,
        )


def _time(ns: int | None) -> str:
    if ns is None:
        return "-"
    stamp = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc)
    return f"{stamp:%Y-%m-%d %H:%M:%S.%f} UTC ({ns // 1_000_000_000}.{ns % 1_000_000_000:09d})"


def format_info(info: BagInfo) -> str:
    """Human-readable report in the spirit of `ros2 bag info`."""
    size = sum(f.size_bytes for f in info.files)
    version = info.metadata_version if info.metadata_version is not None else "none (metadata.yaml missing)"
    lines = [
        f"Bag:              {info.path}",
        f"Files:            {', '.join(f.path.name for f in info.files)}",
        f"Bag size:         {size / 1e6:.2f} MB",
        f"Storage id:       {info.storage}",
        f"Metadata version: {version}",
        f"ROS distro:       {info.ros_distro or 'unknown'}",
        f"Duration:         {info.duration_s:.3f} s",
        f"Start:            {_time(info.start_ns)}",
        f"End:              {_time(info.end_ns)}",
        f"Messages:         {info.message_count}",
        "Topics:",
    ]
    width = max((len(t.name) for t in info.topics), default=0)
    for t in info.topics:
        decode = "decodable" if t.decodable else "NOT decodable"
        note = f"  ({t.note})" if t.note else ""
        lines.append(f"  {t.name:<{width}}  {t.msgtype}  count: {t.count}  {decode}{note}")
    if info.problems:
        lines.append("Problems:")
        lines.extend(f"  - {p}" for p in info.problems)
    if info.needs_repair:
        lines.append(f"This bag was not closed properly; `sim2real bag repair {info.path}` fixes it.")
    return "\n".join(lines)
