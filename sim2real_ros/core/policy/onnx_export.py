"""`sim2real policy export CKPT --onnx OUT.onnx`: a checkpoint as one ONNX graph (docs/onnx.md).

The graph is the checkpoint model's whole observation-to-chunk computation, normalization of the
joint positions and de-normalization of the chunk included (PolicyModel.forward), with inputs
and outputs as core/onnx_policy.py describes; the spec goes into metadata_props
(onnx_policy.spec_metadata). The written file is read back through the same checks as any ONNX
policy and its output compared with torch's before the export counts as done.
"""
from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import CheckpointError
from .checkpoint import load_checkpoint, write_atomically
from .model import PolicyModel
from .onnx_policy import OUTPUT_NAMES, input_names, load_onnx_policy, spec_metadata

OPSET = 18
# Largest |onnxruntime - torch| [rad] over the check inputs for an export to count as done.
EXPORT_TOLERANCE_RAD = 1e-4
CHECK_SAMPLES = 8


class _ObservationToChunk(nn.Module):
    """(image uint8 (1, H, W, 3), joint_positions float32 (1, n) [rad][, joint_history float32
    (1, H, n) [rad]]) -> (targets, deltas), both (1, K, n) [rad]: PolicyModel.forward, with the
    deltas as a second output."""

    def __init__(self, model: PolicyModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor, joint_positions: torch.Tensor,
                joint_history: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        q = joint_positions.to(self.model.joint_mean.dtype)
        deltas = self.model.predict_deltas(image, q, joint_history)
        return q.unsqueeze(1) + deltas, deltas


def export_onnx(checkpoint: str | Path, out: str | Path, seed: int = 0) -> dict[str, Any]:
    """Export `checkpoint` to `out` (written atomically); returns what was written and the largest
    onnxruntime-torch difference found on CHECK_SAMPLES random observations. CheckpointError for a
    bad checkpoint, a failed export or a difference above EXPORT_TOLERANCE_RAD."""
    import onnx

    policy = load_checkpoint(checkpoint, warmup=False)
    spec = policy.spec
    wrapper = _ObservationToChunk(policy.model).eval()
    image = torch.zeros((1, spec.image_height, spec.image_width, 3), dtype=torch.uint8)
    joints = policy.model.joint_mean.detach().clone().unsqueeze(0)
    inputs: tuple[torch.Tensor, ...] = (image, joints)
    if spec.joint_history_s:
        inputs = (image, joints, joints.unsqueeze(1).repeat(1, len(spec.joint_history_s), 1))
    try:
        quiet = logging.getLogger("torch.onnx")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # "torchvision is not installed" for each of its ops
        # The exporter's progress lines go to stderr: a command's --json stdout stays JSON alone.
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")  # the exporter's deprecation chatter
            program = torch.onnx.export(wrapper, inputs, None, input_names=list(input_names(spec)),
                                        output_names=list(OUTPUT_NAMES), opset_version=OPSET, dynamo=True,
                                        verbose=False)
        model = program.model_proto
    except Exception as err:  # noqa: BLE001 - torch.export/onnxscript raise many types
        raise CheckpointError(f"{checkpoint}: the ONNX export failed: {str(err).splitlines()[0]}") from err
    finally:
        quiet.setLevel(level)
    del model.metadata_props[:]
    for key, value in spec_metadata(spec, policy.checkpoint_hash).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    model.producer_name = "sim2real_ros"
    model.doc_string = (f"sim2real policy {spec.architecture} exported from checkpoint {policy.checkpoint_hash}: "
                        f"image uint8 (1,{spec.image_height},{spec.image_width},3) + joint_positions float32 "
                        f"(1,{spec.joint_count}) [rad]"
                        + (f" + joint_history float32 (1,{len(spec.joint_history_s)},{spec.joint_count}) [rad]"
                           if spec.joint_history_s else "")
                        + f" -> targets, deltas float32 (1,{spec.chunk_length},"
                        f"{spec.joint_count}) [rad]")
    onnx.checker.check_model(model)
    buffer = io.BytesIO()
    onnx.save_model(model, buffer)
    tmp = Path(out).with_name(f".{Path(out).name}.check")
    write_atomically(tmp, buffer.getvalue())
    try:
        exported = load_onnx_policy(tmp, warmup=False)
        error = _max_difference(policy, exported, seed)
    finally:
        tmp.unlink(missing_ok=True)
    if not error <= EXPORT_TOLERANCE_RAD:
        raise CheckpointError(f"{checkpoint}: the exported graph differs from torch by {error:.3g} rad, more than "
                              f"{EXPORT_TOLERANCE_RAD} rad; nothing written to {out}")
    write_atomically(out, buffer.getvalue())
    return {"onnx": str(out), "checkpoint": str(checkpoint), "parent_hash": policy.checkpoint_hash,
            "hash": exported.checkpoint_hash, "opset": OPSET, "bytes": len(buffer.getvalue()),
            "max_abs_difference_rad": error}


def _max_difference(policy: Any, exported: Any, seed: int) -> float:
    """Largest |onnxruntime - torch| [rad] over random images, joint positions near the data's and
    histories a few centiradians from them."""
    rng = np.random.default_rng(seed)
    spec = policy.spec
    mean = policy.model.joint_mean.detach().numpy().astype(np.float64)
    std = policy.model.joint_std.detach().numpy().astype(np.float64)
    worst = 0.0
    for _ in range(CHECK_SAMPLES):
        image = rng.integers(0, 256, (spec.image_height, spec.image_width, 3), dtype=np.uint8)
        q = mean + std * rng.normal(size=spec.joint_count)
        history = q + 0.05 * rng.normal(size=(len(spec.joint_history_s), spec.joint_count)) \
            if spec.joint_history_s else None
        difference = exported.select_action(image, q, history) - policy.select_action(image, q, history)
        worst = max(worst, float(np.max(np.abs(difference))))
    return worst
