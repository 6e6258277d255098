"""The Policy protocol and which runtime runs a policy file: `backend: auto | torch | onnxruntime`
(docs/onnx.md).

torch runs the project's safetensors checkpoints (core/policy/checkpoint.py: LoadedPolicy),
onnxruntime runs exported ONNX policies (core/policy/onnx_policy.py: OnnxPolicy); both implement
Policy. `auto` picks by the file: a safetensors start (or the old format's magic) means torch, an
`.onnx` name or an ONNX protobuf start means onnxruntime. Nothing here imports torch: with an ONNX
file torch is never imported.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import CheckpointError
from ..perception.preprocess_config import PreprocessConfig
from .spec import LEGACY_MAGICS, PolicySpec, looks_like_safetensors

BACKENDS = ("auto", "torch", "onnxruntime")
# An ONNX file is a protobuf ModelProto whose first field is ir_version (field 1, varint): byte 0x08.
_ONNX_FIRST_BYTE = b"\x08"


@runtime_checkable
class Policy(Protocol):
    """A policy ready to run, whatever runs it (LoadedPolicy: torch, OnnxPolicy: onnxruntime)."""

    backend: str  # "torch" or "onnxruntime"
    spec: PolicySpec
    checkpoint_hash: str  # sha256 of the file (16 hex digits)
    source: str  # the file it came from

    def select_action(self, image: np.ndarray, joint_positions: np.ndarray,
                      joint_history: np.ndarray | None = None) -> np.ndarray:
        """image (H, W, 3) uint8, joint_positions (n,) [rad], joint_history (H, n) [rad] at
        spec.joint_history_s before (None without history) -> (K, n) float64 absolute targets [rad]."""
        ...

    def select_actions(self, images: np.ndarray, joint_positions: np.ndarray,
                       joint_histories: np.ndarray | None = None) -> np.ndarray:
        """select_action for B observations: (B, H, W, 3), (B, n)[, (B, H, n)] -> (B, K, n)."""
        ...

    def check_compatible(self, joint_names: Sequence[str], preprocess: PreprocessConfig) -> None:
        """CheckpointError when the running graph differs from what the policy was trained with."""
        ...


def file_backend(path: str | Path) -> str:
    """"torch" or "onnxruntime": the runtime for the file at `path` (torch when it cannot tell, so
    the checkpoint reader gives its own error for a file that is neither)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError:
        head = b""
    # The safetensors test comes first: a header length can begin with the byte ONNX begins with.
    if looks_like_safetensors(head) or head in LEGACY_MAGICS:
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
                preprocess: PreprocessConfig | None = None) -> Policy:
    """A policy ready to run (LoadedPolicy or OnnxPolicy), by the backend (see resolve_backend);
    the arguments and checks of load_checkpoint. The returned policy's `backend` names the runtime."""
    chosen = resolve_backend(path, backend)
    if chosen == "onnxruntime":
        from .onnx_policy import load_onnx_policy

        return load_onnx_policy(path, device=device, num_threads=num_threads, warmup=warmup,
                                joint_names=joint_names, preprocess=preprocess)
    from .checkpoint import load_checkpoint

    return load_checkpoint(path, device=device, num_threads=num_threads, warmup=warmup,
                           joint_names=joint_names, preprocess=preprocess)
