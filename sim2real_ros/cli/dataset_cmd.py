"""`sim2real dataset import DATASET_DIR --out BAG_DIR` and `sim2real dataset export BAG_DIR --out DATASET_DIR`:
LeRobot datasets (v2.1, v3.0) to rosbag2 MCAP bags and back (docs/datasets.md)."""
from __future__ import annotations

import argparse
import json
import sys

from ..core.errors import Sim2RealError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    imp = sub.add_parser("import", help="a LeRobot dataset (v2.0, v2.1, v3.0) -> a rosbag2 MCAP bag")
    imp.add_argument("dataset", help="LeRobot dataset folder (with meta/info.json)")
    imp.add_argument("--out", required=True, help="bag folder to create (must not exist, or be empty)")
    imp.add_argument("--episodes", type=int, nargs="+", default=None,
                     help="episode indices (default: every episode whose data file is present)")
    imp.add_argument("--camera-calibration", nargs="+", default=None, metavar="[KEY=]YAML",
                     help="ROS calibration YAML for every camera, or KEY=YAML per camera "
                          "(default: camera_info marked uncalibrated: K, D, R, P all zero)")
    _add_joint_unit_arguments(imp, "convert the joints from LeRobot's motor units to URDF radians")
    imp.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    imp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    exp = sub.add_parser("export", help="a recorded bag -> a LeRobot v3.0 dataset")
    exp.add_argument("bag", help="rosbag2 folder (or a folder of bags: one bag after the other)")
    exp.add_argument("--out", required=True, help="dataset folder to create (must not exist)")
    exp.add_argument("--fps", type=float, default=30.0, help="frame rate of the dataset [Hz] (default 30)")
    exp.add_argument("--codec", choices=("h264", "av1"), default="h264", help="video codec (default h264)")
    exp.add_argument("--task", default="demonstration",
                     help="task string of episodes whose bag names none (dataset/episode carries one)")
    exp.add_argument("--robot-type", default="unknown", help="info.json robot_type")
    exp.add_argument("--actuation-latency", type=float, default=0.0, metavar="S",
                     help="a command sent at tau is the action of frame tau + S [s] (default 0: LeRobot's "
                          "convention; the actuator's 0.02 gives the fine-tuning labels' point 0)")
    _add_joint_unit_arguments(exp, "write the joints in LeRobot's motor units (as the arm's LeRobot recordings)")
    exp.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    exp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _add_joint_unit_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--calibration", default=None, metavar="JSON",
                        help=f"the arm's LeRobot calibration file: {what} (default: values kept as they are)")
    parser.add_argument("--joint-units", choices=("range", "degrees"), default="range",
                        help="with --calibration: arm joints in LeRobot's -100..100 (default) or degrees "
                             "(use_degrees); the gripper is 0..100 either way")
    parser.add_argument("--robot", default="so101", help="with --calibration: the robot whose URDF gives the "
                                                         "joints (default so101)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "import":
            from ..datasets.lerobot import import_dataset

            summary = import_dataset(args.dataset, args.out, episodes=args.episodes,
                                     camera_calibration=args.camera_calibration, progress=not args.no_progress,
                                     joint_calibration=args.calibration, joint_units=args.joint_units,
                                     robot=args.robot)
            result = summary.to_dict()
        else:
            from ..datasets.lerobot_export import export_bag

            result = export_bag(args.bag, args.out, fps=args.fps, codec=args.codec, task=args.task,
                                robot_type=args.robot_type, actuation_latency_s=args.actuation_latency,
                                progress=not args.no_progress, joint_calibration=args.calibration,
                                joint_units=args.joint_units, robot=args.robot).to_dict()
    except Sim2RealError as err:
        print(f"sim2real dataset {args.action}: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if args.action == "import":
        rate = result["frames"] / result["elapsed_s"] if result["elapsed_s"] else 0.0
        print(f"{result['bag']}: {len(result['episodes'])} episode(s) {result['episodes']}, {result['frames']} frames "
              f"from {result['dataset']} ({result['codebase_version']}) in {result['elapsed_s']:.1f} s "
              f"({rate:.0f} frames/s)")
        for topic, count in result["messages"].items():
            print(f"  {topic}: {count}")
    else:
        print(f"{result['dataset']}: {result['episodes']} episode(s), {result['frames']} frames "
              f"at {result['fps']:g} fps from {result['bags']} in {result['elapsed_s']:.1f} s")
    for problem in result.get("problems", []):
        print(f"  note: {problem}", file=sys.stderr)
    return 0
