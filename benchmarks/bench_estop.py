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
time.perf_counter_ns, so the figure includes DDS delivery both ways and this process's callbacks.
"""
from __future__ import annotations

import argparse
import json
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
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import Bool, Float64MultiArray  # noqa: E402
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
from sim2real_ros.paths import urdf_path  # noqa: E402

POLICY_OFFSET_RAD = 0.05




class EstopProbe(Node):
    """Robot, policy, camera and e-stop button in one node; watches the robot command topic."""

    def __init__(self, context: Context, names: list[str], home: np.ndarray) -> None:
        super().__init__("bench_estop_probe", context=context)
        self.names = names
        self.home = home
        self.policy = home.copy()
        self.policy[0] += POLICY_OFFSET_RAD
        self._lock = threading.Lock()
        self._estop_sent_ns: int | None = None
        self.reaction_ns: int | None = None
        self.reacted = threading.Event()
        self.armed = threading.Event()
        self.images_received = 0
        commands_group = MutuallyExclusiveCallbackGroup()
        load_group = MutuallyExclusiveCallbackGroup()
        self.create_subscription(Float64MultiArray, "forward_position_controller/commands", self._on_command,
                                 QoSProfile(depth=100, reliability=RELIABLE_LATEST_QOS.reliability),
                                 callback_group=commands_group)
        self.estop_pub = self.create_publisher(Bool, "estop", LATCHED_QOS)
        self._joint_pub = self.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
        self._policy_pub = self.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
        self._image_pub = self.create_publisher(Image, "camera/image_raw", SENSOR_QOS)
        self.create_subscription(Image, "camera/image_raw", self._on_image, SENSOR_QOS, callback_group=load_group)
        self.reset_client = self.create_client(Trigger, "supervisor/reset", callback_group=load_group)
        self._image = np.random.default_rng(0).integers(0, 255, size=(240, 320, 3), dtype=np.uint8)
        self.create_timer(0.01, self._on_control, callback_group=load_group)
        self.create_timer(1.0 / 30.0, self._on_camera, callback_group=load_group)

    def _on_control(self) -> None:
        stamp = self.get_clock().now().nanoseconds
        self._joint_pub.publish(cv.make_joint_state(self.names, self.home, stamp))
        self._policy_pub.publish(cv.make_joint_state(self.names, self.policy, stamp))

    def _on_camera(self) -> None:
        self._image_pub.publish(cv.array_to_image(self._image, "rgb8", self.get_clock().now().nanoseconds))

    def _on_image(self, _msg: Image) -> None:
        self.images_received += 1

    def _on_command(self, msg: Float64MultiArray) -> None:
        received = time.perf_counter_ns()
        q = np.asarray(msg.data, dtype=float)
        if q[0] > self.home[0] + 0.8 * POLICY_OFFSET_RAD:
            self.armed.set()
        with self._lock:
            if self._estop_sent_ns is not None and np.array_equal(q, self.home):
                self.reaction_ns = received - self._estop_sent_ns
                self._estop_sent_ns = None
                self.reacted.set()

    def press_estop(self) -> None:
        self.reacted.clear()
        self.armed.clear()
        with self._lock:
            self._estop_sent_ns = time.perf_counter_ns()
        self.estop_pub.publish(Bool(data=True))


def _reset(probe: EstopProbe, timeout_s: float) -> int:
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


def run(quick: bool = False, trials: int | None = None) -> dict:
    """E-stop reaction times [ms]: {"estop_reaction_ms": {p50, p99, max, spread_iqr, n}, ...}."""
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
    context = Context()
    rclpy.init(context=context)
    probe = EstopProbe(context, names, home)
    executor = MultiThreadedExecutor(num_threads=3, context=context)
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    reactions_ms: list[float] = []
    reset_tries: list[int] = []
    missed = 0
    launcher.start()
    try:
        if not probe.armed.wait(60.0):
            raise RuntimeError(f"supervisor never armed; see {log}")
        started = time.monotonic()
        images_before = probe.images_received
        for _ in range(n_trials):
            if not probe.armed.wait(10.0):
                raise RuntimeError(f"supervisor did not re-arm; see {log}")
            probe.press_estop()
            if probe.reacted.wait(5.0):
                reactions_ms.append(probe.reaction_ns / 1e6)
            else:
                missed += 1
            probe.estop_pub.publish(Bool(data=False))
            reset_tries.append(_reset(probe, 10.0))
        elapsed = time.monotonic() - started
        images = probe.images_received - images_before
    finally:
        launcher.shutdown()
        executor.shutdown(timeout_sec=1.0)
        probe.destroy_node()
        rclpy.try_shutdown(context=context)
    return {
        "estop_reaction_ms": latency_stats(np.array(reactions_ms)),
        "missed_reactions": missed,
        "reset_tries_mean": round(float(np.mean(reset_tries)), 3),
        "trials_per_s": round(n_trials / elapsed, 2),
        "images_received_per_s": round(images / elapsed, 1),
        "target_p99_ms": 10.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 trials instead of 1000")
    parser.add_argument("--trials", type=int, default=None, help="number of e-stop trials")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    result = run(quick=args.quick, trials=args.trials)
    stats = result["estop_reaction_ms"]
    print(f"e-stop reaction [ms] over {stats['n']} trials: p50 {stats['p50']}  p99 {stats['p99']}  "
          f"max {stats['max']}  IQR {stats.get('spread_iqr')}  (target p99 <= {result['target_p99_ms']})")
    print(f"missed {result['missed_reactions']}, reset tries/trial {result['reset_tries_mean']}, "
          f"{result['trials_per_s']} trials/s, images {result['images_received_per_s']}/s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
