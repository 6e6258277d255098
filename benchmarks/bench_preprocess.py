"""Benchmark of observation preprocessing (core/preprocess.py and the camera_preprocessor node).

1. Per frame, 640x480 bgr8 with plumb_bob distortion -> 96x96 rgb8 (config/preprocess.yaml): the
   cached one-remap pipeline against the naive baseline (cv2.undistort, cv2.resize, cvtColor every
   frame). Both are timed interleaved in one run, so machine load hits them alike; the ratio is
   the figure to compare, not the absolute times.
2. Message-in to message-out through the node, running as a process: publish camera/image_raw
   (sensor QoS, as a driver) -> receive policy/image, one frame in flight at a time; and the same
   through a bare relay node, which tells rclpy + DDS cost apart from the node's own work.

Usage: .venv/bin/python benchmarks/bench_preprocess.py [--quick] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from sim2real_ros.core.perception.camera_model import CameraModel  # noqa: E402
from sim2real_ros.core.perception.preprocess import ImagePipeline  # noqa: E402
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig  # noqa: E402
from sim2real_ros.paths import config_path  # noqa: E402

SOURCE = CameraModel(640, 480, 525.0, 525.0, 319.5, 239.5, "plumb_bob", (-0.25, 0.08, 0.001, -0.001, -0.01))


def stats(values_ms: list[float] | np.ndarray) -> dict[str, float]:
    """Median, p99 and spread (interquartile range) [ms] of a list of durations [ms]."""
    v = np.asarray(values_ms, dtype=float)
    if v.size == 0:
        return {"p50": float("nan"), "p99": float("nan"), "iqr": float("nan"), "n": 0}
    q25, q50, q75, q99 = np.percentile(v, [25, 50, 75, 99])
    return {"p50": float(q50), "p99": float(q99), "iqr": float(q75 - q25), "min": float(v.min()), "n": int(v.size)}


def bench_pipeline(frames: int) -> dict[str, Any]:
    config = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    policy = config.policy_camera
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(4)]
    pipeline = ImagePipeline(config, on_warning=lambda _text: None)
    start = time.perf_counter()
    pipeline.process(images[0], "bgr8", SOURCE)  # builds and caches the remap tables
    plan_ms = (time.perf_counter() - start) * 1e3

    def baseline(image: np.ndarray) -> np.ndarray:
        undistorted = cv2.undistort(image, SOURCE.K, SOURCE.D)
        return cv2.cvtColor(cv2.resize(undistorted, (policy.width, policy.height)), cv2.COLOR_BGR2RGB)

    ours, naive = [], []
    for i in range(frames):
        image = images[i % len(images)]
        t0 = time.perf_counter()
        pipeline.process(image, "bgr8", SOURCE)
        t1 = time.perf_counter()
        baseline(image)
        t2 = time.perf_counter()
        ours.append((t1 - t0) * 1e3)
        naive.append((t2 - t1) * 1e3)
    ours_s, naive_s = stats(ours), stats(naive)
    return {
        "preprocess_ms": ours_s,
        "baseline_ms": naive_s,
        "baseline_ratio": naive_s["p50"] / ours_s["p50"],
        "plan_build_ms": plan_ms,
    }


# Fast DDS's default transports lose most 640x480 (921 kB) best-effort images on one host: the
# 0.5 MB shared-memory segment cannot hold one, and UDP fragments overflow the default 208 kB socket
# buffer. Real deployments with full-resolution cameras need a profile like this one
# (FASTDDS_DEFAULT_PROFILES_FILE); the benchmark uses it unless the environment already names one.
LARGE_DATA_PROFILE = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns="http://www.eprosima.com">
  <profiles>
    <transport_descriptors>
      <transport_descriptor>
        <transport_id>shm_large</transport_id>
        <type>SHM</type>
        <segment_size>16777216</segment_size>
        <maxMessageSize>4194304</maxMessageSize>
      </transport_descriptor>
      <transport_descriptor>
        <transport_id>udp_large</transport_id>
        <type>UDPv4</type>
        <sendBufferSize>4194304</sendBufferSize>
        <receiveBufferSize>4194304</receiveBufferSize>
      </transport_descriptor>
    </transport_descriptors>
    <participant profile_name="large_images" is_default_profile="true">
      <rtps>
        <userTransports>
          <transport_id>shm_large</transport_id>
          <transport_id>udp_large</transport_id>
        </userTransports>
        <useBuiltinTransports>false</useBuiltinTransports>
      </rtps>
    </participant>
  </profiles>
</dds>
"""


