"""Fine-tune a checkpoint on real bags (demonstrations and interventions), with a held-out check.

The dataset comes from finetune.dataset (the same preprocessing as the graph, labels aligned with
the actuator's latency). Episodes, not frames, are held out: frames of one episode are nearly
copies of each other, so a frame split would measure memory, not generalization. The model keeps
its parent's normalization statistics (the network was trained in those units) and trains with a
low learning rate; `freeze_encoder` leaves the image encoder untouched so a few real episodes only
adapt the head. The new checkpoint's provenance names its parent's hash and the bags it learned from.
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

from ..core.checkpoint import git_commit, read_checkpoint, save_checkpoint
from ..core.errors import ConfigError
from ..core.policy_model import PolicyModel, build_model
from ..core.preprocess import ImagePipeline
from ..core.preprocess_config import PreprocessConfig
from ..training.trainer import regress
from .dataset import EpisodeFrames, LabelConfig, RealDataset, build_dataset

SOURCE = "finetune"


@dataclass(frozen=True)
class FinetuneConfig:
    """epochs; lr (AdamW, low: the policy is adapted, not retrained); freeze_encoder: keep the
    image encoder's weights; holdout: fraction of episodes held out (0 = none); batch_size;
    weight_decay; seed (split and shuffling); num_threads (torch); labels: LabelConfig."""

    epochs: int = 50
    lr: float = 1e-4
    freeze_encoder: bool = False
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


def fit_radians(model: PolicyModel, images: np.ndarray, joints: np.ndarray, labels: np.ndarray, epochs: int,
                batch_size: int, lr: float, weight_decay: float, seed: int, log: Callable[[str], None]) -> list[float]:
    """Regress the label chunks with the error measured in radians (MSE of target - label).

    Not the normalized-delta loss of sim training (training.trainer.fit): a teacher's point 0 is
    exactly the current position, so its normalization std is at the floor (1e-4 rad), and a
    person's command for "now" differs from the measured position by milliradians of tracking lag,
    which that normalization would blow up ~100-fold and let dominate the loss. Returns the mean
    loss [rad^2] of each epoch."""
    def radian_loss(model: PolicyModel, imgs: torch.Tensor, q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(imgs, q), target)

    return regress(model, images, joints, labels, radian_loss, epochs, batch_size, lr, weight_decay, seed, log,
                   "finetune", describe=lambda loss: f"RMSE {1e3 * loss ** 0.5:.1f} mrad")


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
             log: Callable[[str], None] = print, dataset: RealDataset | None = None) -> dict[str, Any]:
    """Fine-tune `checkpoint` on `bags`, write `out`; returns the report (offline action error on
    the held-out and the training episodes before and after, the dataset, the provenance).
    `dataset`: an already built dataset of the same bags (saves reading them again).
    Raises ConfigError when the bags hold no labelled frame."""
    config = config or FinetuneConfig()
    started = time.monotonic()
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    spec, state, parent_hash = read_checkpoint(checkpoint)
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(state, strict=True)
    model.eval()
    if dataset is None:
        pipeline = ImagePipeline(PreprocessConfig.from_dict(spec.preprocess, source=f"{checkpoint} preprocess"))
        dataset = build_dataset(list(bags), pipeline, spec.joint_names, spec.chunk_length, spec.dt_s, config.labels)
    episodes = dataset.usable()
    if not episodes:
        raise ConfigError(SOURCE, "bags", [str(b) for b in bags],
                          f"hold no labelled frame (no human commands in TELEOP/SHARED covering a chunk?); "
                          f"skipped frames: {dict(dataset.skipped)}")
    train_idx, hold_idx = split_episodes(episodes, config.holdout, config.seed)
    train_eps = [episodes[i] for i in train_idx]
    hold_eps = [episodes[i] for i in hold_idx]
    train = dataset.arrays(train_eps)
    held = dataset.arrays(hold_eps) if hold_eps else (np.zeros((0,)),) * 3
    log(f"[finetune] {len(episodes)} episodes ({dataset.frames} frames): training on {len(train_eps)} "
        f"({len(train[0])} frames), holding out {len(hold_eps)} ({len(held[0])} frames)")
    before = {"holdout": action_error(model, *held), "train": action_error(model, *train)}
    frozen = freeze_encoder(model) if config.freeze_encoder else []
    losses = fit_radians(model, *train, config.epochs, config.batch_size, config.lr, config.weight_decay, config.seed,
                         log)
    after = {"holdout": action_error(model, *held), "train": action_error(model, *train)}
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    bag_list = [{"path": b, "fingerprint": bag_fingerprint(b)} for b in dataset.bags]
    provenance = {
        "method": "fine-tuning on real demonstrations and interventions (behavior cloning of the human's commands)",
        "parent": parent_hash, "parent_checkpoint": str(checkpoint),
        "parent_method": spec.provenance.get("method"),
        "data": "real bags", "bags": bag_list,
        "episodes": {"train": [e.episode_id for e in train_eps], "holdout": [e.episode_id for e in hold_eps]},
        "frames": {"train": int(len(train[0])), "holdout": int(len(held[0]))},
        "by_kind": dataset.summary()["by_kind"],
        "config": config.to_dict(), "frozen_parameters": len(frozen),
        "offline_action_error": {"before": before, "after": after},
        "final_loss": losses[-1],
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git_commit": git_commit(),
        "finetune_time_s": round(time.monotonic() - started, 1),
    }
    new_spec = dataclasses.replace(spec, provenance=provenance)
    digest = save_checkpoint(out, model, new_spec)
    log(f"[finetune] held-out MAE {_mrad(before['holdout']['mae_rad'])} -> {_mrad(after['holdout']['mae_rad'])} "
        f"mrad; wrote {out} (hash {digest}, parent {parent_hash})")
    return {"checkpoint": str(out), "hash": digest, "parent": parent_hash, "before": before, "after": after,
            "losses": losses, "dataset": dataset.summary(), "frozen_parameters": frozen,
            "train_episodes": provenance["episodes"]["train"], "holdout_episodes": provenance["episodes"]["holdout"],
            "provenance": provenance}


def _mrad(value: float | None) -> str:
    return "n/a" if value is None else f"{1e3 * value:.1f}"
