"""E-stop reaction time of the supervisor, under camera and policy traffic.

Usage: .venv/bin/python benchmarks/bench_estop.py [--quick] [--trials N] [--json OUT]

The supervisor runs as its own process (as in a launched graph: auto_arm, no handover ramp) on an
isolated DDS domain. A probe in this process plays the robot (joint_states at HOME, 100 Hz), the
policy (command/policy at HOME + 0.05 rad on the first joint, 100 Hz) and a camera
(camera/image_raw 320x240 rgb8 at 30 Hz, subscribed here so the images really flow). One trial:
wait until the robot command shows the policy's target (AUTONOMOUS), publish estop=true, and time
until the first command equal to the hold (HOME, the measured position) arrives on
forward_position_controller/commands; then estop=false and supervisor/reset (retried until the
release has arrived) re-arm for the next trial. Both times are taken in this process with
time.perf_counter_ns, so the figure includes DDS delivery both ways and a Python callback at each
end.

The probe is an instrument and must not add its own dispatch delay: the robot-command subscription
has a node, executor and thread of its own (the traffic has another), and takes the receive time
first thing in its callback.

Reference, measured in the same run under the same traffic: an idle DDS round trip. A second
process (this script with --echo) answers every `bench_estop/ping` with a `bench_estop/pong` from a
callback on its own thread, exactly as the supervisor's e-stop thread answers `estop` with a hold;
one ping per trial, between the trials. e-stop minus echo (per percentile) is what the supervisor
itself adds; echo alone is what the machine, DDS and Python cost at that moment.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import rclpy  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import Bool, Float64MultiArray, UInt64  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from sim2real_ros import conversions as cv  # noqa: E402
from sim2real_ros.benchmarking import latency_stats  # noqa: E402
from sim2real_ros.cli.launcher import GraphLauncher  # noqa: E402
from sim2real_ros.core.safety import limits_from_urdf  # noqa: E402
from sim2real_ros.core.urdf import RobotModel  # noqa: E402
from sim2real_ros.graph import NodeDecl  # noqa: E402
from sim2real_ros.nodes.common import (  # noqa: E402
    JOINT_STATE_QOS,
    LATCHED_QOS,
    RELIABLE_LATEST_QOS,
    SENSOR_QOS,
)
from sim2real_ros.paths import urdf_path, use_dds_profile  # noqa: E402

POLICY_OFFSET_RAD = 0.05
PING_TOPIC = "bench_estop/ping"
PONG_TOPIC = "bench_estop/pong"
ECHO_QOS = QoSProfile(depth=10, reliability=RELIABLE_LATEST_QOS.reliability)


class SpinningNode:
    """A node with an executor and a thread of its own (its wait set holds only this node)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.executor = SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)
        self._thread = threading.Thread(target=self._spin, name=node.get_name(), daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        with contextlib.suppress(ExternalShutdownException, KeyboardInterrupt):
            self.executor.spin()

    def wait(self) -> None:
        """Block until the executor stops (shutdown of the context, Ctrl-C)."""
        self._thread.join()

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self._thread.join(timeout=5.0)
        self.node.destroy_node()


class TrafficProbe(Node):
    """Robot, policy and camera traffic; the e-stop button and the reset client."""

    def __init__(self, context: Context, names: list[str], home: np.ndarray) -> None:
        super().__init__("bench_estop_probe", context=context)
        self.names = names
        self.home = home
        self.policy = home.copy()
        self.policy[0] += POLICY_OFFSET_RAD
        self.images_received = 0
        self.estop_pub = self.create_publisher(Bool, "estop", LATCHED_QOS)
        self.ping_pub = self.create_publisher(UInt64, PING_TOPIC, ECHO_QOS)
        self._joint_pub = self.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
        self._policy_pub = self.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
        self._image_pub = self.create_publisher(Image, "camera/image_raw", SENSOR_QOS)
        self.create_subscription(Image, "camera/image_raw", self._on_image, SENSOR_QOS)
        self.reset_client = self.create_client(Trigger, "supervisor/reset")
        self._image = np.random.default_rng(0).integers(0, 255, size=(240, 320, 3), dtype=np.uint8)
        self.create_timer(0.01, self._on_control)
        self.create_timer(1.0 / 30.0, self._on_camera)

    def _on_control(self) -> None:
        stamp = self.get_clock().now().nanoseconds
        self._joint_pub.publish(cv.make_joint_state(self.names, self.home, stamp))
        self._policy_pub.publish(cv.make_joint_state(self.names, self.policy, stamp))

    def _on_camera(self) -> None:
        self._image_pub.publish(cv.array_to_image(self._image, "rgb8", self.get_clock().now().nanoseconds))

    def _on_image(self, _msg: Image) -> None:
        self.images_received += 1


class Stopwatch:
    """One timed request at a time: start() just before publishing, stop() on the matching reply."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started_ns: int | None = None
        self.elapsed_ns: int | None = None
        self.done = threading.Event()

    def start(self, publish: Callable[[], None]) -> None:
        self.done.clear()
        with self._lock:
            self._started_ns = time.perf_counter_ns()
        publish()

    def stop(self, received_ns: int) -> None:
        with self._lock:
            if self._started_ns is None:
                return
            self.elapsed_ns = received_ns - self._started_ns
            self._started_ns = None
        self.done.set()


class Watcher(Node):
    """The robot command topic and the echo's pongs, each stamped first thing in its callback."""

    def __init__(self, context: Context, home: np.ndarray) -> None:
        super().__init__("bench_estop_watcher", context=context)
        self.home = home
        self.estop = Stopwatch()
        self.echo = Stopwatch()
        self.armed = threading.Event()
        self.create_subscription(Float64MultiArray, "forward_position_controller/commands", self._on_command,
                                 QoSProfile(depth=100, reliability=RELIABLE_LATEST_QOS.reliability))
        self.create_subscription(UInt64, PONG_TOPIC, self._on_pong, ECHO_QOS)

    def _on_command(self, msg: Float64MultiArray) -> None:
        received = time.perf_counter_ns()
        q = np.asarray(msg.data, dtype=float)
        if q[0] > self.home[0] + 0.8 * POLICY_OFFSET_RAD:
            self.armed.set()
        elif np.array_equal(q, self.home):
            self.estop.stop(received)

    def _on_pong(self, _msg: UInt64) -> None:
        self.echo.stop(time.perf_counter_ns())


def echo_main() -> int:
    """--echo: answer every ping with a pong from a callback on a thread of its own."""
    rclpy.init()
    node = Node("bench_estop_echo")
    pong_pub = node.create_publisher(UInt64, PONG_TOPIC, ECHO_QOS)
    node.create_subscription(UInt64, PING_TOPIC, pong_pub.publish, ECHO_QOS)
    spinner = SpinningNode(node)
    try:
        spinner.wait()
    except KeyboardInterrupt:
        pass
    finally:
        spinner.close()
        rclpy.try_shutdown()
    return 0


def _reset(probe: TrafficProbe, timeout_s: float) -> int:
    """Call supervisor/reset until it succeeds (the release must arrive first); returns the tries."""
    deadline = time.monotonic() + timeout_s
    tries = 0
    while time.monotonic() < deadline:
        tries += 1
        future = probe.reset_client.call_async(Trigger.Request())
        done = threading.Event()
        future.add_done_callback(lambda _f, event=done: event.set())
        if done.wait(timeout_s) and future.result().success:
            return tries
        time.sleep(0.002)
    raise RuntimeError("supervisor/reset kept refusing")


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def run(quick: bool = False, trials: int | None = None) -> dict:
    """E-stop reaction times [ms]: {"estop_reaction_ms": {p50, p99, max, spread_iqr, n}, ...}, and the
    idle echo round trip measured between the trials ("echo_round_trip_ms") as the machine's floor."""
    n_trials = trials or (100 if quick else 1000)
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randrange(150, 230)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    urdf = str(urdf_path())
    model = RobotModel.from_file(urdf)
    names = model.joint_names
    limits = limits_from_urdf(model, names)
    home = (limits.lower + limits.upper) / 2
    params = {"robot_description": urdf, "auto_arm": True, "handover_ramp_s": 0.0,
              "policy_timeout_s": 0.5, "joint_state_timeout_s": 0.5}
    log = Path(tempfile.mkdtemp(prefix="bench_estop_")) / "graph.log"
    launcher = GraphLauncher([NodeDecl("supervisor", "supervisor", params)], echo=False, log_file=log)
    echo_env = {**os.environ}
    use_dds_profile(echo_env)
    context = Context()
    rclpy.init(context=context)
    traffic = SpinningNode(TrafficProbe(context, names, home))
    probe = traffic.node
    watching = SpinningNode(Watcher(context, home))
    watcher = watching.node
    reactions_ms: list[float] = []
    echo_ms: list[float] = []
    reset_tries: list[int] = []
    missed = echo_missed = 0
    launcher.start()
    echo = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--echo"], env=echo_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not watcher.armed.wait(60.0):
            raise RuntimeError(f"supervisor never armed; see {log}")
        _wait_for(lambda: probe.ping_pub.get_subscription_count() > 0 and watcher.count_publishers(PONG_TOPIC) > 0,
                  30.0, "the echo process")
        started = time.monotonic()
        images_before = probe.images_received
        for _ in range(n_trials):
            if not watcher.armed.wait(10.0):
                raise RuntimeError(f"supervisor did not re-arm; see {log}")
            watcher.estop.start(lambda: probe.estop_pub.publish(Bool(data=True)))
            if watcher.estop.done.wait(5.0):
                reactions_ms.append(watcher.estop.elapsed_ns / 1e6)
            else:
                missed += 1
            # Commands arrive in order: once the hold is here, no pre-e-stop command is in flight,
            # so the next policy target seen means the reset re-armed.
            watcher.armed.clear()
            probe.estop_pub.publish(Bool(data=False))
            reset_tries.append(_reset(probe, 10.0))
            watcher.echo.start(lambda: probe.ping_pub.publish(UInt64(data=0)))
            if watcher.echo.done.wait(5.0):
                echo_ms.append(watcher.echo.elapsed_ns / 1e6)
            else:
                echo_missed += 1
        elapsed = time.monotonic() - started
        images = probe.images_received - images_before
    finally:
        echo.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            echo.wait(5.0)
        if echo.poll() is None:
            echo.kill()
        launcher.shutdown()
        watching.close()
        traffic.close()
        rclpy.try_shutdown(context=context)
    estop_stats = latency_stats(np.array(reactions_ms))
    echo_stats = latency_stats(np.array(echo_ms))
    return {
        "estop_reaction_ms": estop_stats,
        "missed_reactions": missed,
        "echo_round_trip_ms": echo_stats,
        "echo_missed": echo_missed,
        "estop_over_echo_p99": round(estop_stats["p99"] / echo_stats["p99"], 2) if echo_ms else None,
        "reset_tries_mean": round(float(np.mean(reset_tries)), 3),
        "trials_per_s": round(n_trials / elapsed, 2),
        "images_received_per_s": round(images / elapsed, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "target_p99_ms": 10.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 trials instead of 1000")
    parser.add_argument("--trials", type=int, default=None, help="number of e-stop trials")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)  # the reference process
    args = parser.parse_args()
    if args.echo:
        return echo_main()
    result = run(quick=args.quick, trials=args.trials)
    stats = result["estop_reaction_ms"]
    print(f"e-stop reaction [ms] over {stats['n']} trials: p50 {stats['p50']}  p99 {stats['p99']}  "
          f"max {stats['max']}  IQR {stats.get('spread_iqr')}  (target p99 <= {result['target_p99_ms']})")
    echo = result["echo_round_trip_ms"]
    print(f"idle echo round trip [ms] (same run): p50 {echo['p50']}  p99 {echo['p99']}  max {echo['max']}  "
          f"IQR {echo.get('spread_iqr')}; e-stop/echo p99 ratio {result['estop_over_echo_p99']}; "
          f"load {result['load_average_1min']}")
    print(f"missed {result['missed_reactions']} (echo {result['echo_missed']}), "
          f"reset tries/trial {result['reset_tries_mean']}, {result['trials_per_s']} trials/s, "
          f"images {result['images_received_per_s']}/s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
