"""`sim2real sysid ...`: system identification of the real robot.

  sysid latency --bag PATH --command-topic T --state-topic T [--json] [--method model|correlation]
      actuation dead time per joint (and overall) from commanded vs measured positions: the onset
      of a fitted servo response (dead time, then rate-limited first order), per command step and
      its median, with slew rate and time constant; the cross-correlation lag beside it as "bulk
      lag". The dead time is the number to put in the actuator node's `actuation_latency_s`.
  sysid fit --bag PATH --out YAML --report DIR [--method nelder-mead|differential-evolution]
            [--fit latency,kp,kd,damping,friction]
      replays the recorded commands in the PyBullet sim and fits the actuator dynamics to the
      recorded joint trajectories; writes a new versioned sim params YAML and a report (held-out
      error before/after, parameters the data cannot determine, per-joint plots).
  sysid fit --model servo --bag PATH --out YAML --report DIR
      fits the servo actuator model (dead time, max speed, max acceleration, loop gain per joint)
      and a PD baseline, reports both held-out errors, writes sim params with actuator.model: servo
      and randomization ranges around the fit.
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
from ..robots import DEFAULT_ROBOT, ROBOT_NAMES, robot_description_for, sim_params_for
from ..topics import JOINT_STATES, ROBOT_COMMAND


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
    latency.add_argument(
        "--method", choices=("model", "correlation"), default="model",
        help="model (default): latency = dead time, the onset of a fitted servo response (with slew rate, "
             "time constant and per-step estimates), the cross-correlation lag reported as bulk lag; "
             "correlation: the cross-correlation lag alone",
    )

    fit = sub.add_parser("fit", help="fit sim dynamics (latency, gains, damping, friction) to a recorded bag")
    fit.add_argument("--bag", required=True, type=Path, help="rosbag2 folder (sqlite3 or MCAP)")
    fit.add_argument("--command-topic", default=ROBOT_COMMAND.name,
                     help="commanded positions: std_msgs/Float64MultiArray or sensor_msgs/JointState")
    fit.add_argument("--state-topic", default=JOINT_STATES.name, help="measured positions: sensor_msgs/JointState")
    fit.add_argument("--robot", choices=ROBOT_NAMES, default=DEFAULT_ROBOT,
                     help="robot (docs/robots.md): its URDF and sim params are the defaults (default arm6)")
    fit.add_argument("--params", type=Path, default=None,
                     help="sim params YAML to start from (default: the robot's, config/sim_params.yaml for arm6)")
    fit.add_argument("--robot-description", default=None, help="URDF XML or file (default: the robot's)")
    fit.add_argument("--joints", default=None,
                     help="comma-separated joint names in command order (default: the URDF's movable joints, or "
                          "the command's names for JointState commands)")
    fit.add_argument("--out", required=True, type=Path, help="new sim params YAML to write")
    fit.add_argument("--report", required=True, type=Path, help="report folder (report.json, report.md, PNGs)")
    fit.add_argument("--method", choices=("nelder-mead", "differential-evolution"), default="nelder-mead",
                     help="optimizer: local Nelder-Mead or global differential evolution (then Nelder-Mead)")
    fit.add_argument("--fit", default="latency,kp,kd,damping,friction",
                     help="comma-separated parameters to fit: latency, kp, kd, damping, friction")
    fit.add_argument("--holdout", type=float, default=0.3,
                     help="fraction of the recording (at its end) held out for validation (default 0.3)")
    fit.add_argument("--max-latency", type=float, default=0.25, help="largest latency searched [s] (default 0.25)")
    fit.add_argument("--max-evaluations", type=int, default=4000,
                     help="evaluations per search on the fast model (default 4000)")
    fit.add_argument("--sim-polish-evals", type=int, default=0,
                     help="Nelder-Mead evaluations on PyBullet replays after the search (default 0: none)")
    fit.add_argument("--seed", type=int, default=0, help="seed of differential evolution")
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    fit.add_argument("--model", choices=("pd", "servo"), default="pd",
                     help="actuator model to fit: pd (PyBullet replay: latency, kp, kd, damping, friction) or servo "
                          "(dead time, max speed, max acceleration, loop gain per joint; no URDF needed; writes "
                          "actuator.model: servo)")

    excite = sub.add_parser("excite", help="write a safe excitation command sequence (CSV or YAML)")
    excite.add_argument("--out", required=True, type=Path, help="output file: .csv or .yaml")
    excite.add_argument("--robot", choices=ROBOT_NAMES, default=DEFAULT_ROBOT,
                     help="robot (docs/robots.md): its URDF is the default (default arm6)")
    excite.add_argument("--robot-description", default=None, help="URDF XML or file (default: the robot's)")
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
        time_source=args.time_source, unwrap=args.unwrap, method=args.method,
    )
    topics = _resolve_topics(args.bag, [args.command_topic, args.state_topic])  # "joint_states" finds "/joint_states"
    streams = load_streams(args.bag, topics)
    report = estimate_latency(streams[topics[0]], streams[topics[1]], options)
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
    sequence = excitation_for_robot(robot_description_for(args.robot, args.robot_description, "sysid excite"),
                                    options, args.joints)
    write_sequence(sequence, args.out)
    print(
        f"wrote {args.out}: {len(sequence.times_s)} commands over {sequence.times_s[-1]:.1f} s for joints "
        f"{list(sequence.joint_names)}; play it under the supervisor while recording, then run sysid latency"
    )
    return 0


def _run_fit_servo(args: argparse.Namespace) -> int:
    from ..sim.params import load_sim_params
    from ..sysid.bag_io import load_streams
    from ..sysid.servo_fit import ServoFitOptions, fit_servo, servo_report_markdown, write_servo_params

    options = ServoFitOptions(holdout_fraction=args.holdout, max_dead_time_s=max(args.max_latency, 1.0),
                              max_evaluations=min(args.max_evaluations, 600))
    params = load_sim_params(sim_params_for(args.robot, args.params, "sysid fit"))
    topics = _resolve_topics(args.bag, [args.command_topic, args.state_topic])
    streams = load_streams(args.bag, topics)
    result = fit_servo(streams[topics[0]], streams[topics[1]], options)
    extra = {"command_topic": topics[0], "state_topic": topics[1]}
    version = write_servo_params(result, params, str(args.bag), args.out, extra)
    args.report.mkdir(parents=True, exist_ok=True)
    data = result.to_dict() | {"bag": str(args.bag), "params_version": version, "params_file": str(args.out), **extra}
    from ..sysid.fit_output import _jsonable

    (args.report / "report.json").write_text(json.dumps(_jsonable(data), indent=2))
    markdown = servo_report_markdown(result, str(args.bag), version)
    (args.report / "report.md").write_text(markdown)
    print((args.report / "report.json").read_text() if args.json else markdown)
    summary = "; ".join(f"{j.name}: held-out RMS PD {j.holdout_rms_pd:.4g} -> servo {j.holdout_rms_servo:.4g} rad"
                        for j in result.joints)
    print(f"wrote {args.out} (version {version}, model servo); {summary}; report: {args.report}", file=sys.stderr)
    return 0


def _run_fit(args: argparse.Namespace) -> int:
    if args.model == "servo":
        return _run_fit_servo(args)
    from ..core.robot.urdf import RobotModel
    from ..sim.params import load_sim_params
    from ..sysid.bag_io import load_streams
    from ..sysid.fit import FitOptions, fit
    from ..sysid.fit_data import align
    from ..sysid.fit_output import write_fitted_params, write_report
    from ..sysid.latency import SysidError

    options = FitOptions(fit=tuple(f.strip() for f in args.fit.split(",") if f.strip()), method=args.method,
                         holdout_fraction=args.holdout, max_latency_s=args.max_latency,
                         max_evaluations=args.max_evaluations, sim_polish_evals=args.sim_polish_evals, seed=args.seed)
    params = load_sim_params(sim_params_for(args.robot, args.params, "sysid fit"))
    description = robot_description_for(args.robot, args.robot_description, "sysid fit")
    topics = _resolve_topics(args.bag, [args.command_topic, args.state_topic])
    streams = load_streams(args.bag, topics)
    command, state = streams[topics[0]], streams[topics[1]]
    if args.joints:
        joints = [j.strip() for j in args.joints.split(",") if j.strip()]
    elif command.names:
        joints = list(command.names)
    else:
        joints = RobotModel.from_description(description).joint_names
    if command.names and list(command.names) != joints:
        raise SysidError(f"{topics[0]} names its joints {list(command.names)}, not {joints}")
    data = align(command, state, joints, args.holdout)
    result = fit(data, params, description, options)
    extra = {"command_topic": topics[0], "state_topic": topics[1]}
    version = write_fitted_params(result, params, str(args.bag), args.out, extra)
    written = write_report(result, args.report, str(args.bag), version, extra | {"params_file": str(args.out)})
    before, after = result.errors["before"]["holdout"], result.errors["after"]["holdout"]
    if args.json:
        print((args.report / "report.json").read_text())
    else:
        print((args.report / "report.md").read_text())
    print(f"wrote {args.out} (version {version}); held-out normalized MSE {before['normalized_mse']:.4g} -> "
          f"{after['normalized_mse']:.4g}; not identifiable: {result.not_identifiable or 'none'}; "
          f"report: {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def _resolve_topics(bag: Path, topics: list[str]) -> list[str]:
    """Bag topic names are fully qualified; accept them with or without the leading slash."""
    from ..bags.reader import topic_types

    known = topic_types(bag)
    out = []
    for topic in topics:
        candidates = [topic, "/" + topic.lstrip("/")]
        match = next((c for c in candidates if c in known), None)
        if match is None:
            from ..sysid.latency import SysidError

            raise SysidError(f"{bag}: no topic {topic} (topics: {sorted(known)})")
        out.append(match)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        if args.sysid_command == "latency":
            return _run_latency(args)
        if args.sysid_command == "fit":
            return _run_fit(args)
        return _run_excite(args)
    except Sim2RealError as err:
        print(f"sim2real sysid {args.sysid_command}: {err}", file=sys.stderr)
        return 2
