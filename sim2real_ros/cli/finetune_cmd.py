"""`sim2real finetune --checkpoint CKPT --bags PATH... --out CKPT2 [--epochs N] [--lr 1e-4] [--freeze-encoder]
[--holdout 0.3]`.

Builds a dataset from real bags (teleoperated demonstrations and intervention segments, labelled
with the human's commands), fine-tunes, and reports the offline action error on held-out episodes
before and after. The new checkpoint records its parent's hash and the bags (provenance).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint to start from")
    parser.add_argument("--bags", nargs="+", required=True,
                        help="real bags (bag folders, .mcap/.db3 files, or folders of bag folders)")
    parser.add_argument("--out", type=Path, required=True, help="fine-tuned checkpoint to write")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--freeze-encoder", action="store_true", help="keep the image encoder's weights")
    parser.add_argument("--holdout", type=float, default=0.3, help="fraction of episodes held out (0 = none)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--actuation-latency", type=float, default=None,
                        help="a command sent at tau is meant for tau + this [s] (default: the actuator's, params.yaml)")
    parser.add_argument("--report", type=Path, default=None, help="write the report JSON here")


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError
    from ..finetune.dataset import LabelConfig
    from ..finetune.finetune import FinetuneConfig, finetune

    try:
        labels = LabelConfig() if args.actuation_latency is None else LabelConfig(
            actuation_latency_s=args.actuation_latency)
        config = FinetuneConfig(epochs=args.epochs, lr=args.lr, freeze_encoder=args.freeze_encoder,
                                holdout=args.holdout, batch_size=args.batch_size, seed=args.seed, labels=labels)
        report = finetune(args.checkpoint, args.bags, args.out, config)
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
    print(f"wrote {report['checkpoint']} (hash {report['hash']}, parent {report['parent']})")
    return 0
