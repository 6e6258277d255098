"""System identification benchmark: time to estimate actuation latency, and its accuracy.

Usage: .venv/bin/python benchmarks/bench_sysid.py [--quick] [--json OUT]

Figures: reading the real servo-arm bag, estimating on it, estimating on a 6-joint 10-minute
synthetic recording (command 50 Hz, state 500 Hz, known delays), and the estimation error there.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from sim2real_ros.benchmarking import bench_main  # noqa: E402
from sim2real_ros.sysid.bag_io import load_streams  # noqa: E402
from sim2real_ros.sysid.latency import estimate_latency  # noqa: E402
from sim2real_ros.sysid.signals import JointStream  # noqa: E402

REAL_BAG = REPO_ROOT.parent / "shared" / "data" / "bags" / "real_servo_arm_a"


def _timed(fn, trials: int) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(trials):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def _stats(times: list[float]) -> dict[str, float]:
    ms = np.array(times) * 1e3
    return {"median_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)),
            "spread_ms": float(ms.max() - ms.min())}


def _synthetic(duration_s: float, seed: int = 0) -> tuple[JointStream, JointStream, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 6
    delays = np.linspace(0.01, 0.5, n)
    tc = np.arange(0, duration_s, 1 / 50)
    edges = np.cumsum(rng.uniform(0.4, 2.0, (int(duration_s), n)), axis=0)
    levels = rng.uniform(-0.5, 0.5, (int(duration_s) + 1, n))
    xc = np.stack([levels[np.searchsorted(edges[:, j], tc), j] for j in range(n)], axis=1)
    tm = np.arange(0.001, duration_s, 1 / 500)
    xm = np.stack(
        [xc[np.clip(np.searchsorted(tc, tm - d, side="right") - 1, 0, None), j] for j, d in enumerate(delays)], axis=1
    ) + rng.normal(0, 0.002, (len(tm), n))
    ns_c, ns_m = (tc * 1e9).astype(np.int64) + 10**18, (tm * 1e9).astype(np.int64) + 10**18
    names = tuple(f"j{i}" for i in range(n))
    return (JointStream("cmd", "x", ns_c, ns_c, xc, names), JointStream("state", "x", ns_m, ns_m, xm, names), delays)


def run(quick: bool = False) -> dict:
    trials = 3 if quick else 10
    topics = ["/servo/in/state", "/servo/out/state"]
    read_times, streams = _timed(lambda: load_streams(REAL_BAG, topics), max(2, trials // 3))
    est_times, report = _timed(lambda: estimate_latency(streams[topics[0]], streams[topics[1]]), trials)
    command, state, delays = _synthetic(120.0 if quick else 600.0)
    syn_times, syn_report = _timed(lambda: estimate_latency(command, state), max(2, trials // 3))
    errors = np.array([j.latency_s for j in syn_report.joints]) - delays
    return {
        "real_bag_read": _stats(read_times),
        "real_bag_estimate": _stats(est_times),
        "real_bag_latency_s": report.latency_s,
        "real_bag_confidence": report.confidence,
        "synthetic_estimate": _stats(syn_times),
        "synthetic_duration_s": float(command.log_ns[-1] - command.log_ns[0]) / 1e9,
        "synthetic_abs_error_ms_max": float(np.abs(errors).max() * 1e3),
        "synthetic_abs_error_ms_median": float(np.median(np.abs(errors)) * 1e3),
    }


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
