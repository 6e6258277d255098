"""A small `ros2 bag play`: recorded messages published with their original timing, and `clock`.

Messages go out as the recorded CDR bytes (rclpy publishes serialized bytes as they are), so
nothing is lost or changed by a decode/encode round trip. Time: the bag's log times, converted to
the stamps' clock when the recorder ran on another one; `clock` carries that time so use_sim_time
nodes follow the bag, at `rate` times the recorded speed.
"""
from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile
from rosgraph_msgs.msg import Clock

from ..conversions import ns_to_stamp
from ..core.timebase import NS_PER_S
from ..episodes.recording import ClockOffset
from ..nodes.common import CLOCK_QOS
from ..topics import CLOCK

# Wall time between checks of the stop event while waiting for the next message [s].
_WAIT_SLICE_S = 0.05


def message_class(msgtype: str) -> Any:
    """'sensor_msgs/msg/Image' -> the installed message class."""
    package, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


@dataclass(frozen=True)
class PlayedTopic:
    """A bag topic and where it goes: the graph's topic name, its type and the publisher QoS."""

    bag_topic: str
    graph_topic: str
    msgtype: str
    qos: QoSProfile


class BagPlayer:
    """Publishes `topics` of a bag on `node`, paced to wall time, with `clock` from the bag time.

    rate: playback speed (1.0 = as recorded). clock_period_ns: bag time between clock messages.
    """

    def __init__(self, node: Node, topics: list[PlayedTopic], clock: ClockOffset, rate: float = 1.0,
                 clock_period_ns: int = 10_000_000) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.node = node
        self.clock = clock
        self.rate = rate
        self.clock_period_ns = int(clock_period_ns)
        self.topics = {t.bag_topic: t for t in topics}
        self.publishers = {t.bag_topic: node.create_publisher(message_class(t.msgtype), t.graph_topic, t.qos)
                           for t in topics}
        self.clock_publisher = node.create_publisher(Clock, CLOCK.name, CLOCK_QOS)
        self.published: dict[str, int] = {t.bag_topic: 0 for t in topics}
        self.clock_messages = 0
        self.bag_time_ns: int | None = None
        self.lag_s = 0.0  # largest wall-time lag behind the schedule [s]

    def subscription_counts(self) -> dict[str, int]:
        """Subscribers matched per graph topic (and 'clock')."""
        counts = {t.graph_topic: self.publishers[b].get_subscription_count() for b, t in self.topics.items()}
        counts["clock"] = self.clock_publisher.get_subscription_count()
        return counts

    def other_publishers(self) -> dict[str, int]:
        """Publishers other than this player on the played topics: a live graph would mix with the bag."""
        out = {}
        for topic in self.topics.values():
            count = self.node.count_publishers(topic.graph_topic) - 1
            if count > 0:
                out[topic.graph_topic] = count
        return out

    def publish_clock(self, bag_ns: int) -> None:
        self.clock_publisher.publish(Clock(clock=ns_to_stamp(bag_ns)))
        self.clock_messages += 1
        self.bag_time_ns = bag_ns

    def play(self, messages: Iterable[tuple[int, str, bytes | memoryview]], stop: threading.Event,
             end_extra_ns: int = 0, on_message: Callable[[int], None] | None = None) -> None:
        """Publish (log time [ns], bag topic, CDR bytes) in order, paced; then play `end_extra_ns` more
        of bag time (clock only) so the graph finishes its last observations."""
        start_wall = start_bag = None
        next_tick = None
        last_bag = None
        for log_ns, topic, data in messages:
            if stop.is_set():
                return
            bag_ns = self.clock.to_stamp_time(log_ns)
            if start_bag is None:
                start_wall, start_bag, next_tick = time.monotonic(), bag_ns, bag_ns
                self.publish_clock(bag_ns)
            next_tick = self._tick_until(bag_ns, next_tick, start_wall, start_bag, stop)
            self.publishers[topic].publish(bytes(data))
            self.published[topic] += 1
            last_bag = bag_ns
            if on_message is not None:
                on_message(bag_ns)
        if last_bag is not None and end_extra_ns > 0:
            self._tick_until(last_bag + end_extra_ns, next_tick, start_wall, start_bag, stop)

    def _wall_for(self, bag_ns: int, start_wall: float, start_bag: int) -> float:
        return start_wall + (bag_ns - start_bag) / NS_PER_S / self.rate

    def _sleep_until(self, wall: float, stop: threading.Event) -> None:
        while not stop.is_set():
            remaining = wall - time.monotonic()
            if remaining <= 0:
                self.lag_s = max(self.lag_s, -remaining)
                return
            stop.wait(min(remaining, _WAIT_SLICE_S))

    def _tick_until(self, bag_ns: int, next_tick: int, start_wall: float, start_bag: int,
                    stop: threading.Event) -> int:
        """Publish clock ticks up to `bag_ns`, each at its wall time; wait until `bag_ns`'s wall time."""
        while next_tick <= bag_ns and not stop.is_set():
            self._sleep_until(self._wall_for(next_tick, start_wall, start_bag), stop)
            self.publish_clock(next_tick)
            next_tick += self.clock_period_ns
        self._sleep_until(self._wall_for(bag_ns, start_wall, start_bag), stop)
        return next_tick
