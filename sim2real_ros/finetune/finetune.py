"""Fine-tune a checkpoint on real bags (demonstrations and interventions), co-trained with sim data.

The real dataset comes from episodes.dataset (the same preprocessing as the graph, labels: the
human's commands aligned with the actuator's latency). A handful of real episodes alone overfits and
forgets what the sim taught, so by default every batch mixes real frames (`real_fraction` of it)
with sim frames of the checkpoint's own training distribution (finetune.sim_data: regenerated, the
checkpoint driving and its teacher labelling, as in its DAgger rounds). Real frames of intervention
episodes (a person took over from the policy: the states the policy drives into, HG-DAgger) are
drawn INTERVENTION_WEIGHT times as often as demonstration frames. real_fraction 1.0 is real-data-
only fine-tuning (no sim frames), kept for comparison.

Episodes, not frames, are held out: frames of one episode are nearly copies of each other, so a
frame split would measure memory, not generalization. The model keeps its parent's normalization
statistics (the network was trained in those units); `freeze_encoder` leaves the image encoder
untouched. The new checkpoint's provenance names its
parent's hash, the bags and the sim frames it learned from. Offline action error does not decide
whether fine-tuning helped: finetune.judge measures closed-loop success before and after.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..bags import BagReader
from ..core.errors import CheckpointError, ConfigError
from ..core.perception.preprocess import ImagePipeline
from ..core.perception.preprocess_config import PreprocessConfig
from ..core.policy.checkpoint import nonfinite_tensors, read_checkpoint, save_checkpoint
from ..core.policy.model import PolicyModel, build_model
from ..core.policy.spec import abbreviate, check_against_data
from ..core.progress import progress
from ..episodes.bag_source import find_topics, recorded_joint_names
from ..episodes.dataset import EpisodeFrames, LabelConfig, RealDataset, build_dataset, expand_bags
from ..paths import share_dir
from ..provenance import git_state, portable_path, portable_provenance
from .sim_data import SimFrames, collect_sim_frames

SOURCE = "finetune"
# Real frames of intervention episodes are drawn this many times as often as demonstration frames:
# they show the states the policy itself drives into and what a person did there (HG-DAgger).
INTERVENTION_WEIGHT = 2.0


@dataclass(frozen=True)
class FinetuneConfig:
    """The options (docs/finetune.md): epochs (passes over the real training frames); lr (AdamW;
    1e-3, the shipped policy's own training rate: with half of every batch from the sim the policy
    keeps its sim skill, and 1e-4 under-fits the real gap, docs/finetune.md); real_fraction: share
    of real frames in every batch (the rest: sim frames of the checkpoint's training distribution;
    1.0 = real data only);
    freeze_encoder: keep the image encoder's weights.
    Also: sim_episodes (sim episodes regenerated for co-training: 40, one DAgger round of the
    shipped policy's training); holdout: fraction of episodes held out (0 = none) to measure the
    offline action error; refit_all: then train the written checkpoint afresh from the parent on
    every episode (the held-out ones too: with 20 episodes, 30% is too much real data to keep from
    the policy; the split's fit only measures); batch_size; weight_decay; seed (split, sampling,
    the sim episodes' run seed); num_threads (torch); labels: LabelConfig; successful_only: leave
    out episodes whose outcome (sim/episode, when the bag has it) is a failure: a person who did not
    finish the task is no demonstration of it (a loaded machine can make the scripted operator time
    out)."""

    epochs: int = 100
    lr: float = 1e-3
    real_fraction: float = 0.5
    freeze_encoder: bool = False
    sim_episodes: int = 40
    refit_all: bool = True
    successful_only: bool = True
    holdout: float = 0.3
    batch_size: int = 32
    weight_decay: float = 0.0
    seed: int = 0
    num_threads: int = 2
    labels: LabelConfig = field(default_factory=LabelConfig)

    def __post_init__(self) -> None:
        if not (isinstance(self.epochs, int) and self.epochs > 0):
            raise ConfigError(SOURCE, "epochs", self.epochs, "must be an integer > 0")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and 0 < self.lr < 1):
            raise ConfigError(SOURCE, "lr", self.lr, "must be in (0, 1)")
        if not (isinstance(self.real_fraction, (int, float)) and 0 < self.real_fraction <= 1):
            raise ConfigError(SOURCE, "real_fraction", self.real_fraction,
                              "must be in (0, 1] (1 = real data only, no sim frames)")
        if not (isinstance(self.sim_episodes, int) and self.sim_episodes > 0):
            raise ConfigError(SOURCE, "sim_episodes", self.sim_episodes, "must be an integer > 0")
        if not (isinstance(self.holdout, (int, float)) and 0 <= self.holdout < 1):
            raise ConfigError(SOURCE, "holdout", self.holdout, "must be in [0, 1)")
        for name in ("batch_size", "num_threads"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) > 0):
                raise ConfigError(SOURCE, name, getattr(self, name), "must be an integer > 0")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError(SOURCE, "weight_decay", self.weight_decay, "must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["labels"]["human_modes"] = list(self.labels.human_modes)
        return data


def split_episodes(episodes: list[EpisodeFrames], holdout: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, holdout) episode indices: round(holdout * n) episodes held out (at least one when
    holdout > 0 and there are two or more episodes; at least one left to train on)."""
    n = len(episodes)
    if holdout <= 0 or n < 2:
        return list(range(n)), []
    count = min(n - 1, max(1, int(round(holdout * n))))
    order = np.random.default_rng(seed).permutation(n)
    held = sorted(int(i) for i in order[:count])
    return [i for i in range(n) if i not in held], held


def action_error(model: PolicyModel, images: np.ndarray, joints: np.ndarray, labels: np.ndarray,
                 batch_size: int = 64) -> dict[str, Any]:
    """Offline action error of `model` on labelled frames: predicted chunk - label chunk [rad],
    over every chunk point and joint (MAE, RMSE, per-joint MAE, MAE by chunk index)."""
    if len(images) == 0:
        return {"frames": 0, "mae_rad": None, "rmse_rad": None, "per_joint_mae_rad": None, "mae_by_k_rad": None}
    predictions = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(images), batch_size):
            imgs = torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size]))
            q = torch.from_numpy(joints[start:start + batch_size].astype(np.float32))
            predictions.append(model(imgs, q).double().numpy())
    errors = np.concatenate(predictions) - labels
    absolute = np.abs(errors)
    return {"frames": int(len(images)), "mae_rad": float(absolute.mean()),
            "rmse_rad": float(np.sqrt(np.mean(errors ** 2))),
            "per_joint_mae_rad": absolute.mean(axis=(0, 1)).tolist(),
            "mae_by_k_rad": absolute.mean(axis=(0, 2)).tolist()}


