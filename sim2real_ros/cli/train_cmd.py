"""`sim2real train --config CONFIG --out CKPT`: teacher -> student with domain randomization."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..paths import config_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=config_path("train_reach.yaml"), help="training YAML")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint to write")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the resumable state lives (default: OUT with suffix .work)")
    parser.add_argument("--no-resume", action="store_true", help="ignore a previous run's state")
    parser.add_argument("--seed", type=int, default=None, help="override the config's seed")
    parser.add_argument("--no-randomize", action="store_true", help="train without domain randomization (baseline)")


def run(args: argparse.Namespace) -> int:
    from ..training.config import load_train_config
    from ..training.trainer import Trainer

    overrides = {"seed": args.seed, "randomize": False if args.no_randomize else None}
    config = load_train_config(args.config, **overrides)
    work_dir = args.work_dir or args.out.with_suffix(".work")
    trainer = Trainer(config, args.out, work_dir, log=lambda text: print(text, flush=True))
    try:
        result = trainer.run(resume=not args.no_resume)
    finally:
        trainer.close()
    print(json.dumps({"checkpoint": result["checkpoint"], "hash": result["hash"],
                      "evaluation": result["evaluation"]}, indent=2))
    return 0
