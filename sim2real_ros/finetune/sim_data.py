"""Sim frames from a checkpoint's own training distribution, for co-training (finetune.finetune).

What the checkpoint learned in sim is kept by training on more of it while it adapts to real data.
The frames are regenerated, not loaded: the checkpoint's training provenance names its sim params,
domain randomization, rollout settings (graph conditions, latency compensated) and teacher, and
the episodes are collected as its DAgger rounds were: the checkpoint drives, the teacher labels
the states it reaches. Seeds are drawn apart from the training run's (SEED_OFFSET), from the same
ranges. A checkpoint without training provenance (e.g. `sim2real policy init`) gets the defaults of
config/train_reach.yaml's sim: config/sim_params.yaml, randomized, IK teacher.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.policy.checkpoint import PolicySpec
from ..core.policy.model import PolicyModel
from ..paths import config_path, share_dir
from ..provenance import resolve_recorded_path
from ..robots import get_robot, robot_for_checkpoint
from ..sim.world import episode_seed
from ..training.parallel import EpisodeJob, EpisodePool, counting_progress
from ..training.rollout import RolloutConfig

# Training used episode indices below 5e6 of its seed (BC, DAgger rounds, its evaluation:
# training/episode_plan.py); co-training episodes start here, so they are new draws from the same ranges.
SEED_OFFSET = 5_000_000


@dataclass
class SimFrames:
    """Teacher-labelled sim frames: images (N, H, W, 3) uint8, joints (N, n) [rad], labels
    (N, K, n) [rad]; `source` says where they came from (sim params, randomize, teacher, episodes,
    seeds, the driver's success while collecting)."""

    images: np.ndarray
    joints: np.ndarray
    labels: np.ndarray
    source: dict[str, Any]

    def __len__(self) -> int:
        return len(self.images)


def training_distribution(spec: PolicySpec) -> dict[str, Any]:
    """The checkpoint's training sim as plain values: sim_params (path), robot_description, randomize,
    rollout (RolloutConfig dict), teacher (ik | ppo), teacher_checkpoint, pushes, seed."""
    config = dict(spec.provenance.get("config") or {})
    rollout = RolloutConfig.from_dict(config.get("rollout") or {}, "checkpoint provenance rollout")
    trained_for = get_robot(robot_for_checkpoint(None, spec.joint_names, spec.provenance, "checkpoint"))
    # Provenance paths are relative to the repository (core/provenance.py); older checkpoints hold the
    # training machine's absolute paths, which resolve here only on that machine.
    recorded = config.get("sim_params") or spec.provenance.get("sim_params_file")
    sim_params = resolve_recorded_path(recorded, share_dir())
    if sim_params is None:
        named = recorded.get("name") if isinstance(recorded, dict) else (Path(recorded).name if recorded else None)
        sim_params = config_path(named) if named and config_path(named).is_file() else trained_for.sim_params_path()
    robot = resolve_recorded_path(config.get("robot_description"), share_dir()) or trained_for.urdf_path()
    teacher_checkpoint = config.get("teacher_checkpoint")
    if teacher_checkpoint:
        teacher_checkpoint = str(resolve_recorded_path(teacher_checkpoint, share_dir()) or teacher_checkpoint)
    return {"sim_params": str(sim_params), "robot_description": str(robot),
            "randomize": bool(config.get("randomize", True)), "rollout": rollout.to_dict(),
            "teacher": config.get("teacher", "ik"), "teacher_checkpoint": teacher_checkpoint,
            "pushes": bool(config.get("pushes", False)), "seed": int(config.get("seed", 0))}


def collect_sim_frames(spec: PolicySpec, model: PolicyModel, episodes: int, seed: int | None = None,
                       num_threads: int = 2, log: Callable[[str], None] = print) -> SimFrames:
    """`episodes` DAgger episodes of the training distribution: `model` (the checkpoint before any
    fine-tuning) drives, the teacher labels every observation. seed: the run's seed (default: the
    training run's); episodes use indices SEED_OFFSET + i."""
    if episodes <= 0:
        raise ValueError(f"episodes must be > 0, got {episodes}")
    dist = training_distribution(spec)
    run_seed = dist["seed"] if seed is None else int(seed)
    job = EpisodeJob(dist["sim_params"], dist["robot_description"], dict(spec.preprocess), list(spec.joint_names),
                     dist["rollout"], spec.chunk_length, spec.dt_s, pushes=dist["pushes"], teacher=dist["teacher"],
                     teacher_checkpoint=dist["teacher_checkpoint"], record_images=True)
    pool = EpisodePool(job, 0, num_threads=num_threads)
    seeds = [episode_seed(run_seed, SEED_OFFSET + i) for i in range(episodes)]
    was_training = model.training
    model.eval()
    try:
        records = pool.run(seeds, model, dist["randomize"],
                           on_done=counting_progress(episodes, "[finetune] sim episodes"))
    finally:
        pool.close()
        model.train(was_training)
    records = [r for r in records if r.images]
    if not records:
        raise RuntimeError("the sim episodes produced no frame")
    images = np.stack([im for r in records for im in r.images])
    joints = np.stack([q for r in records for q in r.joints])
    labels = np.stack([lab for r in records for lab in r.labels])
    wins = sum(bool(r.outcome.get("success")) for r in records)
    log(f"[finetune] {len(images)} sim frames from {episodes} episodes of {Path(dist['sim_params']).name} "
        f"(randomize {dist['randomize']}, {dist['teacher']} teacher labels; the checkpoint drove: {wins}/{episodes})")
    return SimFrames(images, joints, labels, {**{k: dist[k] for k in ("sim_params", "randomize", "teacher")},
                                              "episodes": episodes, "seed": run_seed, "seed_offset": SEED_OFFSET,
                                              "frames": int(len(images)), "driver_successes": wins})
