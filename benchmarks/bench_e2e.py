"""End-to-end latency: camera capture stamp -> command on the robot topic, two ways.

`e2e_latency_ms` (the headline): the robot graph on the wall clock, as deployed. The nodes this
stack runs on the robot's computer (`sim2real launch robot` with the shipped policy: policy_node
preprocessing the camera and running the policy's ONNX export, actuator_node, supervisor) run as
processes; the two-process torch graph of before (camera_preprocessor) is measured beside it
(`..._two_process` keys). The bottom of the graph is a
stand-in for the robot's own drivers (this script with --robot, its own process): a camera
publishing 320x240 rgb8 frames at 30 Hz, stamped at publication (a real driver stamps at exposure,
so its own readout latency comes on top and is not the stack's), pre-rendered by the PyBullet sim
at start-up so that rendering does not load the machine during the measurement (on a robot the
camera does its own imaging), and a position-controlled arm publishing joint_states at 100 Hz that
follows the commands with a 50 ms first-order lag (a ros2_control forward position controller), and
an idle joystick publishing Joy at 20 Hz (the robot graph's supervisor arms only with a live stop
source, `require_stop_source`). The supervisor is armed through supervisor/arm, as an operator would.

Load (issue 36): the robot graph runs twice, with the real-time knobs off and then as shipped
(graph.ROBOT_REALTIME: supervisor and actuator SCHED_FIFO, memory locked; applied only where the
process may, what was applied is in `realtime`), and each run alternates quiet and loaded segments
(one busy process per CPU beside it, benchmarking.BusyLoad): `e2e_latency_ms` /
`e2e_latency_loaded_ms` (knobs on) and `..._knobs_off_ms`, with the machine's load per phase in
`load` (the load of everything on the machine, not only ours).

`e2e_latency_sim_graph_ms`: the full sim graph (sim node rendering at 30 Hz on this same machine,
plus the four nodes), on sim time. Receipt times are converted to sim time through the clock
messages, so it is the latency the simulated robot experiences, with the sim's real-time factor
beside it: on 2 cores, rendering and five processes saturate the CPU, which is what this shows.

For each action chunk (stamped with its image's capture time, docs/design.md §3) the figure takes the
first command/policy tick after the chunk, then the first robot command after that tick: the first
command that can carry the new observation. The robot graph's figures use the times each message
was published (the DDS source timestamp, the publishing process's system clock: one host, one
clock): the bench is one more process on the same two cores, and the order in which it happens to
take a chunk and the tick that carries it (both waiting for it) would otherwise decide whether a
whole 10 ms tick period is counted. A tick published within the few tenths of a millisecond between
the chunk's publication and the actuator's receipt is counted as carrying it, so a rare figure is a
tick period short; `..._bench_receipt_ms` keeps the figures by the bench's receipt times (the old
way, which errs the other way).

    .venv/bin/python benchmarks/bench_e2e.py [--json OUT] [--quick] [--robot-graph-only | --sim-graph-only]
"""
from __future__ import annotations

import contextlib
import os
import random
import signal
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

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState, Joy  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from sim2real_ros.benchmarking import LOADED, QUIET, BusyLoad, bench_main, interleaved, latency_stats  # noqa: E402
from sim2real_ros.conversions import diagnostic_values, stamp_to_ns  # noqa: E402
from sim2real_ros.evaluation.checkpoint_graph import lean_policy  # noqa: E402
from sim2real_ros.graph import ROBOT_REALTIME, GraphArgs, declare_graph  # noqa: E402
from sim2real_ros.nodes.common import LATCHED_QOS, RELIABLE_LATEST_QOS  # noqa: E402
from sim2real_ros.paths import config_path, default_policy_path, urdf_path  # noqa: E402
from sim2real_ros.runtime.graph_session import SimGraphSession  # noqa: E402

