"""Cut a session bag into one bag per episode (teleop recordings: the episodes can be held out one by one).

Stamped messages are placed by their header stamp (read through our bag reader's deserialization,
never by parsing CDR by hand), unstamped ones (robot commands) by their log time less the
recorder's logging delay. Each episode's bag starts with the last message of each latched topic
(CARRIED_TOPICS) from before it, re-logged at the boundary.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..bags import BagReader
from ..bags.writer import BagWriter
from ..conversions import stamp_to_ns
from ..topics import CAMERA_INFO, JOINT_STATES, POLICY_CAMERA_INFO, SIM_TARGET, SUPERVISOR_STATE

# Topics whose last message before an episode is carried into that episode's bag (latched state).
CARRIED_TOPICS = (SUPERVISOR_STATE.absolute, SIM_TARGET.absolute, CAMERA_INFO.absolute, POLICY_CAMERA_INFO.absolute)


def split_by_episode(session_bag: Path, out_dir: Path, start_ns: int, outcome_stamps_ns: list[int]) -> list[Path]:
    """Cut a session bag into one bag per episode: episode i holds the messages stamped (header
    stamp, else log time) in (boundary i, boundary i+1] (boundaries: start_ns, then each outcome's
    stamp), preceded by the last message before it of each latched topic (CARRIED_TOPICS),
    re-logged at the boundary."""
    boundaries = [int(start_ns), *[int(s) for s in outcome_stamps_ns]]
    bags = [out_dir / f"episode_{i:03d}" for i in range(len(outcome_stamps_ns))]
    writers = [BagWriter(path) for path in bags]
    last: dict[str, tuple[str, bytes]] = {}
    try:
        with BagReader(session_bag) as reader:
            types = reader.topic_types()
            delay_ns = recorder_delay_ns(reader)
            for writer in writers:
                for topic, msgtype in types.items():
                    writer.add_topic(topic, msgtype)
            started: set[int] = set()
            for message in reader.messages(skip_undecodable=False):
                log_ns, topic, data = message.log_time_ns, message.topic, message.data
                # Messages arrive at the recorder late (an image logged after the reset may have been
                # captured before it; an outcome is logged after the episode it ends): stamped ones
                # are placed by their stamp.
                # Unstamped ones (robot commands) by their log time less the recorder's delay.
                when = header_stamp_ns(message.msg) or log_ns - delay_ns
                index = int(np.searchsorted(boundaries, when, side="left")) - 1
                if index >= len(writers):
                    continue
                if index >= 0 and index not in started:
                    started.add(index)
                    for carried, payload in last.values():
                        writers[index].write(carried, boundaries[index], payload)
                if topic in CARRIED_TOPICS:
                    last[topic] = (topic, bytes(data))
                if index >= 0:
                    writers[index].write(topic, log_ns, data)
    finally:
        for writer in writers:
            writer.close()
    return bags


def recorder_delay_ns(reader: BagReader, topic: str = JOINT_STATES.absolute) -> int:
    """Median (log time - header stamp) of `topic` [ns]: how late the recorder logs what it hears."""
    if topic not in reader.topic_types():
        return 0
    delays = [m.log_time_ns - header_stamp_ns(m.msg) for m in reader.messages([topic])]
    return int(np.median(delays)) if delays else 0


def header_stamp_ns(msg) -> int:
    """header.stamp [ns] of a deserialized message (0 for a message without a header, or None: a
    type the reader cannot decode)."""
    header = getattr(msg, "header", None)
    stamp = getattr(header, "stamp", None)
    return 0 if stamp is None else stamp_to_ns(stamp)
