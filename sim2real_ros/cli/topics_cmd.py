"""`sim2real topics [--duration S]`: which topics the running graph publishes, and at what rate.

The pip-environment stand-in for `ros2 topic list` + `ros2 topic hz`, used by troubleshooting and
by `make demo` to show what the graph produced. Below the table: each node's real-time knobs as its
latched `<node>/realtime` report says (scheduling policy and priority, CPUs, memory lock, refused).
"""
from __future__ import annotations

import argparse
import importlib
import json
import time

import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy


def message_class(type_name: str):
    """'sensor_msgs/msg/Image' -> the sensor_msgs.msg.Image class."""
    package, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def measure_topics(duration_s: float = 3.0, discovery_s: float = 1.5) -> list[dict]:
    """Discover topics for `discovery_s`, then count messages for `duration_s`.

    Returns [{name, type, count, rate_hz}] sorted by name. Subscribes best effort, which matches
    publishers of either reliability, and raw, so nothing is deserialized.
    """
    rows, _ = measure_graph(duration_s, discovery_s)
    return rows


def measure_graph(duration_s: float = 3.0, discovery_s: float = 1.5) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """measure_topics' rows, and {node topic prefix: values of its latched `realtime` report}."""
    from diagnostic_msgs.msg import DiagnosticArray

    from ..conversions import diagnostic_values
    from ..nodes.common import LATCHED_QOS

    owns_context = not rclpy.ok()
    if owns_context:
        rclpy.init()
    node = Node("sim2real_topic_probe")
    counts: dict[str, int] = {}
    types: dict[str, str] = {}
    realtime: dict[str, dict[str, str]] = {}
    try:
        end = time.monotonic() + discovery_s
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
        for name, type_names in node.get_topic_names_and_types():
            if name.endswith("parameter_events") or name.endswith("rosout"):
                continue
            try:
                cls = message_class(type_names[0])
            except (ImportError, AttributeError, ValueError):
                continue
            types[name] = type_names[0]
            counts[name] = 0

            def on_message(_msg, topic=name):
                counts[topic] += 1

            node.create_subscription(cls, name, on_message, qos, raw=True)
            if name.endswith("/realtime") and type_names[0] == "diagnostic_msgs/msg/DiagnosticArray":
                def on_realtime(msg, topic=name):
                    realtime[topic.removesuffix("/realtime")] = diagnostic_values(msg)

                node.create_subscription(DiagnosticArray, name, on_realtime, LATCHED_QOS)
        start = time.monotonic()
        while time.monotonic() - start < duration_s:
            rclpy.spin_once(node, timeout_sec=0.05)
        elapsed = time.monotonic() - start
        # Latched reports come once per subscription: give a slow delivery a moment more.
        wanted = sum(1 for name in counts if name.endswith("/realtime"))
        grace_end = time.monotonic() + 2.0
        while len(realtime) < wanted and time.monotonic() < grace_end:
            rclpy.spin_once(node, timeout_sec=0.05)
    finally:
        node.destroy_node()
        if owns_context:
            rclpy.try_shutdown()
    rows = [
        {"name": n, "type": types[n], "count": counts[n], "rate_hz": round(counts[n] / elapsed, 1)}
        for n in sorted(counts)
    ]
    return rows, dict(sorted(realtime.items()))


def format_realtime(realtime: dict[str, dict[str, str]]) -> str:
    """One line per node: the knobs in force, and what was refused."""
    lines = [f"{'node':<30} {'policy':<7} {'prio':>4} {'CPUs':<10} {'mlock':<6} refused"]
    for name, values in realtime.items():
        lines.append(f"{name:<30} {values.get('sched_policy', '?'):<7} {values.get('sched_priority', '?'):>4} "
                     f"{values.get('cpu_affinity', '?'):<10} {values.get('memory_locked', '?'):<6} "
                     f"{values.get('refused', '') or '-'}")
    return "\n".join(lines)


def format_table(rows: list[dict]) -> str:
    lines = [f"{'topic':<45} {'type':<40} {'msgs':>6} {'rate [Hz]':>10}"]
    for r in rows:
        lines.append(f"{r['name']:<45} {r['type']:<40} {r['count']:>6} {r['rate_hz']:>10.1f}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=3.0, help="measuring window [s]")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    rows, realtime = measure_graph(args.duration)
    if args.json:
        print(json.dumps({"topics": rows, "realtime": realtime}, indent=2))
    else:
        print(format_table(rows))
        if realtime:
            print("\nreal-time knobs (<node>/realtime)")
            print(format_realtime(realtime))
    return 0
