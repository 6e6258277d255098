"""Policy artifacts: students and PPO teachers as safetensors files that never run code when loaded
(docs/design.md §5). The one load/save module: rl/teacher_checkpoint.py writes and reads teachers
through encode_artifact and read_artifact.

A file is a standard safetensors file (the `safetensors` package writes and decodes it):

    header length (uint64, little endian)
    header (UTF-8 JSON): {"__metadata__": {"sim2real": SPEC_JSON},
                          "<tensor name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
    tensor data (raw little-endian bytes; offsets relative to the start of this block)

SPEC_JSON (one string: safetensors metadata maps strings to strings) is
{"format_version": 2, "kind": "policy" | "teacher", "spec": {...}}. A student's spec carries
architecture + hparams, joint names, image size and intrinsics, chunk length and dt, the
preprocessing config and its hash, the sim params version and the training provenance; the
tensors are the model's state_dict, which includes the normalization statistics (buffers). The
spec lives in the file (not a sidecar) so that one file, and one hash, is the whole policy.
The checkpoint hash is the sha256 of the file bytes (16 hex digits), what "parent hash" refers to.

Reading checks everything before allocating (read_artifact, the one way in), before the safetensors
decoder sees a byte: the file size, the header length against our cap (safetensors' own is 100 MB),
the header (bounded, no NaN/Infinity), the metadata and the spec's sizes (caps in model.py), the
tensor table (integer sizes, dtype allowlist, every tensor inside the file, tensors tiling the data
block without overlap or gap) and the table against what the spec's architecture needs (built on
the meta device); load_checkpoint checks the running graph before building and warming up the
model. The pre-safetensors format (16-byte magic) is refused with a pointer to
`sim2real policy convert` (core/policy/legacy_checkpoint.py reads it for one release).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import struct
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

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
    build_planned_model,
    plan_model,
)
from .spec import LEGACY_MAGICS, check_compatible, checked_observation, looks_like_safetensors

FORMAT_VERSION = 2
METADATA_KEY = "sim2real"  # the one metadata entry: SPEC_JSON above
KIND_POLICY = "policy"
KIND_TEACHER = "teacher"
_KIND_TEXT = {KIND_POLICY: "policy checkpoint (a vision student)", KIND_TEACHER: "PPO teacher checkpoint"}
_LENGTH = struct.Struct("<Q")
# Caps on the file's own structure (the spec's sizes are capped in model.py). A real header is
# about 4 KB (a fine-tuned one with its bag list some tens of KB); 4 MiB of JSON parses into at
# most ~100 MB of Python objects.
_MAX_HEADER_BYTES = 4 * 1024 * 1024
_MAX_TENSORS = 1024  # tensor table rows: ~20 for the models here, 4 per layer at most
_MAX_TENSOR_DIMS = 8  # dimensions of one tensor: weights here have at most 4
_MAX_TENSOR_NAME = 256  # characters of a tensor name ("image_encoder.0.weight")
# Tensor dtypes the format stores, by their safetensors names (numpy has no bfloat16, so it is not
# among them).
_DTYPES: dict[str, tuple[torch.dtype, np.dtype]] = {
    "F32": (torch.float32, np.dtype("<f4")),
    "F64": (torch.float64, np.dtype("<f8")),
    "F16": (torch.float16, np.dtype("<f2")),
    "I64": (torch.int64, np.dtype("<i8")),
    "I32": (torch.int32, np.dtype("<i4")),
    "U8": (torch.uint8, np.dtype("u1")),
    "BOOL": (torch.bool, np.dtype("?")),
}
_DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _) in _DTYPES.items()}
# The largest file a checkpoint within the caps can be: a bigger one is refused before it is read.
_MAX_FILE_BYTES = _LENGTH.size + _MAX_HEADER_BYTES + MAX_PARAMETERS * max(
    np_dtype.itemsize for _, np_dtype in _DTYPES.values())
_PICKLE_STARTS = (b"\x80", b"PK")  # pickle protocol 2+, torch.save's zip archive

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ArtifactLimits:
    """Caps of one kind of file [bytes]: the whole file and its JSON header."""

    max_file_bytes: int
    max_header_bytes: int


POLICY_LIMITS = ArtifactLimits(_MAX_FILE_BYTES, _MAX_HEADER_BYTES)


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
    joint_history_s: Sequence[float] = (),
) -> PolicySpec:
    """A spec whose image size and intrinsics come from the preprocessing config's policy camera."""
    camera = preprocess.policy_camera
    return PolicySpec(
        architecture=architecture, hparams=dict(hparams or {}), joint_names=tuple(joint_names),
        image_width=camera.width, image_height=camera.height, policy_camera=camera.to_dict(),
        chunk_length=int(chunk_length), dt_s=float(dt_s), preprocess=preprocess.to_dict(),
        preprocess_hash=preprocess.content_hash, sim_params_version=sim_params_version,
        provenance=dict(provenance or {}), joint_history_s=tuple(joint_history_s),
    )


