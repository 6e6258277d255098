"""`sim2real policy info FILE [--json]`, `sim2real policy init --robot URDF --out CKPT ...`,
`sim2real policy export CKPT [--onnx OUT.onnx]` and `sim2real policy convert OLD NEW [--teacher T]`.

info prints a checkpoint's (student or PPO teacher) or an exported ONNX policy's spec, hash and
provenance (as YAML; --json: all of it as JSON); init writes an
untrained checkpoint (holds still) with a correct spec, so the graph can run before any training
exists; export writes a checkpoint as one ONNX graph with its spec in the metadata (docs/onnx.md);
convert rewrites a checkpoint of the format before safetensors as a safetensors one (one release).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import paths
from ..core.errors import Sim2RealError
from ..robots import DEFAULT_ROBOT, ROBOT_NAMES, ROBOTS, robot_description_for, sim_params_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    info = sub.add_parser("info", help="print a checkpoint's or ONNX policy's spec and provenance")
    info.add_argument("checkpoint", help="checkpoint or exported .onnx file")
    info.add_argument("--json", action="store_true", help="print the spec as JSON")
    init = sub.add_parser("init", help="write an untrained checkpoint (holds still) with a correct spec")
    init.add_argument("--robot", default=DEFAULT_ROBOT,
                      help=f"robot name ({' | '.join(ROBOT_NAMES)}) or a URDF file or XML (joint names)")
    init.add_argument("--out", required=True, help="checkpoint file to write")
    init.add_argument("--preprocess", default=str(paths.config_path("preprocess.yaml")), help="preprocess YAML")
    init.add_argument("--sim-params", default=None,
                      help="sim params YAML whose hash is recorded ('unknown' if missing; default: the robot's)")
    init.add_argument("--chunk-length", type=int, default=10, help="points per action chunk (K)")
    init.add_argument("--dt", type=float, default=0.05, help="time between chunk points [s]")
    init.add_argument("--seed", type=int, default=0, help="random seed of the initial weights")
    init.add_argument("--architecture", default="cnn_mlp", help="registered architecture name")
    export = sub.add_parser("export", help="write a checkpoint as one ONNX graph (spec in its metadata)")
    export.add_argument("checkpoint", help="checkpoint file")
    export.add_argument("--onnx", default=None,
                        help="ONNX file to write (default: beside the checkpoint, same name, .onnx: where a "
                             "`sim2real launch robot --checkpoint CKPT` finds it and runs it on onnxruntime)")
    export.add_argument("--json", action="store_true", help="print what was written as JSON")
    convert = sub.add_parser("convert", help="rewrite an old-format checkpoint (before safetensors) as safetensors")
    convert.add_argument("old", help="old-format checkpoint (student or PPO teacher)")
    convert.add_argument("new", help="safetensors file to write (may be OLD itself)")
    convert.add_argument("--teacher", default=None,
                         help="a student's teacher, already converted: its provenance then names the new teacher")


def describe(spec_dict: dict[str, Any], digest: str, path: str, parent_hash: str | None = None) -> str:
    """Human-readable summary of a checkpoint (or, with parent_hash, of an exported ONNX policy)."""
    camera = spec_dict["policy_camera"]
    lines = [
        f"checkpoint:      {path}",
        f"hash:            {digest}",
        *([f"format:          ONNX, exported from checkpoint {parent_hash} (backend onnxruntime)"]
          if parent_hash is not None else []),
        f"architecture:    {spec_dict['architecture']} {json.dumps(spec_dict['hparams'], sort_keys=True)}",
        f"joints ({len(spec_dict['joint_names'])}):      {', '.join(spec_dict['joint_names'])}",
        f"image:           {spec_dict['image_width']}x{spec_dict['image_height']} rgb8, "
        f"fx={camera.get('fx')} fy={camera.get('fy')} cx={camera.get('cx')} cy={camera.get('cy')} [px]",
        f"action chunk:    {spec_dict['chunk_length']} points every {spec_dict['dt_s']} s",
        f"preprocess hash: {spec_dict['preprocess_hash']}",
        f"sim params:      {spec_dict['sim_params_version']}",
    ]
    return "\n".join(lines) + "\n" + provenance_yaml(spec_dict["provenance"])


def provenance_yaml(provenance: dict[str, Any]) -> str:
    """The provenance as readable block YAML under a `provenance:` key (nested mappings and lists as
    YAML, not Python reprs; long per-episode tables summarized by their length)."""
    import yaml

    def shorten(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (f"<{len(v)} rows: --json prints them>" if k == "per_episode" and isinstance(v, list)
                        else shorten(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [shorten(v) for v in value]
        return value

    return yaml.safe_dump({"provenance": shorten(provenance)}, sort_keys=True, default_flow_style=None,
                          width=110, allow_unicode=True).rstrip()


def describe_teacher(spec_dict: dict[str, Any], digest: str, path: str) -> str:
    """Human-readable summary of a PPO teacher checkpoint (rl/teacher_checkpoint.py)."""
    layout = ", ".join(f"{name} {size}" for name, size in spec_dict["observation_layout"])
    lines = [
        f"checkpoint:      {path}",
        f"hash:            {digest}",
        "kind:            teacher (privileged observations; evaluate with `sim2real eval-sim --checkpoint FILE`)",
        f"network:         MLP {spec_dict['hidden_dims']} {spec_dict['activation']}",
        f"joints ({len(spec_dict['joint_names'])}):      {', '.join(spec_dict['joint_names'])}",
        f"observation:     {layout}",
        f"env:             {json.dumps(spec_dict['env'], sort_keys=True)}",
        f"rewards:         {json.dumps(spec_dict['rewards'], sort_keys=True)}",
        f"sim params:      {spec_dict['sim_params_version']}",
    ]
    return "\n".join(lines) + "\n" + provenance_yaml(spec_dict["provenance"])


def run(args: argparse.Namespace) -> int:
    # torch is imported where a checkpoint needs it, not at module import (`sim2real --help` stays
    # fast) nor for an ONNX file (`policy info` on one runs without torch, as the policy node does).
    from ..core.perception.preprocess_config import PreprocessConfig
    from ..core.robot.urdf import RobotModel

    try:
        if args.action == "info":
            from ..core.policy.backend import file_backend
            from ..rl.teacher_checkpoint import is_teacher_file, read_teacher, teacher_spec_dict

            parent = None
            if is_teacher_file(args.checkpoint):
                teacher, _actor, digest = read_teacher(args.checkpoint)
                teacher_dict = teacher_spec_dict(teacher)
                if args.json:
                    print(json.dumps({"checkpoint": args.checkpoint, "hash": digest, "kind": "teacher",
                                      "spec": teacher_dict}, indent=2, sort_keys=True))
                else:
                    print(describe_teacher(teacher_dict, digest, args.checkpoint))
                return 0
            if file_backend(args.checkpoint) == "onnxruntime":
                from ..core.policy.onnx_policy import read_onnx_policy

                spec, digest, parent, _session = read_onnx_policy(args.checkpoint)
            else:
                from ..core.policy.checkpoint import read_checkpoint

                spec, _state, digest = read_checkpoint(args.checkpoint)
            if args.json:
                extra = {} if parent is None else {"format": "onnx", "parent_hash": parent}
                print(json.dumps({"checkpoint": args.checkpoint, "hash": digest, "kind": "student", **extra,
                                  "spec": spec.to_dict()},
                                 indent=2, sort_keys=True))
            else:
                print(describe(spec.to_dict(), digest, args.checkpoint, parent))
            return 0
        if args.action == "convert":
            from ..training.checkpoint_convert import convert_checkpoint

            result = convert_checkpoint(args.old, args.new, teacher_file=args.teacher)
            print(f"wrote {result['kind']} checkpoint {result['new']} (hash {result['hash']}) from "
                  f"{result['old']} (hash {result['previous_hash']}); tensors bit-identical")
            return 0
        if args.action == "export":
            from ..core.policy.onnx_export import export_onnx

            out = Path(args.onnx) if args.onnx else Path(args.checkpoint).with_suffix(".onnx")
            if out.resolve() == Path(args.checkpoint).resolve():
                print(f"sim2real policy export: {args.checkpoint} would be overwritten by its own export; "
                      "name another file with --onnx", file=sys.stderr)
                return 2
            result = export_onnx(args.checkpoint, out)
            if args.json:
                print(json.dumps(result, indent=2, sort_keys=True))
            else:
                print(f"wrote {result['onnx']} (hash {result['hash']}, opset {result['opset']}, "
                      f"{result['bytes']} bytes) "
                      f"from checkpoint {result['parent_hash']}; onnxruntime vs torch: "
                      f"{result['max_abs_difference_rad']:.2g} rad at most")
            return 0
        from ..training.untrained import init_checkpoint

        named = args.robot in ROBOTS
        robot = RobotModel.from_description(robot_description_for(args.robot) if named else args.robot)
        preprocess = PreprocessConfig.from_yaml(args.preprocess)
        sim_params = args.sim_params or sim_params_for(args.robot if named else DEFAULT_ROBOT)
        digest = init_checkpoint(
            args.out, robot.joint_names, preprocess, sim_params_path=sim_params,
            chunk_length=args.chunk_length, dt_s=args.dt, seed=args.seed, architecture=args.architecture,
            provenance={"robot": args.robot if named else robot.source},
        )
        print(f"wrote untrained checkpoint {args.out} (hash {digest}) for joints {robot.joint_names}")
        return 0
    except (Sim2RealError, ValueError) as err:
        print(f"[ERROR] {err}", file=sys.stderr)
        return 2
