"""Feetech driver benchmark: joint_states rate and period jitter from 6 emulated servos at 1 Mbps
(and command/teleop from leader_arm on the same emulated bus, the leader arm's node).

Usage: .venv/bin/python benchmarks/bench_feetech.py [--quick] [--json OUT]

`sim2real emulate-bus` (6 servos, 1 Mbps: reply timing modelled byte by byte) runs as its own process,
feetech_driver as another (as in a launched graph, rate_hz 100) on an isolated DDS domain; a probe
node in this process records every joint_states message. Periods are the differences of the
messages' stamps (the node's time after each sync read) and of their arrival times at the probe;
jitter is |period - 10 ms|; CPU use is the driver's and the emulator's over the same window.
Without ROS, the sync read round trip of the driver core (one transaction for position, speed,
load, voltage and temperature of all 6 servos) is timed too: its wire time at 1 Mbps is 0.98 ms
(14 bytes out, 6 x 14 bytes back, 10 bits per byte).
Two setups in one run, each with its own emulator: `as_started` (every process SCHED_OTHER, as a
node starts without the robot graph's knobs) and `shipped` (the driver and leader arm with their
knobs of graph.ROBOT_REALTIME, SCHED_FIFO 50 and locked memory, and the emulator at
emulated_arm.EMULATOR_PRIORITY, as `sim2real launch robot --emulate` starts them: real servos answer
from their own microcontrollers whatever the host's load). The top-level `node` and `leader_arm`
are the shipped setup's.
Targets (issue 31): >= 100 Hz, p99 period jitter <= 2 ms. Figures depend on the machine's load,
which is reported with them.
"""
from __future__ import annotations

import os
import random
import subprocess
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

from sim2real_ros import conversions as cv  # noqa: E402
from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.core.robot.urdf import RobotModel  # noqa: E402
from sim2real_ros.graph import ROBOT_REALTIME, NodeDecl  # noqa: E402
from sim2real_ros.hardware.bus import BusError, FeetechBus  # noqa: E402
from sim2real_ros.hardware.calibration import MotorCalibration, joint_maps, load_calibration, write_calibration  # noqa: E402
from sim2real_ros.hardware.driver import FeetechDriver  # noqa: E402
from sim2real_ros.hardware.emulated_arm import EMULATOR_PRIORITY  # noqa: E402
from sim2real_ros.paths import urdf_path  # noqa: E402
from sim2real_ros.runtime.launcher import GraphLauncher  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
RATE_HZ = 100.0