# ----------------------------------------------------------------------------------------------
# Writing
def _checked_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` as contiguous CPU tensors of stored dtypes (own memory: safetensors refuses tensors
    that share storage); CheckpointError naming the first tensor of another dtype."""
    tensors = {}
    for name in sorted(state):
        tensor = state[name]
        if tensor.dtype not in _DTYPE_NAMES:
            raise CheckpointError(f"tensor '{name}' has dtype {tensor.dtype}, which the checkpoint format does not "
                                  f"store (supported: {sorted(str(t) for t, _ in _DTYPES.values())})")
        tensors[name] = tensor.detach().to("cpu").contiguous().clone()
    return tensors


def encode_artifact(kind: str, spec: dict[str, Any], state: dict[str, torch.Tensor]) -> bytes:
    """The safetensors bytes of tensors `state` with `spec` (plain JSON values) as a `kind` file's
    metadata. Deterministic: safetensors orders tensors by dtype and name, and the metadata holds
    one key (safetensors writes several in no fixed order)."""
    if kind not in _KIND_TEXT:
        raise CheckpointError(f"unknown checkpoint kind {kind!r}; choose one of {sorted(_KIND_TEXT)}")
    document = {"format_version": FORMAT_VERSION, "kind": kind, "spec": spec}
    try:
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"spec is not plain JSON (hparams/provenance must be JSON values): {err}") from err
    from safetensors.torch import save

    return save(_checked_tensors(state), metadata={METADATA_KEY: text})


def encode_checkpoint(spec: PolicySpec, state: dict[str, torch.Tensor]) -> bytes:
    """The checkpoint file's bytes for `spec` and tensors `state` (deterministic)."""
    return encode_artifact(KIND_POLICY, spec.to_dict(), state)


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
# real size and the caps at the top of this module (the spec's against those in model.py) before
# anything is allocated and before safetensors decodes it, so a hostile or damaged file fails with a
# CheckpointError naming the file, the field and the value: never a traceback, a hang or gigabytes.
_HASH_BLOCK_BYTES = 1 << 20


class _NonFinite:
    """What the JSON parser makes of a NaN/Infinity literal: not a number, so that no check can
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


def parse_bounded_json(raw: bytes | str, source: str, what: str) -> dict[str, Any]:
    """`raw` (already within its size cap) as a JSON object; NaN, Infinity and numbers too large
    for a float are refused naming the field (json.loads would take them as floats, and a size of
    inf overflows int()). `what` names the document in messages and paths ("header")."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        document = json.loads(text, parse_constant=_NonFinite)
    except RecursionError as err:
        raise CheckpointError(f"{source}: {what} is nested too deeply to be a checkpoint {what}") from err
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError, and ints over Python's digit limit
        raise CheckpointError(f"{source}: {what} is not valid JSON: {err}") from err
    if not isinstance(document, dict):
        raise CheckpointError(f"{source}: {what} is a JSON {type(document).__name__}, not an object")
    found = _find_non_finite(document, what)
    if found is not None:
        where, literal = found
        raise CheckpointError(f"{source}: field {where} = {literal}: NaN and infinite numbers are not allowed "
                              f"in a checkpoint")
    return document


def _find_non_finite(value: Any, where: str) -> tuple[str, str] | None:
    """(path, literal) of the first NaN/Infinity in a parsed document, else None. Iterative: the
    nesting depth is whatever the JSON parser accepted."""
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
class TensorEntry:
    """One row of the tensor table, checked: [begin, end) [bytes] from the data block start."""

    name: str
    dtype: str  # safetensors name: "F32", ...
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype][0]


def _is_size(value: Any) -> bool:
    """A JSON integer >= 0 (not a bool, not 3.0: a size written as a float was not written by us)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_entry(name: Any, entry: Any, data_bytes: int, source: str) -> TensorEntry:
    """Check one tensor table row: types, dtype allowlist, shape bounds, end - begin = elements x
    itemsize, and [begin, end) inside the data block of `data_bytes` bytes."""
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TENSOR_NAME:
        raise CheckpointError(f"{source}: tensor name {abbreviate(name)}: must be a string of 1 to "
                              f"{_MAX_TENSOR_NAME} characters")
    where = f"{source}: tensor '{name}'"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where} is a {type(entry).__name__}, not an object")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in entry]
    if missing:
        raise CheckpointError(f"{where} lacks {missing}")
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
    offsets = entry["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_size(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise CheckpointError(f"{where}: field 'data_offsets' = {abbreviate(offsets)}: must be [begin, end], "
                              f"integers with 0 <= begin <= end")
    begin, end = offsets
    expected = elements * _DTYPES[dtype_name][1].itemsize
    if end - begin != expected:
        raise CheckpointError(f"{where}: field 'data_offsets' = {offsets}: {end - begin} bytes, shape {shape} of "
                              f"{dtype_name} takes {expected} bytes")
    if end > data_bytes:
        raise CheckpointError(f"{where}: field 'data_offsets' = {offsets}: its bytes lie outside the file (they end "
                              f"at byte {end} of a data block of {data_bytes}; truncated file?)")
    return TensorEntry(name, dtype_name, tuple(shape), begin, end)


def _check_layout(table: dict[str, TensorEntry], data_bytes: int, source: str) -> None:
    """The tensors tile the data block: no two overlap, no gap, nothing after the last (what the
    safetensors decoder requires too; said here naming the tensors)."""
    position, previous = 0, None
    for entry in sorted(table.values(), key=lambda e: (e.begin, e.end)):
        if entry.begin < position:
            raise CheckpointError(f"{source}: tensors '{previous}' and '{entry.name}' overlap (bytes "
                                  f"{entry.begin}-{position} of the data block are claimed twice)")
        if entry.begin > position:
            raise CheckpointError(f"{source}: tensor '{entry.name}' begins at byte {entry.begin} of the data block, "
                                  f"the tensors before it end at {position} (a gap of unclaimed bytes)")
        position, previous = entry.end, entry.name
    if position != data_bytes:
        raise CheckpointError(f"{source}: the tensors end at byte {position} of a data block of {data_bytes}: "
                              f"{data_bytes - position} bytes after the last tensor")


def _parse_table(header: dict[str, Any], data_bytes: int, source: str) -> dict[str, TensorEntry]:
    """The checked tensor table by name (see _parse_entry, _check_layout): the header's entries
    other than __metadata__. Names are unique (JSON keys: a repeated one would be folded by the
    parser, so the layout check then finds its bytes unclaimed)."""
    names = [name for name in header if name != "__metadata__"]
    if len(names) > _MAX_TENSORS:
        raise CheckpointError(f"{source}: the header lists {len(names)} tensors, more than {_MAX_TENSORS}")
    table = {name: _parse_entry(name, header[name], data_bytes, source) for name in names}
    _check_layout(table, data_bytes, source)
    return table


def _artifact_spec(header: dict[str, Any], kind: str, source: str) -> Any:
    """The spec of the header's metadata (SPEC_JSON), after its format version and kind."""
    metadata = header.get("__metadata__")
    if not isinstance(metadata, dict) or not isinstance(metadata.get(METADATA_KEY), str):
        raise CheckpointError(f"{source}: field '__metadata__.{METADATA_KEY}' = "
                              f"{abbreviate(metadata.get(METADATA_KEY) if isinstance(metadata, dict) else metadata)}: "
                              f"a safetensors file without a sim2real spec (written by another tool?); "
                              f"refusing to load it")
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()):
        raise CheckpointError(f"{source}: field '__metadata__' maps to values that are not strings")
    document = parse_bounded_json(metadata[METADATA_KEY], source, f"__metadata__.{METADATA_KEY}")
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{source}: checkpoint format version {abbreviate(document.get('format_version'))}, "
                              f"this code reads {FORMAT_VERSION}")
    found = document.get("kind")
    if found != kind:
        what = _KIND_TEXT.get(found, f"file of kind {abbreviate(found)}") if isinstance(found, str) else \
            f"file of kind {abbreviate(found)}"
        raise CheckpointError(f"{source}: a {what}, not a {_KIND_TEXT[kind]}")
    return document.get("spec")


def _read_header(handle: BinaryIO, size: int, source: str, limits: ArtifactLimits,
                 kind: str = KIND_POLICY) -> tuple[bytes, dict[str, Any]]:
    """The raw header bytes and the header parsed, after the format (not an old-format file, not
    a pickle) and the header length (within our cap and the file) are checked; `kind`: the kind
    expected, for messages."""
    head = handle.read(16)
    legacy = LEGACY_MAGICS.get(head)
    if legacy is not None:
        raise CheckpointError(f"{source}: old format ({_KIND_TEXT[legacy]} from before safetensors, magic "
                              f"{head!r}): run `sim2real policy convert {source} NEW.safetensors` to convert it")
    if not looks_like_safetensors(head) and head.startswith(_PICKLE_STARTS):
        raise CheckpointError(f"{source}: not a sim2real {_KIND_TEXT[kind]} (it looks like a pickle, which could "
                              f"run code when loaded); refusing to load it")
    if size < _LENGTH.size:
        raise CheckpointError(f"{source}: truncated checkpoint ({size} bytes: it ends inside the 8-byte header "
                              f"length)")
    (header_length,) = _LENGTH.unpack_from(head, 0)
    if header_length > limits.max_header_bytes:
        raise CheckpointError(f"{source}: field 'header length' = {header_length}: more than the "
                              f"{limits.max_header_bytes} bytes a checkpoint header may have")
    if _LENGTH.size + header_length > size:
        raise CheckpointError(f"{source}: field 'header length' = {header_length}: the header would end at byte "
                              f"{_LENGTH.size + header_length} of a {size}-byte file (truncated file?)")
    handle.seek(_LENGTH.size)
    raw = handle.read(header_length)
    if len(raw) != header_length:
        raise CheckpointError(f"{source}: truncated header ({len(raw)} of {header_length} bytes)")
    if not raw.lstrip(b" ").startswith(b"{"):
        raise CheckpointError(f"{source}: not a safetensors checkpoint (the header after the 8-byte length is not "
                              f"a JSON object); refusing to load it")
    return raw, parse_bounded_json(raw, source, "header")


def _decode_tensors(data: bytes, table: dict[str, TensorEntry], source: str) -> dict[str, torch.Tensor]:
    """safetensors' decoding of the checked file `data`; its result must be the checked table."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        state = load(data)
    except (SafetensorError, ValueError, RuntimeError, TypeError) as err:
        raise CheckpointError(f"{source}: safetensors cannot decode it: {err}") from err
    for name, entry in table.items():
        tensor = state.get(name)
        if tensor is None or tuple(tensor.shape) != entry.shape or tensor.dtype != entry.torch_dtype:
            raise CheckpointError(f"{source}: tensor '{name}' decoded unlike its table entry")
    if set(state) != set(table):
        raise CheckpointError(f"{source}: decoded tensors {abbreviate(sorted(set(state) - set(table)))} "
                              f"are not in the tensor table")
    return state


def read_artifact(path: str | Path, kind: str, limits: ArtifactLimits,
                  check: Callable[[Any, dict[str, TensorEntry], str], T]) -> tuple[T, dict[str, torch.Tensor], str]:
    """(check's result, tensors, checkpoint hash) of the `kind` file at `path`.

    Before any tensor is read: the file size and header length against `limits`, the header and
    metadata (bounded JSON, no NaN/Infinity), the format version and kind, the tensor table (see
    _parse_table); then `check(spec, table, source)` parses the spec and checks the table against
    what it describes (raising CheckpointError). Only then is the file read whole and decoded by
    safetensors (the bytes hashed are the bytes decoded). CheckpointError names the file."""
    path = Path(path)
    source = str(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limits.max_file_bytes:
                raise CheckpointError(f"{source}: file size {size} bytes is more than a "
                                      f"{_KIND_TEXT[kind]} within the caps can be ({limits.max_file_bytes} bytes)")
            raw, header = _read_header(handle, size, source, limits, kind)
            spec = _artifact_spec(header, kind, source)
            table = _parse_table(header, size - _LENGTH.size - len(raw), source)
            result = check(spec, table, source)
            handle.seek(0)
            data = handle.read(size + 1)
    except OSError as err:
        raise CheckpointError(f"{source}: cannot read checkpoint: {err}") from err
    if len(data) != size or data[_LENGTH.size:_LENGTH.size + len(raw)] != raw:
        raise CheckpointError(f"{source}: the file changed while it was being read")
    return result, _decode_tensors(data, table, source), _hash_bytes(data)


def artifact_kind(path: str | Path) -> str | None:
    """"policy" or "teacher" for a file of this format, else None (what `policy info` and
    `eval-sim` dispatch on). Reads at most the capped header; never raises."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            _raw, header = _read_header(handle, size, str(path), POLICY_LIMITS)
        metadata = header.get("__metadata__")
        document = parse_bounded_json(metadata[METADATA_KEY], str(path), "metadata")
    except (OSError, CheckpointError, TypeError, KeyError):
        return None
    kind = document.get("kind")
    return kind if kind in _KIND_TEXT else None


def _parse_spec(spec_value: Any, source: str) -> tuple[PolicySpec, ModelPlan]:
    """The metadata's spec, with every size within the caps, and the plan of the model it builds
    (made on the meta device: nothing allocated). Its camera must parse, since the graph check
    reads its intrinsics."""
    try:
        spec = PolicySpec.from_dict(spec_value, source=f"{source} spec")
        CameraModel.from_dict(spec.policy_camera, source=f"{source} spec policy_camera")
        plan = plan_model(spec.architecture, spec, **spec.hparams)
    except ConfigError as err:
        # The same field, value and problem, told as this file's (plan_model names "policy").
        raise CheckpointError(str(ConfigError(err.source if err.source.startswith(source) else f"{source} spec",
                                              err.field, err.value, err.problem))) from err
    return spec, plan


def _check_against_plan(table: dict[str, TensorEntry], plan: ModelPlan, spec: PolicySpec, source: str) -> None:
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
        elif dtype.is_floating_point and not entry.torch_dtype.is_floating_point:
            problems.append(f"tensor '{name}' field 'dtype' = {entry.dtype!r}, the architecture needs {dtype}")
    if problems:
        raise CheckpointError(f"{source}: weights do not fit architecture {spec.architecture!r} "
                              f"{spec.hparams}: " + "; ".join(problems[:5])
                              + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))


def _check_policy(spec_value: Any, table: dict[str, TensorEntry], source: str) -> PolicySpec:
    spec, plan = _parse_spec(spec_value, source)
    _check_against_plan(table, plan, spec, source)
    return spec


def read_checkpoint(path: str | Path) -> tuple[PolicySpec, dict[str, torch.Tensor], str]:
    """(spec, state_dict, checkpoint hash) of a checkpoint file, without building a model.

    The one way into a student checkpoint: everything that loads one (the policy node, evaluation,
    fine-tuning, `sim2real policy info`) comes through here, so all get the same checks."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist; create an untrained one with "
                              f"`sim2real policy init --robot URDF --out {path}` or train one")
    return read_artifact(path, KIND_POLICY, POLICY_LIMITS, _check_policy)


# ----------------------------------------------------------------------------------------------
# Running
class LoadedPolicy:
    """A checkpoint ready to run: spec, model (eval mode, on its device) and checkpoint hash."""

    backend = "torch"  # implements core/policy/backend.Policy (core/policy/onnx_policy.OnnxPolicy: "onnxruntime")

    def __init__(self, spec: PolicySpec, model: PolicyModel, checkpoint_hash: str, source: str,
                 device: torch.device) -> None:
        self.spec = spec
        self.model = model
        self.checkpoint_hash = checkpoint_hash
        self.source = source
        self.device = device

    def select_action(self, image: np.ndarray, joint_positions: np.ndarray,
                      joint_history: np.ndarray | None = None) -> np.ndarray:
        """One deterministic inference.

        image: (H, W, 3) uint8 RGB at the policy resolution (spec.image_height, spec.image_width).
        joint_positions: (n,) [rad] in spec.joint_names order, at the image's capture time.
        joint_history: (H, n) [rad], the positions at spec.joint_history_s before it (None for a
        policy without history; core/control/joint_history.py).
        Returns (K, n) float64 absolute targets [rad]: row k is the target for time stamp + k * dt
        (row 0 at the observation time). The current positions are added in float64 so that a
        zero delta holds exactly. Raises ValueError for wrong shapes, dtype or non-finite joints.
        """
        image, q, history = checked_observation(self.spec, image, joint_positions, joint_history)
        with torch.inference_mode():
            images = torch.from_numpy(np.ascontiguousarray(image)).unsqueeze(0).to(self.device)
            joints = torch.from_numpy(q.astype(np.float32)).unsqueeze(0).to(self.device)
            past = torch.from_numpy(history.astype(np.float32)).unsqueeze(0).to(self.device) \
                if self.spec.joint_history_s else None
            deltas = self.model.predict_deltas(images, joints, past)[0].to("cpu").numpy()
        return q[None, :] + deltas.astype(np.float64)

    def select_actions(self, images: np.ndarray, joint_positions: np.ndarray,
                       joint_histories: np.ndarray | None = None) -> np.ndarray:
        """select_action for B observations in one forward pass (offline replay: all are known).

        images: (B, H, W, 3) uint8 RGB; joint_positions: (B, n) [rad]; joint_histories (B, H, n)
        [rad] (policies with history). Returns (B, K, n) float64 absolute targets [rad]. Row b
        equals select_action(images[b], joint_positions[b], joint_histories[b]) up to the float32
        rounding of the network (a batched matrix product sums in another order: measured <= 1e-6
        rad). ValueError for wrong shapes, dtype or non-finite joints.
        """
        images = np.asarray(images)
        q = np.asarray(joint_positions, dtype=np.float64)
        if images.ndim != 4 or q.ndim != 2 or images.shape[0] != q.shape[0]:
            raise ValueError(f"images (B, H, W, 3) and joint_positions (B, n) must share B, got {images.shape} "
                             f"and {q.shape}")
        if joint_histories is not None and len(joint_histories) != len(q):
            raise ValueError(f"joint_histories must have B = {len(q)} rows, got {len(joint_histories)}")
        histories = [checked_observation(self.spec, image, joints,
                                         None if joint_histories is None else joint_histories[b])[2]
                     for b, (image, joints) in enumerate(zip(images, q, strict=True))]
        with torch.inference_mode():
            batch = torch.from_numpy(np.ascontiguousarray(images)).to(self.device)
            joints = torch.from_numpy(q.astype(np.float32)).to(self.device)
            past = torch.from_numpy(np.stack(histories).astype(np.float32)).to(self.device) \
                if self.spec.joint_history_s else None
            deltas = self.model.predict_deltas(batch, joints, past).to("cpu").numpy()
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
        model = build_planned_model(spec.architecture, spec, **spec.hparams)  # read_checkpoint planned it
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
        q = model.joint_mean.to("cpu").numpy().astype(np.float64)
        try:
            policy.select_action(image, q, np.tile(q, (len(spec.joint_history_s), 1)) if spec.joint_history_s else None)
        except (ValueError, RuntimeError) as err:
            raise CheckpointError(f"{path}: the warm-up inference failed: {err}") from err
    return policy
