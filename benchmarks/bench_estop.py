"""E-stop reaction time of the supervisor, under camera and policy traffic.

Usage: .venv/bin/python benchmarks/bench_estop.py [--quick] [--trials N] [--json OUT]

The supervisor runs as its own process (as in a launched graph: auto_arm, no handover ramp) on an
isolated DDS domain. A traffic process (this script with --traffic) plays the robot (joint_states
at HOME, 100 Hz), the policy (command/policy at HOME + 0.05 rad on the first joint, 100 Hz) and a
camera (camera/image_raw 320x240 rgb8 at 30 Hz, subscribed there too so the images really flow).
The probe, in this process, is the e-stop button. One trial: wait until the robot command shows
the policy's target (AUTONOMOUS), publish estop=true, and time until the first hold command arrives
on forward_position_controller/commands (the first command off the policy's target, heading for
HOME, the measured position, at the velocity limit: holds are step-limited too); then
estop=false and supervisor/reset (retried until the release has arrived) re-arm for the next
trial. Both times are taken in this process with time.perf_counter_ns: the figure is publication
to receipt over real DDS between two processes, with a Python callback at each end.

Beside it, `..._to_publication_ms`: the e-stop's DDS write to the hold's (both source timestamps,
the system clock of one host; the probe reads its own e-stop's from a subscription to it), the same
for the echo (the probe's clock just before the ping's publish to the pong's write). That is the
stack's reaction without the probe's own delays: under load the probe is one more SCHED_OTHER
process waiting for a core, to publish and to receive, while a robot's controller manager and
e-stop button driver would not be. `--probe-priority N` runs the probe itself at SCHED_FIFO N (below
the supervisor's 60; everything it starts stays SCHED_OTHER): then the probe-to-probe figure is the
stack's reaction with real-time ends (`probe_priority` in the JSON).

The probe is an instrument and must not add its own dispatch delay: it shares its process with
nothing but the trial loop (the traffic has a process of its own), its node has its own executor
thread, and it takes the receive time first thing in its callback.

Reference, measured in the same run under the same traffic: an idle DDS round trip. An echo
process (this script with --echo) answers every `bench_estop/ping` with a `bench_estop/pong` from a
callback on its own executor thread, as the supervisor's e-stop thread answers `estop` with a hold;
one ping per trial, between the trials. The e-stop figure against the echo figure is what the
supervisor itself adds; the echo alone is what the machine, DDS and Python cost at that moment.

Load (issue 36): the supervisor runs three times, with its real-time knobs off, as an unprivileged
process gets the shipped knobs (SCHED_FIFO and the memory lock refused: SCHED_OTHER, but the 0.5 ms
GIL switch interval, which needs no privilege), and as the robot graph ships them
(graph.ROBOT_REALTIME: SCHED_FIFO, memory locked, where the process may), and
the trials of each run alternate quiet and loaded blocks (one busy process per CPU beside them,
benchmarking.BusyLoad; `--busy N` for N of them, e.g. more than the cores to overload the machine).
`estop_reaction_ms` / `estop_reaction_loaded_ms` are knobs on (`..._knobs_off_...`,
`..._unprivileged_...` the others); the echo is measured in the same
blocks; `load` gives the machine's load per phase. `dds_profile` names the Fast DDS profile the
processes ran with (the project's unless FASTDDS_DEFAULT_PROFILES_FILE / FASTRTPS_DEFAULT_PROFILES_FILE
names another) and `reactions_over_100ms...` counts the reactions that waited for a lost sample's
repair (a reliable sample lost on the way is resent after the writer's next heartbeat).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
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
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.context import Context  # noqa: E402
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import Bool, Float64MultiArray, UInt64  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from sim2real_ros import conversions as cv  # noqa: E402
from sim2real_ros.benchmarking import LOADED, QUIET, BusyLoad, interleaved, latency_stats  # noqa: E402
from sim2real_ros.core.robot.urdf import RobotModel  # noqa: E402
from sim2real_ros.core.safety.limits import limits_from_urdf  # noqa: E402
from sim2real_ros.graph import ROBOT_REALTIME, NodeDecl  # noqa: E402
from sim2real_ros.nodes.common import (  # noqa: E402
    JOINT_STATE_QOS,
    LATCHED_QOS,
    RELIABLE_LATEST_QOS,
    SENSOR_QOS,
)
from sim2real_ros.paths import urdf_path, use_dds_profile  # noqa: E402
from sim2real_ros.runtime.launcher import GraphLauncher  # noqa: E402

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


class Traffic(Node):
    """Robot, policy and camera traffic (the --traffic helper process); counts the images it hears."""

    def __init__(self, names: list[str], home: np.ndarray) -> None:
        super().__init__("bench_estop_traffic")
        self.names = names
        self.home = home
        self.policy = home.copy()
        self.policy[0] += POLICY_OFFSET_RAD
        self.images_received = 0
        self.first_image_s: float | None = None
        self._joint_pub = self.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
        self._policy_pub = self.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
        self._image_pub = self.create_publisher(Image, "camera/image_raw", SENSOR_QOS)
        self.create_subscription(Image, "camera/image_raw", self._on_image, SENSOR_QOS)
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
        if self.first_image_s is None:
            self.first_image_s = time.monotonic()
        self.images_received += 1

    def images_per_s(self) -> float:
        if self.first_image_s is None:
            return 0.0
        return self.images_received / max(time.monotonic() - self.first_image_s, 1e-9)


class Stopwatch:
    """One timed request at a time: start() just before publishing, stop() on the matching reply."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started_ns: int | None = None
        self._started_wall_ns = 0
        self.elapsed_ns: int | None = None
        self.to_publication_ns: int | None = None  # the request's publication -> the reply's
        self.request_written = threading.Event()  # the request's own source timestamp is known
        self._request_written_ns: int | None = None
        self._reply_written_ns: int | None = None
        self.done = threading.Event()

    def start(self, publish: Callable[[], None]) -> None:
        self.done.clear()
        self.request_written.clear()
        with self._lock:
            self._started_ns = time.perf_counter_ns()
            self._started_wall_ns = time.time_ns()
            self._request_written_ns = self._reply_written_ns = None
            self.to_publication_ns = None
        publish()

    def written(self, request_written_ns: int) -> None:
        """The request's DDS source timestamp (seen by a subscription to it): the reply's time is
        taken from it rather than from the clock read before publishing."""
        with self._lock:
            self._request_written_ns = request_written_ns
            if self._reply_written_ns is not None:
                self.to_publication_ns = self._reply_written_ns - request_written_ns
        self.request_written.set()

    def stop(self, received_ns: int, published_wall_ns: int) -> None:
        """received_ns: perf_counter at receipt; published_wall_ns: the reply's DDS source timestamp."""
        with self._lock:
            if self._started_ns is None:
                return
            self.elapsed_ns = received_ns - self._started_ns
            self._reply_written_ns = published_wall_ns
            start = self._started_wall_ns if self._request_written_ns is None else self._request_written_ns
            self.to_publication_ns = published_wall_ns - start
            self._started_ns = None
        self.done.set()


