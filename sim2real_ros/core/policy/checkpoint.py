"""Policy checkpoints: one self-contained file that never executes code when loaded (docs/design.md §5).

File layout (a safetensors-like format, written and read without pickle):

    MAGIC (16 bytes: b"SIM2REAL-POLICY\\n")
    header length (uint64, little endian)
    header (UTF-8 JSON): {"format_version": 1, "spec": PolicySpec.to_dict(),
                          "tensors": [{"name", "dtype", "shape", "offset", "nbytes"}, ...]}
    tensor data (raw little-endian bytes; offsets relative to the start of this block)

The spec carries architecture + hparams, joint names, image size and intrinsics, chunk length and
dt, the preprocessing config and its hash, the sim params version and the training provenance;
the tensors are the model's state_dict, which includes the normalization statistics (buffers).
The checkpoint hash is the sha256 of the file bytes (16 hex digits), what "parent hash" refers to.

Reading checks everything before allocating (read_checkpoint, the one way in): the file size, the
header (bounded, no NaN/Infinity), the spec's sizes (caps in policy_model.py), the tensor table
(integer sizes, dtype allowlist, every tensor inside the file) and the table against what the
spec's architecture needs (built on the meta device); load_checkpoint checks the running graph
before building and warming up the model.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from ..errors import CheckpointError, ConfigError
from ..perception.camera_model import CameraModel
from ..perception.preprocess_config import PreprocessConfig
from .model import (
    DEFAULT_ARCHITECTURE,
    DEFAULT_CHUNK_LENGTH,
    DEFAULT_DT_S,
    MAX_PARAMETERS,
    ModelPlan,
    PolicyModel,
    PolicySpec,
    abbreviate,
    build_model,
    plan_model,
)
from .spec import CHECKPOINT_MAGIC, check_compatible, checked_observation

MAGIC = CHECKPOINT_MAGIC
FORMAT_VERSION = 1
_LENGTH = struct.Struct("<Q")
# Caps on the file's own structure (the spec's sizes are capped in policy_model.py). A real header
# is about 4 KB (a fine-tuned one with its bag list some tens of KB); 4 MiB of JSON parses into at
# most ~100 MB of Python objects.
_MAX_HEADER_BYTES = 4 * 1024 * 1024
_MAX_TENSORS = 1024  # tensor table rows: ~20 for the models here, 4 per layer at most
_MAX_TENSOR_DIMS = 8  # dimensions of one tensor: weights here have at most 4
_MAX_TENSOR_NAME = 256  # characters of a tensor name ("image_encoder.0.weight")
# Tensor dtypes the format stores (numpy has no bfloat16, so it is not among them).
_DTYPES: dict[str, tuple[torch.dtype, np.dtype]] = {
    "float32": (torch.float32, np.dtype("<f4")),
    "float64": (torch.float64, np.dtype("<f8")),
    "float16": (torch.float16, np.dtype("<f2")),
    "int64": (torch.int64, np.dtype("<i8")),
    "int32": (torch.int32, np.dtype("<i4")),
    "uint8": (torch.uint8, np.dtype("u1")),
    "bool": (torch.bool, np.dtype("?")),
}
_DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _) in _DTYPES.items()}
# The largest file a checkpoint within the caps can be: a bigger one is refused before it is read.
_MAX_FILE_BYTES = len(MAGIC) + _LENGTH.size + _MAX_HEADER_BYTES + MAX_PARAMETERS * max(
    np_dtype.itemsize for _, np_dtype in _DTYPES.values())


# ----------------------------------------------------------------------------------------------
# Spec helpers
def make_policy_spec(
    joint_names: Sequence[str],
    preprocess: PreprocessConfig,
    *,
    architecture: str = DEFAULT_ARCHITECTURE,
    hparams: dict[str, Any] | None = None,
    chunk_length: int = DEFAULT_CHUNK_LENGTH,
    dt_s: float = DEFAULT_DT_S,
    sim_params_version: str = "unknown",
    provenance: dict[str, Any] | None = None,
) -> PolicySpec:
    """A spec whose image size and intrinsics come from the preprocessing config's policy camera."""
    camera = preprocess.policy_camera
    return PolicySpec(
        architecture=architecture, hparams=dict(hparams or {}), joint_names=tuple(joint_names),
        image_width=camera.width, image_height=camera.height, policy_camera=camera.to_dict(),
        chunk_length=int(chunk_length), dt_s=float(dt_s), preprocess=preprocess.to_dict(),
        preprocess_hash=preprocess.content_hash, sim_params_version=sim_params_version,
        provenance=dict(provenance or {}),
    )


