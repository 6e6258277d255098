"""The PPO teacher's checkpoint: a safetensors file written and read through the one policy
artifact module (core/policy/checkpoint.py: encode_artifact, read_artifact; kind "teacher"; never a
pickle), with a teacher spec instead of a vision policy spec: joint names, the observation layout,
the network shape, the env and reward config it was trained with, and its provenance (sim params
version, steps, success).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..core.errors import CheckpointError
from ..core.policy.checkpoint import (
    KIND_TEACHER,
    ArtifactLimits,
    TensorEntry,
    artifact_kind,
    encode_artifact,
    read_artifact,
    write_atomically,
)

# A teacher MLP is well under 1 MB; its header (with 100 evaluation episodes) about 20 KB.
TEACHER_LIMITS = ArtifactLimits(max_file_bytes=64 * 1024 * 1024, max_header_bytes=1024 * 1024)
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
    """The teacher file's bytes for `spec` and tensors `state` (deterministic)."""
    return encode_artifact(KIND_TEACHER, teacher_spec_dict(spec), state)


def save_teacher(path: str | Path, actor: torch.nn.Module, spec: TeacherSpec) -> str:
    """Write the actor's weights (normalizer and std included) and `spec`, atomically. Returns the hash."""
    data = encode_teacher(spec, dict(actor.state_dict()))
    write_atomically(path, data)
    return hashlib.sha256(data).hexdigest()[:16]


def is_teacher_file(path: str | Path) -> bool:
    """True when the file is a teacher checkpoint (what `policy info` and `eval-sim` dispatch on)."""
    return artifact_kind(path) == KIND_TEACHER


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
    """(spec, actor module with the file's weights, checkpoint hash) of a teacher file, checked:
    every size before anything is read (read_artifact), the tensor table against the spec's
    network (built at the spec's small, capped size) before the tensors are decoded."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"teacher checkpoint {path} does not exist; train one with "
                              f"`sim2real train-teacher --config config/teacher_reach.yaml --out {path}`")

    def check(spec_value: Any, table: dict[str, TensorEntry], source: str) -> tuple[TeacherSpec, torch.nn.Module]:
        spec = TeacherSpec.from_dict(spec_value, source)
        actor = build_actor(spec)
        expected = {k: tuple(v.shape) for k, v in actor.state_dict().items()}
        found = {name: entry.shape for name, entry in table.items()}
        if expected != found:
            raise CheckpointError(f"{source}: tensors do not match the spec's network: expected {expected}, "
                                  f"found {found}")
        return spec, actor

    (spec, actor), state, digest = read_artifact(path, KIND_TEACHER, TEACHER_LIMITS, check)
    try:
        actor.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: cannot load the teacher weights: {err}") from err
    actor.eval()
    return spec, actor, digest
