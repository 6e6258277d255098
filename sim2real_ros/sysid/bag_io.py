"""Read joint position topics from a rosbag2 folder (sqlite3 or MCAP) into JointStreams."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..bags.reader import iter_messages
from ..core.errors import BagError
from .signals import JointStream, stream_from_messages


def load_streams(path: str | Path, topics: list[str]) -> dict[str, JointStream]:
    """JointStream per topic (JointState or Float64MultiArray), read with the stack's bag reader.
    Raises BagError naming the bag and a topic that is missing or has no joint positions."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"{path}: no such bag")
    collected: dict[str, list[tuple[int, Any]]] = {t: [] for t in topics}
    msgtypes: dict[str, str] = {}
    for item in iter_messages(path, topics=topics):
        collected[item.topic].append((item.log_time_ns, item.msg))
        msgtypes[item.topic] = item.msgtype
    streams = {}
    for topic in topics:
        if not collected[topic]:
            raise BagError(f"{path}: topic {topic} has no decodable messages in the bag")
        stream = stream_from_messages(topic, msgtypes[topic], collected[topic])
        if len(stream) == 0:
            raise BagError(f"{path}: topic {topic} ({msgtypes[topic]}) has no joint positions: {stream.drop_reasons}")
        streams[topic] = stream
    return streams
