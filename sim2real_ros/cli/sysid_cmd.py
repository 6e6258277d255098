"""`sim2real sysid ...`: system identification of the real robot.

  sysid latency --bag PATH --command-topic T --state-topic T [--json]
      model-free actuation latency per joint (and overall) from commanded vs measured positions;
      the number to put in the actuator node's `actuation_latency`.
  sysid excite --out CMDS.csv
      a safe excitation sequence (steps and chirps, one joint at a time, within the URDF limits) to
      play on the robot under the supervisor while recording, for `sysid latency` and later fits.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.errors import Sim2RealError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sysid_command", required=True)

    latency = sub.add_parser("latency", help="actuation latency from a recorded bag")
    latency.add_argument("--bag", required=True, type=Path, help="rosbag2 folder (sqlite3 or MCAP)")
    latency.add_argument(
        "--command-topic", required=True,
        help="commanded positions: sensor_msgs/JointState or std_msgs/Float64MultiArray",
    )
    latency.add_argument("--state-topic", required=True, help="measured positions: sensor_msgs/JointState")
    latency.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    latency.add_argument("--min-lag", type=float, default=-0.5, help="smallest lag searched [s] (default -0.5)")
    latency.add_argument("--max-lag", type=float, default=2.0, help="largest lag searched [s] (default 2.0)")
    latency.add_argument("--start", type=float, default=None, help="window start [s] after the first message")
    latency.add_argument("--end", type=float, default=None, help="window end [s] after the first message")
    latency.add_argument(
        "--time-source", choices=("auto", "header", "log"), default="auto",
        help="header stamps or recorder log times (auto: header stamps when sane)",
    )
    latency.add_argument(
        "--unwrap", default="auto",
        help="measured positions that wrap: auto (detect), none, or the period [rad]",
    )

    excite = sub.add_parser("excite", help="write a safe excitation command sequence (CSV or YAML)")
    excite.add_argument("--out", required=True, type=Path, help="output file: .csv or .yaml")
    excite.add_argument(
        "--robot-description", default=None,
        help="URDF XML or file (default: the package's arm6.urdf)",
    )
    excite.add_argument("--rate", type=float, default=50.0, help="command rate [Hz] (default 50)")
    excite.add_argument(
        "--amplitude", type=float, default=0.15,
        help="largest excursion from the start pose, as a fraction of each joint's range (default 0.15)",
    )
    excite.add_argument(
        "--speed-fraction", type=float, default=0.2,
        help="largest commanded speed as a fraction of the URDF velocity limit (default 0.2)",
    )
    excite.add_argument("--joints", nargs="*", default=None, help="joints to excite (default: all movable)")


def _run_latency(args: argparse.Namespace) -> int:
    from ..sysid.bag_io import load_streams
    from ..sysid.latency import LatencyOptions, estimate_latency, format_report

    options = LatencyOptions(
        min_lag_s=args.min_lag, max_lag_s=args.max_lag, window_s=(args.start, args.end),
        time_source=args.time_source, unwrap=args.unwrap,
    )
    streams = load_streams(args.bag, [args.command_topic, args.state_topic])
    report = estimate_latency(streams[args.command_topic], streams[args.state_topic], options)
    if args.json:
        data = report.to_dict()
        data["bag"] = str(args.bag)
        print(json.dumps(data, indent=2))
    else:
        print(format_report(report))
    return 0


def _run_excite(args: argparse.Namespace) -> int:
    from ..sysid.excite import ExciteOptions, excitation_for_robot, write_sequence

    options = ExciteOptions(
        rate_hz=args.rate, amplitude_fraction=args.amplitude, speed_fraction=args.speed_fraction,
    )
    sequence = excitation_for_robot(args.robot_description, options, args.joints)
    write_sequence(sequence, args.out)
    print(
        f"wrote {args.out}: {len(sequence.times_s)} commands over {sequence.times_s[-1]:.1f} s for joints "
        f"{list(sequence.joint_names)}; play it under the supervisor while recording, then run sysid latency"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        if args.sysid_command == "latency":
            return _run_latency(args)
        return _run_excite(args)
    except Sim2RealError as err:
        print(f"sim2real sysid {args.sysid_command}: {err}", file=sys.stderr)
        return 2
