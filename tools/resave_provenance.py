"""Re-save checkpoints with portable provenance (issue 33): weights bit-identical, machine paths gone.

    python tools/resave_provenance.py --old-root /work/main \
        policies/teacher_reach.safetensors policies/reach_*.safetensors

Every absolute path in the provenance becomes relative to the repository when it lay under
`--old-root` (the training machine's checkout) or this checkout, else a name plus content hash. The
git commit those files carry was read at save time, not at training start: the provenance says so
(git_taken) and its dirty flag is unknown (null). A student whose teacher was re-saved first gets
the teacher's new hash, the old one kept as hash_when_trained. The re-encoded tensors of each file
are compared bit for bit with the file's before it is replaced. (Run on the files of the format
before safetensors in issue 33; reads and writes safetensors checkpoints since issue 35.)
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import torch

from sim2real_ros.core.policy.checkpoint import (
    checkpoint_hash,
    encode_checkpoint,
    read_checkpoint,
    write_atomically,
)
from sim2real_ros.paths import share_dir
from sim2real_ros.provenance import absolute_paths, portable_provenance
from sim2real_ros.rl.teacher_checkpoint import encode_teacher, is_teacher_file, read_teacher


def same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Whether two state dicts hold the same names, dtypes and bits."""
    return set(a) == set(b) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def portable(provenance: dict[str, Any], roots: list[str], previous_hash: str, teachers: dict[str, tuple[str, str]]
             ) -> dict[str, Any]:
    new = portable_provenance(provenance, roots)
    if "git_taken" not in new:
        new["git_taken"] = "at save (recorded before issue 33: not necessarily the commit training started from)"
        new.setdefault("git_dirty", None)
    teacher = new.get("teacher")
    if isinstance(teacher, dict) and teacher.get("hash") in teachers:
        old, fresh = teacher["hash"], teachers[teacher["hash"]][1]
        new["teacher"] = {**teacher, "hash": fresh, "hash_when_trained": old}
    new["resaved"] = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                      "previous_hash": previous_hash,
                      "why": "provenance made portable (issue 33); weights and spec otherwise unchanged"}
    return new


def resave(path: Path, roots: list[str], teachers: dict[str, tuple[str, str]]) -> tuple[str, str]:
    from safetensors.torch import load

    previous = checkpoint_hash(path)
    if is_teacher_file(path):
        spec, actor, _ = read_teacher(path)
        state = dict(actor.state_dict())
        spec = dataclasses.replace(spec, provenance=portable(spec.provenance, roots, previous, teachers))
        new_bytes = encode_teacher(spec, state)
    else:
        spec, state, _ = read_checkpoint(path)
        spec = dataclasses.replace(spec, provenance=portable(spec.provenance, roots, previous, teachers))
        new_bytes = encode_checkpoint(spec, state)
    if not same_tensors(state, load(new_bytes)):
        raise SystemExit(f"{path}: the re-encoded tensors differ from the file's; not replacing it")
    left = absolute_paths(spec.provenance)
    if left:
        raise SystemExit(f"{path}: absolute paths left in the provenance: {left}")
    write_atomically(path, new_bytes)
    return previous, checkpoint_hash(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", type=Path, help="teachers first: students name their hash")
    parser.add_argument("--old-root", action="append", default=[], help="the training machine's checkout")
    args = parser.parse_args()
    roots = [*args.old_root, str(share_dir())]
    teachers: dict[str, tuple[str, str]] = {}
    for path in args.checkpoints:
        previous, fresh = resave(path, roots, teachers)
        if is_teacher_file(path):
            teachers[previous] = (str(path), fresh)
        print(f"{path}: {previous} -> {fresh}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
