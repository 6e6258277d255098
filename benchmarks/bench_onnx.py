"""ONNX benchmark: inference time of the shipped policy on torch and on ONNX Runtime, in one run.

The shipped policy (policies/reach_default.pt) is exported to a temporary .onnx file
(`sim2real policy export`), and select_action (image + joints -> (K, n) targets) is timed on both
backends at 1 thread each (policy_node's default), in interleaved blocks of 20 on the same sim-like
inputs, so machine load hits both alike; the load average is reported with the figures.

Usage: .venv/bin/python benchmarks/bench_onnx.py [--quick] [--json OUT]
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.core.onnx_export import export_onnx  # noqa: E402
from sim2real_ros.core.policy_backend import load_policy  # noqa: E402
from sim2real_ros.paths import default_policy_path  # noqa: E402

BLOCK = 20


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
    stats = {name: latency_stats(values) for name, values in times.items()}
    return {
        "inference_ms": stats,
        "ratio_onnxruntime_vs_torch_p50": round(stats["onnxruntime"]["p50"] / stats["torch"]["p50"], 3),
        "ratio_onnxruntime_vs_torch_p99": round(stats["onnxruntime"]["p99"] / stats["torch"]["p99"], 3),
        "max_abs_difference_rad": worst,
        "onnx_bytes": exported["bytes"],
        "threads": 1,
        "load_average_1min_before": round(load_before[0], 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
    }


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