# ----------------------------------------------------------------------------------------------
# Writing
def _tensor_bytes(name: str, tensor: torch.Tensor) -> tuple[str, bytes]:
    dtype_name = _DTYPE_NAMES.get(tensor.dtype)
    if dtype_name is None:
        raise CheckpointError(f"tensor '{name}' has dtype {tensor.dtype}, which the checkpoint format does not "
                              f"store (supported: {sorted(_DTYPES)})")
    array = tensor.detach().to("cpu").contiguous().numpy()
    return dtype_name, array.astype(_DTYPES[dtype_name][1], copy=False).tobytes()


def encode_tensors(state: dict[str, torch.Tensor]) -> tuple[list[dict[str, Any]], bytes]:
    """The tensor table (sorted by name: deterministic) and the data block of `state`."""
    entries = []
    blobs = []
    offset = 0
    for name in sorted(state):
        dtype_name, data = _tensor_bytes(name, state[name])
        entries.append({"name": name, "dtype": dtype_name, "shape": list(state[name].shape), "offset": offset,
                        "nbytes": len(data)})
        blobs.append(data)
        offset += len(data)
    return entries, b"".join(blobs)


def encode_checkpoint(spec: PolicySpec, state: dict[str, torch.Tensor]) -> bytes:
    """The checkpoint file's bytes for `spec` and tensors `state` (deterministic: sorted names)."""
    entries, data = encode_tensors(state)
    header = {"format_version": FORMAT_VERSION, "spec": spec.to_dict(), "tensors": entries}
    try:
        header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"spec is not plain JSON (hparams/provenance must be JSON values): {err}") from err
    return MAGIC + _LENGTH.pack(len(header_bytes)) + header_bytes + data


