"""Read joint position topics from a rosbag2 folder (sqlite3 or MCAP) into JointStreams.

Messages without a header (Float64MultiArray commands) get the DDS source timestamp as their stamp
when the recorder stored it as the MCAP publish time (`sim2real record` does): the time the
publisher sent the command, free of the recorder's receive jitter. Whether it is used is decided
like any stamp (signals.choose_time_source: on the same clock as the other stream, near the log time).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..bags.reader import iter_messages, publish_times
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
    unstamped = [t for t, s in streams.items() if s.stamp_ns is None]
    if unstamped:
        for topic, pairs in publish_times(path, unstamped).items():
            streams[topic] = with_publish_stamps(streams[topic], pairs)
    return streams


def with_publish_stamps(stream: JointStream, pairs: np.ndarray) -> JointStream:
    """`stream` with stamp_ns = the publish time of each message ((K, 2) (log, publish) [ns] pairs),
    when the writer stored real publish times (not a copy of the log time) for every message."""
    if len(pairs) == 0 or np.all(pairs[:, 0] == pairs[:, 1]):
        return stream
    index = np.searchsorted(pairs[:, 0], stream.log_ns)
    index = np.clip(index, 0, len(pairs) - 1)
    if not np.all(pairs[index, 0] == stream.log_ns):
        return stream  # not every message found: do not guess
    return replace(stream, stamp_ns=pairs[index, 1].copy(), stamps_from="publish")
