"""`sim2real policy convert OLD NEW`: an old-format checkpoint (student or PPO teacher, before
safetensors) as a safetensors one, tensors bit-identical, spec and provenance kept (docs/design.md §5).

The converted file's provenance gains `converted: {from_format, previous_hash}` (no date: converting
the same file twice gives the same bytes). A student trained from a teacher that was converted
first may be given that teacher's new file: its `provenance.teacher` then names the new file and
hash, the old hash kept as `hash_before_conversion`. The new file is read back through the normal
loader (every check of the spec and tensors) and compared tensor by tensor before it takes NEW's
name: a file that would not load is never left behind.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..core.errors import CheckpointError
from ..core.policy.checkpoint import KIND_POLICY, checkpoint_hash, encode_artifact, read_checkpoint
from ..core.policy.legacy_checkpoint import read_legacy_checkpoint
from ..paths import share_dir
from ..provenance import portable_path
from ..rl.teacher_checkpoint import read_teacher

FROM_FORMAT = "sim2real checkpoint format 1 (16-byte magic, JSON header, tensor table)"


def _converted_teacher(teacher_file: Path) -> tuple[str, str]:
    """(hash before conversion, hash now) of a converted teacher file."""
    spec, _actor, digest = read_teacher(teacher_file)
    previous = spec.provenance.get("converted", {}).get("previous_hash")
    if not isinstance(previous, str):
        raise CheckpointError(f"{teacher_file}: a teacher that `sim2real policy convert` did not write "
                              f"(no provenance.converted.previous_hash)")
    return previous, digest


def _provenance(provenance: dict[str, Any], previous_hash: str, teacher_file: Path | None) -> dict[str, Any]:
    new = {**provenance, "converted": {"from_format": FROM_FORMAT, "previous_hash": previous_hash}}
    if teacher_file is None:
        return new
    old_teacher_hash, new_teacher_hash = _converted_teacher(teacher_file)
    recorded = new.get("teacher")
    if not isinstance(recorded, dict) or recorded.get("hash") != old_teacher_hash:
        raise CheckpointError(f"--teacher {teacher_file} was converted from {old_teacher_hash}; the student's "
                              f"provenance names teacher {_abbreviated(recorded)}")
    new["teacher"] = {**recorded, "hash": new_teacher_hash, "hash_before_conversion": old_teacher_hash,
                      "checkpoint": portable_path(teacher_file.resolve(), [share_dir()])}
    return new


def _abbreviated(value: Any) -> str:
    text = repr(value.get("hash") if isinstance(value, dict) else value)
    return text if len(text) < 80 else text[:77] + "..."


def convert_checkpoint(old: str | Path, new: str | Path, teacher_file: str | Path | None = None) -> dict[str, Any]:
    """Write the old-format checkpoint `old` as the safetensors checkpoint `new` (may be the same
    path). teacher_file: the converted teacher of a student (see the module docstring). Returns
    {"kind", "old", "previous_hash", "new", "hash"}. CheckpointError names the file and the reason."""
    old, new = Path(old), Path(new)
    previous_hash = checkpoint_hash(old) if old.is_file() else ""
    kind, spec, state = read_legacy_checkpoint(old)
    if teacher_file is not None and kind != KIND_POLICY:
        raise CheckpointError(f"{old}: --teacher applies to students; this is a teacher checkpoint")
    provenance = spec.get("provenance", {})
    if not isinstance(provenance, dict):
        raise CheckpointError(f"{old}: field 'spec.provenance' is not an object")
    spec = {**spec, "provenance": _provenance(provenance, previous_hash,
                                              None if teacher_file is None else Path(teacher_file))}
    data = encode_artifact(kind, spec, state)
    new.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{new.name}.", suffix=".safetensors", dir=new.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        try:
            if kind == KIND_POLICY:
                _spec, loaded, digest = read_checkpoint(tmp)
            else:
                _teacher, actor, digest = read_teacher(tmp)
                loaded = dict(actor.state_dict())
        except CheckpointError as err:
            raise CheckpointError(f"{old}: the converted file would not load, nothing written: {err}") from err
        differing = sorted(name for name in state if name not in loaded or not torch.equal(loaded[name], state[name]))
        if differing or set(loaded) != set(state):
            raise CheckpointError(f"{old}: the converted tensors {differing[:5]} differ from the old file's; "
                                  f"nothing written")
        os.replace(tmp, new)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"kind": kind, "old": str(old), "previous_hash": previous_hash, "new": str(new), "hash": digest}
