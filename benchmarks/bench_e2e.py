"""End-to-end latency of the sim graph: camera capture stamp -> command on the robot topic.

Runs the full sim graph (sim node, preprocessor, policy, actuator, supervisor) as processes and
watches it from an operator node. For each action chunk (stamped with its image's capture time,
DESIGN.md §3) it finds the first command/policy tick after the chunk arrived, then the first robot
command after that tick: that command is the first one that can carry the new observation.
Receipt times are converted to sim time through the clock messages, so the figure is the latency
the (simulated) robot experiences; the sim's real-time factor is reported beside it.

    .venv/bin/python benchmarks/bench_e2e.py [--json OUT] [--quick]
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros.benchmarking import bench_main, latency_stats
from sim2real_ros.conversions import stamp_to_ns
from sim2real_ros.graph import GraphArgs
from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS
from sim2real_ros.orchestration.graph_session import SimGraphSession
from sim2real_ros.paths import config_path, default_policy_path, urdf_path


def _checkpoint(tmp: Path) -> Path:
    shipped = default_policy_path()
    if shipped.is_file():
        return shipped
    from sim2real_ros.core.checkpoint import init_checkpoint
    from sim2real_ros.core.preprocess_config import PreprocessConfig
    from sim2real_ros.core.urdf import RobotModel

    path = tmp / "untrained.pt"
    init_checkpoint(path, RobotModel.from_file(urdf_path()).joint_names,
                    PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    return path


def run(quick: bool = False) -> dict:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    duration_s = 8.0 if quick else 25.0
    with tempfile.TemporaryDirectory(prefix="bench_e2e_") as tmp:
        checkpoint = _checkpoint(Path(tmp))
        args = GraphArgs(checkpoint=str(checkpoint))
        with SimGraphSession(args, Path(tmp) / "graph.log") as session:
            probe = session.probe
            assert probe is not None
            clocks = probe.collect(Clock, "clock", 50, stamped=True)
            chunks = probe.collect(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS, stamped=True)
            ticks = probe.collect(JointState, "command/policy", RELIABLE_LATEST_QOS, stamped=True)
            if not session.wait_for_mode("AUTONOMOUS", 180.0):
                session.check_nodes()
                raise TimeoutError(f"supervisor never armed: {session.mode_reason()}")
            first = len(chunks)
            wall_start, sim_start = time.monotonic(), stamp_to_ns(clocks[-1][1].clock)
            time.sleep(duration_s)
            session.check_nodes()
            sim_elapsed = (stamp_to_ns(clocks[-1][1].clock) - sim_start) / 1e9
            rtf = sim_elapsed / (time.monotonic() - wall_start)
            # One snapshot of each list: the probe's executor keeps appending while this runs.
            clock_list, tick_list, command_list = list(clocks), list(ticks), list(session.commands)
            chunk_list = list(chunks)[first:]
            clock_t = np.array([t for t, _ in clock_list])
            clock_ns = np.array([stamp_to_ns(m.clock) for _, m in clock_list], dtype=float)
            tick_t = np.array([t for t, _ in tick_list])
            cmd_t = np.array([t for t, _ in command_list])
            latencies_ms = []
            for received, msg in chunk_list:
                i = np.searchsorted(tick_t, received)
                if i >= len(tick_t):
                    continue
                j = np.searchsorted(cmd_t, tick_t[i])
                if j >= len(cmd_t):
                    continue
                sim_at_command = np.interp(cmd_t[j], clock_t, clock_ns)
                latencies_ms.append((sim_at_command - stamp_to_ns(msg.header.stamp)) / 1e6)
    result = {"e2e_latency_ms": latency_stats(latencies_ms, digits=2), "sim_realtime_factor_during": round(rtf, 3),
              "checkpoint": str(checkpoint), "duration_s": duration_s}
    return result


if __name__ == "__main__":
    raise SystemExit(bench_main(run, __doc__))
