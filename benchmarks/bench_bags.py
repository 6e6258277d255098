"""Bag benchmark: reading + decoding speed, and the recorder's CPU use while recording.

Usage: .venv/bin/python benchmarks/bench_bags.py [--quick] [--json OUT]

The stream is what the policy graph produces: 320x240 rgb8 images at 30 Hz and 6-joint joint
states at 100 Hz. Reading: a bag of that stream is written to a temp dir (MCAP, zstd chunks, as
the recorder writes it; and sqlite3), then read and decoded several times; figures are medians
over repetitions with their spread (min..max), and the p99 of the per-message read+decode time.
Recording: the recorder runs as its own process on an isolated DDS domain while a probe node in
this process publishes the stream; its CPU use is its CPU time (from /proc) over the wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402

from sim2real_ros.bags import BagReader  # noqa: E402
from sim2real_ros.bags.writer import BagWriter  # noqa: E402
from sim2real_ros.conversions import array_to_image, ns_to_stamp  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
NS = 1_000_000_000
IMAGE_HZ, JOINT_HZ = 30, 100
HEIGHT, WIDTH = 240, 320


def _image(i: int, t_ns: int, rng: np.random.Generator) -> Image:
    # A textured scene plus sensor noise: compresses like a camera image, not like a flat colour.
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = ((x + 2 * i) % 64 * 3 + (y % 32) * 2).astype(np.uint8)
    pixels = np.repeat(base[:, :, None], 3, axis=2) + rng.integers(0, 8, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    return array_to_image(pixels, "rgb8", t_ns, "camera")


def _joints(i: int, t_ns: int) -> JointState:
    msg = JointState(name=[f"joint{k}" for k in range(1, 7)], position=[0.001 * i * k for k in range(1, 7)])
    msg.header.stamp = ns_to_stamp(t_ns)
    return msg


def stream(duration_s: float, t0: int = 1_700_000_000 * NS) -> list[tuple[int, str, bytes]]:
    """(log time [ns], topic, CDR) of the image + joint state stream, in time order."""
    rng = np.random.default_rng(0)
    events = [(t0 + i * NS // IMAGE_HZ, "/camera/image_raw", serialize_message(_image(i, t0 + i * NS // IMAGE_HZ, rng)))
              for i in range(int(duration_s * IMAGE_HZ))]
    events += [(t0 + i * NS // JOINT_HZ, "/joint_states", serialize_message(_joints(i, t0 + i * NS // JOINT_HZ)))
               for i in range(int(duration_s * JOINT_HZ))]
    return sorted(events)


def write_bag(path: Path, events: list[tuple[int, str, bytes]], storage: str) -> Path:
    with BagWriter(path, storage=storage) as writer:
        writer.add_topic("/camera/image_raw", "sensor_msgs/msg/Image")
        writer.add_topic("/joint_states", "sensor_msgs/msg/JointState")
        for t, topic, data in events:
            writer.write(topic, t, data)
    return path


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(float(np.median(values)), 1), "min": round(float(np.min(values)), 1),
            "max": round(float(np.max(values)), 1)}


def measure_read(bag: Path, repetitions: int) -> dict:
    msgs_per_s, mb_per_s, images_per_s, per_message_us = [], [], [], []
    for _ in range(repetitions):
        with BagReader(bag) as reader:
            count, size = 0, 0
            start = last = time.perf_counter()
            for m in reader.messages():
                count += 1
                size += len(m.data)
                now = time.perf_counter()
                per_message_us.append((now - last) * 1e6)
                last = now
            elapsed = time.perf_counter() - start
        msgs_per_s.append(count / elapsed)
        mb_per_s.append(size / 1e6 / elapsed)
        with BagReader(bag) as reader:  # the replay evaluator's case: images only
            start = time.perf_counter()
            n_images = sum(1 for _ in reader.messages(["/camera/image_raw"]))
            images_per_s.append(n_images / (time.perf_counter() - start))
    return {
        "msgs_per_s": _spread(msgs_per_s), "mb_per_s": _spread(mb_per_s), "images_per_s": _spread(images_per_s),
        "per_message_us": {"p50": round(float(np.percentile(per_message_us, 50)), 1),
                           "p99": round(float(np.percentile(per_message_us, 99)), 1)},
        "messages": count, "bytes": size,
    }


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def measure_recorder(events: list[tuple[int, str, bytes]], duration_s: float, workdir: Path) -> dict:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from sim2real_ros.graph import NodeDecl
    from sim2real_ros.nodes.common import JOINT_STATE_QOS, SENSOR_QOS
    from sim2real_ros.runtime.launcher import GraphLauncher

    domain_id = 101 + random.SystemRandom().randrange(100)  # away from the tests' 1..100
    env = {"ROS_DOMAIN_ID": str(domain_id), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    bag = workdir / "recorded"
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = Node("bench_bags_publisher", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    images = node.create_publisher(Image, "camera/image_raw", SENSOR_QOS)
    joints = node.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
    rng = np.random.default_rng(1)
    frames = [_image(i, 0, rng) for i in range(10)]
    params = {"output": str(bag), "topics": ["camera/image_raw", "joint_states"]}
    launcher = GraphLauncher([NodeDecl("recorder", "recorder", params)], env=env, echo=False,
                             log_file=workdir / "recorder.log")
    launcher.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (images.get_subscription_count() < 1
                                               or joints.get_subscription_count() < 1):
            executor.spin_once(timeout_sec=0.05)
        pid = launcher.nodes[0].process.pid
        cpu0, wall0 = _process_cpu_s(pid), time.monotonic()
        sent = 0
        next_image = next_joint = wall0
        while time.monotonic() - wall0 < duration_s:
            now = time.monotonic()
            if now >= next_image:
                frame = frames[sent % len(frames)]
                frame.header.stamp = ns_to_stamp(time.time_ns())
                images.publish(frame)
                next_image += 1 / IMAGE_HZ
                sent += 1
            if now >= next_joint:
                joints.publish(_joints(sent, time.time_ns()))
                next_joint += 1 / JOINT_HZ
                sent += 1
            time.sleep(max(0.0, min(next_image, next_joint) - time.monotonic()))
        cpu1, wall1 = _process_cpu_s(pid), time.monotonic()
    finally:
        launcher.shutdown()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    with BagReader(bag) as reader:
        recorded = reader.message_count
    return {"cpu_percent_of_one_core": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 1), "published": sent,
            "recorded": recorded, "duration_s": round(wall1 - wall0, 2)}


def run(quick: bool = False) -> dict:
    duration_s = 3.0 if quick else 10.0
    repetitions = 3 if quick else 5
    events = stream(duration_s)
    with tempfile.TemporaryDirectory(prefix="bench_bags_") as tmp:
        workdir = Path(tmp)
        mcap = measure_read(write_bag(workdir / "mcap_bag", events, "mcap"), repetitions)
        sqlite = measure_read(write_bag(workdir / "sqlite_bag", events, "sqlite3"), repetitions)
        recorder = measure_recorder(events, 3.0 if quick else 8.0, workdir)
    return {
        "stream": f"{WIDTH}x{HEIGHT} rgb8 at {IMAGE_HZ} Hz + JointState at {JOINT_HZ} Hz, {duration_s} s",
        "read_msgs_per_s": mcap["msgs_per_s"]["median"],
        "read_mb_per_s": mcap["mb_per_s"]["median"],
        "read_images_per_s": mcap["images_per_s"]["median"],
        "mcap": mcap, "sqlite3": sqlite, "recorder": recorder,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter stream, fewer repetitions")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    result = run(quick=args.quick)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