def _dds_profile() -> str:
    """Name of the Fast DDS profile in use; writes and selects LARGE_DATA_PROFILE when none is set.
    Must run before rclpy creates its first participant (and before the node process starts)."""
    for variable in ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"):
        if os.environ.get(variable):
            return os.environ[variable]
    path = Path(tempfile.mkdtemp(prefix="bench_preprocess_dds_")) / "fastdds_large_images.xml"
    path.write_text(LARGE_DATA_PROFILE)
    os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(path)
    return "benchmark large-image profile (shm segment 16 MB, udp buffers 4 MB)"


# The same hop without the work: a bare rclpy relay (same executor as every node, via run_node) that
# answers each camera image with a constant 96x96 rgb8 image carrying its stamp, on its own topics.
# Frames alternate between it and the node, so both see the same machine load; its latency is what
# rclpy and DDS cost here, the node's latency minus it is what preprocessing costs.
RELAY_SOURCE = """
import sys
import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image
from sim2real_ros import conversions as cv
from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS, SENSOR_QOS, run_node

class Relay(Node):
    def __init__(self):
        super().__init__("bench_relay")
        self.pub = self.create_publisher(Image, "relay/policy_image", RELIABLE_LATEST_QOS)
        self.out = np.zeros((96, 96, 3), np.uint8)
        self.create_subscription(Image, "relay/image_raw", self.on_image, SENSOR_QOS)

    def on_image(self, msg):
        out = cv.array_to_image(self.out, "rgb8", 0, msg.header.frame_id)
        out.header.stamp = msg.header.stamp
        self.pub.publish(out)

sys.exit(run_node(Relay, sys.argv))
"""