class Probe(Node):
    """The e-stop button, the reset client and the ping; watches the robot command topic and the
    echo's pongs, each reply stamped first thing in its callback. Nothing else runs in its process."""

    def __init__(self, context: Context, home: np.ndarray) -> None:
        super().__init__("bench_estop_probe", context=context)
        self.home = home
        self.estop = Stopwatch()
        self.echo = Stopwatch()
        self.armed = threading.Event()
        self.estop_pub = self.create_publisher(Bool, "estop", LATCHED_QOS)
        self.ping_pub = self.create_publisher(UInt64, PING_TOPIC, ECHO_QOS)
        self.reset_client = self.create_client(Trigger, "supervisor/reset")
        self.create_subscription(Float64MultiArray, "forward_position_controller/commands", self._on_command,
                                 QoSProfile(depth=100, reliability=RELIABLE_LATEST_QOS.reliability))
        self.create_subscription(UInt64, PONG_TOPIC, self._on_pong, ECHO_QOS)
        # Its own e-stop, for the time DDS wrote it (the press as the supervisor's reader sees it).
        self.create_subscription(Bool, "estop", self._on_own_estop, LATCHED_QOS)

    def _on_own_estop(self, msg: Bool, info) -> None:
        if msg.data:
            self.estop.written(int(info["source_timestamp"]))

    def _on_command(self, msg: Float64MultiArray, info) -> None:
        received = time.perf_counter_ns()
        q = np.asarray(msg.data, dtype=float)
        target = self.home[0] + POLICY_OFFSET_RAD
        if abs(q[0] - target) <= 1e-9:
            self.armed.set()  # AUTONOMOUS: the command is the policy's target
        elif q[0] < target:
            # The hold heads for HOME at the velocity limit (holds are step-limited too): the first
            # command off the policy's target after the e-stop is the hold.
            self.estop.stop(received, int(info["source_timestamp"]))

    def _on_pong(self, _msg: UInt64, info) -> None:
        self.echo.stop(time.perf_counter_ns(), int(info["source_timestamp"]))


