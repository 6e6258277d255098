"""`sim2real validate --checkpoint CKPT [--real-bags PATH...] [--gates YAML] --report DIR [--json] [--episodes N]
[--graph | --core-only] [--robot-sim YAML [--robot-sim-graph]]`.

Stage 1: nominal sim success; stage 2: perturbed sim success; stage 3: offline action error on real
bags; then the verdict ("ready for supervised rollout" or "not ready", naming the stage, the figure
and the threshold) and the sim-vs-real report (report.md, report.json, plots in DIR).
Stages 1-2 run on the full ROS graph and on the core path (same seed and episodes) and pass only
when both Wilson lower bounds reach the threshold; --graph runs the graph only; --core-only the
core path only, which is quick but fails stages 1-2 (no graph figure: the gate cannot pass on
the core path alone). See validation/validate.py.
--robot-sim YAML adds stage 4 when no robot is attached: closed-loop success on that sim variant
standing in for the robot (core path; --robot-sim-graph: through the full ROS graph), and the report
says when it and the offline action error of stage 3 disagree.
--json prints one JSON object and nothing else on stdout (progress goes to stderr).
Exit code: 0 ready, 1 not ready, 2 bad input.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from ..paths import config_path, default_policy_path
from ..robots import ROBOT_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path(), help="default: the shipped policy")
    parser.add_argument("--real-bags", nargs="*", default=[],
                        help="real bags (bag folders, .mcap/.db3 files, or folders of bag folders)")
    parser.add_argument("--gates", type=Path, default=config_path("gates.yaml"), help="gate thresholds YAML")
    parser.add_argument("--report", type=Path, required=True, help="folder for report.md, report.json and plots")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--episodes", type=int, default=None, help="sim episodes per sim stage (default: the gates')")
    parser.add_argument("--sim-config", type=Path, default=None,
                        help="nominal sim params YAML (default: the robot's, docs/robots.md)")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=None,
                        help="robot (docs/robots.md; default: the checkpoint's); a checkpoint trained for "
                             "the other robot is refused")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--actuation-latency", type=float, default=None,
                        help="real bags: a command sent at tau is meant for tau + this [s] (default: params.yaml)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    paths = parser.add_mutually_exclusive_group()
    paths.add_argument("--graph", dest="sim_paths", action="store_const", const="graph", default="both",
                       help="stages 1-2 on the full ROS graph only (default: the graph and the core path, both gated)")
    paths.add_argument("--core-only", dest="sim_paths", action="store_const", const="core",
                       help="stages 1-2 on the core path only (quick, for development): they then FAIL, since the "
                            "gate needs the graph figure")
    parser.add_argument("--robot-sim", type=Path, default=None, metavar="YAML",
                        help="sim params of a robot stand-in (e.g. config/sim_params_real_b.yaml): stage 4, "
                             "closed-loop success on it (when no robot is attached)")
    parser.add_argument("--robot-sim-graph", action="store_true",
                        help="stage 4 through the full ROS graph instead of the core path")
    parser.add_argument("--real-time-factor", type=float, default=None,
                        help="graph: the sim's pace, sim s per wall s (default 0.3, as eval-sim --graph)")


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError
    from ..episodes.dataset import default_actuation_latency_s
    from ..episodes.options import ReplayOptions
    from ..sim.quiet_stdout import stdout_to_stderr
    from ..validation.gates import READY, load_gates
    from ..validation.validate import validate

    if args.episodes is not None and args.episodes <= 0:
        print(f"sim2real validate: --episodes must be > 0, got {args.episodes}", file=sys.stderr)
        return 2
    if args.real_time_factor is not None and not 0 < args.real_time_factor <= 10:
        print(f"sim2real validate: --real-time-factor must be in (0, 10], got {args.real_time_factor}", file=sys.stderr)
        return 2
    log = (lambda text: print(text, file=sys.stderr)) if args.json else print
    if args.robot_sim_graph and args.robot_sim is None:
        print("sim2real validate: --robot-sim-graph needs --robot-sim YAML", file=sys.stderr)
        return 2
    if args.robot_sim is not None and not args.robot_sim.is_file():
        print(f"sim2real validate: --robot-sim {args.robot_sim}: no such file", file=sys.stderr)
        return 2
    evaluator = _graph_evaluator(args.real_time_factor, args.report) if args.robot_sim_graph else None
    try:
        gates = load_gates(args.gates)
        latency = default_actuation_latency_s() if args.actuation_latency is None else args.actuation_latency
        options = ReplayOptions(actuation_latency_s=latency, action_tolerance_s=0.1, progress=False, plots=False)
        # --json: stdout carries the JSON only; whatever else reaches fd 1 meanwhile (C libraries, a
        # node's exit notice) goes to stderr.
        with stdout_to_stderr() if args.json else contextlib.nullcontext():
            report = validate(args.checkpoint, args.real_bags, gates, args.report, episodes=args.episodes,
                              sim_config=args.sim_config, seed=args.seed, replay_options=options,
                              plots=not args.no_plots, log=log, sim_paths=args.sim_paths,
                              real_time_factor=args.real_time_factor, robot_sim=args.robot_sim,
                              robot_evaluator=evaluator, robot_path="graph" if evaluator else "core",
                              graph_evaluator=None if args.sim_paths == "core" else _graph_stages_evaluator(),
                              robot=args.robot)
    except Sim2RealError as err:
        print(f"sim2real validate: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"verdict": report["verdict"], "reason": report["reason"],
                          "stages": [{k: s[k] for k in ("stage", "kind", "figure", "interval", "threshold", "passed",
                                                        "ran", "note", "summary", "paths")}
                                     for s in report["stages"]],
                          "sim_paths": report["sim_paths"],
                          "sim_vs_real": report["sim_vs_real"], "failure_modes": report["failure_modes"],
                          "disagreement": report.get("disagreement", ""),
                          "report": str(args.report)}, indent=2))
    else:
        print(f"{report['verdict_text']}: {report['reason']}\nreport: {args.report / 'report.md'}")
    return 0 if report["verdict"] == READY else 1


def _graph_stages_evaluator():
    """Stages 1-2 on the full ROS graph (runtime.graph_eval), injected into validation."""
    from ..runtime.graph_eval import DEFAULT_GRAPH_RTF, evaluate_in_graph

    def evaluate(real_time_factor=None, **kwargs):
        return evaluate_in_graph(real_time_factor=DEFAULT_GRAPH_RTF if real_time_factor is None else real_time_factor,
                                 **kwargs)

    return evaluate


def _graph_evaluator(real_time_factor: float | None, report_dir: Path):
    """Stage 4 through the full ROS graph (runtime.graph_eval), injected into validation."""
    from ..runtime.graph_eval import DEFAULT_GRAPH_RTF, evaluate_in_graph

    def evaluate(checkpoint, episodes, sim_config, seed):
        return evaluate_in_graph(checkpoint, episodes, sim_config=sim_config, seed=seed,
                                 real_time_factor=DEFAULT_GRAPH_RTF if real_time_factor is None else real_time_factor,
                                 log_file=report_dir / "graph_robot_closed_loop.log")

    return evaluate
