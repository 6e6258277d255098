"""ONNX benchmark: inference time of the shipped policy on torch and on ONNX Runtime, in one run.

The shipped policy (policies/reach_default.safetensors) is exported to a temporary .onnx file
(`sim2real policy export`), and select_action (image + joints -> (K, n) targets) is timed on both
backends at 1 thread each (policy_node's default), in interleaved blocks of 20 on the same sim-like
inputs, so machine load hits both alike; the load average is reported with the figures.

Then the node's observation-to-chunk latency on both backends: two policy_node processes (one per
`backend`, each in a namespace of its own, as launched by GraphLauncher) run the same policy, the
checkpoint and its export; a probe publishes joint_states then policy/image stamped now, one
observation in flight at a time, to one node then the other in interleaved rounds, and takes the
receive time of policy/action_chunk minus the image stamp (same host clock). Only the node being
fed works; the other waits idle. The nodes' own obs_to_chunk_ms from ~/diagnostics is reported too.

Usage: .venv/bin/python benchmarks/bench_onnx.py [--quick] [--json OUT]
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

from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.core.policy.backend import load_policy  # noqa: E402
from sim2real_ros.core.policy.onnx_export import export_onnx  # noqa: E402
from sim2real_ros.paths import default_policy_path, urdf_path  # noqa: E402

BLOCK = 20
ROUNDS = 3  # node latency: rounds per backend, interleaved
WARMUP = 5  # observations per node before the measured rounds


def measure_node_latency(files: dict[str, Path], n_per_round: int, tmp: Path) -> dict:
    """Image publish -> chunk receive [ms] through one policy_node process per backend, one in flight."""
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import Image, JointState
    from trajectory_msgs.msg import JointTrajectory

    from sim2real_ros import conversions as cv
    from sim2real_ros.graph import NodeDecl
    from sim2real_ros.nodes.common import JOINT_STATE_QOS, LATCHED_QOS, RELIABLE_LATEST_QOS
    from sim2real_ros.runtime.launcher import GraphLauncher
    from sim2real_ros.runtime.probe import RosProbe, wait_until

    spec = load_policy(files["torch"], num_threads=1).spec
    joints = list(spec.joint_names)
    env = {"ROS_DOMAIN_ID": os.environ.get("ROS_DOMAIN_ID") or str(101 + random.SystemRandom().randrange(100)),
           "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")}
    previous_env = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the probe's context reads the domain from the environment
    launchers = {backend: GraphLauncher(
        [NodeDecl("policy_node", "policy_node", {"checkpoint": str(path), "backend": backend,
                                                 "robot_description": str(urdf_path()),
                                                 "observation_period_s": 0.0})],
        namespace=backend, env=env, echo=False, log_file=tmp / f"{backend}.log") for backend, path in files.items()}
    probe = RosProbe("bench_onnx_probe")
    received = threading.Event()
    latest: dict[str, int] = {}
    diagnostics: dict[str, dict[str, str]] = {}

    def on_chunk(msg: JointTrajectory) -> None:
        latest["received"] = time.time_ns()
        latest["stamp"] = cv.stamp_to_ns(msg.header.stamp)
        received.set()

    def on_diagnostics(backend: str, msg: DiagnosticArray) -> None:
        if msg.status:
            diagnostics[backend] = {kv.key: kv.value for kv in msg.status[0].values}

    pubs = {}
    for backend in files:
        probe.node.create_subscription(JointTrajectory, f"/{backend}/policy/action_chunk", on_chunk,
                                       RELIABLE_LATEST_QOS)
        probe.node.create_subscription(DiagnosticArray, f"/{backend}/policy_node/diagnostics",
                                       lambda m, b=backend: on_diagnostics(b, m), LATCHED_QOS)
        pubs[backend] = (probe.publisher(JointState, f"/{backend}/joint_states", JOINT_STATE_QOS),
                         probe.publisher(Image, f"/{backend}/policy/image", RELIABLE_LATEST_QOS))
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (8, spec.image_height, spec.image_width, 3), dtype=np.uint8)
    latencies: dict[str, list[float]] = {backend: [] for backend in files}
    lost = dict.fromkeys(files, 0)

    def feed(backend: str, count: int, record: bool) -> None:
        joint_pub, image_pub = pubs[backend]
        for i in range(count):
            received.clear()
            stamp = time.time_ns()
            joint_pub.publish(cv.make_joint_state(joints, np.zeros(len(joints)), stamp))
            image_pub.publish(cv.array_to_image(images[i % len(images)], "rgb8", stamp))
            if not received.wait(2.0) or latest.get("stamp") != stamp:
                lost[backend] += int(record)
                continue
            if record:
                latencies[backend].append((latest["received"] - stamp) / 1e6)
            time.sleep(0.02)  # lets the node go idle between frames, as between camera frames

    try:
        for launcher in launchers.values():
            launcher.start()
        for backend, (joint_pub, image_pub) in pubs.items():
            up = wait_until(lambda j=joint_pub, im=image_pub, b=backend: (
                j.get_subscription_count() >= 1 and im.get_subscription_count() >= 1
                and probe.node.count_publishers(f"/{b}/policy/action_chunk") >= 1), 120.0)
            if not up or launchers[backend].check():
                log = tmp / f"{backend}.log"
                raise RuntimeError(f"policy_node ({backend}) did not come up: "
                                   f"{log.read_text() if log.exists() else ''}")
        for backend in files:
            feed(backend, WARMUP, record=False)
        for round_ in range(ROUNDS):
            for backend in (list(files) if round_ % 2 == 0 else list(reversed(files))):
                feed(backend, n_per_round, record=True)
        diagnostics.clear()  # the reports after the last observation: every chunk counted
        wait_until(lambda: len(diagnostics) == len(files), 5.0)
        exited = [e for launcher in launchers.values() for e in launcher.check()]
        if exited:
            raise RuntimeError(f"policy_node exited: {exited}")
    finally:
        probe.close()
        for launcher in launchers.values():
            launcher.shutdown()
        for key, value in previous_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    stats = {backend: latency_stats(values, digits=3) for backend, values in latencies.items()}
    node_stats = {backend: {key: float(diagnostics[backend][f"obs_to_chunk_ms_{key}"]) for key in ("p50", "p99")
                            if f"obs_to_chunk_ms_{key}" in diagnostics.get(backend, {})} for backend in files}
    return {
        "obs_to_chunk_ms": stats,
        "obs_to_chunk_ratio_onnxruntime_vs_torch_p50": round(stats["onnxruntime"]["p50"] / stats["torch"]["p50"], 3),
        "obs_to_chunk_ratio_onnxruntime_vs_torch_p99": round(stats["onnxruntime"]["p99"] / stats["torch"]["p99"], 3),
        "obs_to_chunk_ms_node_diagnostics": node_stats,
        "node_backends": {backend: diagnostics.get(backend, {}).get("backend") for backend in files},
        "observations_lost": lost,
        "rounds_per_backend": ROUNDS,
    }


def run(quick: bool = False) -> dict:
    load_before = os.getloadavg()
    n = 200 if quick else 2000
    with tempfile.TemporaryDirectory(prefix="bench_onnx_") as tmp:
        onnx_path = Path(tmp) / "reach_default.onnx"
        exported = export_onnx(default_policy_path(), onnx_path)
        policies = {"torch": load_policy(default_policy_path(), num_threads=1),
                    "onnxruntime": load_policy(onnx_path, num_threads=1)}
        spec = policies["torch"].spec
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (BLOCK, spec.image_height, spec.image_width, 3), dtype=np.uint8)
        joints = rng.uniform(-0.5, 0.5, (BLOCK, spec.joint_count))
        times: dict[str, list[float]] = {name: [] for name in policies}
        worst = 0.0
        for block in range(n // BLOCK):
            order = list(policies) if block % 2 == 0 else list(reversed(policies))
            for name in order:
                policy = policies[name]
                for i in range(BLOCK):
                    start = time.perf_counter()
                    policy.select_action(images[i], joints[i])
                    times[name].append((time.perf_counter() - start) * 1e3)
        for i in range(BLOCK):
            worst = max(worst, float(np.max(np.abs(policies["onnxruntime"].select_action(images[i], joints[i])
                                                   - policies["torch"].select_action(images[i], joints[i])))))
        load_between = os.getloadavg()
        node = measure_node_latency({"torch": default_policy_path(), "onnxruntime": onnx_path},
                                    30 if quick else 200, Path(tmp))
    stats = {name: latency_stats(values) for name, values in times.items()}
    return {
        "inference_ms": stats,
        "ratio_onnxruntime_vs_torch_p50": round(stats["onnxruntime"]["p50"] / stats["torch"]["p50"], 3),
        "ratio_onnxruntime_vs_torch_p99": round(stats["onnxruntime"]["p99"] / stats["torch"]["p99"], 3),
        "max_abs_difference_rad": worst,
        "onnx_bytes": exported["bytes"],
        "threads": 1,
        **node,
        "load_average_1min_before": round(load_before[0], 2),
        "load_average_1min_before_node": round(load_between[0], 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
    }


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
