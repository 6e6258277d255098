"""The checkpoint format before safetensors (format_version 1), read for one release so that
`sim2real policy convert OLD NEW` can turn old files into safetensors ones (docs/design.md §5).

    MAGIC (16 bytes: b"SIM2REAL-POLICY\\n" for a student, b"SIM2REAL-TEACHR\\n" for a PPO teacher)
    header length (uint64, little endian)
    header (UTF-8 JSON): {"format_version": 1, "spec": {...},
                          "tensors": [{"name", "dtype", "shape", "offset", "nbytes"}, ...]}
    tensor data (raw little-endian bytes; offsets relative to the start of this block)

Nothing else reads it: every loader refuses an old file, naming the convert command. An old file
is as untrusted as a new one: the file size, the header length and every tensor row are checked
(the caps of core/policy/checkpoint.py) before any tensor is allocated, and the tensors together
may not claim more bytes than the data block holds, so what is allocated is bounded by the file.
The spec is checked when the converted file is read back (training/checkpoint_convert.py).
"""
from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError
from .checkpoint import POLICY_LIMITS, parse_bounded_json
from .model import MAX_PARAMETERS, abbreviate
from .spec import LEGACY_MAGICS

LEGACY_FORMAT_VERSION = 1
_LENGTH = struct.Struct("<Q")
_MAGIC_BYTES = 16
_MAX_TENSORS = 1024
_MAX_TENSOR_DIMS = 8
_MAX_TENSOR_NAME = 256
_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "float16": np.dtype("<f2"),
           "int64": np.dtype("<i8"), "int32": np.dtype("<i4"), "uint8": np.dtype("u1"), "bool": np.dtype("?")}


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_row(row: Any, index: int, data_bytes: int, source: str) -> tuple[str, np.dtype, list[int], int, int]:
    """(name, dtype, shape, offset, nbytes) of one checked tensor table row."""
    where = f"{source}: tensor table entry {index}"
    if not isinstance(row, dict) or any(k not in row for k in ("name", "dtype", "shape", "offset", "nbytes")):
        raise CheckpointError(f"{where} is not an object with name, dtype, shape, offset and nbytes")
    name = row["name"]
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TENSOR_NAME:
        raise CheckpointError(f"{where}: field 'name' = {abbreviate(name)}: must be a string of 1 to "
                              f"{_MAX_TENSOR_NAME} characters")
    where = f"{source}: tensor '{name}'"
    dtype = _DTYPES.get(row["dtype"]) if isinstance(row["dtype"], str) else None
    if dtype is None:
        raise CheckpointError(f"{where}: field 'dtype' = {abbreviate(row['dtype'])}: not a stored dtype "
                              f"(supported: {sorted(_DTYPES)})")
    shape = row["shape"]
    if (not isinstance(shape, list) or len(shape) > _MAX_TENSOR_DIMS
            or not all(_is_size(d) and d <= MAX_PARAMETERS for d in shape) or math.prod(shape) > MAX_PARAMETERS):
        raise CheckpointError(f"{where}: field 'shape' = {abbreviate(shape)}: at most {_MAX_TENSOR_DIMS} sizes, "
                              f"at most MAX_PARAMETERS = {MAX_PARAMETERS} elements")
    offset, nbytes = row["offset"], row["nbytes"]
    if not (_is_size(offset) and _is_size(nbytes)):
        raise CheckpointError(f"{where}: fields 'offset', 'nbytes' = {abbreviate([offset, nbytes])}: must be "
                              f"integers >= 0")
    if nbytes != math.prod(shape) * dtype.itemsize or offset + nbytes > data_bytes:
        raise CheckpointError(f"{where}: {nbytes} bytes at offset {offset} do not fit shape {shape} or the "
                              f"{data_bytes}-byte data block (truncated file?)")
    return name, dtype, shape, offset, nbytes


def read_legacy_checkpoint(path: str | Path) -> tuple[str, dict[str, Any], dict[str, torch.Tensor]]:
    """(kind "policy" | "teacher", spec as a JSON dict, tensors) of an old-format file, checked
    as the module docstring says. CheckpointError names the file."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist")
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > POLICY_LIMITS.max_file_bytes:
                raise CheckpointError(f"{source}: file size {size} bytes is more than a checkpoint may be "
                                      f"({POLICY_LIMITS.max_file_bytes})")
            prefix = handle.read(_MAGIC_BYTES + _LENGTH.size)
            kind = LEGACY_MAGICS.get(prefix[:_MAGIC_BYTES])
            if kind is None:
                raise CheckpointError(f"{source}: not an old-format sim2real checkpoint (none of the magics "
                                      f"{sorted(LEGACY_MAGICS)}); nothing to convert")
            if len(prefix) < _MAGIC_BYTES + _LENGTH.size:
                raise CheckpointError(f"{source}: truncated checkpoint ({size} bytes)")
            (header_length,) = _LENGTH.unpack_from(prefix, _MAGIC_BYTES)
            data_start = len(prefix) + header_length
            if header_length > POLICY_LIMITS.max_header_bytes or data_start > size:
                raise CheckpointError(f"{source}: field 'header length' = {header_length}: more than "
                                      f"{POLICY_LIMITS.max_header_bytes} bytes or past the end of the {size}-byte "
                                      f"file (truncated file?)")
            header = parse_bounded_json(handle.read(header_length), source, "header")
            if header.get("format_version") != LEGACY_FORMAT_VERSION:
                raise CheckpointError(f"{source}: old format version {abbreviate(header.get('format_version'))}, "
                                      f"the converter reads {LEGACY_FORMAT_VERSION}")
            rows = header.get("tensors")
            if not isinstance(rows, list) or len(rows) > _MAX_TENSORS:
                raise CheckpointError(f"{source}: field 'tensors': not a list of at most {_MAX_TENSORS} rows")
            data_bytes = size - data_start
            parsed = [_parse_row(row, i, data_bytes, source) for i, row in enumerate(rows)]
            names = [p[0] for p in parsed]
            if len(set(names)) != len(names):
                raise CheckpointError(f"{source}: a tensor name appears twice in the tensor table")
            if sum(p[4] for p in parsed) > data_bytes:  # rows sharing bytes: allocation beyond the file
                raise CheckpointError(f"{source}: the tensors claim more bytes than the data block holds")
            state = {}
            for name, dtype, shape, offset, nbytes in parsed:
                array = np.empty(shape, dtype=dtype)
                handle.seek(data_start + offset)
                if nbytes and handle.readinto(array.reshape(-1).view(np.uint8)) != nbytes:
                    raise CheckpointError(f"{source}: tensor '{name}': the file ended early (truncated file?)")
                state[name] = torch.from_numpy(array)
    except OSError as err:
        raise CheckpointError(f"{source}: cannot read checkpoint: {err}") from err
    spec = header.get("spec")
    if not isinstance(spec, dict):
        raise CheckpointError(f"{source}: field 'spec' = {abbreviate(spec)}: not an object")
    return kind, spec, state
