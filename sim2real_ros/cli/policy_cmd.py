"""`sim2real policy info CKPT [--json]` and `sim2real policy init --robot URDF --out CKPT ...`.

info prints a checkpoint's spec, hash and provenance; init writes an untrained checkpoint (holds
still) with a correct spec, so the graph can run before any training exists.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import paths
from ..core.errors import Sim2RealError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    info = sub.add_parser("info", help="print a checkpoint's spec and provenance")
    info.add_argument("checkpoint", help="checkpoint file")
    info.add_argument("--json", action="store_true", help="print the spec as JSON")
    init = sub.add_parser("init", help="write an untrained checkpoint (holds still) with a correct spec")
    init.add_argument("--robot", default=str(paths.urdf_path()), help="URDF file or XML (joint names)")
    init.add_argument("--out", required=True, help="checkpoint file to write")
    init.add_argument("--preprocess", default=str(paths.config_path("preprocess.yaml")), help="preprocess YAML")
    init.add_argument("--sim-params", default=str(paths.config_path("sim_params.yaml")),
                      help="sim params YAML whose hash is recorded ('unknown' if missing)")
    init.add_argument("--chunk-length", type=int, default=10, help="points per action chunk (K)")
    init.add_argument("--dt", type=float, default=0.05, help="time between chunk points [s]")
    init.add_argument("--seed", type=int, default=0, help="random seed of the initial weights")
    init.add_argument("--architecture", default="cnn_mlp", help="registered architecture name")


def describe(spec_dict: dict[str, Any], digest: str, path: str) -> str:
    """Human-readable summary of a checkpoint."""
    camera = spec_dict["policy_camera"]
    lines = [
        f"checkpoint:      {path}",
        f"hash:            {digest}",
        f"architecture:    {spec_dict['architecture']} {json.dumps(spec_dict['hparams'], sort_keys=True)}",
        f"joints ({len(spec_dict['joint_names'])}):      {', '.join(spec_dict['joint_names'])}",
        f"image:           {spec_dict['image_width']}x{spec_dict['image_height']} rgb8, "
        f"fx={camera.get('fx')} fy={camera.get('fy')} cx={camera.get('cx')} cy={camera.get('cy')} [px]",
        f"action chunk:    {spec_dict['chunk_length']} points every {spec_dict['dt_s']} s",
        f"preprocess hash: {spec_dict['preprocess_hash']}",
        f"sim params:      {spec_dict['sim_params_version']}",
        "provenance:",
    ]
    lines += [f"  {key}: {value}" for key, value in sorted(spec_dict["provenance"].items())]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    # torch is imported here, not at module import, so `sim2real --help` stays fast.
    from ..core.checkpoint import init_checkpoint, read_checkpoint
    from ..core.preprocess_config import PreprocessConfig
    from ..core.urdf import RobotModel

    try:
        if args.action == "info":
            spec, _state, digest = read_checkpoint(args.checkpoint)
            if args.json:
                print(json.dumps({"checkpoint": args.checkpoint, "hash": digest, "spec": spec.to_dict()},
                                 indent=2, sort_keys=True))
            else:
                print(describe(spec.to_dict(), digest, args.checkpoint))
            return 0
        robot = RobotModel.from_description(args.robot)
        preprocess = PreprocessConfig.from_yaml(args.preprocess)
        digest = init_checkpoint(
            args.out, robot.joint_names, preprocess, sim_params_path=args.sim_params,
            chunk_length=args.chunk_length, dt_s=args.dt, seed=args.seed, architecture=args.architecture,
            provenance={"robot": robot.source},
        )
        print(f"wrote untrained checkpoint {args.out} (hash {digest}) for joints {robot.joint_names}")
        return 0
    except (Sim2RealError, ValueError) as err:
        print(f"[ERROR] {err}", file=sys.stderr)
        return 2