def frame_weights(episodes: list[EpisodeFrames]) -> np.ndarray:
    """Sampling weight of each real frame, in the order of RealDataset.arrays(episodes):
    INTERVENTION_WEIGHT for intervention episodes, 1 otherwise."""
    return np.concatenate([np.full(len(e), INTERVENTION_WEIGHT if e.kind == "intervention" else 1.0)
                           for e in episodes if len(e)])


def cotrain(model: PolicyModel, real: tuple[np.ndarray, np.ndarray, np.ndarray], real_weights: np.ndarray,
            sim: SimFrames | None, epochs: int, batch_size: int, real_fraction: float, lr: float,
            weight_decay: float, seed: int, log: Callable[[str], None]) -> list[float]:
    """Regress label chunks with the error in radians (MSE of target - label) on mixed batches:
    round(real_fraction * batch_size) real frames (drawn with probability proportional to
    `real_weights`) and the rest sim frames (uniform), each batch. An epoch is as many batches as it
    takes to draw as many real frames as there are. AdamW, cosine schedule; only parameters that
    require gradients are optimized. Returns the mean loss [rad^2] of each epoch.

    Not the normalized-delta loss of sim training (training.trainer.fit): a teacher's point 0 is
    exactly the current position, so its normalization std is at the floor (1e-4 rad), and a
    person's command for "now" differs from the measured position by milliradians of tracking lag,
    which that normalization would blow up ~100-fold and let dominate the loss."""
    n_real = batch_size if sim is None or real_fraction >= 1 else max(1, int(round(real_fraction * batch_size)))
    n_sim = batch_size - n_real
    tensors = [torch.from_numpy(np.ascontiguousarray(real[0])), torch.from_numpy(real[1].astype(np.float32)),
               torch.from_numpy(real[2].astype(np.float32))]
    sim_t = None if not n_sim else [torch.from_numpy(np.ascontiguousarray(sim.images)),
                                    torch.from_numpy(sim.joints.astype(np.float32)),
                                    torch.from_numpy(sim.labels.astype(np.float32))]
    weights = torch.from_numpy(np.asarray(real_weights, dtype=np.float64))
    steps = max(1, math.ceil(len(tensors[0]) / n_real))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs * steps))
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for epoch in progress(range(epochs), epochs, "[finetune] epochs"):
        total = 0.0
        for _ in range(steps):
            idx = torch.multinomial(weights, n_real, replacement=True, generator=generator)
            imgs, q, target = (t[idx] for t in tensors)
            if sim_t is not None:
                sidx = torch.randint(len(sim_t[0]), (n_sim,), generator=generator)
                imgs, q, target = (torch.cat([a, b[sidx]]) for a, b in zip((imgs, q, target), sim_t, strict=True))
            loss = torch.nn.functional.mse_loss(model(imgs, q), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item()
        losses.append(total / steps)
        if epoch == epochs - 1 or epoch % max(1, epochs // 4) == 0:
            log(f"[finetune] epoch {epoch + 1}/{epochs} RMSE {1e3 * losses[-1] ** 0.5:.1f} mrad "
                f"({n_real} real + {n_sim} sim frames per batch)")
    model.eval()
    return losses


def freeze_encoder(model: PolicyModel) -> list[str]:
    """Stop gradients into the image encoder (and the spatial-softmax keypoints); returns the names
    of the frozen parameters. The optimizer skips parameters without gradients, so they stay as loaded."""
    frozen = []
    for prefix in ("image_encoder", "keypoints"):
        module = getattr(model, prefix, None)
        if module is None:
            continue
        for name, parameter in module.named_parameters():
            parameter.requires_grad_(False)
            frozen.append(f"{prefix}.{name}")
    return frozen


def bag_fingerprint(path: str | Path) -> str:
    """sha256 (16 hex digits) of a bag's storage files (names and bytes), for provenance."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*")
                                                  if p.is_file() and p.name != "metadata.yaml")
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def finetune(checkpoint: str | Path, bags: list[str | Path], out: str | Path, config: FinetuneConfig | None = None,
             log: Callable[[str], None] = print, dataset: RealDataset | None = None,
             sim_frames: SimFrames | None = None) -> dict[str, Any]:
    """Fine-tune `checkpoint` on `bags` (co-trained with sim frames unless real_fraction is 1),
    write `out`; returns the report (offline action error on the held-out and the training
    episodes before and after, on the sim frames too, the dataset, the provenance). With
    refit_all (default) and episodes held out, the held-out error is measured on a fit of the
    training split, and the written checkpoint is a second fit, from the parent, on every episode.
    `dataset`: an already built dataset of the same bags (saves reading them again); `sim_frames`:
    already collected sim frames of this checkpoint (finetune.sim_data.collect_sim_frames).
    Raises ConfigError when the bags hold no labelled frame."""
    config = config or FinetuneConfig()
    started = time.monotonic()
    git = git_state(share_dir())  # the tree the fine-tuning starts from (core/provenance.py)
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    spec, state, parent_hash = read_checkpoint(checkpoint)
    bad = nonfinite_tensors(state)
    if bad:
        raise CheckpointError(f"{checkpoint}: tensors {abbreviate(bad)} contain NaN/Inf; refusing to fine-tune from "
                              f"it")
    if spec.joint_history_s:
        # Recorded frames carry one joint state each; their histories are not assembled yet.
        raise CheckpointError(f"{checkpoint}: the policy takes a joint history (joint_history_s = "
                              f"{list(spec.joint_history_s)} s); fine-tuning such a policy on recorded data is not "
                              f"supported yet: fine-tune a policy without history, or retrain in sim")
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(state, strict=True)
    model.eval()
    if dataset is None:
        preprocess = PreprocessConfig.from_dict(spec.preprocess, source=f"{checkpoint} preprocess")
        # the checkpoint against each bag (a folder of bags counts bag by bag): its joints there, its
        # preprocessing the trained one
        for bag in expand_bags(list(bags)):
            with BagReader(bag) as reader:
                names = recorded_joint_names(reader, find_topics(reader, config.labels.replay_options()))
            check_against_data(spec, spec.joint_names if names is None else names, str(checkpoint), f"bag {bag}",
                               preprocess)
        pipeline = ImagePipeline(preprocess)
        dataset = build_dataset(list(bags), pipeline, spec.joint_names, spec.chunk_length, spec.dt_s, config.labels)
    episodes = dataset.usable()
    failed = [e.episode_id for e in episodes if e.outcome is not None and not e.outcome.get("success")]
    if config.successful_only and failed:
        log(f"[finetune] leaving out {len(failed)} episode(s) the person did not finish: {failed}")
        episodes = [e for e in episodes if e.episode_id not in failed]
    if not episodes:
        raise ConfigError(SOURCE, "bags", [str(b) for b in bags],
                          f"hold no labelled frame (no human commands in TELEOP/SHARED covering a chunk?); "
                          f"skipped frames: {dict(dataset.skipped)}"
                          + (f"; left out as unfinished: {failed}" if failed and config.successful_only else ""))
    train_idx, hold_idx = split_episodes(episodes, config.holdout, config.seed)
    train_eps = [episodes[i] for i in train_idx]
    hold_eps = [episodes[i] for i in hold_idx]
    train = dataset.arrays(train_eps)
    held = dataset.arrays(hold_eps) if hold_eps else (np.zeros((0,)),) * 3
    log(f"[finetune] {len(episodes)} episodes ({sum(len(e) for e in episodes)} frames): training on {len(train_eps)} "
        f"({len(train[0])} frames), holding out {len(hold_eps)} ({len(held[0])} frames)")
    if config.real_fraction < 1 and sim_frames is None:
        sim_frames = collect_sim_frames(spec, model, config.sim_episodes, seed=config.seed,
                                        num_threads=config.num_threads, log=log)
    sim = sim_frames if config.real_fraction < 1 else None
    before = {"holdout": action_error(model, *held), "train": action_error(model, *train)}
    if sim is not None:
        before["sim"] = action_error(model, sim.images, sim.joints, sim.labels)
    frozen = freeze_encoder(model) if config.freeze_encoder else []
    losses = cotrain(model, train, frame_weights(train_eps), sim, config.epochs, config.batch_size,
                     config.real_fraction, config.lr, config.weight_decay, config.seed, log)
    after = {"holdout": action_error(model, *held), "train": action_error(model, *train)}
    if sim is not None:
        after["sim"] = action_error(model, sim.images, sim.joints, sim.labels)
    fit_episodes = train_eps
    if config.refit_all and hold_eps:
        # The split's fit measured the held-out error; the written checkpoint learns from every episode.
        log(f"[finetune] refit on all {len(episodes)} episodes ({sum(len(e) for e in episodes)} frames) "
            "for the written checkpoint")
        torch.manual_seed(config.seed)
        model = build_model(spec.architecture, spec, **spec.hparams)
        model.load_state_dict(state, strict=True)
        if config.freeze_encoder:
            freeze_encoder(model)
        fit_episodes = episodes
        everything = dataset.arrays(episodes)
        losses = cotrain(model, everything, frame_weights(episodes), sim, config.epochs, config.batch_size,
                         config.real_fraction, config.lr, config.weight_decay, config.seed, log)
        after["written_checkpoint_all_episodes"] = action_error(model, *everything)
        if sim is not None:
            after["written_checkpoint_sim"] = action_error(model, sim.images, sim.joints, sim.labels)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    # A bag is a folder: named by its folder name (its path when inside the repository) and its
    # fingerprint, the content hash of its storage files; never by this machine's absolute path.
    bag_list = [{"name": Path(b).name, "path": portable_path(b, [share_dir()]), "fingerprint": bag_fingerprint(b)}
                for b in dataset.bags]
    provenance = {
        "method": ("fine-tuning on real demonstrations and interventions (behavior cloning of the human's commands)"
                   + ("" if sim is None else f", co-trained with sim frames of the parent's training distribution "
                      f"(real fraction {config.real_fraction} per batch)")),
        "parent": parent_hash, "parent_checkpoint": str(checkpoint),
        "parent_method": spec.provenance.get("method"),
        "data": "real bags" if sim is None else "real bags + sim", "bags": bag_list,
        "sim_frames": None if sim is None else sim.source,
        "intervention_weight": INTERVENTION_WEIGHT,
        "episodes": {"train": [e.episode_id for e in train_eps], "holdout": [e.episode_id for e in hold_eps],
                     "checkpoint_trained_on": [e.episode_id for e in fit_episodes]},
        "frames": {"train": int(len(train[0])), "holdout": int(len(held[0]))},
        "by_kind": dataset.summary()["by_kind"],
        "failed_episodes_left_out": failed if config.successful_only else [],
        "config": config.to_dict(), "frozen_parameters": len(frozen),
        "offline_action_error": {"before": before, "after": after},
        "final_loss": losses[-1],
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **git, "git_taken": "fine-tuning start",
        "finetune_time_s": round(time.monotonic() - started, 1),
    }
    # Paths relative to the repository, or name + content hash (core/provenance.py).
    new_spec = dataclasses.replace(spec, provenance=portable_provenance(provenance, [share_dir()]))
    digest = save_checkpoint(out, model, new_spec)
    log(f"[finetune] held-out MAE {_mrad(before['holdout']['mae_rad'])} -> {_mrad(after['holdout']['mae_rad'])} "
        f"mrad; wrote {out} (hash {digest}, parent {parent_hash})")
    return {"checkpoint": str(out), "hash": digest, "parent": parent_hash, "before": before, "after": after,
            "losses": losses, "dataset": dataset.summary(), "frozen_parameters": frozen,
            "sim_frames": provenance["sim_frames"], "config": config.to_dict(),
            "train_episodes": provenance["episodes"]["train"], "holdout_episodes": provenance["episodes"]["holdout"],
            "checkpoint_trained_on": provenance["episodes"]["checkpoint_trained_on"],
            "failed_episodes_left_out": provenance["failed_episodes_left_out"],
            "provenance": provenance}


def _mrad(value: float | None) -> str:
    return "n/a" if value is None else f"{1e3 * value:.1f}"
