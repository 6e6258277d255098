"""Crafting checkpoint files byte by byte, for the tests of hostile and damaged checkpoints.

Independent of the reader's checks (it writes what a hostile file would hold): the tensors of a
spec's architecture come from the model built on torch's "meta" device (shapes only, nothing
allocated), so a file can hold a model far too big to build.
"""
from __future__ import annotations

import json
from typing import Any

import torch
from support import run_measured  # noqa: F401 - re-exported for the checkpoint tests

from sim2real_ros.core.policy.checkpoint import MAGIC, encode_checkpoint
from sim2real_ros.core.policy.model import ARCHITECTURES, PolicySpec


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
    """(header as a dict, tensor data block) of checkpoint bytes."""
    length = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    return json.loads(data[start:start + length]), data[start + length:]


def join_checkpoint(header: dict[str, Any] | str | bytes, blob: bytes) -> bytes:
    """Checkpoint bytes of a header (a dict, written as Python's json writes it, NaN and Infinity
    included; or the header's raw text/bytes) and a data block."""
    if isinstance(header, dict):
        header = json.dumps(header)
    raw = header.encode() if isinstance(header, str) else header
    return MAGIC + len(raw).to_bytes(8, "little") + raw + blob
