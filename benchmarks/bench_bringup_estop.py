"""E-stop to the hold goal on the servo bus, on the emulated SO-101 bring-up.

Usage: .venv/bin/python benchmarks/bench_bringup_estop.py [--quick] [--json OUT]

`sim2real launch robot --robot so101 --emulate` runs as a process (the emulator, feetech_driver,
sim_camera, policy_node preprocessing the camera, actuator_node, supervisor), with a policy that keeps
turning the shoulder slowly (runtime/rehearsal.py). Each trial: arm (reset first when latched), wait until
the goals on the bus move, publish `estop` true from this process, and find in the emulator's goal
log the first goal write equal to the hold the arm then stays at. Latency = the time the emulator
read that write from its pty minus the time just before the e-stop was published (both
CLOCK_MONOTONIC, one clock for every process on the machine). Then release, reset, re-arm.
`in_flight` counts writes after the press that were not yet the hold (commands already on their way).
The emulator runs at its shipped SCHED_FIFO priority (emulated_arm.EMULATOR_PRIORITY: real servos
answer from their own microcontrollers whatever the host's load; at SCHED_OTHER it can miss the
driver's start-up pings while the graph's processes start) and the graph's nodes with their shipped
knobs (graph.ROBOT_REALTIME). `run_setup` takes more `sim2real launch` arguments for comparisons.
Target (issue 31): p99 <= 5 ms. Figures depend on the machine's load, which is reported with them.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from std_msgs.msg import Bool  # noqa: E402

from sim2real_ros.benchmarking import bench_main, latency_stats  # noqa: E402
from sim2real_ros.hardware.emulated_arm import EMULATOR_PRIORITY, read_goal_log  # noqa: E402
from sim2real_ros.nodes.common import LATCHED_QOS  # noqa: E402
from sim2real_ros.runtime.probe import RosProbe, wait_until  # noqa: E402
from sim2real_ros.runtime.rehearsal import EmulatedBringup, arm_like_a_human, drifting_so101_checkpoint  # noqa: E402

HEARTBEAT_TIMEOUT_S = "2.0"  # generous: on a loaded 2-core machine a 0.5 s heartbeat gap happens
SETTLE_S = 1.0  # after the press, the window in which the hold must appear and stay [s]
MAX_STALLS = 3  # a loaded machine can starve the policy (the supervisor then holds): re-arm this often


def run(quick: bool = False) -> dict:
    trials = 5 if quick else 30
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    result = run_setup(trials, EMULATOR_PRIORITY)
    figures = result["estop_to_bus_hold_ms"]
    print(f"[bench_bringup_estop] p50 {figures['p50']} ms, p99 {figures['p99']} ms over {figures['n']} trials",
          file=sys.stderr, flush=True)
    return result


def run_setup(trials: int, emulator_priority: int, extra: tuple[str, ...] = ()) -> dict:
    """`trials` e-stops on one bring-up whose emulator runs at SCHED_FIFO `emulator_priority` (0: as started);
    `extra`: more `sim2real launch` arguments."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_bringup_") as scratch:
        directory = Path(scratch)
        # A slow drift (0.01 rad past the present pan angle): 30 trials stay inside the pan's range.
        checkpoint = drifting_so101_checkpoint(directory / "drift.safetensors", 0.01)
        goal_log = directory / "goals.log"
        bringup = EmulatedBringup(checkpoint, goal_log, directory / "launch.log",
                                  "--estop-heartbeat", HEARTBEAT_TIMEOUT_S,
                                  "--emulate-realtime-priority", str(emulator_priority), *extra)
        probe = RosProbe("bench_bringup_estop")
        estop = probe.publisher(Bool, "estop", LATCHED_QOS)
        pressed = threading.Event()
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.is_set():
                estop.publish(Bool(data=pressed.is_set()))
                stop.wait(0.1)

        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        latencies_ms, in_flight, failures = [], [], []
        stalls = 0  # armed, but the goals did not move: re-armed, at most MAX_STALLS times in a row
        try:
            trial = 0
            while trial < trials:
                answer = arm_like_a_human(probe.node, 180.0)
                if not answer.startswith("accepted"):
                    failures.append(f"trial {trial}: {answer}")
                    break
                armed_ns = time.monotonic_ns()

                def moving(since_ns: int = armed_ns) -> bool:
                    writes = [w for w in read_goal_log(goal_log) if w.t_ns > since_ns]
                    return len(writes) >= 2 and writes[-1].goals != writes[0].goals

                if not wait_until(moving, 20.0):
                    supervisor = [line for line in bringup.lines if line.startswith("[supervisor]")][-2:]
                    failures.append(f"trial {trial}: armed, but the goals did not move: {supervisor}")
                    stalls += 1
                    if stalls > MAX_STALLS:
                        break
                    continue
                stalls = 0
                time.sleep(0.2)  # moving steadily
                t0 = time.monotonic_ns()
                pressed.set()
                estop.publish(Bool(data=True))
                time.sleep(SETTLE_S)
                after = [w for w in read_goal_log(goal_log) if w.t_ns > t0]
                if not after:
                    failures.append(f"trial {trial}: no goal written after the e-stop")
                else:
                    hold = after[-1].goals
                    first = next(k for k, w in enumerate(after) if w.goals == hold)
                    if any(w.goals != hold for w in after[first:]):
                        failures.append(f"trial {trial}: goals changed after the hold")
                    latencies_ms.append((after[first].t_ns - t0) / 1e6)
                    in_flight.append(first)
                pressed.clear()
                estop.publish(Bool(data=False))
                time.sleep(0.3)
                trial += 1
        finally:
            stop.set()
            beat.join(timeout=2.0)
            probe.close()
            code = bringup.stop()
    return {
        "estop_to_bus_hold_ms": latency_stats(latencies_ms),
        "in_flight_writes_after_press": {"max": max(in_flight, default=0), "mean": round(sum(in_flight) /
                                                                                         max(len(in_flight), 1), 2)},
        "target_p99_ms": 5.0, "emulator_priority": emulator_priority,
        "emulator_lines": [line for line in bringup.lines if line.startswith("[emulate-bus]")][:4],
        "trials": trials, "failures": failures, "launcher_exit_code": code,
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]}, "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__))
