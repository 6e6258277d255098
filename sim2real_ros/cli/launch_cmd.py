"""`sim2real launch sim|robot|replay`: start a declared graph without launch_ros."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import threading
from pathlib import Path

from ..core.errors import Sim2RealError
from ..graph import BRINGUP_FIELDS, MODES, GraphArgs, bringup_problems, declare_graph
from ..hardware.emulated_arm import EMULATOR_PRIORITY, start_emulated_arm
from ..robots import ROBOT_NAMES, sim_params_for
from ..runtime.launcher import GraphLauncher
from ..runtime.lifeline import launcher_environment


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch arguments of docs/design.md §2 / launch/*.launch.py, as command-line options."""
    defaults = GraphArgs()
    parser.add_argument("--namespace", default=defaults.namespace, help="push the graph into a namespace")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=defaults.robot,
                        help="robot (docs/robots.md): its URDF, sim params and tool link are the defaults")
    parser.add_argument("--robot-description", default=defaults.robot_description,
                        help="URDF path (default: the robot's)")
    parser.add_argument("--params-file", default=defaults.params_file, help="ROS parameters YAML")
    parser.add_argument("--checkpoint", default=None,
                        help="policy checkpoint (default: the robot's shipped reach policy, docs/robots.md)")
    parser.add_argument("--use-sim-time", choices=("true", "false"), default=None,
                        help="default: true in sim mode, false otherwise")
    parser.add_argument("--camera-image-topic", default=defaults.camera_image_topic)
    parser.add_argument("--camera-info-topic", default=defaults.camera_info_topic)
    parser.add_argument("--joint-states-topic", default=defaults.joint_states_topic)
    parser.add_argument("--command-topic", default=defaults.command_topic,
                        help="the ros2_control forward position controller's command topic")
    parser.add_argument("--ee-link", default=defaults.ee_link,
                        help="tool link for the sim task and Cartesian jogging (e.g. panda_grasptarget)")
    parser.add_argument("--preprocess-in-policy", action=argparse.BooleanOptionalAction, default=None,
                        help="no camera_preprocessor: policy_node preprocesses the camera in its own process "
                             "(one image hop and one process fewer on the camera path) and runs the checkpoint's "
                             "ONNX export when one lies beside it; default: on for robot, off for sim and replay")
    parser.add_argument("--viz", action="store_true", help="add viz_node: a live Foxglove view (docs/viz.md)")
    parser.add_argument("--viz-port", type=int, default=defaults.viz_port, help="viz_node's WebSocket port")
    parser.add_argument("--viz-host", default=defaults.viz_host,
                        help="address viz_node listens on (default 127.0.0.1; 0.0.0.0 = every interface)")
    bringup = parser.add_argument_group("robot bring-up (an SO-101 on its Feetech bus; docs/so101.md)")
    bringup.add_argument("--port", default=defaults.port,
                         help="the arm's servo bus (/dev/ttyACM0, /dev/serial/by-id/...): start feetech_driver")
    bringup.add_argument("--calibration", default=defaults.calibration,
                         help="the arm's LeRobot calibration JSON (required with --port)")
    bringup.add_argument("--camera", default=defaults.camera,
                         help="start camera_node on this source: a device index (0), /dev/videoN or a video file")
    bringup.add_argument("--camera-calibration", default=defaults.camera_calibration,
                         help="the camera's ROS calibration YAML (default: the sim camera's, config/camera_sim.yaml)")
    bringup.add_argument("--leader-port", default=defaults.leader_port,
                         help="a leader arm's servo bus: start leader_arm (command/teleop)")
    bringup.add_argument("--leader-calibration", default=defaults.leader_calibration,
                         help="the leader arm's LeRobot calibration JSON (required with --leader-port)")
    bringup.add_argument("--estop-heartbeat", dest="estop_heartbeat_s", type=float, default=defaults.estop_heartbeat_s,
                         metavar="S", help="the supervisor's estop_heartbeat_timeout_s [s]: an `estop` publisher "
                                           "silent this long stops the arm, and counts as a live stop source")
    bringup.add_argument("--emulate", action="store_true",
                         help="rehearse on an emulated arm: start `sim2real emulate-bus`, generate its calibration, "
                              "use its pty as --port and the sim's camera following joint_states")
    bringup.add_argument("--emulate-faults", nargs="*", default=[], metavar="KIND:ID:N",
                         help="with --emulate: faults of the emulated servos (sim2real emulate-bus --faults), "
                              "e.g. overheat:2:500")
    bringup.add_argument("--emulate-realtime-priority", type=int, default=EMULATOR_PRIORITY, metavar="N",
                         help="with --emulate: the emulator's SCHED_FIFO priority (default %(default)s, above the "
                              "graph's nodes, as real servos never wait for the host's CPU; 0: as started)")
    bringup.add_argument("--emulate-goal-log", default=None, help=argparse.SUPPRESS)  # tests, benchmarks


