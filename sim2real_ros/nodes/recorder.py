"""recorder: record topics of the graph to a crash-safe rosbag2 MCAP bag.

Parameters: output (bag folder; default rosbag2_<date>), topics (empty = every topic, discovered
continuously), storage (mcap | sqlite3), flush_period_s, discovery_period_s, max_file_size_mb,
max_file_duration_s, robot_description (URDF path or XML, default the package's arm; '' = none).

Every bag gets the URDF as `robot_description` (std_msgs/msg/String, offered transient local, as
robot_state_publisher latches it), written just before the first recorded message so it shares the
bag's time base, and once only: a graph's own robot_description publisher is then not recorded
again. Viewers (`sim2real view`, `bag export-foxglove`) draw the arm from it.

Subscriptions are raw (serialized CDR) so recording costs no deserialization, use the QoS the
publishers offer (latched topics with transient local), and each message's receive time is its log
time; the DDS source timestamp (when the publisher sent it) is stored as the MCAP publish time
(sysid uses it for commands that carry no header stamp). No message waits longer than flush_period_s
(plus however late the recorder gets the CPU) before its MCAP chunk is closed and handed to the
operating system (flush_timing), so a recorder killed with SIGKILL, or by the OOM killer, loses at
most the last flush_period_s of what it received. A flush is not an fsync: the data is in the OS
page cache, which survives the recorder process dying but not a power loss or a kernel crash. On
SIGINT/SIGTERM it stops spinning, takes in what the readers already hold, and writes metadata.yaml;
`sim2real bag repair` rebuilds it after a crash.
"""
from __future__ import annotations

import datetime as dt
import importlib
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.expand_topic_name import expand_topic_name
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import serialize_message
from std_msgs.msg import String

from ..bags.topic_selection import adapt_qos, select_topics
from ..bags.writer import BagWriter, qos_profiles_yaml
from ..core.errors import BagError, ConfigError
from ..core.timebase import NS_PER_S
from ..signals import StopRequest
from .common import freeze_startup_objects, now_ns, single_threaded_executor
from .parameters import RECORDER, declare_table


@dataclass(frozen=True)
class RecorderConfig:
    """Validated recorder parameters (no defaults: they are config/parameters/recorder.yaml's)."""

    output: str
    topics: tuple[str, ...]
    storage: str
    flush_period_s: float
    discovery_period_s: float
    max_file_size_mb: float
    max_file_duration_s: float
    source: str = "recorder parameters"

    def __post_init__(self) -> None:
        if self.storage not in ("mcap", "sqlite3"):
            raise ConfigError(self.source, "storage", self.storage, "must be 'mcap' or 'sqlite3'")
        if not self.output:
            raise ConfigError(self.source, "output", self.output, "must name the bag folder to create")
        if Path(self.output).exists():
            raise ConfigError(self.source, "output", self.output, "exists already; a bag is never overwritten")
        for name, value in (("flush_period_s", self.flush_period_s), ("discovery_period_s", self.discovery_period_s)):
            if not 0.0 < value <= 60.0:
                raise ConfigError(self.source, name, value, "must be in (0, 60] seconds")
        for name, value in (("max_file_size_mb", self.max_file_size_mb),
                            ("max_file_duration_s", self.max_file_duration_s)):
            if value < 0.0:
                raise ConfigError(self.source, name, value, "must be >= 0 (0 = never split)")
        if any(not t or not isinstance(t, str) for t in self.topics):
            raise ConfigError(self.source, "topics", list(self.topics), "every entry must be a non-empty topic name")


FLUSH_CHECKS_PER_PERIOD = 4


def flush_timing(flush_period_s: float) -> tuple[int, float]:
    """(the writer's flush_period_ns [ns], the recorder's flush-check period [s]) that keep every
    message's wait for a flush within `flush_period_s` [s].

    The writer flushes at a check once its own period has passed since its last flush. With checks
    every quarter period and the writer's period three quarters of it, a message written at t after
    a flush at t0 <= t is flushed by the first check at or after t0 + 3/4 period, which comes
    before t0 + period <= t + period (a write after a longer pause flushes at once). Checking every
    half period against the full period let a message that came just after a flush wait 1.5 periods.
    """
    check_s = flush_period_s / FLUSH_CHECKS_PER_PERIOD
    return int(round((flush_period_s - check_s) * NS_PER_S)), check_s


def default_output() -> str:
    """rosbag2's default folder name: rosbag2_YYYY_MM_DD-HH_MM_SS."""
    return f"rosbag2_{dt.datetime.now():%Y_%m_%d-%H_%M_%S}"


def message_class(msgtype: str) -> Any:
    """'sensor_msgs/msg/JointState' -> the installed Python message class (ImportError if absent)."""
    package, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


