"""rosbag2 `metadata.yaml`: read every version (1..9), write the one ROS 2 tools of every distro read.

Reading is lenient about what each version added (v4 `relative_file_paths` only; v5 `files`;
v6 `custom_data`; v8 `type_description_hash`, `ros_distro`; v9 QoS as a list instead of a string),
and strict about what makes the file unusable: the error names the file and the field.

metadata.yaml is untrusted input: it is read only up to MAX_METADATA_BYTES, YAML anchors and
aliases are refused (rosbag2 never writes them, and a few hundred bytes of nested aliases expand
to gigabytes), and every parse failure is a BagError naming the file.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import BagError
from .safe_files import create_temp, replace

METADATA_FILE = "metadata.yaml"
# rosbag2 writes ~0.5 KiB per topic (the 16-topic servo arm bag: 8.7 KiB), so 4 MiB holds thousands
# of topics and parses in about a second; anything larger is not a metadata.yaml.
MAX_METADATA_BYTES = 4 * 2**20  # [bytes]
# Written by `sim2real bag repair` and the recorder: version 8 keeps offered_qos_profiles as a YAML
# string, which every rosbag2 reader from Humble to Kilted parses; version 9 changed it to a list.
WRITE_VERSION = 8


@dataclass
class TopicMetadata:
    name: str
    type: str
    serialization_format: str = "cdr"
    offered_qos_profiles: str = ""
    type_description_hash: str = ""
    message_count: int = 0


@dataclass
class BagMetadata:
    """The fields of metadata.yaml the tools use."""

    path: Path
    version: int
    storage_identifier: str
    relative_file_paths: list[str]
    message_count: int = 0
    starting_time_ns: int = 0
    duration_ns: int = 0
    topics: list[TopicMetadata] = field(default_factory=list)
    compression_format: str = ""
    compression_mode: str = ""
    ros_distro: str = ""


def _qos_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=False).strip()


class AliasError(yaml.YAMLError):
    """A YAML anchor or alias where rosbag2 writes none."""


# libyaml's loader when the yaml package has it (4 MiB in ~1 s instead of ~4 s), else pure Python.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_plain_yaml(text: str) -> Any:
    """The YAML document in `text`, refusing anchors and aliases before anything is built from it.

    One pass over the parser's events first: an alias only becomes expensive when the document is
    built and then walked, so refusing at the event level keeps a billion-laughs file cheap.
    """
    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            raise AliasError(f"YAML anchors and aliases are not allowed (line {line}); rosbag2 writes none")
    return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader, aliases refused above


def _read_text(path: Path, limit: int = MAX_METADATA_BYTES) -> str:
    """The UTF-8 text of `path`, refusing files over `limit` [bytes] without reading them whole."""
    with open(path, "rb") as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise BagError(f"{path}: {path.stat().st_size} bytes, more than the {limit} bytes a metadata.yaml "
                       "may have; `sim2real bag repair` rebuilds it from the files")
    return data.decode("utf-8")


def _count(value: Any, path: Path, field_name: str) -> int:
    """A message count from metadata.yaml: a non-negative integer (0 when absent)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BagError(f"{path}: field '{field_name}' = {_short(value)} is not a message count "
                       "(a non-negative integer); `sim2real bag repair` rebuilds it from the files")
    return value


def _short(value: Any, limit: int = 80) -> str:
    """repr of a value for an error message, cut to `limit` characters."""
    return _one_line(repr(value), limit)


