"""`sim2real finetune --checkpoint CKPT --bags PATH... --out CKPT2 [--epochs 100] [--lr 1e-3] [--real-fraction 0.5]
[--freeze-encoder] [--holdout 0.3] [--robot-sim YAML --eval-episodes N]`.

Builds a dataset from real bags (teleoperated demonstrations and intervention segments, labelled
with the human's commands), co-trains on it and on sim frames of the checkpoint's training
distribution (`--real-fraction` of every batch is real; 1.0 = real data only), and reports the
offline action error on held-out episodes before and after. With --robot-sim (a sim variant standing
in for the robot when none is attached) the report also gives closed-loop success before and after
on it and on the nominal and perturbed sim (forgetting), same seeds, Wilson 95% intervals, and says
when offline error and closed-loop success disagree. docs/finetune.md. The new checkpoint records its
parent's hash, the bags and the sim frames (provenance).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .onnx_beside import add_export_argument, export_beside


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint to start from")
    parser.add_argument("--bags", nargs="+", required=True,
                        help="real bags (bag folders, .mcap/.db3 files, or folders of bag folders)")
    parser.add_argument("--out", type=Path, required=True, help="fine-tuned checkpoint to write")
    parser.add_argument("--epochs", type=int, default=100, help="passes over the real training frames")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--real-fraction", type=float, default=0.5,
                        help="share of real frames in every batch; the rest are sim frames of the checkpoint's "
                             "training distribution (1.0 = real data only)")
    parser.add_argument("--freeze-encoder", action="store_true", help="keep the image encoder's weights")
    parser.add_argument("--holdout", type=float, default=0.3, help="fraction of episodes held out (0 = none)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--actuation-latency", type=float, default=None,
                        help="a command sent at tau is meant for tau + this [s] (default: the actuator's, params.yaml)")
    parser.add_argument("--robot-sim", type=Path, default=None, metavar="YAML",
                        help="judge in closed loop: success before/after on this robot stand-in and on the "
                             "nominal and perturbed sim")
    parser.add_argument("--eval-episodes", type=int, default=20, help="closed-loop episodes per policy and sim")
    parser.add_argument("--report", type=Path, default=None, help="write the report JSON here")
    add_export_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError
    from ..episodes.dataset import LabelConfig
    from ..finetune.finetune import FinetuneConfig, finetune
    from ..training.allocator import keep_freed_memory

    if args.robot_sim is not None and not args.robot_sim.is_file():
        print(f"sim2real finetune: --robot-sim {args.robot_sim}: no such file", file=sys.stderr)
        return 2
    if args.eval_episodes <= 0:
        print(f"sim2real finetune: --eval-episodes must be > 0, got {args.eval_episodes}", file=sys.stderr)
        return 2
    keep_freed_memory()  # the regression reuses its activations' pages (training/allocator.py)
    try:
        labels = LabelConfig() if args.actuation_latency is None else LabelConfig(
            actuation_latency_s=args.actuation_latency)
        config = FinetuneConfig(epochs=args.epochs, lr=args.lr, real_fraction=args.real_fraction,
                                freeze_encoder=args.freeze_encoder, holdout=args.holdout, batch_size=args.batch_size,
                                seed=args.seed, labels=labels)
        report = finetune(args.checkpoint, args.bags, args.out, config)
        if args.robot_sim is not None:
            from ..finetune.judge import closed_loop, disagreement

            judged = closed_loop({"before": args.checkpoint, "after": args.out}, args.robot_sim, args.eval_episodes)
            held = (report["before"]["holdout"]["mae_rad"], report["after"]["holdout"]["mae_rad"])
            judged["disagreement"] = disagreement(*held, judged["robot"]["before"], judged["robot"]["after"])
            report["closed_loop"] = judged
    except Sim2RealError as err:
        print(f"sim2real finetune: {err}", file=sys.stderr)
        return 2
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps({k: v for k, v in report.items() if k != "provenance"}, indent=2) + "\n")
    before, after = report["before"]["holdout"], report["after"]["holdout"]
    if before["mae_rad"] is not None:
        print(f"held-out offline action error: MAE {before['mae_rad'] * 1e3:.1f} -> {after['mae_rad'] * 1e3:.1f} mrad "
              f"over {after['frames']} frames of {len(report['holdout_episodes'])} episode(s)")
    for where, figures in (report.get("closed_loop") or {}).items():
        if where in ("robot", "nominal", "perturbed") and figures:
            b, a = figures["before"], figures["after"]
            print(f"closed-loop success, {where}: {b['successes']}/{b['episodes']} "
                  f"({b['ci95'][0]:.2f}-{b['ci95'][1]:.2f}) -> {a['successes']}/{a['episodes']} "
                  f"({a['ci95'][0]:.2f}-{a['ci95'][1]:.2f})")
    if (report.get("closed_loop") or {}).get("disagreement"):
        print(f"note: {report['closed_loop']['disagreement']}")
    print(f"wrote {report['checkpoint']} (hash {report['hash']}, parent {report['parent']})")
    if args.export_onnx:
        export_beside("finetune", Path(report["checkpoint"]))
    return 0
