"""Untrained checkpoints (`sim2real policy init`): a correct spec and random weights, with the
provenance (git state, portable paths) that core's checkpoint format does not gather itself."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.perception.preprocess_config import PreprocessConfig
from ..core.policy.checkpoint import make_policy_spec, save_checkpoint
from ..core.policy.model import DEFAULT_ARCHITECTURE, DEFAULT_CHUNK_LENGTH, DEFAULT_DT_S, build_model
from ..provenance import git_state, portable_provenance, sim_params_version


def init_checkpoint(
    out: str | Path,
    joint_names: Sequence[str],
    preprocess: PreprocessConfig,
    *,
    sim_params_path: str | Path | None = None,
    chunk_length: int = DEFAULT_CHUNK_LENGTH,
    dt_s: float = DEFAULT_DT_S,
    seed: int = 0,
    architecture: str = DEFAULT_ARCHITECTURE,
    hparams: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
    joint_history_s: Sequence[float] = (),
) -> str:
    """Write a randomly initialized checkpoint with a correct spec, so the graph runs before any
    training: its normalization (action_std = UNTRAINED_ACTION_STD, action_mean = 0) keeps every
    target within about a milliradian of the current position, i.e. it holds still.
    Returns the checkpoint hash."""
    torch.manual_seed(int(seed))
    source_tree = Path(__file__).resolve().parents[2]
    info = {"method": "untrained (random init)", "seed": int(seed), "parent": None, "data": None,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **git_state(source_tree),
            "git_taken": "creation", "created_unix_s": time.time()}
    if sim_params_path is not None:  # as training records it: eval-sim then runs on the same file
        info.update(sim_params_file=str(sim_params_path), sim_params_version=sim_params_version(sim_params_path))
    spec = make_policy_spec(
        joint_names, preprocess, architecture=architecture, hparams=hparams, chunk_length=chunk_length, dt_s=dt_s,
        sim_params_version=sim_params_version(sim_params_path),
        provenance=portable_provenance({**info, **(provenance or {})}, [source_tree]),
        joint_history_s=joint_history_s,
    )
    model = build_model(architecture, spec, **(hparams or {}))
    return save_checkpoint(out, model, spec)
