"""The ONNX export written beside a checkpoint a command has just trained (`sim2real train`,
`sim2real finetune`): `CKPT.onnx` next to `CKPT.safetensors` is what a lean robot graph runs on
onnxruntime when its parent hash is the checkpoint's (evaluation/checkpoint_graph.lean_policy), so a
freshly trained policy runs lean on the robot without a separate `sim2real policy export`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_export_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--export-onnx", action=argparse.BooleanOptionalAction, default=True,
                        help="also write the checkpoint's ONNX export beside it (OUT with suffix .onnx: what "
                             "the robot graph runs on onnxruntime, docs/onnx.md); --no-export-onnx: the checkpoint "
                             "alone (the robot graph then runs it on torch)")


def export_beside(command: str, checkpoint: Path) -> str | None:
    """Export `checkpoint` to the same name with suffix .onnx and say so on stdout; returns that
    path, or None when the export failed or would overwrite the checkpoint (said on stderr: the
    checkpoint is kept and runs on torch; a stale export of an earlier run is left where it was, and
    lean_policy refuses it by its parent hash)."""
    from ..core.errors import Sim2RealError
    from ..core.policy.onnx_export import export_onnx

    out = checkpoint.with_suffix(".onnx")
    if out.resolve() == checkpoint.resolve():
        print(f"sim2real {command}: {checkpoint} is named .onnx: no export beside it (the robot graph runs it "
              f"on torch; `sim2real policy export {checkpoint} --onnx OTHER.onnx` writes one)", file=sys.stderr)
        return None
    try:
        result = export_onnx(checkpoint, out)
    except Sim2RealError as err:
        print(f"sim2real {command}: {checkpoint} is written, but its ONNX export failed: {err}; the robot graph "
              f"runs it on torch", file=sys.stderr)
        return None
    print(f"wrote {result['onnx']} beside it (its ONNX export; onnxruntime vs torch "
          f"{result['max_abs_difference_rad']:.2g} rad at most)", flush=True)
    return str(result["onnx"])
