"""Crafting checkpoint files byte by byte, for the tests of hostile and damaged checkpoints.

Independent of the reader's checks (it writes what a hostile file would hold): the tensors of a
spec's architecture come from the model built on torch's "meta" device (shapes only, nothing
allocated), so a file can hold a model far too big to build. A checkpoint is a safetensors file
whose metadata key "sim2real" holds the spec document as a JSON string; split_checkpoint gives that
document parsed, in place of the string, and join_checkpoint writes it back.
"""
from __future__ import annotations

import json
import struct
from typing import Any

import torch
from support import run_measured  # noqa: F401 - re-exported for the checkpoint tests

from sim2real_ros.core.policy.checkpoint import METADATA_KEY, encode_checkpoint
from sim2real_ros.core.policy.model import ARCHITECTURES, PolicySpec

LEGACY_POLICY_MAGIC = b"SIM2REAL-POLICY\n"
LEGACY_TEACHER_MAGIC = b"SIM2REAL-TEACHR\n"
_LEGACY_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}


def zero_weights_checkpoint(spec: PolicySpec) -> bytes:
    """The bytes of a well-formed checkpoint of `spec` (its architecture and hparams) whose
    tensors are all zeros (the normalization's standard deviations ones: it holds still),
    written without building the model in memory."""
    cls = ARCHITECTURES[spec.architecture]
    with torch.device("meta"):
        model = cls(spec.joint_count, spec.chunk_length, spec.image_height, spec.image_width,
                    **{**cls.DEFAULT_HPARAMS, **spec.hparams})
    state = {name: (torch.ones if name.endswith("_std") else torch.zeros)(tuple(t.shape), dtype=t.dtype)
             for name, t in model.state_dict().items()}
    return encode_checkpoint(spec, state)


def split_checkpoint(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(safetensors header as a dict, its metadata's "sim2real" document parsed; tensor data block)."""
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    header["__metadata__"][METADATA_KEY] = json.loads(header["__metadata__"][METADATA_KEY])
    return header, data[8 + length:]


def join_checkpoint(header: dict[str, Any] | str | bytes, blob: bytes) -> bytes:
    """Checkpoint bytes of a header (a dict as split_checkpoint gives it, written as Python's json
    writes it, NaN and Infinity included; or the header's raw text/bytes) and a data block."""
    if isinstance(header, dict):
        header = json.loads(json.dumps(header))  # a copy
        document = header.get("__metadata__", {}).get(METADATA_KEY)
        if isinstance(document, dict):
            header["__metadata__"][METADATA_KEY] = json.dumps(document)
        header = json.dumps(header)
    raw = header.encode() if isinstance(header, str) else header
    return len(raw).to_bytes(8, "little") + raw + blob


def spec_document(header: dict[str, Any]) -> dict[str, Any]:
    """The spec of a split header (to edit in place)."""
    return header["__metadata__"][METADATA_KEY]["spec"]


def legacy_checkpoint(spec: dict[str, Any], state: dict[str, torch.Tensor], teacher: bool = False) -> bytes:
    """The bytes of a file of the format before safetensors (format_version 1): magic, header
    length, JSON header {format_version, spec, tensors: [{name, dtype, shape, offset, nbytes}]},
    raw little-endian tensors (written here from its description, as that release wrote it)."""
    rows, blobs, offset = [], [], 0
    for name in sorted(state):
        array = state[name].detach().contiguous().numpy()
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        rows.append({"name": name, "dtype": _LEGACY_DTYPES[state[name].dtype], "shape": list(array.shape),
                     "offset": offset, "nbytes": len(data)})
        blobs.append(data)
        offset += len(data)
    header = json.dumps({"format_version": 1, "spec": spec, "tensors": rows}, sort_keys=True).encode()
    magic = LEGACY_TEACHER_MAGIC if teacher else LEGACY_POLICY_MAGIC
    return magic + struct.pack("<Q", len(header)) + header + b"".join(blobs)