def helper_main(role: str) -> int:
    """--echo: answer every ping with a pong from a callback on a thread of its own.
    --traffic: robot, policy and camera traffic; prints the image rate heard when stopped (SIGINT)."""
    rclpy.init()
    if role == "echo":
        node = Node("bench_estop_echo")
        pong_pub = node.create_publisher(UInt64, PONG_TOPIC, ECHO_QOS)
        node.create_subscription(UInt64, PING_TOPIC, pong_pub.publish, ECHO_QOS)
    else:
        model = RobotModel.from_file(urdf_path())
        node = Traffic(model.joint_names, _home(model))
    spinner = SpinningNode(node)
    try:
        spinner.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if isinstance(node, Traffic):
            print(json.dumps({"images_received_per_s": round(node.images_per_s(), 1)}), flush=True)
        spinner.close()
        rclpy.try_shutdown()
    return 0


def _home(model: RobotModel) -> np.ndarray:
    """Mid-range of every joint [rad]: where the robot stands and the hold the e-stop must send."""
    limits = limits_from_urdf(model, model.joint_names)
    return (limits.lower + limits.upper) / 2


def _helper(role: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), f"--{role}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _stop(process: subprocess.Popen) -> str:
    """SIGINT (rclpy's clean shutdown on every distribution), then kill; returns its stdout."""
    process.send_signal(signal.SIGINT)
    try:
        out, _ = process.communicate(timeout=10.0)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return out or ""


def _reset(probe: Probe, timeout_s: float) -> int:
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


KNOBS_OFF = {"sched_policy": "other", "sched_priority": 0, "lock_memory": False}
# What the shipped knobs give a process without CAP_SYS_NICE, an rtprio limit or a memlock limit: the
# refused scheduling and memory lock fall back to SCHED_OTHER; the GIL switch interval still applies.
UNPRIVILEGED = {**ROBOT_REALTIME["supervisor"], **KNOBS_OFF}
# Supervisor configurations measured, by the suffix of their figures in the JSON.
CONFIGURATIONS = {"_knobs_off": KNOBS_OFF, "_unprivileged": UNPRIVILEGED, "": ROBOT_REALTIME["supervisor"]}
NAMES = {"": "knobs on", "_knobs_off": "knobs off", "_unprivileged": "unprivileged"}
BLOCKS = 4  # trial blocks per supervisor run: quiet, loaded, quiet, loaded


def _probe_threads_follow_main() -> None:
    """Give this process's other threads the main thread's SCHED_FIFO (--probe-priority), without
    SCHED_RESET_ON_FORK: that flag, which keeps the processes the main thread starts at SCHED_OTHER,
    also resets every thread created after it (the kernel's fork path is the threads' too)."""
    main_policy = os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK
    if main_policy != os.SCHED_FIFO:
        return
    priority = os.sched_getparam(0).sched_priority
    main = threading.get_native_id()
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        if tid != main:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))


