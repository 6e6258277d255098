"""`sim2real soak --minutes N [--seed S] [--json OUT]`: the fault-injection soak (docs/safety.md)."""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from ..paths import default_policy_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=5.0, help="how long faults are injected [min] (wall)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault schedule (and the sim)")
    parser.add_argument("--json", type=Path, default=None, help="write the report to this JSON file")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the bag, graph.log and soak.json in this new folder (default: a temp folder)")
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path())
    parser.add_argument("--estop-bound-ms", type=float, default=100.0,
                        help="an e-stop must latch and the command head for the hold within this [ms]")
    parser.add_argument("--recovery-timeout-s", type=float, default=90.0,
                        help="the longest wait for AUTONOMOUS after a fault [s]; then the next fault comes")
    parser.add_argument("--max-faults", type=int, default=0, help="stop after this many faults (0: no cap)")


def run(args: argparse.Namespace) -> int:
    from ..runtime.soak import Soak, SoakConfig

    for name in ("minutes", "estop_bound_ms", "recovery_timeout_s"):
        value = getattr(args, name)
        if not (value > 0 and value < float("inf")):
            print(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
            return 2
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        print(f"--out {args.out} exists and is not empty")
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="sim2real_soak_"))
    config = SoakConfig(out_dir=out, minutes=args.minutes, seed=args.seed, checkpoint=args.checkpoint,
                        estop_bound_s=args.estop_bound_ms / 1e3, max_faults=args.max_faults,
                        recovery_timeout_s=args.recovery_timeout_s)
    try:
        report = Soak(config, log=lambda text: print(text, flush=True)).run()
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from ..runtime.soak import finite_or_none

        args.json.write_text(json.dumps(finite_or_none(report), indent=2))
    violations = sum(report["violations"].values())
    print(f"[soak] faults injected {report['faults_injected']}")
    print(f"[soak] e-stops honoured {report['estops']['honoured']}/{report['estops']['pressed']}; "
          f"violations {violations} {({k: v for k, v in report['violations'].items() if v})}")
    bag = report.get("bag", {})
    if "commands" in bag:
        print(f"[soak] robot commands recorded {bag['commands']}, sent but not recorded "
              f"{bag.get('commands_missed', 0)} (by publication sequence number)")
    for detail in report["violation_details"][:10]:
        print(f"[soak]   {detail['kind']}: {detail['detail']}")
    if report["error"]:
        print(f"[soak] FAILED: {report['error']}")
        return 1
    return 1 if violations else 0
