"""Recorder decisions that need no ROS: which discovered topics to record, with which QoS.

The node (nodes/recorder.py) feeds in what graph discovery returns, as plain values.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# rmw enum values (rmw/types.h), as rosbag2 stores them in offered_qos_profiles.
RELIABILITY_RELIABLE, RELIABILITY_BEST_EFFORT = 1, 2
DURABILITY_TRANSIENT_LOCAL, DURABILITY_VOLATILE = 1, 2
# Subscription depth [messages]: what each reader holds while the recorder gets no CPU, or while a
# reliable stream waits for a lost sample's resend (delivery is in order, and Fast DDS's writers
# heartbeat every 3 s by default, so a repair can take that long). At 100 the soak's 100 Hz
# commands lost a second's worth at a time (CI stop 45); 1000 is 10 s at 100 Hz, 5 s at 200 Hz.
# Bounded: a reader keeps at most this many, so a recorder stopped for good holds 1000 messages
# per topic (about 230 MB for a 320x240 RGB camera), not an ever-growing queue.
RECORD_DEPTH = 1000


@dataclass(frozen=True)
class SubscriptionQos:
    """QoS the recorder subscribes with (rmw enum values)."""

    reliability: int
    durability: int
    depth: int = RECORD_DEPTH


def is_hidden(topic: str) -> bool:
    """ROS hides names with a component starting with '_' (e.g. action internals)."""
    return any(part.startswith("_") for part in topic.split("/") if part)


def select_topics(discovered: Iterable[tuple[str, list[str]]], requested: set[str] | None,
                  already: set[str]) -> list[tuple[str, str]]:
    """(topic, type) pairs to start recording now.

    discovered: (fully qualified topic, types) from graph discovery. requested: fully qualified
    names to record, or None for every visible topic. already: topics being recorded (or given up on).
    A topic with several types is recorded with its first type.
    """
    out = []
    for topic, types in discovered:
        if topic in already or not types:
            continue
        if requested is None:
            if is_hidden(topic):
                continue
        elif topic not in requested:
            continue
        out.append((topic, types[0]))
    return out


def adapt_qos(offers: list[tuple[int, int]]) -> SubscriptionQos:
    """Subscription QoS that matches every publisher's (reliability, durability) offer.

    Reliable only if every publisher is reliable (a reliable subscription does not match a
    best-effort publisher); transient local only if every publisher is (so latched topics such as
    supervisor/state and estop deliver their last value to the recorder).
    """
    if not offers:
        return SubscriptionQos(RELIABILITY_RELIABLE, DURABILITY_VOLATILE)
    reliable = all(r == RELIABILITY_RELIABLE for r, _ in offers)
    latched = all(d == DURABILITY_TRANSIENT_LOCAL for _, d in offers)
    return SubscriptionQos(RELIABILITY_RELIABLE if reliable else RELIABILITY_BEST_EFFORT,
                           DURABILITY_TRANSIENT_LOCAL if latched else DURABILITY_VOLATILE)
