"""`sim2real launch sim|robot|replay`: start a declared graph without launch_ros."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from ..graph import MODES, GraphArgs, declare_graph
from ..robots import ROBOT_NAMES
from ..runtime.launcher import GraphLauncher


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch arguments of docs/design.md §2 / launch/*.launch.py, as command-line options."""
    defaults = GraphArgs()
    parser.add_argument("--namespace", default=defaults.namespace, help="push the graph into a namespace")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=defaults.robot,
                        help="robot (docs/robots.md): its URDF, sim params and tool link are the defaults")
    parser.add_argument("--robot-description", default=defaults.robot_description,
                        help="URDF path (default: the robot's)")
    parser.add_argument("--params-file", default=defaults.params_file, help="ROS parameters YAML")
    parser.add_argument("--checkpoint", default=defaults.checkpoint, help="policy checkpoint")
    parser.add_argument("--use-sim-time", choices=("true", "false"), default=None,
                        help="default: true in sim mode, false otherwise")
    parser.add_argument("--camera-image-topic", default=defaults.camera_image_topic)
    parser.add_argument("--camera-info-topic", default=defaults.camera_info_topic)
    parser.add_argument("--joint-states-topic", default=defaults.joint_states_topic)
    parser.add_argument("--command-topic", default=defaults.command_topic,
                        help="the ros2_control forward position controller's command topic")
    parser.add_argument("--ee-link", default=defaults.ee_link,
                        help="tool link for the sim task and Cartesian jogging (e.g. panda_grasptarget)")
    parser.add_argument("--viz", action="store_true", help="add viz_node: a live Foxglove view (docs/viz.md)")
    parser.add_argument("--viz-port", type=int, default=defaults.viz_port, help="viz_node's WebSocket port")
    parser.add_argument("--viz-host", default=defaults.viz_host,
                        help="address viz_node listens on (default 127.0.0.1; 0.0.0.0 = every interface)")


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
    from ..core.policy_backend import load_policy
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


def run(args: argparse.Namespace) -> int:
    graph_args = graph_args_from(args)
    problem = _checkpoint_robot_problem(graph_args)
    if problem:
        print(f"sim2real launch: {problem}", file=sys.stderr)
        return 2
    decls = declare_graph(args.mode, graph_args)
    print(f"[launch] {args.mode} graph: " + ", ".join(d.name for d in decls), flush=True)
    launcher = GraphLauncher(decls, namespace=graph_args.namespace)
    launcher.start()
    try:
        code = launcher.spin(args.duration, stop_on_exit=args.stop_on_exit)
    finally:
        codes = launcher.shutdown()
    print("[launch] stopped: " + ", ".join(f"{k}={v}" for k, v in codes.items()), flush=True)
    return code
