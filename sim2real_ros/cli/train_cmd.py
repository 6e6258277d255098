"""`sim2real train --config CONFIG --out CKPT`: teacher -> student with domain randomization."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..paths import config_path
from ..robots import ROBOT_NAMES
from .onnx_beside import add_export_argument, export_beside


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=config_path("train_reach.yaml"), help="training YAML")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint to write")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the resumable state lives (default: OUT with suffix .work)")
    parser.add_argument("--no-resume", action="store_true", help="ignore a previous run's state")
    parser.add_argument("--seed", type=int, default=None, help="override the config's seed")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=None,
                        help="override the config's robot (docs/robots.md); its URDF and sim params replace the "
                             "config's robot_description and sim_params")
    parser.add_argument("--no-randomize", action="store_true", help="train without domain randomization (baseline)")
    parser.add_argument("--workers", type=int, default=0,
                        help="Ray rollout workers for collection (0 = in this process); results do not depend on it")
    parser.add_argument("--ray-address", default=None, help="join a Ray cluster (HOST:PORT or auto)")
    add_export_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError
    from ..rl.cluster import ray_for_command, shutdown_ray
    from ..training.allocator import keep_freed_memory
    from ..training.config import load_train_config
    from ..training.trainer import Trainer

    overrides = {"seed": args.seed, "randomize": False if args.no_randomize else None, "robot": args.robot}
    try:
        config = load_train_config(args.config, **overrides)
        workers = ray_for_command(args.workers, args.ray_address)
    except Sim2RealError as err:
        print(f"sim2real train: {err}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or args.out.with_suffix(".work")
    # Before the first tensor: each minibatch reuses its activations' pages (training/allocator.py).
    print(f"sim2real train: malloc thresholds {keep_freed_memory()}", flush=True)
    try:
        trainer = Trainer(config, args.out, work_dir, log=lambda text: print(text, flush=True), workers=workers)
        try:
            result = trainer.run(resume=not args.no_resume)
        finally:
            trainer.close()
    finally:
        shutdown_ray()
    onnx = export_beside("train", Path(result["checkpoint"])) if args.export_onnx else None
    print(json.dumps({"checkpoint": result["checkpoint"], "hash": result["hash"], "onnx": onnx,
                      "evaluation": result["evaluation"]}, indent=2))
    return 0
