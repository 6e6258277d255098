"""The PPO teacher's checkpoint: the project's safe file layout (core/checkpoint.py: magic, bounded
JSON header, tensor table, raw little-endian tensors; never a pickle), with a teacher spec instead of
a vision policy spec: joint names, the observation layout, the network shape, the env and reward
config it was trained with, and its provenance (sim params version, steps, success).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..core.errors import CheckpointError
from ..core.policy.checkpoint import (  # the bounded parser and writer shared with vision checkpoints
    _LENGTH,
    _hash_bytes,
    _parse_header,
    _parse_table,
    _read_tensor,
    encode_tensors,
    write_atomically,
)

TEACHER_MAGIC = b"SIM2REAL-TEACHR\n"
TEACHER_FORMAT_VERSION = 1
_MAX_HEADER_BYTES = 1024 * 1024
_MAX_FILE_BYTES = 64 * 1024 * 1024  # a teacher MLP is well under 1 MB
_MAX_LAYERS, _MAX_WIDTH, _MAX_OBS = 8, 4096, 4096


@dataclass(frozen=True)
class TeacherSpec:
    """joint_names (the action order); observation_layout: term name -> size, in order;
    hidden_dims, activation: the actor MLP; env, rewards: the config it was trained with;
    sim_params_version; provenance (steps, iterations, success, config, date, git commit)."""

    joint_names: list[str]
    observation_layout: dict[str, int]
    hidden_dims: list[int]
    activation: str
    env: dict[str, Any]
    rewards: dict[str, float]
    sim_params_version: str
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def obs_dim(self) -> int:
        return sum(self.observation_layout.values())

    @classmethod
    def from_dict(cls, data: Any, source: str) -> TeacherSpec:
        if not isinstance(data, dict):
            raise CheckpointError(f"{source}: teacher spec is not a JSON object")
        try:
            spec = cls(joint_names=[str(n) for n in data["joint_names"]],
                       observation_layout={str(k): int(v) for k, v in data["observation_layout"]},
                       hidden_dims=[int(h) for h in data["hidden_dims"]], activation=str(data["activation"]),
                       env=dict(data.get("env", {})), rewards={str(k): float(v) for k, v in data["rewards"].items()},
                       sim_params_version=str(data.get("sim_params_version", "")),
                       provenance=dict(data.get("provenance", {})))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CheckpointError(f"{source}: teacher spec field missing or malformed: {err!r}") from err
        if not 1 <= len(spec.hidden_dims) <= _MAX_LAYERS or not all(0 < h <= _MAX_WIDTH for h in spec.hidden_dims):
            raise CheckpointError(f"{source}: field hidden_dims = {spec.hidden_dims}: 1-{_MAX_LAYERS} layers of "
                                  f"1-{_MAX_WIDTH} units")
        if not 0 < spec.obs_dim <= _MAX_OBS or any(v <= 0 for v in spec.observation_layout.values()):
            raise CheckpointError(f"{source}: field observation_layout sums to {spec.obs_dim} (1-{_MAX_OBS})")
        if not 0 < len(spec.joint_names) <= 64:
            raise CheckpointError(f"{source}: field joint_names has {len(spec.joint_names)} names (1-64)")
        return spec


def build_actor(spec: TeacherSpec) -> torch.nn.Module:
    """The rsl_rl actor (MLPModel with observation normalization and a Gaussian head) for `spec`."""
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    obs = TensorDict({"policy": torch.zeros(1, spec.obs_dim)}, batch_size=[1])
    return MLPModel(obs, {"actor": ["policy"]}, "actor", len(spec.joint_names), hidden_dims=spec.hidden_dims,
                    activation=spec.activation, obs_normalization=True,
                    distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0})


def teacher_spec_dict(spec: TeacherSpec) -> dict[str, Any]:
    """The spec as written in the header (and printed by `policy info`)."""
    spec_dict = asdict(spec)
    # JSON objects are written with sorted keys: the observation order is kept as a list of pairs.
    spec_dict["observation_layout"] = [[name, size] for name, size in spec.observation_layout.items()]
    return spec_dict


def encode_teacher(spec: TeacherSpec, state: dict[str, torch.Tensor]) -> bytes:
    """The teacher file's bytes for `spec` and tensors `state` (deterministic: sorted names)."""
    entries, blob = encode_tensors(state)
    header = {"format_version": TEACHER_FORMAT_VERSION, "spec": teacher_spec_dict(spec), "tensors": entries}
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return TEACHER_MAGIC + _LENGTH.pack(len(header_bytes)) + header_bytes + blob