def run_supervisor(n_trials: int, knobs: dict, load: BusyLoad) -> dict:
    """One supervisor process (real-time knob parameters `knobs`: one of CONFIGURATIONS) and
    `n_trials` e-stop trials in BLOCKS blocks alternating quiet and loaded. Returns per phase
    {"reactions_ms", "echo_ms"} lists, misses, and what the supervisor reported applying."""
    urdf = str(urdf_path())
    model = RobotModel.from_file(urdf)
    home = _home(model)
    params = {"robot_description": urdf, "auto_arm": True, "handover_ramp_s": 0.0,
              "policy_timeout_s": 0.5, "joint_state_timeout_s": 0.5,
              **knobs}
    log = Path(tempfile.mkdtemp(prefix="bench_estop_")) / "graph.log"
    launcher = GraphLauncher([NodeDecl("supervisor", "supervisor", params)], echo=False, log_file=log)
    helper_env = {**os.environ}
    use_dds_profile(helper_env)
    context = Context()
    rclpy.init(context=context)
    spinning = SpinningNode(Probe(context, home))
    _probe_threads_follow_main()  # its executor's and DDS's threads, made after the main thread's policy
    probe = spinning.node
    realtime: dict[str, str] = {}
    probe.create_subscription(DiagnosticArray, "supervisor/realtime",
                              lambda m: realtime.update(cv.diagnostic_values(m)), LATCHED_QOS)
    per_phase: dict[str, dict[str, list[float]]] = {
        phase: {"reactions_ms": [], "echo_ms": [], "reactions_to_publication_ms": [], "echo_to_publication_ms": []}
        for phase in (QUIET, LOADED)}
    reset_tries: list[int] = []
    missed = echo_missed = 0
    traffic = _helper("traffic", helper_env)
    echo = _helper("echo", helper_env)
    launcher.start()
    traffic_report = ""
    try:
        if not probe.armed.wait(60.0):
            raise RuntimeError(f"supervisor never armed; see {log}")
        _wait_for(lambda: probe.ping_pub.get_subscription_count() > 0 and probe.count_publishers(PONG_TOPIC) > 0,
                  30.0, "the echo process")
        started = time.monotonic()
        block = max(1, n_trials // BLOCKS)
        phase = QUIET
        for trial in range(n_trials):
            if trial % block == 0:
                phase = load.phase(interleaved(BLOCKS)[min(trial // block, BLOCKS - 1)])
                time.sleep(0.5)  # let the switch settle
            if not probe.armed.wait(10.0):
                raise RuntimeError(f"supervisor did not re-arm; see {log}")
            probe.estop.start(lambda: probe.estop_pub.publish(Bool(data=True)))
            if probe.estop.done.wait(5.0):
                per_phase[phase]["reactions_ms"].append(probe.estop.elapsed_ns / 1e6)
                if probe.estop.request_written.wait(5.0):
                    per_phase[phase]["reactions_to_publication_ms"].append(probe.estop.to_publication_ns / 1e6)
            else:
                missed += 1
            # Commands arrive in order: once the hold is here, no pre-e-stop command is in flight,
            # so the next policy target seen means the reset re-armed.
            probe.armed.clear()
            probe.estop_pub.publish(Bool(data=False))
            reset_tries.append(_reset(probe, 10.0))
            probe.echo.start(lambda: probe.ping_pub.publish(UInt64(data=0)))
            if probe.echo.done.wait(5.0):
                per_phase[phase]["echo_ms"].append(probe.echo.elapsed_ns / 1e6)
                per_phase[phase]["echo_to_publication_ms"].append(probe.echo.to_publication_ns / 1e6)
            else:
                echo_missed += 1
        load.phase(False)
        elapsed = time.monotonic() - started
    finally:
        _stop(echo)
        traffic_report = _stop(traffic)
        launcher.shutdown()
        spinning.close()
        rclpy.try_shutdown(context=context)
    images_per_s = next((json.loads(line)["images_received_per_s"] for line in traffic_report.splitlines()
                         if line.startswith("{")), 0.0)
    return {"per_phase": per_phase, "missed": missed, "echo_missed": echo_missed, "reset_tries": reset_tries,
            "trials_per_s": n_trials / elapsed, "images_per_s": images_per_s,
            "realtime": {k: realtime.get(k, "") for k in ("sched_policy", "sched_priority", "memory_locked",
                                                           "refused")}}


SLOW_REACTION_MS = 100.0  # [ms] a reaction this late waited for more than a scheduling delay


def run(quick: bool = False, trials: int | None = None, busy: int | None = None,
        busy_own_sessions: bool = False) -> dict:
    """E-stop reaction times [ms] with the supervisor's real-time knobs off, unprivileged, then on
    (as the robot graph ships them), each over trials alternating quiet and loaded (one busy process
    per CPU):
    "estop_reaction_ms" (quiet, knobs on), "estop_reaction_loaded_ms" (loaded, knobs on), the same
    "..._knobs_off_ms" and "..._unprivileged_ms", and the idle echo round trip of each phase as the
    machine's floor. `busy`: busy processes in the loaded phases (default one per CPU);
    `busy_own_sessions`: each in a session of its own (benchmarking.BusyLoad)."""
    n_trials = trials or (100 if quick else 1000)
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randrange(150, 230)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    load_before = os.getloadavg()[0]
    out: dict = {}
    profile_env = dict(os.environ)
    use_dds_profile(profile_env)
    with BusyLoad(busy, own_sessions=busy_own_sessions) as load:
        runs = {suffix: run_supervisor(n_trials, knobs, load) for suffix, knobs in CONFIGURATIONS.items()}
    for suffix, result in runs.items():
        for phase in (QUIET, LOADED):
            name = "" if phase == QUIET else "_loaded"
            estop = latency_stats(np.array(result["per_phase"][phase]["reactions_ms"]))
            echo = latency_stats(np.array(result["per_phase"][phase]["echo_ms"]))
            out[f"estop_reaction{name}{suffix}_ms"] = estop
            out[f"reactions_over_100ms{name}{suffix}"] = int(
                np.sum(np.array(result["per_phase"][phase]["reactions_ms"]) > SLOW_REACTION_MS))
            out[f"echo_round_trip{name}{suffix}_ms"] = echo
            out[f"estop_over_echo_p99{name}{suffix}"] = (round(estop["p99"] / echo["p99"], 2)
                                                          if echo["n"] else None)
            for key in ("reactions", "echo"):
                figure = "estop_reaction" if key == "reactions" else "echo_round_trip"
                out[f"{figure}{name}{suffix}_to_publication_ms"] = latency_stats(
                    np.array(result["per_phase"][phase][f"{key}_to_publication_ms"]))
        out[f"missed_reactions{suffix}"] = result["missed"]
        out[f"echo_missed{suffix}"] = result["echo_missed"]
        out[f"realtime{suffix}"] = result["realtime"]
        out[f"trials_per_s{suffix}"] = round(result["trials_per_s"], 2)
        out[f"images_received_per_s{suffix}"] = result["images_per_s"]
    out["reset_tries_mean"] = round(float(np.mean(runs[""]["reset_tries"])), 3)
    out["load"] = {**load.report(), "load_average_1min_before": round(load_before, 2)}
    out["trials_per_run"] = n_trials
    out["dds_profile"] = (profile_env.get("FASTDDS_DEFAULT_PROFILES_FILE")
                          or profile_env.get("FASTRTPS_DEFAULT_PROFILES_FILE"))
    out["target_p99_ms"] = 10.0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 trials instead of 1000")
    parser.add_argument("--trials", type=int, default=None, help="number of e-stop trials")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--busy", type=int, default=None,
                        help="busy processes in the loaded blocks (default: one per CPU)")
    parser.add_argument("--busy-own-sessions", action="store_true",
                        help="start each busy process in a session of its own (as work started elsewhere)")
    parser.add_argument("--probe-priority", type=int, default=0,
                        help="run the probe (this process: the e-stop button and the receiving end) at "
                             "SCHED_FIFO this priority, below the supervisor's 60, as a robot's joystick "
                             "driver and controller manager could; its children (supervisor, echo, traffic, "
                             "busy load) stay SCHED_OTHER (SCHED_RESET_ON_FORK). 0: as started")
    # The helper processes (this script again): the echo reference and the traffic.
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traffic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo or args.traffic:
        return helper_main("echo" if args.echo else "traffic")
    if args.busy is not None and args.busy < 1:
        parser.error(f"--busy must be at least 1, got {args.busy}")
    if not 0 <= args.probe_priority < 60:
        parser.error(f"--probe-priority must be in [0, 59] (below the supervisor's 60), got {args.probe_priority}")
    if args.probe_priority:
        try:  # before any thread (DDS's included) exists: they inherit it
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(args.probe_priority))
        except OSError as err:
            parser.error(f"--probe-priority {args.probe_priority}: SCHED_FIFO refused ({err.strerror}; "
                         "docs/deployment.md: limits.conf rtprio)")
    result = run(quick=args.quick, trials=args.trials, busy=args.busy, busy_own_sessions=args.busy_own_sessions)
    result["probe_priority"] = args.probe_priority
    for suffix, knobs in NAMES.items():
        for name, phase in (("", "quiet"), ("_loaded", "loaded")):
            stats, echo = result[f"estop_reaction{name}{suffix}_ms"], result[f"echo_round_trip{name}{suffix}_ms"]
            print(f"{knobs}, {phase}: e-stop [ms] n {stats['n']} p50 {stats['p50']} p99 {stats['p99']} "
                  f"max {stats['max']}; echo p50 {echo['p50']} p99 {echo['p99']}; "
                  f"p99 ratio {result[f'estop_over_echo_p99{name}{suffix}']}; "
                  f"over {SLOW_REACTION_MS:.0f} ms {result[f'reactions_over_100ms{name}{suffix}']}")
        print(f"{knobs}: supervisor {result[f'realtime{suffix}']}, missed {result[f'missed_reactions{suffix}']}")
    print(f"load {result['load']}; DDS profile {result['dds_profile']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