class Emulator:
    """`sim2real emulate-bus` as a process; .path is its pty."""

    def __init__(self, realtime_priority: int = 0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--ids", "1-6",
                                      "--baud", "1000000", "--realtime-priority", str(realtime_priority)],
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        self.path = self.proc.stdout.readline().strip()
        self.lines = [self.proc.stdout.readline().strip() for _ in range(2 if realtime_priority else 1)]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process [s] (/proc/PID/stat fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def calibration_file(folder: Path) -> Path:
    path = folder / "so101_calibration.json"
    write_calibration(path, [MotorCalibration(name, k + 1, 0, 0, 1024, 3072) for k, name in enumerate(JOINTS)])
    return path


def measure_core(port: str, calibration: Path, reads: int) -> dict:
    """Sync read round trips [ms] of the driver core, back to back."""
    model = RobotModel.from_file(urdf_path("so101/so101_new_calib.urdf"))
    limits = model.limits_arrays(JOINTS)
    with FeetechBus(port, 1_000_000, 0.05) as bus:
        driver = FeetechDriver(bus, joint_maps(load_calibration(calibration), JOINTS, limits["lower"]),
                               limits["lower"], limits["upper"])
        driver.start()
        times, failures = [], 0
        for _ in range(reads):
            start = time.perf_counter()
            try:
                driver.read()
            except BusError:
                failures += 1
                continue
            times.append((time.perf_counter() - start) * 1e3)
    return {"sync_read_ms": latency_stats(times), "failed_reads": failures,
            "max_rate_hz": round(1e3 / float(np.mean(times)), 1) if times else 0.0}


def measure_node(port: str, calibration: Path, duration_s: float, domain_id: int, log: Path,
                 emulator_pid: int, executable: str = "feetech_driver", topic: str = "joint_states",
                 shipped_knobs: bool = False) -> dict:
    """`topic` from the node `executable` (feetech_driver, leader_arm): rate, stamp and arrival period
    jitter [ms], CPU use of the node and the emulator. shipped_knobs: the node's real-time knobs of
    graph.ROBOT_REALTIME (else none)."""
    os.environ["ROS_DOMAIN_ID"] = str(domain_id)
    knobs = dict(ROBOT_REALTIME.get(executable, {})) if shipped_knobs else {}
    decl = NodeDecl(executable, executable,
                    {"port": port, "calibration": str(calibration), "rate_hz": RATE_HZ, "joints": JOINTS,
                     "robot_description": str(urdf_path("so101/so101_new_calib.urdf")), **knobs}, (), ())
    launcher = GraphLauncher([decl], echo=False, log_file=log)
    context = Context()
    rclpy.init(context=context)
    node = Node("bench_feetech_probe", context=context)
    received: list[tuple[float, int]] = []
    node.create_subscription(JointState, topic,
                             lambda m: received.append((time.monotonic(), cv.stamp_to_ns(m.header.stamp))),
                             QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    launcher.start()
    try:
        deadline = time.monotonic() + 60
        while len(received) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        if len(received) < 50:
            raise RuntimeError(f"{executable} published {len(received)} {topic} in 60 s; see {log}")
        first = len(received)
        driver_pid = launcher.nodes[0].process.pid
        cpu_start = {"driver": process_cpu_s(driver_pid), "emulator": process_cpu_s(emulator_pid)}
        wall_start = time.monotonic()
        time.sleep(duration_s)
        window = received[first:]
        wall_s = time.monotonic() - wall_start
        cpu_percent = {"driver": round(100 * (process_cpu_s(driver_pid) - cpu_start["driver"]) / wall_s, 1),
                       "emulator": round(100 * (process_cpu_s(emulator_pid) - cpu_start["emulator"]) / wall_s, 1)}
    finally:
        launcher.shutdown()
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    arrivals = np.array([a for a, _ in window])
    stamps = np.array([s for _, s in window], dtype=float) * 1e-9
    nominal = 1.0 / RATE_HZ
    stamp_periods = np.diff(stamps)
    arrival_periods = np.diff(arrivals)
    return {
        "rate_hz": round(float((len(stamps) - 1) / (stamps[-1] - stamps[0])), 2),
        "messages": len(window),
        "stamp_period_ms": latency_stats(stamp_periods * 1e3),
        "stamp_jitter_ms": latency_stats(np.abs(stamp_periods - nominal) * 1e3),
        "arrival_jitter_ms": latency_stats(np.abs(arrival_periods - nominal) * 1e3),
        "gaps_over_20ms": int(np.sum(stamp_periods > 0.02)),
        "cpu_percent_of_one_core": cpu_percent,
        "realtime_knobs": knobs,
    }


def run(quick: bool = False) -> dict:
    duration_s = 5.0 if quick else 20.0
    domain_id = 101 + random.SystemRandom().randrange(100)
    load_before = os.getloadavg()[0]
    setups: dict[str, dict] = {}
    core: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        calibration = calibration_file(folder)
        for setup, shipped in (("as_started", False), ("shipped", True)):
            emulator = Emulator(EMULATOR_PRIORITY if shipped else 0)
            try:
                if not core:
                    core = measure_core(emulator.path, calibration, 300 if quick else 2000)
                node = measure_node(emulator.path, calibration, duration_s, domain_id, folder / f"driver_{setup}.log",
                                    emulator.proc.pid, shipped_knobs=shipped)
                leader = measure_node(emulator.path, calibration, duration_s, domain_id, folder / f"leader_{setup}.log",
                                      emulator.proc.pid, "leader_arm", "command/teleop", shipped_knobs=shipped)
            finally:
                emulator.close()
            setups[setup] = {"node": node, "leader_arm": leader, "emulator": emulator.lines[1:]}
            print(f"[bench_feetech] {setup}: {node['rate_hz']} Hz, stamp jitter p99 "
                  f"{node['stamp_jitter_ms']['p99']} ms; leader arm p99 {leader['stamp_jitter_ms']['p99']} ms",
                  file=sys.stderr, flush=True)
    return {**setups["shipped"], "setups": setups, "core": core, "duration_s": duration_s, "cpus": os.cpu_count(),
            "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
            "targets": {"rate_hz": ">= 100", "p99_jitter_ms": "<= 2"}}


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