def _one_line(text: str, limit: int) -> str:
    """`text` on one line (an error is one line of CLI output), cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def read_metadata(path: Path) -> BagMetadata:
    """Parse `path` (a metadata.yaml). Raises BagError naming the file and the bad field."""
    try:
        doc = _load_plain_yaml(_read_text(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError) as err:
        # ValueError: an integer of more digits than Python converts; RecursionError: deep nesting.
        raise BagError(f"{path}: unreadable metadata ({_one_line(str(err), 300)}); "
                       "`sim2real bag repair` rebuilds it from the files") from err
    info = doc.get("rosbag2_bagfile_information") if isinstance(doc, dict) else None
    if not isinstance(info, dict):
        raise BagError(f"{path}: no 'rosbag2_bagfile_information' mapping; not rosbag2 metadata "
                       "(`sim2real bag repair` rebuilds it from the files)")

    def get(key: str, kind: type, default: Any) -> Any:
        value = info.get(key, default)
        if value is None:
            return default
        if not isinstance(value, kind):
            raise BagError(f"{path}: field '{key}' = {_short(value)} is not a {kind.__name__}")
        return value

    def nested_int(key: str, inner: str) -> int:
        value = get(key, dict, {})
        number = value.get(inner, 0)
        if isinstance(number, bool) or not isinstance(number, int):
            raise BagError(f"{path}: field '{key}.{inner}' = {_short(number)} is not an integer")
        return number

    topics = []
    for i, entry in enumerate(get("topics_with_message_count", list, [])):
        meta = entry.get("topic_metadata") if isinstance(entry, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not isinstance(meta.get("type"), str):
            raise BagError(f"{path}: topics_with_message_count[{i}] lacks topic_metadata.name/type "
                           f"(strings): {_short(entry)}")
        topics.append(TopicMetadata(
            name=meta["name"], type=meta["type"],
            serialization_format=str(meta.get("serialization_format") or "cdr"),
            offered_qos_profiles=_qos_text(meta.get("offered_qos_profiles")),
            type_description_hash=str(meta.get("type_description_hash") or ""),
            message_count=_count(entry.get("message_count"), path,
                                 f"topics_with_message_count[{i}].message_count"),
        ))
    files = [str(f) for f in get("relative_file_paths", list, [])]
    if not files:
        files = [str(f.get("path")) for f in get("files", list, []) if isinstance(f, dict) and f.get("path")]
    return BagMetadata(
        path=path,
        version=get("version", int, 0),
        storage_identifier=str(get("storage_identifier", str, "")),
        relative_file_paths=files,
        message_count=_count(info.get("message_count"), path, "message_count"),
        starting_time_ns=nested_int("starting_time", "nanoseconds_since_epoch"),
        duration_ns=nested_int("duration", "nanoseconds"),
        topics=topics,
        compression_format=str(get("compression_format", str, "")),
        compression_mode=str(get("compression_mode", str, "")),
        ros_distro=str(get("ros_distro", str, "")),
    )


@dataclass
class FileEntry:
    """One storage file for metadata.yaml's `files` list."""

    path: str
    starting_time_ns: int
    duration_ns: int
    message_count: int


def metadata_document(storage: str, files: list[FileEntry], topics: list[TopicMetadata],
                      ros_distro: str = "") -> dict:
    """The metadata.yaml document (WRITE_VERSION) of a bag made of `files` holding `topics`."""
    starts = [f.starting_time_ns for f in files if f.message_count]
    ends = [f.starting_time_ns + f.duration_ns for f in files if f.message_count]
    start = min(starts) if starts else 0
    duration = (max(ends) - start) if ends else 0
    info: dict[str, Any] = {
        "version": WRITE_VERSION,
        "storage_identifier": storage,
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(f.message_count for f in files),
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": t.name,
                    "type": t.type,
                    "serialization_format": t.serialization_format or "cdr",
                    "offered_qos_profiles": t.offered_qos_profiles,
                    "type_description_hash": t.type_description_hash,
                },
                "message_count": t.message_count,
            }
            for t in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "relative_file_paths": [f.path for f in files],
        "files": [
            {
                "path": f.path,
                "starting_time": {"nanoseconds_since_epoch": f.starting_time_ns},
                "duration": {"nanoseconds": f.duration_ns},
                "message_count": f.message_count,
            }
            for f in files
        ],
        "custom_data": {},
        "ros_distro": ros_distro,
    }
    return {"rosbag2_bagfile_information": info}


def write_metadata(bag_dir: Path, document: dict) -> Path:
    """Write metadata.yaml atomically (a crash leaves the old file or the new one, never half),
    through a temp file created exclusively: no link in the bag folder is ever written through."""
    target = bag_dir / METADATA_FILE
    tmp = bag_dir / (METADATA_FILE + ".tmp")
    text = yaml.safe_dump(document, default_flow_style=False, sort_keys=False).encode("utf-8")
    stream = create_temp(tmp)
    try:
        with stream:
            stream.write(text)
        replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # ours: created exclusively above
        raise
    return target
