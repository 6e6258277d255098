"""Policy benchmark: inference time of the default model, and observation-to-chunk latency.

1. select_action of the default architecture (cnn_mlp, 96x96 image, 6 joints of urdf/arm6.urdf,
   K = 10) at 1 and 2 torch threads. The two settings are timed in interleaved blocks within one
   run, so machine load hits them alike.
2. Through policy_node running as its own process (as in a launched graph, default parameters:
   1 torch thread): a probe publishes joint_states then policy/image stamped now, one observation in
   flight at a time, and measures receive time of the chunk minus the image stamp (same host clock).

Usage: .venv/bin/python benchmarks/bench_policy.py [--quick] [--json OUT]
"""
from __future__ import annotations

import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import rclpy  # noqa: E402
import torch  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from sim2real_ros import conversions as cv  # noqa: E402
from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig  # noqa: E402
from sim2real_ros.core.policy.checkpoint import load_checkpoint  # noqa: E402
from sim2real_ros.core.robot.urdf import RobotModel  # noqa: E402
from sim2real_ros.graph import NodeDecl  # noqa: E402
from sim2real_ros.nodes.common import JOINT_STATE_QOS, RELIABLE_LATEST_QOS  # noqa: E402
from sim2real_ros.paths import config_path, urdf_path  # noqa: E402
from sim2real_ros.runtime.launcher import GraphLauncher  # noqa: E402
from sim2real_ros.training.untrained import init_checkpoint  # noqa: E402

DEFAULT_THREADS = 1  # policy_node's num_threads default




def make_checkpoint(directory: Path) -> tuple[Path, list[str]]:
    """An untrained default-architecture checkpoint for urdf/arm6.urdf (the default robot)."""
    joints = RobotModel.from_file(urdf_path()).joint_names
    path = directory / "bench_policy.safetensors"
    init_checkpoint(path, joints, PreprocessConfig.from_yaml(config_path("preprocess.yaml")), seed=0)
    return path, joints


def measure_inference(checkpoint: Path, n: int, thread_counts: tuple[int, ...] = (1, 2)) -> dict[int, dict]:
    """select_action time [ms] per torch thread count, timed in interleaved blocks of 20."""
    previous = torch.get_num_threads()
    policy = load_checkpoint(checkpoint)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (16, policy.spec.image_height, policy.spec.image_width, 3), dtype=np.uint8)
    q = rng.uniform(-1, 1, (16, policy.spec.joint_count))
    times: dict[int, list[float]] = {t: [] for t in thread_counts}
    try:
        for threads in thread_counts:  # warm up each setting
            torch.set_num_threads(threads)
            for i in range(10):
                policy.select_action(images[i % 16], q[i % 16])
        for block in range(max(1, n // 20)):
            for threads in thread_counts:
                torch.set_num_threads(threads)
                for i in range(20):
                    start = time.perf_counter_ns()
                    policy.select_action(images[(block + i) % 16], q[i % 16])
                    times[threads].append((time.perf_counter_ns() - start) / 1e6)
    finally:
        torch.set_num_threads(previous)
    return {t: latency_stats(np.array(v)) for t, v in times.items()}


def measure_node_latency(checkpoint: Path, joints: list[str], n: int, domain_id: int) -> dict:
    """Image publish -> chunk receive [ms] through policy_node as a process, one in flight."""
    env = {"ROS_DOMAIN_ID": str(domain_id), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    params = {"checkpoint": str(checkpoint), "robot_description": str(urdf_path())}
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = Node("bench_policy_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    received = threading.Event()
    latest: dict[str, int] = {}

    def on_chunk(msg: JointTrajectory) -> None:
        latest["stamp"] = cv.stamp_to_ns(msg.header.stamp)
        latest["received"] = time.time_ns()
        received.set()

    node.create_subscription(JointTrajectory, "policy/action_chunk", on_chunk, RELIABLE_LATEST_QOS)
    image_pub = node.create_publisher(Image, "policy/image", RELIABLE_LATEST_QOS)
    joint_pub = node.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (8, 96, 96, 3), dtype=np.uint8)
    latencies: list[float] = []
    lost = 0
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "bench.log"
        launcher = GraphLauncher([NodeDecl("policy_node", "policy_node", params)], env=env, echo=False, log_file=log)
        launcher.start()
        try:
            deadline = time.monotonic() + 90.0
            while (image_pub.get_subscription_count() < 1 or joint_pub.get_subscription_count() < 1
                   or node.count_publishers("policy/action_chunk") < 1):
                if time.monotonic() > deadline or launcher.check():
                    raise RuntimeError(f"policy_node did not come up: {log.read_text() if log.exists() else ''}")
                time.sleep(0.05)
            for i in range(n + 5):  # the first 5 are warm-up
                received.clear()
                stamp = time.time_ns()
                joint_pub.publish(cv.make_joint_state(joints, np.zeros(len(joints)), stamp))
                image_pub.publish(cv.array_to_image(images[i % 8], "rgb8", stamp))
                if not received.wait(2.0) or latest.get("stamp") != stamp:
                    lost += 1
                    continue
                if i >= 5:
                    latencies.append((latest["received"] - stamp) / 1e6)
                time.sleep(0.01)  # ~30 Hz like a camera, and lets the node go idle between frames
        finally:
            launcher.shutdown()
            executor.shutdown(timeout_sec=1.0)
            node.destroy_node()
            rclpy.try_shutdown(context=context)
            spinner.join(timeout=2.0)
    return {"obs_to_chunk_ms": latency_stats(np.array(latencies)), "lost": lost}


def run(quick: bool = False) -> dict:
    domain_id = 101 + random.SystemRandom().randrange(100)  # away from the tests' 1..100
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, joints = make_checkpoint(Path(tmp))
        by_threads = measure_inference(checkpoint, 200 if quick else 1000)
        node = measure_node_latency(checkpoint, joints, 50 if quick else 300, domain_id)
    return {
        "inference_ms": by_threads[DEFAULT_THREADS],
        "inference_ms_by_threads": {str(t): s for t, s in by_threads.items()},
        "inference_ratio_2_vs_1_thread_p50": round(by_threads[2]["p50"] / by_threads[1]["p50"], 3),
        "obs_to_chunk_ms": node["obs_to_chunk_ms"],
        "observations_lost": node["lost"],
        "joints": len(joints),
        "load_average_1min": os.getloadavg()[0],
    }


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
