"""`sim2real replay --bag PATH --checkpoint CKPT [--mode offline|graph] --report DIR`.

Replays a recorded bag through a checkpoint and compares the predicted action chunks with the
actions recorded in it (by default the robot commands a person sent in TELEOP or SHARED mode).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..episodes.options import HUMAN_MODES, MODES, ReplayOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ReplayOptions()
    parser.add_argument("--bag", required=True, help="rosbag2 folder or .mcap/.db3 file")
    parser.add_argument("--checkpoint", required=True, help="policy checkpoint (or exported .onnx) to evaluate")
    parser.add_argument("--backend", choices=("auto", "torch", "onnxruntime"), default="auto",
                        help="what runs the policy (offline): auto picks by the file (docs/onnx.md)")
    parser.add_argument("--mode", choices=MODES, default="offline",
                        help="offline: the core code without ROS; graph: play the bag into the replay graph")
    parser.add_argument("--report", required=True, help="folder for report.json, report.md and plots")
    topics = parser.add_argument_group("topics (graph names; a namespace prefix in the bag is matched)")
    topics.add_argument("--image-topic", default=defaults.image_topic)
    topics.add_argument("--camera-info-topic", default=defaults.camera_info_topic)
    topics.add_argument("--joint-states-topic", default=defaults.joint_states_topic)
    topics.add_argument("--action-topic", default=defaults.action_topic,
                        help="recorded action: Float64MultiArray commands or a JointState topic (e.g. command/policy)")
    topics.add_argument("--action-joints", default="",
                        help="comma-separated joint order of a Float64MultiArray action topic (default: checkpoint's)")
    topics.add_argument("--supervisor-state-topic", default=defaults.supervisor_state_topic)
    compare = parser.add_argument_group("comparison")
    compare.add_argument("--human-modes", default=",".join(HUMAN_MODES),
                         help="supervisor modes whose commands count as human actions")
    compare.add_argument("--all-actions", action="store_true", help="compare with every command (no mode filter)")
    compare.add_argument("--actuation-latency", type=float, default=defaults.actuation_latency_s,
                         help="a command sent at tau is the target for tau + this [s]")
    compare.add_argument("--pairing-tolerance", type=float, default=defaults.pairing_tolerance_s,
                         help="largest image/joint state stamp difference paired [s]")
    compare.add_argument("--action-tolerance", type=float, default=defaults.action_tolerance_s,
                         help="largest gap between recorded actions interpolated across [s]")
    compare.add_argument("--lag-range", type=float, nargs=2, default=(defaults.lag_min_s, defaults.lag_max_s),
                         metavar=("MIN", "MAX"), help="lag search range [s]")
    compare.add_argument("--lag-step", type=float, default=defaults.lag_step_s, help="lag search step [s]")
    run_group = parser.add_argument_group("running")
    run_group.add_argument("--preprocess-config", default="", help="preprocess YAML (default: the checkpoint's)")
    run_group.add_argument("--max-frames", type=int, default=0, help="stop after this many images (0: all)")
    run_group.add_argument("--rate", type=float, default=defaults.rate, help="graph mode playback rate")
    run_group.add_argument("--device", default=defaults.device, help="torch device (offline)")
    run_group.add_argument("--batch-size", type=int, default=defaults.batch_size,
                           help="offline: observations per forward pass (1: one at a time)")
    run_group.add_argument("--num-threads", type=int, default=defaults.num_threads, help="torch threads (offline)")
    run_group.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def options_from(args: argparse.Namespace) -> ReplayOptions:
    modes = () if args.all_actions else tuple(m.strip().upper() for m in args.human_modes.split(",") if m.strip())
    return ReplayOptions(
        image_topic=args.image_topic, camera_info_topic=args.camera_info_topic,
        joint_states_topic=args.joint_states_topic, action_topic=args.action_topic,
        action_joints=tuple(j.strip() for j in args.action_joints.split(",") if j.strip()),
        supervisor_state_topic=args.supervisor_state_topic, human_modes=modes,
        actuation_latency_s=args.actuation_latency, pairing_tolerance_s=args.pairing_tolerance,
        action_tolerance_s=args.action_tolerance, lag_min_s=args.lag_range[0], lag_max_s=args.lag_range[1],
        lag_step_s=args.lag_step, preprocess_config=args.preprocess_config, max_frames=args.max_frames,
        rate=args.rate, device=args.device, num_threads=args.num_threads, plots=not args.no_plots,
        backend=args.backend, batch_size=args.batch_size,
    )


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError

    try:
        options = options_from(args)
        if args.mode == "graph":
            from ..runtime.replay_graph import evaluate_bag_in_graph

            report = evaluate_bag_in_graph(Path(args.bag), Path(args.checkpoint), Path(args.report), options)
        else:
            from ..evaluation.replay import evaluate_bag

            report = evaluate_bag(Path(args.bag), Path(args.checkpoint), args.mode, Path(args.report), options)
    except Sim2RealError as err:
        print(f"sim2real replay: {err}", file=sys.stderr)
        return 2
    overall = report["metrics"]["overall"]
    frames = report["frames"]
    print(f"{frames['evaluated']} of {frames['images']} frames evaluated ({frames['skipped_total']} skipped: "
          f"{ {k: v for k, v in frames['skipped'].items() if v} }); MAE {overall['mae']} rad, RMSE {overall['rmse']} "
          f"rad; report in {args.report}/report.md")
    return 0 if frames["evaluated"] > 0 else 1
