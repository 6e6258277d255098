"""Actuator node benchmark: timer period at 100 and 500 Hz, CPU use, chunk sampling and core costs.

Usage: .venv/bin/python benchmarks/bench_actuator.py [--quick] [--json OUT]

The node runs as its own process (as in a launched graph) on an isolated DDS domain; a probe node
in this process plays the policy (a chunk every 100 ms, observation 30 ms old) and records every
command. Periods are the differences of the command stamps (the node's tick times); CPU use is the
node process's CPU time (user + system, from /proc) over the wall time of the measurement.
Core costs (no ROS): one ActuatorCore.tick with the latency history being recorded [us], and one
latency estimate over the default 4 s window [ms] (it runs in the node's I/O callback group, ~1 Hz,
so it is how long joint states and chunks can queue behind it).
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
from rclpy.context import Context  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from sim2real_ros import conversions as cv  # noqa: E402
from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.core.control.actuator import ActuatorConfig, ActuatorCore  # noqa: E402
from sim2real_ros.core.control.chunk_buffer import ChunkBuffer, ChunkBufferConfig  # noqa: E402
from sim2real_ros.graph import NodeDecl  # noqa: E402
from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS  # noqa: E402
from sim2real_ros.runtime.launcher import GraphLauncher  # noqa: E402

JOINTS = [f"joint{i}" for i in range(1, 7)]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")




def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime (fields 14, 15)


def _chunk(stamp_ns: int, duration_s: float = 0.5, dt: float = 0.02) -> JointTrajectory:
    times = np.arange(0.0, duration_s + 1e-9, dt)
    t_abs = stamp_ns / 1e9 + times
    positions = 0.3 * np.sin(2 * np.pi * 0.5 * t_abs[:, None] + np.arange(len(JOINTS))[None, :])
    return cv.chunk_to_trajectory(cv.ActionChunk(tuple(JOINTS), stamp_ns, times, positions))


def measure_rate(rate_hz: float, duration_s: float, domain_id: int) -> dict:
    """Run the node at `rate_hz` for `duration_s` [s] of commanding; return period and CPU figures."""
    env = {"ROS_DOMAIN_ID": str(domain_id), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    params = {"joints": JOINTS, "control_rate_hz": float(rate_hz), "actuation_latency_s": 0.05}
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = Node("bench_actuator_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stamps: list[int] = []
    node.create_subscription(JointState, "command/policy", lambda m: stamps.append(cv.stamp_to_ns(m.header.stamp)),
                             QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    chunk_pub = node.create_publisher(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    with tempfile.TemporaryDirectory() as tmp:
        launcher = GraphLauncher([NodeDecl("actuator_node", "actuator_node", params)], env=env, echo=False,
                                 log_file=Path(tmp) / "bench.log")
        launcher.start()
        try:
            deadline = time.monotonic() + 60.0
            while chunk_pub.get_subscription_count() < 1 or node.count_publishers("command/policy") < 1:
                if time.monotonic() > deadline or launcher.check():
                    raise RuntimeError(f"actuator_node did not come up: {(Path(tmp) / 'bench.log').read_text()}")
                time.sleep(0.05)
            pid = launcher.nodes[0].process.pid
            # Warm up for 1 s of commanding, then measure.
            warmup_end = time.monotonic() + 1.0
            measure_start = None
            cpu_start = wall_start = 0.0
            end = warmup_end + duration_s
            next_chunk = time.monotonic()
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_chunk:
                    chunk_pub.publish(_chunk(time.time_ns() - 30_000_000))
                    next_chunk += 0.1
                if measure_start is None and now >= warmup_end:
                    measure_start = len(stamps)
                    cpu_start, wall_start = _process_cpu_s(pid), time.monotonic()
                time.sleep(0.005)
            cpu_s, wall_s = _process_cpu_s(pid) - cpu_start, time.monotonic() - wall_start
        finally:
            launcher.shutdown()
            executor.shutdown(timeout_sec=1.0)
            node.destroy_node()
            rclpy.try_shutdown(context=context)
            spinner.join(timeout=2.0)
    measured = np.array(stamps[measure_start or 0:], dtype=np.int64)
    periods_ms = np.diff(measured) / 1e6
    nominal_ms = 1e3 / rate_hz
    return {
        "period_ms": latency_stats(periods_ms),
        "deviation_ms": latency_stats(np.abs(periods_ms - nominal_ms)),
        "nominal_ms": nominal_ms,
        "achieved_rate_hz": round(float(len(periods_ms) / (periods_ms.sum() / 1e3)), 2) if len(periods_ms) else 0.0,
        "cpu_percent": round(100.0 * cpu_s / wall_s, 2),
    }


def measure_sampling(n: int) -> dict:
    """Cost of one ChunkBuffer.sample (6 joints, cubic, crossfade over two chunks) [us]."""
    buffer = ChunkBuffer(JOINTS, ChunkBufferConfig(interpolation="cubic", crossfade_s=0.05))
    stamp = 10_000_000_000
    for k in range(2):
        chunk = cv.trajectory_to_chunk(_chunk(stamp + k * 100_000_000, duration_s=2.0))
        buffer.add(chunk, received_ns=stamp + k * 100_000_000 + 30_000_000)
    durations = []
    for i in range(n):
        tick = stamp + 110_000_000 + i * 20_000  # inside the crossfade: both chunks are blended
        start = time.perf_counter_ns()
        buffer.sample_at(tick, tick + 50_000_000)
        durations.append((time.perf_counter_ns() - start) / 1e3)
    return latency_stats(np.array(durations))  # in [us] here


def measure_core(n_ticks: int, n_estimates: int) -> dict:
    """Cost of ActuatorCore.tick [us] (100 Hz, 60 ms echo of the commands as joint states, 10 Hz
    chunks) and of one latency estimate over the full 4 s window [ms]."""
    core = ActuatorCore(ActuatorConfig(joints=tuple(JOINTS), actuation_latency_s=0.05))
    period_ns, stamp = 10_000_000, 10_000_000_000
    sent: list[np.ndarray] = []
    tick_us = []
    for k in range(n_ticks):
        now = stamp + k * period_ns
        if k % 10 == 0:
            core.on_chunk(cv.trajectory_to_chunk(_chunk(now - 30_000_000)), now)
        start = time.perf_counter_ns()
        sample = core.tick(now)
        tick_us.append((time.perf_counter_ns() - start) / 1e3)
        sent.append(sample.positions)
        if k >= 7:
            # Sampled half a period after the tick grid, holding the command that has acted for 60 ms.
            core.on_joint_state(JOINTS, sent[k - 7], now - period_ns // 2, now)
    estimate_ms = []
    for _ in range(n_estimates):
        start = time.perf_counter_ns()
        estimate = core.update_latency()
        estimate_ms.append((time.perf_counter_ns() - start) / 1e6)
    return {"tick_us": latency_stats(np.array(tick_us)), "latency_estimate_ms": latency_stats(np.array(estimate_ms)),
            "latency_estimate_s": round(float(estimate.latency_s or float("nan")), 5)}


def run(quick: bool = False) -> dict:
    duration_s = 3.0 if quick else 10.0
    domain_id = 101 + random.SystemRandom().randrange(100)  # away from the tests' 1..100
    at_100 = measure_rate(100.0, duration_s, domain_id)
    at_500 = measure_rate(500.0, duration_s, domain_id)
    return {
        "control_period_ms": at_100["period_ms"],
        "control_period_ms_500hz": at_500["period_ms"],
        "control_period_deviation_ms": at_100["deviation_ms"],
        "control_period_deviation_ms_500hz": at_500["deviation_ms"],
        "achieved_rate_hz": {"100hz": at_100["achieved_rate_hz"], "500hz": at_500["achieved_rate_hz"]},
        "cpu_percent": {"100hz": at_100["cpu_percent"], "500hz": at_500["cpu_percent"]},
        "sample_us": measure_sampling(2000 if quick else 20000),
        "core": measure_core(1000 if quick else 6000, 10 if quick else 50),
        "duration_s": duration_s,
        "load_average_1min": os.getloadavg()[0],
    }


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