def save_teacher(path: str | Path, actor: torch.nn.Module, spec: TeacherSpec) -> str:
    """Write the actor's weights (normalizer and std included) and `spec`, atomically. Returns the hash."""
    data = encode_teacher(spec, dict(actor.state_dict()))
    write_atomically(path, data)
    return _hash_bytes(data)


def is_teacher_file(path: str | Path) -> bool:
    """True when the file starts with the teacher magic (what `policy info` and `eval-sim` dispatch on)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(TEACHER_MAGIC)) == TEACHER_MAGIC
    except OSError:
        return False


@dataclass
class LoadedTeacher:
    """A teacher ready to act: `policy(obs (B, obs_dim) float32) -> mean actions (B, n)`."""

    spec: TeacherSpec
    policy: torch.nn.Module
    checkpoint_hash: str
    source: str


def load_teacher(path: str | Path) -> LoadedTeacher:
    """Read, check and build a teacher checkpoint. CheckpointError names the file and the field."""
    spec, actor, digest = read_teacher(path)
    return LoadedTeacher(spec, actor.as_jit().eval(), digest, str(path))


def read_teacher(path: str | Path) -> tuple[TeacherSpec, torch.nn.Module, str]:
    """(spec, actor module with the file's weights, checkpoint hash) of a teacher file, checked."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise CheckpointError(f"teacher checkpoint {path} does not exist; train one with "
                              f"`sim2real train-teacher --config config/teacher_reach.yaml --out {path}`")
    size = path.stat().st_size
    if size > _MAX_FILE_BYTES:
        raise CheckpointError(f"{source}: file size {size} bytes is more than a teacher checkpoint may be "
                              f"({_MAX_FILE_BYTES})")
    with open(path, "rb") as handle:
        prefix = handle.read(len(TEACHER_MAGIC) + _LENGTH.size)
        if not prefix.startswith(TEACHER_MAGIC):
            raise CheckpointError(f"{source}: not a sim2real teacher checkpoint (missing the {TEACHER_MAGIC!r} "
                                  f"header); refusing to load it")
        if len(prefix) < len(TEACHER_MAGIC) + _LENGTH.size:
            raise CheckpointError(f"{source}: truncated teacher checkpoint")
        (header_length,) = _LENGTH.unpack_from(prefix, len(TEACHER_MAGIC))
        start = len(prefix)
        if header_length > _MAX_HEADER_BYTES or start + header_length > size:
            raise CheckpointError(f"{source}: field 'header length' = {header_length} does not fit the "
                                  f"{size}-byte file")
        header = _parse_header(handle.read(header_length), source)
        if header.get("format_version") != TEACHER_FORMAT_VERSION:
            raise CheckpointError(f"{source}: teacher format version {header.get('format_version')!r}, this "
                                  f"code reads {TEACHER_FORMAT_VERSION}")
        spec = TeacherSpec.from_dict(header.get("spec"), source)
        data_start = start + header_length
        table = _parse_table(header.get("tensors"), size - data_start, source)
        actor = build_actor(spec)
        expected = {k: tuple(v.shape) for k, v in actor.state_dict().items()}
        found = {name: tuple(entry.shape) for name, entry in table.items()}
        if expected != found:
            raise CheckpointError(f"{source}: tensors do not match the spec's network: expected {expected}, "
                                  f"found {found}")
        state = {name: _read_tensor(handle, data_start, entry, source) for name, entry in table.items()}
    try:
        actor.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"{source}: cannot load the teacher weights: {err}") from err
    actor.eval()
    from ..core.policy.checkpoint import checkpoint_hash

    return spec, actor, checkpoint_hash(path)
