"""rosbag2 `metadata.yaml`: read every version (1..9), write the one ROS 2 tools of every distro read.

Reading is lenient about what each version added (v4 `relative_file_paths` only; v5 `files`;
v6 `custom_data`; v8 `type_description_hash`, `ros_distro`; v9 QoS as a list instead of a string),
and strict about what makes the file unusable: the error names the file and the field.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import BagError

METADATA_FILE = "metadata.yaml"
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


def read_metadata(path: Path) -> BagMetadata:
    """Parse `path` (a metadata.yaml). Raises BagError naming the file and the bad field."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise BagError(
            f"{path}: unreadable metadata ({err}); `sim2real bag repair` rebuilds it from the files") from err
    info = doc.get("rosbag2_bagfile_information") if isinstance(doc, dict) else None
    if not isinstance(info, dict):
        raise BagError(f"{path}: no 'rosbag2_bagfile_information' mapping; not rosbag2 metadata "
                       "(`sim2real bag repair` rebuilds it from the files)")

    def get(key: str, kind: type, default: Any) -> Any:
        value = info.get(key, default)
        if value is None:
            return default
        if not isinstance(value, kind):
            raise BagError(f"{path}: field '{key}' = {value!r} is not a {kind.__name__}")
        return value

    def nested_int(key: str, inner: str) -> int:
        value = get(key, dict, {})
        number = value.get(inner, 0)
        if not isinstance(number, int):
            raise BagError(f"{path}: field '{key}.{inner}' = {number!r} is not an integer")
        return number

    topics = []
    for i, entry in enumerate(get("topics_with_message_count", list, [])):
        meta = entry.get("topic_metadata") if isinstance(entry, dict) else None
        if not isinstance(meta, dict) or "name" not in meta or "type" not in meta:
            raise BagError(f"{path}: topics_with_message_count[{i}] lacks topic_metadata.name/type: {entry!r}")
        topics.append(TopicMetadata(
            name=str(meta["name"]), type=str(meta["type"]),
            serialization_format=str(meta.get("serialization_format") or "cdr"),
            offered_qos_profiles=_qos_text(meta.get("offered_qos_profiles")),
            type_description_hash=str(meta.get("type_description_hash") or ""),
            message_count=int(entry.get("message_count") or 0),
        ))
    files = [str(f) for f in get("relative_file_paths", list, [])]
    if not files:
        files = [str(f.get("path")) for f in get("files", list, []) if isinstance(f, dict) and f.get("path")]
    return BagMetadata(
        path=path,
        version=get("version", int, 0),
        storage_identifier=str(get("storage_identifier", str, "")),
        relative_file_paths=files,
        message_count=get("message_count", int, 0),
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
    """Write metadata.yaml atomically (a crash leaves the old file or the new one, never half)."""
    target = bag_dir / METADATA_FILE
    tmp = target.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(document, default_flow_style=False, sort_keys=False), encoding="utf-8")
    tmp.replace(target)
    return target