def graph_args_from(args: argparse.Namespace) -> GraphArgs:
    fields = {f.name for f in dataclasses.fields(GraphArgs)}
    values = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    if args.use_sim_time is not None:
        values["use_sim_time"] = args.use_sim_time == "true"
    return GraphArgs(**values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", choices=MODES)
    add_graph_arguments(parser)
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds [s]")
    parser.add_argument("--stop-on-exit", action="store_true", help="stop the graph when any node exits")


def _checkpoint_robot_problem(graph_args: GraphArgs) -> str | None:
    """Why the graph's checkpoint cannot run on its robot (trained for the other one), or None. A
    missing or unreadable file is left to policy_node, which names it at start-up."""
    from pathlib import Path

    from ..core.errors import CheckpointError, Sim2RealError
    from ..core.policy.backend import load_policy
    from ..robots import check_checkpoint_robot

    if not Path(graph_args.checkpoint).is_file():
        return None
    try:
        spec = load_policy(graph_args.checkpoint, warmup=False).spec
    except (Sim2RealError, ValueError, OSError):
        return None
    try:
        check_checkpoint_robot(spec.joint_names, spec.provenance, graph_args.robot, graph_args.checkpoint)
    except CheckpointError as err:
        return str(err)
    return None


def _usage_problems(args: argparse.Namespace, graph_args: GraphArgs) -> list[str]:
    """Flags that do not fit together or name nothing (before anything starts)."""
    problems = []
    robot_flags = [f"--{f.replace('_', '-')}" for f in BRINGUP_FIELDS if getattr(graph_args, f)]
    if args.mode != "robot" and (robot_flags or args.emulate):
        problems.append(f"{', '.join(robot_flags) or '--emulate'}: only for `sim2real launch robot`")
    if args.emulate_faults and not args.emulate:
        problems.append("--emulate-faults: only with --emulate")
    if args.emulate_realtime_priority != EMULATOR_PRIORITY and not args.emulate:
        problems.append("--emulate-realtime-priority: only with --emulate")
    if not 0 <= args.emulate_realtime_priority <= 99:
        problems.append(f"--emulate-realtime-priority {args.emulate_realtime_priority}: must be in 0..99 "
                        "(0: as started)")
    if args.emulate:
        if graph_args.port or graph_args.calibration:
            problems.append("--emulate: the emulator's pty is the port and its calibration is generated; "
                            "drop --port/--calibration")
        if graph_args.robot != "so101":
            problems.append(f"--emulate: emulates an SO-101's servo bus; add --robot so101 (robot is "
                            f"{graph_args.robot!r})")
        if graph_args.camera:
            problems.append("--camera: with --emulate the camera is the sim's, following the emulated arm")
    else:
        problems += bringup_problems(graph_args)
    return problems


def run(args: argparse.Namespace) -> int:
    graph_args = graph_args_from(args)
    problems = _usage_problems(args, graph_args)
    problem = _checkpoint_robot_problem(graph_args)
    if problem:
        problems.append(f"--checkpoint {graph_args.checkpoint}: {problem}")
    if problems:
        for line in problems:
            print(f"sim2real launch: {line}", file=sys.stderr)
        return 2
    env = launcher_environment(os.getpid(), threading.current_thread() is threading.main_thread())
    arm = None
    with tempfile.TemporaryDirectory(prefix="sim2real_emulated_arm_") as scratch:
        if args.emulate:
            try:
                arm = start_emulated_arm(graph_args.description(), sim_params_for(graph_args.robot), Path(scratch),
                                         env=env, goal_log=Path(args.emulate_goal_log) if args.emulate_goal_log
                                         else None, faults=tuple(args.emulate_faults),
                                         realtime_priority=args.emulate_realtime_priority)
            except Sim2RealError as err:
                print(f"sim2real launch: --emulate: {err}", file=sys.stderr)
                return 2
            graph_args = dataclasses.replace(graph_args, port=arm.port, calibration=str(arm.calibration),
                                             sim_camera=True)
            print(f"[launch] emulated arm on {arm.port}, calibration {arm.calibration}, servos at "
                  f"{arm.initial_ticks} ticks", flush=True)
        graph_args = _follow_checkpoint(args.mode, graph_args, Path(scratch))
        try:
            return _run_graph(args, graph_args)
        finally:
            if arm is not None:
                # After the nodes: the driver's shutdown hold still reaches the bus.
                print(f"[launch] emulate-bus stopped: {arm.stop()}", flush=True)


def _follow_checkpoint(mode: str, graph_args: GraphArgs, folder: Path) -> GraphArgs:
    """graph_args that run the checkpoint as it was trained (evaluation.checkpoint_graph), said once."""
    from ..evaluation.checkpoint_graph import follow_checkpoint

    source = graph_args.checkpoint
    graph_args, followed = follow_checkpoint(mode, graph_args, folder)
    if followed:
        print(f"[launch] as {source} was trained: {', '.join(followed)}", flush=True)
    return graph_args


def _run_graph(args: argparse.Namespace, graph_args: GraphArgs) -> int:
    decls = declare_graph(args.mode, graph_args)
    print(f"[launch] {args.mode} graph: " + ", ".join(d.name for d in decls), flush=True)
    launcher = GraphLauncher(decls, namespace=graph_args.namespace)
    launcher.start()
    # Bringing up an arm: a node that dies (a driver whose servo does not answer) stops the graph,
    # rather than leaving a graph that looks up around an arm nobody drives.
    stop_on_exit = args.stop_on_exit or bool(graph_args.port)
    try:
        code = launcher.spin(args.duration, stop_on_exit=stop_on_exit)
    finally:
        codes = launcher.shutdown()
    print("[launch] stopped: " + ", ".join(f"{k}={v}" for k, v in codes.items()), flush=True)
    return code
