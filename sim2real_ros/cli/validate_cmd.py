"""`sim2real validate --checkpoint CKPT [--real-bags PATH...] [--gates YAML] --report DIR [--json] [--episodes N]`.

Stage 1: nominal sim success; stage 2: perturbed sim success; stage 3: offline action error on real
bags; then the verdict ("ready for supervised rollout" or "not ready", naming the stage, the figure
and the threshold) and the sim-vs-real report (report.md, report.json, plots in DIR).
Exit code: 0 ready, 1 not ready, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..paths import config_path, default_policy_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path(), help="default: the shipped policy")
    parser.add_argument("--real-bags", nargs="*", default=[],
                        help="real bags (bag folders, .mcap/.db3 files, or folders of bag folders)")
    parser.add_argument("--gates", type=Path, default=config_path("gates.yaml"), help="gate thresholds YAML")
    parser.add_argument("--report", type=Path, required=True, help="folder for report.md, report.json and plots")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--episodes", type=int, default=None, help="sim episodes per sim stage (default: the gates')")
    parser.add_argument("--sim-config", type=Path, default=None, help="nominal sim params YAML (default: config/)")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--actuation-latency", type=float, default=None,
                        help="real bags: a command sent at tau is meant for tau + this [s] (default: params.yaml)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError
    from ..evaluation.options import ReplayOptions
    from ..finetune.dataset import default_actuation_latency_s
    from ..validation.gates import READY, load_gates
    from ..validation.validate import validate

    if args.episodes is not None and args.episodes <= 0:
        print(f"sim2real validate: --episodes must be > 0, got {args.episodes}", file=sys.stderr)
        return 2
    log = (lambda text: print(text, file=sys.stderr)) if args.json else print
    try:
        gates = load_gates(args.gates)
        latency = default_actuation_latency_s() if args.actuation_latency is None else args.actuation_latency
        options = ReplayOptions(actuation_latency_s=latency, action_tolerance_s=0.1, progress=False, plots=False)
        report = validate(args.checkpoint, args.real_bags, gates, args.report, episodes=args.episodes,
                          sim_config=args.sim_config, seed=args.seed, replay_options=options,
                          plots=not args.no_plots, log=log)
    except Sim2RealError as err:
        print(f"sim2real validate: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"verdict": report["verdict"], "reason": report["reason"],
                          "stages": [{k: s[k] for k in ("stage", "kind", "figure", "interval", "threshold", "passed",
                                                        "ran", "note", "summary")} for s in report["stages"]],
                          "sim_vs_real": report["sim_vs_real"], "failure_modes": report["failure_modes"],
                          "report": str(args.report)}, indent=2))
    else:
        print(f"{report['verdict_text']}: {report['reason']}\nreport: {args.report / 'report.md'}")
    return 0 if report["verdict"] == READY else 1
