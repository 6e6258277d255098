"""Read joint position topics from a rosbag2 folder (sqlite3 or MCAP) into JointStreams."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import BagError
from .signals import JointStream, stream_from_messages


def _iter_with_rosbags(path: Path, topics: list[str]) -> Iterator[tuple[str, str, int, Any]]:
    """(topic, msgtype, log_time_ns, msg) straight from `rosbags`, for when the stack's bag reader
    is not available. Bags often store no message definitions; the standard types needed here
    (JointState, Float64MultiArray) are in the default typestore."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS2_HUMBLE)
    try:
        with Reader(path) as reader:
            connections = [c for c in reader.connections if c.topic in topics]
            for connection, log_ns, raw in reader.messages(connections=connections):
                yield connection.topic, connection.msgtype, log_ns, typestore.deserialize_cdr(raw, connection.msgtype)
    except Exception as err:  # noqa: BLE001 - rosbags raises many types; all mean an unreadable bag
        raise BagError(f"{path}: cannot read the bag: {err}") from err


def _iter_messages(path: Path, topics: list[str]) -> Iterator[tuple[str, str, int, Any]]:
    try:
        from ..bags.reader import iter_messages
    except ImportError:
        yield from _iter_with_rosbags(path, topics)
        return
    for item in iter_messages(path, topics=topics):
        yield item.topic, item.msgtype, item.log_time_ns, item.msg


def load_streams(path: str | Path, topics: list[str]) -> dict[str, JointStream]:
    """JointStream per topic (JointState or Float64MultiArray). Raises BagError naming the bag and
    a topic that is missing or has no joint positions."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"{path}: no such bag")
    collected: dict[str, list[tuple[int, Any]]] = {t: [] for t in topics}
    msgtypes: dict[str, str] = {}
    for topic, msgtype, log_ns, msg in _iter_messages(path, topics):
        collected[topic].append((log_ns, msg))
        msgtypes[topic] = msgtype
    streams = {}
    for topic in topics:
        if not collected[topic]:
            raise BagError(f"{path}: topic {topic} has no messages in the bag")
        stream = stream_from_messages(topic, msgtypes[topic], collected[topic])
        if len(stream) == 0:
            raise BagError(f"{path}: topic {topic} ({msgtypes[topic]}) has no joint positions: {stream.drop_reasons}")
        streams[topic] = stream
    return streams