def _duration(d: Any) -> dict[str, int]:
    ns = int(d.nanoseconds)
    return {"sec": ns // NS_PER_S, "nsec": ns % NS_PER_S}


def _qos_dict(qos: QoSProfile) -> dict[str, Any]:
    return {
        "history": int(qos.history), "depth": int(qos.depth), "reliability": int(qos.reliability),
        "durability": int(qos.durability), "deadline": _duration(qos.deadline), "lifespan": _duration(qos.lifespan),
        "liveliness": int(qos.liveliness), "liveliness_lease_duration": _duration(qos.liveliness_lease_duration),
        "avoid_ros_namespace_conventions": bool(qos.avoid_ros_namespace_conventions),
    }


class RecorderNode(Node):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__("recorder", **node_kwargs)
        v = declare_table(self, RECORDER)  # parameters.RECORDER, docs/parameters.md
        output, topics, storage = v["output"], v["topics"], v["storage"]
        flush, discovery = v["flush_period_s"], v["discovery_period_s"]
        max_mb, max_s, description = v["max_file_size_mb"], v["max_file_duration_s"], v["robot_description"]
        self.config = RecorderConfig(
            output=output or default_output(), topics=tuple(t for t in (topics or []) if t), storage=storage,
            flush_period_s=float(flush), discovery_period_s=float(discovery), max_file_size_mb=float(max_mb),
            max_file_duration_s=float(max_s), source=f"node '{self.get_name()}' parameters")
        writer_flush_period_ns, self._flush_check_s = flush_timing(self.config.flush_period_s)
        try:
            self.writer = BagWriter(
                Path(self.config.output), storage=self.config.storage, flush_period_ns=writer_flush_period_ns,
                max_file_bytes=int(self.config.max_file_size_mb * 1e6),
                max_file_duration_ns=int(self.config.max_file_duration_s * NS_PER_S))
        except (BagError, OSError) as err:
            raise ConfigError(self.config.source, "output", self.config.output, str(err)) from err
        self._lock = threading.Lock()
        self._group = MutuallyExclusiveCallbackGroup()
        self._recorded_subs: dict[str, Any] = {}
        self._given_up: set[str] = set()
        self._requested = (
            {expand_topic_name(t, self.get_name(), self.get_namespace()) for t in self.config.topics}
            if self.config.topics else None)
        self.received = 0
        self._closed = False
        self._description: tuple[str, bytes] | None = self._description_message(description)
        self.create_timer(self.config.discovery_period_s, self._discover, callback_group=self._group)
        self.create_timer(self._flush_check_s, self._flush_tick, callback_group=self._group)
        self.create_timer(10.0, self._report, callback_group=self._group)
        self.get_logger().info(
            f"recording {'every topic' if self._requested is None else sorted(self._requested)} "
            f"to {self.config.output} ({self.config.storage}, flush every {self.config.flush_period_s} s)")
        self._discover()

    def _description_message(self, description: str) -> tuple[str, bytes] | None:
        """(topic, CDR bytes) of the robot_description to store, added to the bag now; None for ''."""
        if not description:
            return None
        try:
            text = description if description.lstrip().startswith("<") else Path(description).read_text()
        except OSError as err:
            raise ConfigError(self.config.source, "robot_description", description, f"cannot read: {err}") from err
        topic = expand_topic_name("robot_description", self.get_name(), self.get_namespace())
        offered = qos_profiles_yaml([_qos_dict(QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))])
        self.writer.add_topic(topic, "std_msgs/msg/String", offered_qos_profiles=offered)
        self._given_up.add(topic)  # stored once, by us: a graph's own publisher is not recorded again
        return topic, serialize_message(String(data=text))

    def _write_description(self, log_time_ns: int) -> None:
        """Write the pending robot_description at `log_time_ns` [ns]; call with the lock held."""
        if self._description is not None:
            topic, data = self._description
            self._description = None
            self.writer.write(topic, log_time_ns, data, now_ns=time.monotonic_ns())

    # ------------------------------------------------------------------ discovery
    def _discover(self) -> None:
        discovered = self.get_topic_names_and_types()
        for topic, msgtype in select_topics(discovered, self._requested, set(self._recorded_subs) | self._given_up):
            self._subscribe(topic, msgtype)

    def _subscribe(self, topic: str, msgtype: str) -> None:
        publishers = self.get_publishers_info_by_topic(topic)
        if not publishers:
            return  # only subscribers so far: wait for a publisher to learn its QoS
        try:
            cls = message_class(msgtype)
        except (ImportError, AttributeError, ValueError) as err:
            self._given_up.add(topic)
            self.get_logger().warning(f"not recording {topic}: type {msgtype} is not installed here ({err})")
            return
        offers = [(int(p.qos_profile.reliability), int(p.qos_profile.durability)) for p in publishers]
        chosen = adapt_qos(offers)
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=chosen.depth,
                         reliability=ReliabilityPolicy(chosen.reliability),
                         durability=DurabilityPolicy(chosen.durability))
        offered = qos_profiles_yaml([_qos_dict(p.qos_profile) for p in publishers])
        with self._lock:
            if self._closed:
                return
            self.writer.add_topic(topic, msgtype, offered_qos_profiles=offered)
        # Two positional parameters: rclpy passes the message info (DDS source timestamp) as well.
        self._recorded_subs[topic] = self.create_subscription(
            cls, topic, lambda data, info, t=topic: self._on_message(t, data, info), qos, raw=True,
            callback_group=self._group)
        self.get_logger().info(f"recording {topic} ({msgtype}, {qos.reliability.name.lower()}, "
                               f"{qos.durability.name.lower()})")

    # ------------------------------------------------------------------ writing
    def _on_message(self, topic: str, data: bytes, info: Any = None) -> None:
        received_ns = now_ns(self)  # receive time = log time (sim time under use_sim_time)
        # The publisher's send time (DDS source timestamp, its system clock) as MCAP publish time:
        # commands without a header (Float64MultiArray) get a time free of the receive jitter.
        source = info.get("source_timestamp") if isinstance(info, dict) else None
        publish_ns = int(source) if source else None
        # The publisher's count of this message: a gap between two recorded ones says how many
        # this recorder never got (the soak's step check needs to know, docs/safety.md).
        sequence = info.get("publication_sequence_number") if isinstance(info, dict) else None
        with self._lock:
            if self._closed:
                return
            self._write_description(received_ns)
            self.writer.write(topic, received_ns, data, now_ns=time.monotonic_ns(), publish_time_ns=publish_ns,
                              sequence=int(sequence) if sequence else 0)
            self.received += 1

    def _flush_tick(self) -> None:
        with self._lock:
            if not self._closed:
                self.writer.maybe_flush(time.monotonic_ns())

    def _report(self) -> None:
        self.get_logger().info(f"{self.received} messages on {len(self._recorded_subs)} topics so far")

    def drain(self) -> int:
        """Write every message DDS already delivered but no callback took yet; returns how many.

        Called once spinning has stopped, before close(): on Ctrl-C the last messages of a run (an
        episode's outcome, say) are often still queued in the readers, and stopping must not lose
        what already arrived."""
        taken = 0
        for topic, subscription in list(self._recorded_subs.items()):
            with subscription.handle:
                while (message := subscription.handle.take_message(subscription.msg_type, True)) is not None:
                    self._on_message(topic, message[0], message[1] if len(message) > 1 else None)
                    taken += 1
        return taken

    def close(self) -> None:
        """Finish the bag (MCAP summary, metadata.yaml). Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._write_description(now_ns(self))
            path = self.writer.close()
        self.get_logger().info(f"bag closed: {path} ({self.writer.message_count} messages)")

    def destroy_node(self) -> None:
        self.close()
        super().destroy_node()


def _spin_until_stopped(node: RecorderNode, duration_s: float | None = None) -> None:
    """Spin `node` until SIGINT/SIGTERM/SIGHUP, rclpy shutdown or `duration_s`; then take in what DDS
    already delivered (RecorderNode.drain) while the context is still valid. rclpy's own signal
    handler would shut the context down at once and destroy the subscriptions with those messages."""
    stop = StopRequest()  # not an Event: setting one from a handler can deadlock (signals.py)
    # SIGHUP (its terminal closed) too: the bag must be finished, not cut off (issue 34).
    previous = {sig: signal.signal(sig, stop.handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    executor = single_threaded_executor(node)
    executor.add_node(node)
    freeze_startup_objects()
    deadline = None if duration_s is None else time.monotonic() + duration_s
    try:
        while not stop and rclpy.ok(context=node.context) and (
                deadline is None or time.monotonic() < deadline):
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if rclpy.ok(context=node.context):
        taken = node.drain()
        if taken:
            node.get_logger().info(f"took in {taken} messages still queued at the stop")


def _run_recorder(overrides: list | None, args: list[str] | None, duration_s: float | None = None) -> int:
    """Start rclpy without its signal handlers, record until stopped, finish the bag; exit code."""
    from rclpy.executors import ExternalShutdownException

    from ..core.errors import Sim2RealError

    try:
        from rclpy.signals import SignalHandlerOptions

        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except ImportError:  # an rclpy without the option: its handler stops us (queued messages are lost)
        rclpy.init(args=args)
    node = None
    try:
        node = RecorderNode(parameter_overrides=overrides or [])
        _spin_until_stopped(node, duration_s)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Sim2RealError as err:
        print(f"[ERROR] {err}", file=sys.stderr, flush=True)
        return 2
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


def record(output: str, topics: list[str] | None = None, duration_s: float | None = None,
           storage: str = "mcap", flush_period_s: float = 1.0, args: list[str] | None = None) -> int:
    """Run the recorder in this process until `duration_s` passes or Ctrl-C/SIGTERM; returns an exit code."""
    from rclpy.parameter import Parameter

    overrides = [Parameter("output", value=output), Parameter("storage", value=storage),
                 Parameter("flush_period_s", value=float(flush_period_s))]
    if topics:
        overrides.append(Parameter("topics", value=list(topics)))
    return _run_recorder(overrides, args, duration_s)


def main(args: list[str] | None = None) -> None:
    sys.exit(_run_recorder(None, args))