CAMERA_HZ = 30.0  # [Hz]
JOINT_STATE_HZ = 100.0  # [Hz]
JOY_HZ = 20.0  # [Hz] the joy node's autorepeat rate, well above 1 / joy_timeout_s
ARM_LAG_S = 0.05  # [s] first-order lag of the stand-in arm's position controller
# The timing subscriptions keep every message: with the graph's own depth 1 (RELIABLE_LATEST_QOS), a
# tick published while this process waited for a CPU was replaced by the next one before it was
# taken, and the chunk it carried was paired with that later tick (the loaded chunk -> tick "tail"
# of 5-7 ms until 2026-12-07: docs/benchmarks.md). Reliable, as the publishers are.
TIMING_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


def _checkpoint(tmp: Path) -> Path:
    shipped = default_policy_path()
    if shipped.is_file():
        return shipped
    from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
    from sim2real_ros.core.robot.urdf import RobotModel
    from sim2real_ros.training.untrained import init_checkpoint

    path = tmp / "untrained.safetensors"
    init_checkpoint(path, RobotModel.from_file(urdf_path()).joint_names,
                    PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    return path


def _first_carrier_latencies(chunks: list, ticks: np.ndarray, commands: np.ndarray, to_stamp_time,
                             stages: dict[str, list[float]] | None = None,
                             images: dict[int, int] | None = None) -> list[float]:
    """[ms] per chunk (receipt time, msg): capture stamp -> the first robot command after the first
    command/policy tick after the chunk arrived. Receipt times in one clock; to_stamp_time maps them
    to the stamps' clock [ns]. `stages`, when given, gets the two parts of each figure [ms]:
    "capture_to_chunk" (preprocessor, policy inference, DDS: the camera path) and
    "chunk_to_command" (actuator tick, supervisor, DDS: the control path; split at the carrying
    tick into "chunk_to_tick" and "tick_to_command"); with `images` (capture
    stamp [ns] -> receipt of its policy/image at the bench), the camera path split in two as well:
    "capture_to_policy_image" (two image hops and the preprocessor) and "policy_image_to_chunk"
    (pairing, inference, the chunk's hop)."""
    latencies = []
    for received, msg in chunks:
        i = np.searchsorted(ticks, received)
        if i >= len(ticks):
            continue
        j = np.searchsorted(commands, ticks[i])
        if j >= len(commands):
            continue
        captured = stamp_to_ns(msg.header.stamp)
        latencies.append((to_stamp_time(commands[j]) - captured) / 1e6)
        if stages is not None:
            stages.setdefault("capture_to_chunk", []).append((to_stamp_time(received) - captured) / 1e6)
            stages.setdefault("chunk_to_command", []).append((commands[j] - received) / 1e6)
            # ... split at the carrying tick: the actuator's side, then the supervisor's.
            stages.setdefault("chunk_to_tick", []).append((ticks[i] - received) / 1e6)
            stages.setdefault("tick_to_command", []).append((commands[j] - ticks[i]) / 1e6)
            image_received = None if images is None else images.get(captured)
            if image_received is not None:
                stages.setdefault("capture_to_policy_image", []).append(
                    (to_stamp_time(image_received) - captured) / 1e6)
                stages.setdefault("policy_image_to_chunk", []).append((received - image_received) / 1e6)
    return latencies


# ----------------------------------------------------------------------------------------------
# The robot stand-in (--robot): camera driver + position-controlled arm, in a process of its own.
def _apply_driver_knobs() -> None:
    """The robot graph's camera_node knobs on the stand-in (graph.ROBOT_REALTIME, as shipped): on
    a robot the frames come from camera_node, whose nice keeps the time between a frame's stamp and
    its publication from waiting behind the machine's other work; applied where this process may."""
    from sim2real_ros.core.control.realtime import RealtimeRequest, plan_knobs
    from sim2real_ros.nodes.realtime import apply_plan, read_permissions

    request = RealtimeRequest(**{("policy" if key == "sched_policy" else "priority" if key == "sched_priority"
                                  else key): value for key, value in ROBOT_REALTIME["camera_node"].items()})
    report = apply_plan(request, plan_knobs(request, read_permissions()))
    print(f"stand-in driver knobs: nice {report.nice}" + (f", refused {list(report.refused)}" if report.refused
                                                          else ""), flush=True)


def robot_main() -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.node import Node

    from sim2real_ros import conversions as cv
    from sim2real_ros.nodes.common import (
        JOINT_STATE_QOS,
        JOY_QOS,
        SENSOR_QOS,
        freeze_startup_objects,
        single_threaded_executor,
    )
    from sim2real_ros.sim.params import load_sim_params
    from sim2real_ros.sim.world import SimWorld

    world = SimWorld(load_sim_params(None), str(urdf_path()), seed=7)
    frames = []
    for _ in range(8):  # a few targets, so the policy sees changing images
        world.reset()
        frames.append(world.render())
    camera, names = world.camera, list(world.joint_names)
    q = world.joint_positions()
    world.close()

    rclpy.init()
    node = Node("bench_e2e_robot")
    image_pub = node.create_publisher(Image, "camera/image_raw", SENSOR_QOS)
    info_pub = node.create_publisher(CameraInfo, "camera/camera_info", SENSOR_QOS)
    joint_pub = node.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
    joy_pub = node.create_publisher(Joy, "joy", JOY_QOS)
    state = {"q": q.copy(), "target": q.copy()}
    lock = threading.Lock()

    def on_command(msg: Float64MultiArray) -> None:
        with lock:
            state["target"] = np.asarray(msg.data, dtype=float)[: len(names)]

    node.create_subscription(Float64MultiArray, "forward_position_controller/commands", on_command, RELIABLE_LATEST_QOS)
    dt = 1.0 / JOINT_STATE_HZ
    alpha = 1.0 - np.exp(-dt / ARM_LAG_S)
    count = {"frame": 0}

    def on_joints() -> None:
        with lock:
            previous = state["q"]
            state["q"] = previous + alpha * (state["target"] - previous)
            q_now, velocity = state["q"].copy(), (state["q"] - previous) / dt
        joint_pub.publish(cv.make_joint_state(names, q_now, node.get_clock().now().nanoseconds, velocity))

    def on_camera() -> None:
        stamp = node.get_clock().now().nanoseconds
        image_pub.publish(cv.array_to_image(frames[count["frame"] % len(frames)], "rgb8", stamp, "camera_link"))
        info_pub.publish(cv.camera_model_to_info(camera, stamp, "camera_link"))
        count["frame"] += 1

    node.create_timer(dt, on_joints)
    node.create_timer(1.0 / CAMERA_HZ, on_camera)
    # An idle joystick, as the joy node with autorepeat: the supervisor's live stop source.
    node.create_timer(1.0 / JOY_HZ, lambda: joy_pub.publish(Joy(axes=[0.0] * 6, buttons=[0] * 15)))
    executor = single_threaded_executor(node)  # as the stack's nodes: a driver in C++ costs less still
    executor.add_node(node)
    if "--driver-knobs" in sys.argv[1:]:
        _apply_driver_knobs()
    freeze_startup_objects()
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()
    print(f"frames {count['frame']}", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------
KNOBS_OFF = {"sched_policy": "other", "sched_priority": 0, "lock_memory": False, "nice": 0}
SEGMENTS = 4  # quiet, loaded, quiet, loaded
SETTLE_S = 0.5  # [s] after switching the load, before a segment counts


def run_robot_graph(checkpoint: Path, duration_s: float, tmp: Path, knobs: bool = True,
                    load: BusyLoad | None = None, parameters: dict[str, dict] | None = None,
                    preprocess_in_policy: bool | None = None, label: str = "") -> dict:
    """The robot graph on the wall clock against the stand-in (see the module docstring).

    knobs: the robot graph's real-time knobs (graph.ROBOT_REALTIME) as shipped, else all off.
    parameters: node name -> parameters set on top (e.g. a per-node `executor`).
    preprocess_in_policy: GraphArgs.preprocess_in_policy; None: as shipped (the lean graph, running the
    checkpoint's ONNX export beside it, as `sim2real launch robot` does: checkpoint_graph.lean_policy).
    False: the two-process graph (camera_preprocessor), keys ending in `_two_process`; True: lean
    with the checkpoint as given, keys ending in `_preprocess_in_policy`; then `label`.
    load: switched quiet / loaded / quiet / loaded over `duration_s`; figures per phase."""
    from rclpy.node import Node

    from sim2real_ros.nodes.common import freeze_startup_objects
    from sim2real_ros.nodes.lean_executor import LeanExecutor
    from sim2real_ros.runtime.launcher import GraphLauncher
    from sim2real_ros.runtime.probe import RosProbe, wait_until

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    robot = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--robot",
                              *(["--driver-knobs"] if knobs else [])], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    extra = {} if knobs else {name: dict(KNOBS_OFF) for name in ROBOT_REALTIME}
    for name, values in (parameters or {}).items():
        extra[name] = {**extra.get(name, {}), **values}
    suffix = (("" if knobs else "_knobs_off") + {None: "", False: "_two_process", True: "_preprocess_in_policy"}
              [preprocess_in_policy] + label)
    args = GraphArgs(checkpoint=str(checkpoint), extra_parameters=extra, preprocess_in_policy=preprocess_in_policy)
    args, chosen = lean_policy("robot", args) if preprocess_in_policy is None else (args, None)
    lean = args.lean("robot")
    graph = declare_graph("robot", args)
    launcher = GraphLauncher(graph, echo=False, log_file=tmp / f"robot_graph{suffix or '_knobs_on'}.log")
    launcher.start()
    probe = RosProbe("bench_e2e_probe")  # arms the supervisor (a service client: rclpy's executor)
    # The timing subscriptions take ~300 messages/s: a node of their own on a LeanExecutor, so the
    # measurement loads the two cores no more than it must.
    node = Node("bench_e2e_timing", context=probe.context)
    timing_executor = LeanExecutor(context=probe.context)
    timing_executor.add_node(node)
    timing_thread = threading.Thread(target=timing_executor.spin, daemon=True)
    try:
        chunks: list = []
        ticks: list = []
        commands: list = []
        realtime: dict[str, dict[str, str]] = {}
        for name in ROBOT_REALTIME:
            node.create_subscription(DiagnosticArray, f"{name}/realtime",
                                     lambda m, n=name: realtime.__setitem__(n, diagnostic_values(m)), LATCHED_QOS)
        actuator: dict[str, str] = {}  # the actuator's latest diagnostics: chunk waits, ticks brought forward
        node.create_subscription(DiagnosticArray, "actuator_node/diagnostics",
                                 lambda m: actuator.update(diagnostic_values(m)), RELIABLE_LATEST_QOS)
        policy: dict[str, str] = {}  # the policy node's: inference time, capture stamp -> chunk published
        node.create_subscription(DiagnosticArray, "policy_node/diagnostics",
                                 lambda m: policy.update(diagnostic_values(m)), LATCHED_QOS)
        # Receipt and publication (DDS source timestamp) in the stamps' clock (the system clock, as
        # the nodes' ROS time off sim time).
        def published(info) -> int:
            return int(info["source_timestamp"])

        node.create_subscription(JointTrajectory, "policy/action_chunk",
                                 lambda m, info: chunks.append((time.time_ns(), m, published(info))), TIMING_QOS)
        node.create_subscription(JointState, "command/policy",
                                 lambda m, info: ticks.append((time.time_ns(), published(info))), TIMING_QOS)
        # Where the camera path's time goes: when each policy image (27 KB) reaches the bench too.
        images: dict[int, tuple[int, int]] = {}
        node.create_subscription(Image, "policy/image",
                                 lambda m, info: images.__setitem__(stamp_to_ns(m.header.stamp),
                                                                    (time.time_ns(), published(info))),
                                 TIMING_QOS)
        node.create_subscription(Float64MultiArray, "forward_position_controller/commands",
                                 lambda m, info: commands.append((time.time_ns(), published(info))), TIMING_QOS)
        freeze_startup_objects()  # no full-collection stall in the timing callbacks either
        timing_thread.start()
        # A node that refused its parameters exits at start-up: say so then, not after the whole wait.
        if not wait_until(lambda: len(ticks) > 10 or bool(launcher.check()), 180.0) or launcher.check():
            exited = ", ".join(f"{name} (exit code {code})" for name, code in launcher.check())
            raise RuntimeError(f"robot graph nodes exited: {exited}; node output in {tmp}" if exited else
                               f"no command/policy from the robot graph within 180 s; node output in {tmp}")
        deadline = time.monotonic() + 60.0
        while True:  # arm as an operator would; refused until joint states and commands are fresh
            response = probe.call(Trigger, "supervisor/arm", timeout_s=10.0)
            if response.success:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"supervisor/arm kept refusing: {response.message}")
            time.sleep(0.2)
        time.sleep(1.5)  # past the hand-over ramp
        windows: list[tuple[str, int, int]] = []
        for loaded in interleaved(SEGMENTS if load is not None else 1):
            phase = load.phase(loaded) if load is not None else QUIET
            time.sleep(SETTLE_S)
            start_ns = time.time_ns()
            time.sleep(duration_s / SEGMENTS if load is not None else duration_s)
            windows.append((phase, start_ns, time.time_ns()))
        if load is not None:
            load.phase(False)
        exited = launcher.check()
        if exited:
            raise RuntimeError(f"robot graph nodes exited: {exited}; output in {tmp}")
        chunk_all = list(chunks)
        tick_rx, tick_pub = np.array(list(ticks), dtype=float).reshape(-1, 2).T
        command_rx, command_pub = np.array(list(commands), dtype=float).reshape(-1, 2).T
        image_all = dict(images)
        latencies: dict[str, list[float]] = {QUIET: [], LOADED: []}
        at_receipt: dict[str, list[float]] = {QUIET: [], LOADED: []}
        periods: dict[str, list[float]] = {QUIET: [], LOADED: []}
        stages: dict[str, dict[str, list[float]]] = {QUIET: {}, LOADED: {}}
        for phase, start_ns, end_ns in windows:
            in_window = [c for c in chunk_all if start_ns <= c[0] < end_ns]
            # In-process preprocessing publishes the policy image after its chunk: no split there.
            split = None if lean else {stamp: times[1] for stamp, times in image_all.items()}
            latencies[phase] += _first_carrier_latencies([(c[2], c[1]) for c in in_window], tick_pub, command_pub,
                                                         lambda t: t, stages[phase], split)
            at_receipt[phase] += _first_carrier_latencies([(c[0], c[1]) for c in in_window], tick_rx, command_rx,
                                                          lambda t: t)
            window_commands = command_pub[(command_pub >= start_ns) & (command_pub < end_ns)]
            periods[phase] += list(np.diff(window_commands) / 1e6)
    finally:
        timing_executor.shutdown(timeout_sec=2.0)
        timing_thread.join(timeout=2.0)
        node.destroy_node()
        probe.close()
        launcher.shutdown(timeout_s=8.0)
        robot.send_signal(signal.SIGINT)
        try:
            robot.communicate(timeout=10.0)
        except subprocess.TimeoutExpired:
            robot.kill()
    # Where the time goes: the camera path (capture -> chunk at the bench) and the control path
    # (chunk -> first carrying command), per phase; their sum is each chunk's e2e figure.
    stage_stats = {phase: {name: latency_stats(values, digits=2) for name, values in sorted(by_stage.items())}
                   for phase, by_stage in stages.items() if by_stage}
    out = {f"policy_file{suffix}": args.checkpoint, **({f"policy_chosen{suffix}": chosen} if chosen else {}),
           f"e2e_stages{suffix}_ms": stage_stats,
           f"e2e_latency{suffix}_ms": latency_stats(latencies[QUIET], digits=2),
           f"e2e_latency{suffix}_bench_receipt_ms": latency_stats(at_receipt[QUIET], digits=2),
           f"robot_command_period{suffix}_ms": latency_stats(periods[QUIET], digits=2),
           f"realtime{suffix}": {name: {k: values.get(k, "") for k in ("sched_policy", "sched_priority",
                                                                        "nice", "memory_locked", "refused")}
                                 for name, values in realtime.items()},
           f"actuator{suffix}": {k: actuator.get(k, "") for k in (
               "chunk_wait_for_tick_ms_p50", "chunk_wait_for_tick_ms_p99", "chunk_wait_for_tick_ms_max",
               "ticks_brought_forward", "grid_placed_for_next_chunk", "ticks_on_arrival", "chunks_accepted",
               "chunk_delivery_ms_p50", "chunk_delivery_ms_p99", "chunk_dispatch_ms_p50", "chunk_dispatch_ms_p99",
               "tick_cpu_ms_p50", "tick_cpu_ms_p99")},
           f"policy_node{suffix}": {k: policy.get(k, "") for k in (
               "inference_ms_p50", "inference_ms_p99", "obs_to_chunk_ms_p50", "obs_to_chunk_ms_p99",
               "obs_to_chunk_ms_max", "obs_to_receipt_ms_p50", "obs_to_receipt_ms_p99",
               "receipt_to_inference_ms_p50", "receipt_to_inference_ms_p99",
               "chunks_published", "chunks_inline", "drops_superseded", "drops_throttled")}}
    if load is not None:
        out[f"e2e_latency_loaded{suffix}_ms"] = latency_stats(latencies[LOADED], digits=2)
        out[f"e2e_latency_loaded{suffix}_bench_receipt_ms"] = latency_stats(at_receipt[LOADED], digits=2)
        out[f"robot_command_period_loaded{suffix}_ms"] = latency_stats(periods[LOADED], digits=2)
    return out