def bench_node(frames: int, width: int = 640, height: int = 480, reliable: bool = False,
               large_data_profile: bool = True) -> dict[str, Any]:
    """Latency publish -> receive [ms] through the node and through a bare relay, both separate
    processes, frames alternating between them."""
    # Never the user's own domain: on a robot this would publish policy/image into the live graph.
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("SIM2REAL_BENCH_DOMAIN_ID",
                                                 str(101 + random.SystemRandom().randrange(100)))
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    profile = _dds_profile() if large_data_profile else "fast dds defaults"
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from sensor_msgs.msg import CameraInfo, Image

    from sim2real_ros import conversions as cv
    from sim2real_ros.graph import NodeDecl
    from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS, SENSOR_QOS
    from sim2real_ros.runtime.launcher import GraphLauncher

    received: dict[tuple[str, int], float] = {}
    arrived = threading.Condition()

    def receiver(target: str):
        def on_image(msg: Image) -> None:
            now = time.perf_counter()
            with arrived:
                received[(target, cv.stamp_to_ns(msg.header.stamp))] = now
                arrived.notify_all()
        return on_image

    context = Context()
    rclpy.init(context=context)
    probe = Node("bench_preprocess_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    log = Path(tempfile.mkdtemp(prefix="bench_preprocess_")) / "node.log"
    decl = NodeDecl("camera_preprocessor", "camera_preprocessor", {"diagnostics_period_s": 1.0}, (), ())
    launcher = GraphLauncher([decl], echo=False, log_file=log)
    launcher.start()
    relay_process = subprocess.Popen([sys.executable, "-c", RELAY_SOURCE], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
    latencies: dict[str, list[float]] = {"node": [], "relay": []}
    lost: dict[str, int] = {"node": 0, "relay": 0}
    try:
        driver_qos = RELIABLE_LATEST_QOS if reliable else SENSOR_QOS
        image_pubs = {"node": probe.create_publisher(Image, "camera/image_raw", driver_qos),
                      "relay": probe.create_publisher(Image, "relay/image_raw", driver_qos)}
        info_pub = probe.create_publisher(CameraInfo, "camera/camera_info", SENSOR_QOS)
        probe.create_subscription(Image, "policy/image", receiver("node"), RELIABLE_LATEST_QOS)
        probe.create_subscription(Image, "relay/policy_image", receiver("relay"), RELIABLE_LATEST_QOS)
        diagnostics: list = []
        probe.create_subscription(DiagnosticArray, "camera_preprocessor/diagnostics", diagnostics.append,
                                  RELIABLE_LATEST_QOS)
        deadline = time.monotonic() + 60.0
        while (any(pub.get_subscription_count() < 1 for pub in image_pubs.values())
               or probe.count_publishers("policy/image") < 1 or probe.count_publishers("relay/policy_image") < 1):
            if time.monotonic() > deadline or launcher.check() or relay_process.poll() is not None:
                raise RuntimeError(f"camera_preprocessor or the relay did not come up; see {log}")
            time.sleep(0.05)
        rng = np.random.default_rng(1)
        frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        source = CameraModel(width, height, SOURCE.fx * width / 640, SOURCE.fy * height / 480,
                             (width - 1) / 2, (height - 1) / 2, SOURCE.distortion_model, SOURCE.distortion)
        warmup = 20
        for k in range(warmup + frames):
            stamp = 1_000_000_000 + k
            if k % 30 == 0 or k < warmup:  # drivers repeat camera_info; the first ones may race the image
                info_pub.publish(cv.camera_model_to_info(source, stamp))
            msg = cv.array_to_image(frame, "bgr8", stamp)
            order = ("node", "relay") if k % 2 else ("relay", "node")
            for target in order:
                sent = time.perf_counter()
                image_pubs[target].publish(msg)
                with arrived:
                    got = arrived.wait_for(lambda t=target, s=stamp: (t, s) in received, timeout=1.0)
                if not got:
                    lost[target] += 1
                elif k >= warmup:
                    latencies[target].append((received[(target, stamp)] - sent) * 1e3)
                time.sleep(0.005)  # a gap between frames; latency is per frame, not throughput
        count = len(diagnostics)
        deadline = time.monotonic() + 5.0
        while len(diagnostics) == count and time.monotonic() < deadline:  # one report after the last frame
            time.sleep(0.05)
        node_values = {kv.key: kv.value for kv in diagnostics[-1].status[0].values} if diagnostics else {}
    finally:
        launcher.shutdown()
        relay_process.send_signal(signal.SIGINT)
        try:
            relay_process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            relay_process.kill()
            relay_process.wait()
        executor.shutdown(timeout_sec=1.0)
        spinner.join(timeout=2.0)
        probe.destroy_node()
        rclpy.try_shutdown(context=context)
    node_s, relay_s = stats(latencies["node"]), stats(latencies["relay"])
    return {
        "node_latency_ms": node_s,
        "relay_latency_ms": relay_s,
        "node_overhead_over_relay_ms": node_s["p50"] - relay_s["p50"],
        "node_frames_lost": lost["node"],
        "relay_frames_lost": lost["relay"],
        # Time inside the node's image callback (convert, remap, publish), from its diagnostics.
        "node_callback_ms": {"p50": float(node_values.get("process_ms_p50", "nan")),
                             "p99": float(node_values.get("process_ms_p99", "nan"))},
        "dds_profile": profile,
        "driver_qos": "reliable" if reliable else "best_effort",
    }


def run(quick: bool = False) -> dict[str, Any]:
    """All figures of this area (see module docstring)."""
    result = bench_pipeline(frames=150 if quick else 1000)
    result.update(bench_node(frames=40 if quick else 300))
    result["image"] = "640x480 bgr8 plumb_bob -> 96x96 rgb8"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = run(quick=args.quick)
    for key in ("preprocess_ms", "baseline_ms", "node_latency_ms", "relay_latency_ms"):
        s = result[key]
        print(f"{key:18s} p50 {s['p50']:8.3f}  p99 {s['p99']:8.3f}  iqr {s['iqr']:7.3f}  (n={s['n']})")
    callback = result["node_callback_ms"]
    print(f"node_callback_ms   p50 {callback['p50']:8.3f}  p99 {callback['p99']:8.3f}")
    print(f"node p50 minus bare-relay p50: {result['node_overhead_over_relay_ms']:.3f} ms")
    print(f"baseline_ratio     {result['baseline_ratio']:.1f}x   plan build {result['plan_build_ms']:.1f} ms   "
          f"node frames lost {result['node_frames_lost']}   dds: {result['dds_profile']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