def write_atomically(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` through a temporary file and a rename, so a crash never leaves a
    half-written file under the real name; readable by all (0644) like any shared artifact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_checkpoint(path: str | Path, model: PolicyModel, spec: PolicySpec) -> str:
    """Write `model` (weights + normalization buffers) and `spec` to `path`, atomically.

    The spec's architecture, hparams, joint count, image size and chunk length are made to agree
    with the model (architecture and hparams are taken from the model). Returns the checkpoint hash.
    """
    architecture = _architecture_name(model)
    spec = dataclasses.replace(spec, architecture=architecture, hparams=dict(model.hparams))
    shape_checks = {
        "joint_names": (spec.joint_count, model.joint_count),
        "chunk_length": (spec.chunk_length, model.chunk_length),
        "image_height": (spec.image_height, model.image_height),
        "image_width": (spec.image_width, model.image_width),
    }
    for field, (in_spec, in_model) in shape_checks.items():
        if in_spec != in_model:
            raise CheckpointError(f"cannot save: spec {field} gives {in_spec}, the model was built for {in_model}")
    state = dict(model.state_dict())
    bad = nonfinite_tensors(state)
    if bad:  # a diverged training run: a file that every loader would refuse (load_checkpoint)
        raise CheckpointError(f"cannot save {path}: tensors {abbreviate(bad)} contain NaN/Inf; nothing written")
    data = encode_checkpoint(spec, state)
    write_atomically(path, data)
    return _hash_bytes(data)


def nonfinite_tensors(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors of `state` holding a NaN or an infinity."""
    return [name for name, tensor in state.items()
            if tensor.is_floating_point() and not bool(torch.all(torch.isfinite(tensor)))]


def _architecture_name(model: PolicyModel) -> str:
    from .model import ARCHITECTURES

    for name, cls in ARCHITECTURES.items():
        if type(model) is cls:
            return name
    raise CheckpointError(f"model class {type(model).__name__} is not a registered architecture "
                          f"(register it with @register_architecture); registered: {sorted(ARCHITECTURES)}")


# ----------------------------------------------------------------------------------------------
# Reading
#
# A checkpoint is untrusted input (docs/design.md §5): every size it gives is checked against the file's
# real size and the caps at the top of this module (the spec's against those in policy_model.py)
# before anything is allocated, so a hostile or damaged file fails with a CheckpointError naming the
# file, the field and the value: never a traceback, a hang or gigabytes of memory.
_HASH_BLOCK_BYTES = 1 << 20


class _NonFinite:
    """What the header parser makes of a NaN/Infinity literal: not a number, so that no check can
    take it for one; _find_non_finite reports where it is."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _hash_file(handle: BinaryIO) -> str:
    """sha256 (16 hex digits) of an open file's bytes, read in blocks (memory stays bounded)."""
    digest = hashlib.sha256()
    handle.seek(0)
    for block in iter(lambda: handle.read(_HASH_BLOCK_BYTES), b""):
        digest.update(block)
    return digest.hexdigest()[:16]


def checkpoint_hash(path: str | Path) -> str:
    """Content hash of a checkpoint file (sha256 of its bytes, 16 hex digits)."""
    try:
        with open(path, "rb") as handle:
            return _hash_file(handle)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint: {err}") from err


def _parse_header(raw: bytes, source: str) -> dict[str, Any]:
    """The header JSON as a dict; NaN, Infinity and numbers too large for a float are refused
    naming the field (json.loads would take them as floats, and a size of inf overflows int())."""
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_NonFinite)
    except RecursionError as err:
        raise CheckpointError(f"{source}: header is nested too deeply to be a checkpoint header") from err
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError, and ints over Python's digit limit
        raise CheckpointError(f"{source}: header is not valid JSON: {err}") from err
    if not isinstance(header, dict):
        raise CheckpointError(f"{source}: header is a JSON {type(header).__name__}, not an object")
    found = _find_non_finite(header, "header")
    if found is not None:
        where, literal = found
        raise CheckpointError(f"{source}: field {where} = {literal}: NaN and infinite numbers are not allowed "
                              f"in a checkpoint header")
    return header


def _find_non_finite(value: Any, where: str) -> tuple[str, str] | None:
    """(path, literal) of the first NaN/Infinity in a parsed header, else None. Iterative: the
    header's nesting depth is whatever the JSON parser accepted."""
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _NonFinite):
            return path, item.literal
        if isinstance(item, float) and not math.isfinite(item):
            return path, repr(item)  # a literal like 1e999
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}") for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


@dataclasses.dataclass(frozen=True)
class _TensorEntry:
    """One row of the tensor table, checked: offset and nbytes [bytes] from the data block start."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


def _is_size(value: Any) -> bool:
    """A JSON integer >= 0 (not a bool, not 3.0: a size written as a float was not written by us)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_entry(entry: Any, index: int, data_bytes: int, source: str) -> _TensorEntry:
    """Check one tensor table row: types, dtype allowlist, shape bounds, nbytes = elements x
    itemsize, and [offset, offset + nbytes) inside the data block of `data_bytes` bytes."""
    where = f"{source}: tensor table entry {index}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where} is a {type(entry).__name__}, not an object")
    missing = [k for k in ("name", "dtype", "shape", "offset", "nbytes") if k not in entry]
    if missing:
        raise CheckpointError(f"{where} lacks {missing}")
    name = entry["name"]
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TENSOR_NAME:
        raise CheckpointError(f"{where}: field 'name' = {abbreviate(name)}: must be a string of 1 to "
                              f"{_MAX_TENSOR_NAME} characters")
    where = f"{source}: tensor '{name}'"
    dtype_name = entry["dtype"]
    if not isinstance(dtype_name, str) or dtype_name not in _DTYPES:
        raise CheckpointError(f"{where}: field 'dtype' = {abbreviate(dtype_name)}: not a stored dtype "
                              f"(supported: {sorted(_DTYPES)})")
    shape = entry["shape"]
    if (not isinstance(shape, list) or len(shape) > _MAX_TENSOR_DIMS
            or not all(_is_size(d) and d <= MAX_PARAMETERS for d in shape)):
        raise CheckpointError(f"{where}: field 'shape' = {abbreviate(shape)}: must be a list of at most "
                              f"{_MAX_TENSOR_DIMS} integers from 0 to MAX_PARAMETERS = {MAX_PARAMETERS}")
    elements = math.prod(shape)
    if elements > MAX_PARAMETERS:
        raise CheckpointError(f"{where}: field 'shape' = {shape}: {elements} elements, more than "
                              f"MAX_PARAMETERS = {MAX_PARAMETERS}")
    for key in ("offset", "nbytes"):
        if not _is_size(entry[key]):
            raise CheckpointError(f"{where}: field '{key}' = {abbreviate(entry[key])}: must be an integer >= 0")
    offset, nbytes = entry["offset"], entry["nbytes"]
    expected = elements * _DTYPES[dtype_name][1].itemsize
    if nbytes != expected:
        raise CheckpointError(f"{where}: field 'nbytes' = {nbytes}: shape {shape} of {dtype_name} takes "
                              f"{expected} bytes")
    if offset + nbytes > data_bytes:
        raise CheckpointError(f"{where}: field 'offset' = {offset}: its {nbytes} bytes lie outside the file (they "
                              f"end at byte {offset + nbytes} of a data block of {data_bytes}; truncated file?)")
    return _TensorEntry(name, dtype_name, tuple(shape), offset, nbytes)


def _parse_table(entries: Any, data_bytes: int, source: str) -> dict[str, _TensorEntry]:
    """The checked tensor table by name (see _parse_entry); names must be unique."""
    if not isinstance(entries, list):
        raise CheckpointError(f"{source}: field 'tensors' = {abbreviate(entries)}: the header has no tensor table")
    if len(entries) > _MAX_TENSORS:
        raise CheckpointError(f"{source}: field 'tensors' has {len(entries)} entries, more than {_MAX_TENSORS}")
    table: dict[str, _TensorEntry] = {}
    for index, raw in enumerate(entries):
        entry = _parse_entry(raw, index, data_bytes, source)
        if entry.name in table:
            raise CheckpointError(f"{source}: tensor '{entry.name}' appears twice in the tensor table")
        table[entry.name] = entry
    return table


def _parse_spec(header: dict[str, Any], source: str) -> tuple[PolicySpec, ModelPlan]:
    """The header's spec, with every size within the caps, and the plan of the model it builds
    (made on the meta device: nothing allocated). Its camera must parse, since the graph check
    reads its intrinsics."""
    try:
        spec = PolicySpec.from_dict(header.get("spec"), source=f"{source} spec")
        CameraModel.from_dict(spec.policy_camera, source=f"{source} spec policy_camera")
        plan = plan_model(spec.architecture, spec, **spec.hparams)
    except ConfigError as err:
        # The same field, value and problem, told as this file's (plan_model names "policy").
        raise CheckpointError(str(ConfigError(err.source if err.source.startswith(source) else f"{source} spec",
                                              err.field, err.value, err.problem))) from err
    return spec, plan


def _check_against_plan(table: dict[str, _TensorEntry], plan: ModelPlan, spec: PolicySpec, source: str) -> None:
    """Every tensor the spec's architecture needs, no other, each with the shape it needs (and a
    floating dtype where it needs one): checked before any tensor data is read."""
    problems = []
    missing = sorted(set(plan.state) - set(table))
    unexpected = sorted(set(table) - set(plan.state))
    if missing:
        problems.append(f"missing tensors {abbreviate(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {abbreviate(unexpected)}")
    for name in sorted(set(plan.state) & set(table)):
        shape, dtype = plan.state[name]
        entry = table[name]
        if entry.shape != shape:
            problems.append(f"tensor '{name}' field 'shape' = {list(entry.shape)}, "
                            f"the architecture needs {list(shape)}")
        elif dtype.is_floating_point and not _DTYPES[entry.dtype][0].is_floating_point:
            problems.append(f"tensor '{name}' field 'dtype' = {entry.dtype!r}, the architecture needs {dtype}")
    if problems:
        raise CheckpointError(f"{source}: weights do not fit architecture {spec.architecture!r} "
                              f"{spec.hparams}: " + "; ".join(problems[:5])
                              + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))


def _read_tensor(handle: BinaryIO, data_start: int, entry: _TensorEntry, source: str) -> torch.Tensor:
    """Read one checked tensor straight into its array (no copy of the file in memory)."""
    array = np.empty(entry.shape, dtype=_DTYPES[entry.dtype][1])
    if entry.nbytes:
        handle.seek(data_start + entry.offset)
        read = handle.readinto(array.reshape(-1).view(np.uint8))
        if read != entry.nbytes:  # the file shrank since its size was taken
            raise CheckpointError(f"{source}: tensor '{entry.name}': read {read} of its {entry.nbytes} bytes "
                                  f"(truncated file?)")
    return torch.from_numpy(array)


def _decode(handle: BinaryIO, size: int, source: str) -> tuple[PolicySpec, dict[str, torch.Tensor]]:
    """Parse and check an open checkpoint of `size` bytes: header, spec, tensor table and the
    table against the spec's architecture, all before reading (allocating) any tensor."""
    prefix = handle.read(len(MAGIC) + _LENGTH.size)
    if len(prefix) < len(MAGIC) and MAGIC.startswith(prefix):
        raise CheckpointError(f"{source}: truncated checkpoint ({size} bytes: it ends inside the {MAGIC!r} header)")
    if not prefix.startswith(MAGIC):
        hint = " (it looks like a pickle, which could run code when loaded)" if prefix[:1] in (b"\x80", b"PK") else ""
        raise CheckpointError(f"{source}: not a sim2real policy checkpoint (missing the {MAGIC!r} header){hint}; "
                              f"refusing to load it")
    start = len(MAGIC) + _LENGTH.size
    if len(prefix) < start:
        raise CheckpointError(f"{source}: truncated checkpoint ({size} bytes: it ends inside the header length)")
    (header_length,) = _LENGTH.unpack_from(prefix, len(MAGIC))
    if header_length > _MAX_HEADER_BYTES:
        raise CheckpointError(f"{source}: field 'header length' = {header_length}: more than the "
                              f"{_MAX_HEADER_BYTES} bytes a checkpoint header may have")
    if start + header_length > size:
        raise CheckpointError(f"{source}: field 'header length' = {header_length}: the header would end at byte "
                              f"{start + header_length} of a {size}-byte file (truncated file?)")
    raw = handle.read(header_length)
    if len(raw) != header_length:
        raise CheckpointError(f"{source}: truncated header ({len(raw)} of {header_length} bytes)")
    header = _parse_header(raw, source)
    if header.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{source}: checkpoint format version {abbreviate(header.get('format_version'))}, "
                              f"this code reads {FORMAT_VERSION}")
    spec, plan = _parse_spec(header, source)
    data_start = start + header_length
    table = _parse_table(header.get("tensors"), size - data_start, source)
    _check_against_plan(table, plan, spec, source)
    state = {name: _read_tensor(handle, data_start, entry, source) for name, entry in sorted(table.items())}
    return spec, state


def decode_checkpoint(data: bytes, source: str) -> tuple[PolicySpec, dict[str, torch.Tensor]]:
    """Parse checkpoint bytes into (spec, state_dict). Nothing is unpickled or executed: a file
    that is not in this format (a torch.save pickle, say) is refused, never loaded. Every size is
    checked (see _decode) before anything is allocated; CheckpointError names `source`."""
    return _decode(io.BytesIO(data), len(data), source)


def read_checkpoint(path: str | Path) -> tuple[PolicySpec, dict[str, torch.Tensor], str]:
    """(spec, state_dict, checkpoint hash) of a checkpoint file, without building a model.

    The one way into a checkpoint file: everything that loads one (the policy node, evaluation,
    fine-tuning, `sim2real policy info`) comes through here, so all get the same checks."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist; create an untrained one with "
                              f"`sim2real policy init --robot URDF --out {path}` or train one")
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > _MAX_FILE_BYTES:
                raise CheckpointError(f"{path}: file size {size} bytes is more than a checkpoint within the "
                                      f"caps can be ({_MAX_FILE_BYTES} bytes)")
            spec, state = _decode(handle, size, str(path))
            digest = _hash_file(handle)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint: {err}") from err
    return spec, state, digest


# ----------------------------------------------------------------------------------------------
# Running
class LoadedPolicy:
    """A checkpoint ready to run: spec, model (eval mode, on its device) and checkpoint hash."""

    backend = "torch"  # core/policy_backend.py: what runs it (core/onnx_policy.OnnxPolicy: "onnxruntime")

    def __init__(self, spec: PolicySpec, model: PolicyModel, checkpoint_hash: str, source: str,
                 device: torch.device) -> None:
        self.spec = spec
        self.model = model
        self.checkpoint_hash = checkpoint_hash
        self.source = source
        self.device = device

    def select_action(self, image: np.ndarray, joint_positions: np.ndarray) -> np.ndarray:
        """One deterministic inference.

        image: (H, W, 3) uint8 RGB at the policy resolution (spec.image_height, spec.image_width).
        joint_positions: (n,) [rad] in spec.joint_names order, at the image's capture time.
        Returns (K, n) float64 absolute targets [rad]: row k is the target for time stamp + k * dt
        (row 0 at the observation time). The current positions are added in float64 so that a
        zero delta holds exactly. Raises ValueError for wrong shapes, dtype or non-finite joints.
        """
        image, q = checked_observation(self.spec, image, joint_positions)
        with torch.inference_mode():
            images = torch.from_numpy(np.ascontiguousarray(image)).unsqueeze(0).to(self.device)
            joints = torch.from_numpy(q.astype(np.float32)).unsqueeze(0).to(self.device)
            deltas = self.model.predict_deltas(images, joints)[0].to("cpu").numpy()
        return q[None, :] + deltas.astype(np.float64)

    def select_actions(self, images: np.ndarray, joint_positions: np.ndarray) -> np.ndarray:
        """select_action for B observations in one forward pass (offline replay: all are known).

        images: (B, H, W, 3) uint8 RGB; joint_positions: (B, n) [rad]. Returns (B, K, n) float64
        absolute targets [rad]. Row b equals select_action(images[b], joint_positions[b]) up to the
        float32 rounding of the network (a batched matrix product sums in another order: measured
        <= 1e-6 rad). ValueError for wrong shapes, dtype or non-finite joints.
        """
        images = np.asarray(images)
        q = np.asarray(joint_positions, dtype=np.float64)
        if images.ndim != 4 or q.ndim != 2 or images.shape[0] != q.shape[0]:
            raise ValueError(f"images (B, H, W, 3) and joint_positions (B, n) must share B, got {images.shape} "
                             f"and {q.shape}")
        for image, joints in zip(images, q, strict=True):
            checked_observation(self.spec, image, joints)
        with torch.inference_mode():
            batch = torch.from_numpy(np.ascontiguousarray(images)).to(self.device)
            joints = torch.from_numpy(q.astype(np.float32)).to(self.device)
            deltas = self.model.predict_deltas(batch, joints).to("cpu").numpy()
        return q[:, None, :] + deltas.astype(np.float64)

    def check_compatible(self, joint_names: Sequence[str], preprocess: PreprocessConfig) -> None:
        """Refuse (CheckpointError) to run in a graph that differs from what the policy was
        trained with; see check_compatible."""
        check_compatible(self.spec, joint_names, preprocess, self.source)


def _resolve_device(device: str) -> torch.device:
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise CheckpointError(f"unknown torch device {device!r}: {err}") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(f"device {device!r} requested but CUDA is not available; use device 'cpu'")
    if resolved.type not in ("cpu", "cuda"):
        raise CheckpointError(f"device {device!r}: only 'cpu' and 'cuda' are supported")
    return resolved


def load_checkpoint(path: str | Path, device: str = "cpu", num_threads: int | None = None,
                    warmup: bool = True, joint_names: Sequence[str] | None = None,
                    preprocess: PreprocessConfig | None = None) -> LoadedPolicy:
    """Read a checkpoint, rebuild its model and make it ready to run.

    device: "cpu" or "cuda[:i]". num_threads: torch intra-op threads (process-wide setting; None
    leaves torch's default). warmup: run one inference now so the first real observation does not
    pay the cold start. joint_names and preprocess (both or neither): the running graph's; the
    checkpoint is checked against them (check_compatible) before its model is built.
    Raises CheckpointError for a missing, unsafe, damaged, oversized, inconsistent or (given the
    graph) incompatible file, before allocating more than the checked tensors.
    """
    if (joint_names is None) != (preprocess is None):
        raise ValueError("load_checkpoint: give both joint_names and preprocess, or neither")
    path = Path(path)
    spec, state, digest = read_checkpoint(path)
    if joint_names is not None and preprocess is not None:
        check_compatible(spec, joint_names, preprocess, str(path))
    torch_device = _resolve_device(device)
    if num_threads is not None:
        if int(num_threads) <= 0:
            raise CheckpointError(f"num_threads must be positive, got {num_threads}")
        torch.set_num_threads(int(num_threads))
    bad = nonfinite_tensors(state)
    if bad:
        raise CheckpointError(f"{path}: tensors {abbreviate(bad)} contain NaN/Inf; refusing to run them")
    try:
        model = build_model(spec.architecture, spec, **spec.hparams)
    except ConfigError as err:
        raise CheckpointError(f"{path}: cannot rebuild the model: {err}") from err
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not fit architecture {spec.architecture!r}: {err}") from err
    model.eval().to(torch_device)
    policy = LoadedPolicy(spec, model, digest, str(path), torch_device)
    if warmup:
        image = np.zeros((spec.image_height, spec.image_width, 3), dtype=np.uint8)
        try:
            policy.select_action(image, model.joint_mean.to("cpu").numpy().astype(np.float64))
        except (ValueError, RuntimeError) as err:
            raise CheckpointError(f"{path}: the warm-up inference failed: {err}") from err
    return policy