def _so101_checkpoint(tmp: Path) -> Path:
    """The shipped SO-101 policy, else an untrained one with its joints (latency needs no skill)."""
    from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
    from sim2real_ros.core.robot.urdf import RobotModel
    from sim2real_ros.robots import get_robot
    from sim2real_ros.training.untrained import init_checkpoint

    path = tmp / "untrained_so101.safetensors"
    if not path.is_file():
        init_checkpoint(path, RobotModel.from_file(get_robot("so101").urdf_path()).joint_names,
                        PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    return path


def run_sim_graph(checkpoint: Path, duration_s: float, tmp: Path, robot: str = "arm6",
                  camera_render: str = "process", preprocess_in_policy: bool = False, label: str = "",
                  sim_node_parameters: dict | None = None) -> dict:
    """The full sim graph on sim time (see the module docstring); camera_render: the sim node's
    (process: off the physics loop; inline: in it, the old way); preprocess_in_policy: no
    camera_preprocessor (GraphArgs.preprocess_in_policy); sim_node_parameters: more sim node
    parameters (e.g. clock_rate_hz)."""
    from sim2real_ros.runtime.probe import wait_until

    args = GraphArgs(checkpoint=str(checkpoint), robot=robot, preprocess_in_policy=preprocess_in_policy,
                     extra_parameters={"sim_node": {"camera_render": camera_render, **(sim_node_parameters or {})}})
    with SimGraphSession(args, tmp / f"sim_graph_{robot}_{camera_render}{label}.log") as session:
        probe = session.probe
        assert probe is not None
        clocks = probe.collect(Clock, "clock", 50, stamped=True)
        chunks = probe.collect(JointTrajectory, "policy/action_chunk", TIMING_QOS, stamped=True)
        ticks = probe.collect(JointState, "command/policy", TIMING_QOS, stamped=True)
        if not session.wait_for_mode("AUTONOMOUS", 180.0):
            session.check_nodes()
            raise TimeoutError(f"supervisor never armed: {session.mode_reason()}")
        # The supervisor can arm before the probe's /clock subscription has matched the sim's.
        if not wait_until(lambda: len(clocks) > 0, 30.0):
            raise TimeoutError("no /clock message reached the bench in 30 s after the supervisor armed")
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
    latencies = _first_carrier_latencies(chunk_list, np.array([t for t, _ in tick_list]),
                                         np.array([t for t, _ in command_list]),
                                         lambda t: np.interp(t, clock_t, clock_ns))
    return {"e2e_latency_sim_graph_ms": latency_stats(latencies, digits=2),
            "sim_realtime_factor_during": round(rtf, 3)}


def run_sim_graphs(checkpoint: Path, duration_s: float, tmp: Path, rounds: int) -> dict:
    """The sim graph for arm6 and the SO-101 with the camera rendered off the physics loop
    (`process`, shipped), and that with the camera preprocessed in the policy node running the
    policy's ONNX export (`process_in_policy_onnx`: two processes and most of the inference fewer
    on the two cores), in interleaved rounds of one run. Headline `e2e_latency_sim_graph_ms`: arm6,
    process, the last round."""
    checkpoints = {"arm6": checkpoint, "so101": _so101_checkpoint(tmp)}
    exports = {robot: _onnx_export(path, tmp) for robot, path in checkpoints.items()}
    out: dict = {}
    for _ in range(rounds):
        for robot in ("arm6", "so101"):
            for variant in ("process", "process_in_policy_onnx"):
                lean = variant != "process"
                figures = run_sim_graph(exports[robot] if lean else checkpoints[robot], duration_s, tmp, robot,
                                        "process", preprocess_in_policy=lean, label="_in_policy_onnx" if lean else "")
                key = f"sim_graph_{robot}_{variant}"
                out.setdefault(key, []).append({"e2e_ms": figures["e2e_latency_sim_graph_ms"],
                                                "real_time_factor": figures["sim_realtime_factor_during"],
                                                "load_average_1min": round(os.getloadavg()[0], 2)})
    last = out["sim_graph_arm6_process"][-1]
    return {"e2e_latency_sim_graph_ms": last["e2e_ms"], "sim_realtime_factor_during": last["real_time_factor"],
            "sim_graphs": out}


def _onnx_export(checkpoint: Path, tmp: Path) -> Path:
    """The checkpoint exported to ONNX (`sim2real policy export`), for the onnxruntime variant."""
    from sim2real_ros.core.policy.onnx_export import export_onnx

    out = tmp / f"{checkpoint.stem}.onnx"
    export_onnx(checkpoint, out)
    return out


def run(quick: bool = False, sim_graph: bool = True) -> dict:
    """Robot graph as shipped (lean: the camera preprocessed in the policy node's process, the
    policy's ONNX export on onnxruntime) with the real-time knobs off, then on (the headline), then on
    with the policy as a torch checkpoint (keys end in `_preprocess_in_policy`), then the two-process
    graph of before (camera_preprocessor, torch: `_two_process`), each quiet and loaded
    (interleaved), then the sim graph (sim_graph=False: skip it)."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randrange(150, 230)))
    duration_s = 8.0 if quick else 40.0
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_e2e_") as tmp_name, BusyLoad() as load:
        tmp = Path(tmp_name)
        checkpoint = _checkpoint(tmp)
        robot = {**run_robot_graph(checkpoint, duration_s, tmp, knobs=False, load=load),
                 **run_robot_graph(checkpoint, duration_s, tmp, knobs=True, load=load),
                 **run_robot_graph(checkpoint, duration_s, tmp, knobs=True, load=load, preprocess_in_policy=True),
                 **run_robot_graph(checkpoint, duration_s, tmp, knobs=True, load=load, preprocess_in_policy=False)}
        sim = run_sim_graphs(checkpoint, duration_s / 2, tmp, rounds=1 if quick else 2) if sim_graph else {}
    return {**robot, **sim, "load": {**load.report(), "load_average_1min_before": round(load_before, 2)},
            "checkpoint": str(checkpoint), "duration_s": duration_s, "camera_hz": CAMERA_HZ}


if __name__ == "__main__":
    if "--robot" in sys.argv[1:]:
        raise SystemExit(robot_main())
    if "--sim-graph-only" in sys.argv[1:]:  # only the sim graphs: arm6 and SO-101, as shipped and lean
        def sim_only(quick: bool) -> dict:
            os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
            os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randrange(150, 230)))
            load_before = os.getloadavg()[0]
            with tempfile.TemporaryDirectory(prefix="bench_e2e_") as tmp_name:
                tmp = Path(tmp_name)
                out = run_sim_graphs(_checkpoint(tmp), 4.0 if quick else 20.0, tmp, rounds=1 if quick else 2)
            return {**out, "load_average_1min_before": round(load_before, 2)}
        raise SystemExit(bench_main(sim_only, __doc__, [a for a in sys.argv[1:] if a != "--sim-graph-only"]))
    if "--robot-graph-only" in sys.argv[1:]:  # skip the sim graph (a shorter run)
        raise SystemExit(bench_main(lambda quick: run(quick, sim_graph=False), __doc__,
                                    [a for a in sys.argv[1:] if a != "--robot-graph-only"]))
    raise SystemExit(bench_main(run, __doc__))
