"""Does a Foxglove viewer slow the graph? The sim graph without viz_node, then with viz_node and
two viewers connected: one reading everything (a healthy Foxglove), one that subscribes to every
channel and never reads (a stalled client: its socket and its server queue fill).

Per condition: the camera-to-command latency (each chunk's capture stamp to the first robot
command that can carry it, on sim time, as bench_e2e's sim-graph figure) over `duration_s`, then
e-stop trials: publish estop=true and time until supervisor/state reports ESTOP (the supervisor
publishes its state on every change; monotonic publication to receipt in this process), release,
reset, re-arm. Rounds alternate the two conditions (3; 1 with --quick), so each ratio with / without
is taken under one load; the result is the median ratio and its range over the rounds.

    .venv/bin/python benchmarks/bench_viz.py [--json OUT] [--quick]
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
for folder in (REPO_ROOT, Path(__file__).resolve().parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from bench_e2e import _checkpoint, _first_carrier_latencies  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.conversions import stamp_to_ns  # noqa: E402
from sim2real_ros.graph import GraphArgs  # noqa: E402
from sim2real_ros.nodes.common import LATCHED_QOS, RELIABLE_LATEST_QOS  # noqa: E402
from sim2real_ros.runtime.graph_session import SimGraphSession  # noqa: E402

SUBPROTOCOL = "foxglove.sdk.v1"  # foxglove-sdk 0.30's name for the Foxglove WebSocket protocol


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _viewer(port: int, read: bool, stop: threading.Event, received: list) -> None:
    """Connect, subscribe to every advertised channel; read everything (read) or nothing."""
    from websockets.sync.client import connect

    deadline = time.monotonic() + 60
    while True:
        try:
            ws = connect(f"ws://127.0.0.1:{port}", subprotocols=[SUBPROTOCOL], max_size=None, max_queue=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    channels = {}
    while len(channels) < 10:
        frame = ws.recv(timeout=30)
        if isinstance(frame, str) and json.loads(frame)["op"] == "advertise":
            channels.update({c["id"]: c for c in json.loads(frame)["channels"]})
    ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": i + 1, "channelId": c}
                                                              for i, c in enumerate(channels)]}))
    while not stop.is_set():
        if read:
            try:
                received.append(len(ws.recv(timeout=0.5)))
            except TimeoutError:
                continue
        else:
            stop.wait(0.5)
    ws.close()


def run_condition(checkpoint: Path, viz: bool, duration_s: float, trials: int, tmp: Path) -> dict:
    port = _free_port()
    args = GraphArgs(checkpoint=str(checkpoint), viz=viz, viz_port=port)
    stop = threading.Event()
    viewers, received = [], []
    with SimGraphSession(args, tmp / f"graph_viz_{viz}.log") as session:
        probe = session.probe
        clocks = probe.collect(Clock, "clock", 50, stamped=True)
        chunks = probe.collect(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS, stamped=True)
        ticks = probe.collect(JointState, "command/policy", RELIABLE_LATEST_QOS, stamped=True)
        states = probe.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS, stamped=True)
        if not session.wait_for_mode("AUTONOMOUS", 180.0):
            session.check_nodes()
            raise TimeoutError(f"supervisor never armed: {session.mode_reason()}")
        if viz:
            for read in (True, False):
                thread = threading.Thread(target=_viewer, args=(port, read, stop, received), daemon=True)
                thread.start()
                viewers.append(thread)
            deadline = time.monotonic() + 60
            while not received and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)  # the stalled viewer's queue fills
        first = len(chunks)
        time.sleep(duration_s)
        session.check_nodes()
        clock_list, tick_list, command_list = list(clocks), list(ticks), list(session.commands)
        chunk_list = list(chunks)[first:]
        reactions = []
        for _ in range(trials):
            seen = len(states)
            pressed = session.press_estop(True)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                hit = next((t for t, m in list(states)[seen:] if m.status and any(
                    kv.key == "mode" and kv.value == "ESTOP" for kv in m.status[0].values)), None)
                if hit is not None:
                    reactions.append((hit - pressed) * 1e3)
                    break
                time.sleep(0.001)
            session.press_estop(False)
            time.sleep(0.3)
            for service in ("supervisor/reset", "supervisor/arm"):
                for _attempt in range(20):
                    if session.call(service)[0]:
                        break
                    time.sleep(0.2)
            session.wait_for_mode("AUTONOMOUS", 10.0)
            time.sleep(0.5)
        stop.set()
    clock_t = np.array([t for t, _ in clock_list])
    clock_ns = np.array([stamp_to_ns(m.clock) for _, m in clock_list], dtype=float)
    latencies = _first_carrier_latencies(chunk_list, np.array([t for t, _ in tick_list]),
                                         np.array([t for t, _ in command_list]),
                                         lambda t: np.interp(t, clock_t, clock_ns))
    return {"camera_to_command_ms": latency_stats(latencies, digits=2),
            "estop_to_state_ms": latency_stats(reactions, digits=2), "estop_trials": len(reactions),
            **({"viewer_bytes_received": int(sum(received))} if viz else {})}


def _ratio_summary(rounds: list[dict], key: str, figure: str) -> dict:
    """Median and range over the rounds of with / without for one figure (same round, same load)."""
    ratios = [r["with"][key][figure] / r["without"][key][figure] for r in rounds
              if r["without"][key][figure] and np.isfinite(r["without"][key][figure])]
    if not ratios:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "rounds": 0}
    return {"median": round(float(np.median(ratios)), 3), "min": round(float(min(ratios)), 3),
            "max": round(float(max(ratios)), 3), "rounds": len(ratios)}


def run(quick: bool = False) -> dict:
    """Rounds of (without viz_node, with viz_node + a reading and a stalled viewer), interleaved so
    both conditions of a round share the machine's load; the ratios with / without are the result."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randrange(150, 230)))
    duration_s, trials, n_rounds = (8.0, 5, 1) if quick else (20.0, 15, 3)
    load_before = os.getloadavg()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench_viz_") as tmp_name:
        tmp = Path(tmp_name)
        checkpoint = _checkpoint(tmp)
        for _ in range(n_rounds):
            without = run_condition(checkpoint, False, duration_s, trials, tmp)
            with_viz = run_condition(checkpoint, True, duration_s, trials, tmp)
            rounds.append({"without": without, "with": with_viz, "load": os.getloadavg()})
    return {
        "ratio_with_to_without": {
            "camera_to_command_p50": _ratio_summary(rounds, "camera_to_command_ms", "p50"),
            "camera_to_command_p99": _ratio_summary(rounds, "camera_to_command_ms", "p99"),
            "estop_to_state_p50": _ratio_summary(rounds, "estop_to_state_ms", "p50"),
        },
        "rounds": rounds, "duration_s": duration_s, "load_before": load_before, "load_after": os.getloadavg(),
    }


if __name__ == "__main__":
    raise SystemExit(bench_main(run, __doc__))
