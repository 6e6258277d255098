"""Which runtime runs a policy file: `backend: auto | torch | onnxruntime` (docs/onnx.md).

torch runs the project's checkpoints (core/checkpoint.py), onnxruntime runs exported ONNX
policies (core/onnx_policy.py); `auto` picks by the file: the checkpoint magic means torch, an
`.onnx` name or an ONNX protobuf start means onnxruntime. Nothing here imports torch: with an ONNX
file torch is never imported.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from ..perception.preprocess_config import PreprocessConfig
from .spec import CHECKPOINT_MAGIC

BACKENDS = ("auto", "torch", "onnxruntime")
# An ONNX file is a protobuf ModelProto whose first field is ir_version (field 1, varint): byte 0x08.
_ONNX_FIRST_BYTE = b"\x08"


def file_backend(path: str | Path) -> str:
    """"torch" or "onnxruntime": the runtime for the file at `path` (torch when it cannot tell, so
    the checkpoint reader gives its own error for a file that is neither)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(CHECKPOINT_MAGIC))
    except OSError:
        head = b""
    if head.startswith(CHECKPOINT_MAGIC):
        return "torch"
    if path.suffix.lower() == ".onnx" or head.startswith(_ONNX_FIRST_BYTE):
        return "onnxruntime"
    return "torch"


def resolve_backend(path: str | Path, backend: str = "auto") -> str:
    """The backend to run `path` with: `backend`, or the file's for "auto". CheckpointError for an
    unknown backend or a file of the other kind (naming the file and what it is)."""
    if backend not in BACKENDS:
        raise CheckpointError(f"unknown policy backend {backend!r}; choose one of {list(BACKENDS)}")
    if not Path(path).is_file():
        return "onnxruntime" if backend == "auto" and Path(path).suffix.lower() == ".onnx" else (
            "torch" if backend == "auto" else backend)
    found = file_backend(path)
    if backend == "auto":
        return found
    if backend != found:
        what = "an ONNX model" if found == "onnxruntime" else "a sim2real checkpoint"
        hint = ("use backend onnxruntime (or auto)" if found == "onnxruntime"
                else "export it with `sim2real policy export CKPT --onnx OUT.onnx`, or use backend torch (or auto)")
        raise CheckpointError(f"{path} is {what}, not a file for backend {backend!r}: {hint}")
    return backend


def load_policy(path: str | Path, backend: str = "auto", device: str = "cpu", num_threads: int | None = None,
                warmup: bool = True, joint_names: Sequence[str] | None = None,
                preprocess: PreprocessConfig | None = None) -> Any:
    """A policy ready to run (LoadedPolicy or OnnxPolicy: both have spec, checkpoint_hash, source,
    select_action and check_compatible), by the backend (see resolve_backend); the arguments and
    checks of load_checkpoint. The returned object's `backend` names the runtime."""
    chosen = resolve_backend(path, backend)
    if chosen == "onnxruntime":
        from .onnx_policy import load_onnx_policy

        return load_onnx_policy(path, device=device, num_threads=num_threads, warmup=warmup,
                                joint_names=joint_names, preprocess=preprocess)
    from .checkpoint import load_checkpoint

    return load_checkpoint(path, device=device, num_threads=num_threads, warmup=warmup,
                           joint_names=joint_names, preprocess=preprocess)
