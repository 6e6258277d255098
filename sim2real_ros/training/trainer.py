"""Behavior cloning from the privileged IK teacher, then DAgger rounds (the student drives, the
teacher labels the states it reaches). Headless, seeded, resumable (state in a work directory)."""
from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.hashing import content_hash
from ..core.perception.preprocess import ImagePipeline
from ..core.perception.preprocess_config import PreprocessConfig
from ..core.policy.checkpoint import make_policy_spec, save_checkpoint
from ..core.policy.model import PolicyModel, build_model
from ..core.policy.training_log import TrainingLog
from ..core.progress import progress
from ..core.stats import wilson_interval
from ..paths import share_dir
from ..provenance import (
    assert_unseen_episodes,
    portable_path,
    portable_provenance,
    sim_params_version,
    training_git_state,
)
from ..robots import get_robot
from ..sim.expert import ReachExpert
from ..sim.params import load_sim_params, with_sim_loop_override, with_task
from ..sim.world import SimWorld, episode_seed
from .augment import random_shift
from .config import TrainConfig
from .episode_plan import EVAL_SEED_OFFSET, dagger_offset, training_index_ranges
from .parallel import EpisodeJob, EpisodePool, counting_progress
from .rollout import Controller, EpisodeRecord


@dataclass
class Dataset:
    """Aggregated frames: images (N, H, W, 3) uint8, joints (N, n) [rad], labels (N, K, n) [rad],
    histories (N, H, n) [rad] (empty when the student has no joint history)."""

    images: list[np.ndarray] = field(default_factory=list)
    joints: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    histories: list[np.ndarray] = field(default_factory=list)

    def add(self, record: EpisodeRecord) -> None:
        self.images += record.images
        self.joints += record.joints
        self.labels += record.labels
        self.histories += record.histories
        if self.histories and len(self.histories) != len(self.joints):
            raise ValueError(f"{len(self.joints)} frames but {len(self.histories)} joint histories: every episode "
                             f"must carry histories or none")

    def __len__(self) -> int:
        return len(self.images)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.stack(self.images), np.stack(self.joints), np.stack(self.labels)

    def history_array(self) -> np.ndarray | None:
        """(N, H, n) [rad], or None when the frames carry no history."""
        return np.stack(self.histories) if self.histories else None

    def save(self, path: Path) -> None:
        images, joints, labels = self.arrays()
        extra = {"histories": self.history_array()} if self.histories else {}
        np.savez(path, images=images, joints=joints, labels=labels, **extra)

    @classmethod
    def load(cls, path: Path) -> Dataset:
        data = np.load(path)
        histories = list(data["histories"]) if "histories" in data.files else []
        return cls(list(data["images"]), list(data["joints"]), list(data["labels"]), histories)


# (model, images, joints, labels, joint histories or None, per-frame weights or None) -> loss
LossFn = Callable[[PolicyModel, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None],
                  torch.Tensor]


def normalized_delta_loss(model: PolicyModel, images: torch.Tensor, joints: torch.Tensor,
                          labels: torch.Tensor, histories: torch.Tensor | None = None,
                          weights: torch.Tensor | None = None) -> torch.Tensor:
    """MSE between predicted and labelled chunks as normalized deltas (what sim training regresses);
    with weights (B,), each frame's mean squared error counts that much (a weighted mean over the
    minibatch, so all-ones weights give the plain MSE)."""
    squared = (model.forward_normalized(images, joints, histories) - model.normalize_targets(labels, joints)) ** 2
    if weights is None:
        return squared.mean()
    per_frame = squared.flatten(1).mean(dim=1)
    return (per_frame * weights).sum() / weights.sum()


def grasp_frame_weights(joints: np.ndarray, labels: np.ndarray, gripper_index: int, below_rad: float,
                        weight: float) -> np.ndarray:
    """Per-frame loss weights (N,): `weight` for the frames of a grasp (the measured jaw, joints
    (N, n) [rad], or any point of the labelled chunk, labels (N, K, n) [rad], below `below_rad`
    [rad]: the teacher closing, squeezing, lifting, holding), 1 for the others.

    Why: the shipped pick_lift student's failed grasps, traced against its teacher's labels
    (docs/learning.md), were mostly departures after the jaw closed (the squeeze let go, never
    lifted): an unweighted regression pulls the jaw's target there toward the approach's open jaw."""
    in_grasp = (joints[:, gripper_index] < below_rad) | (labels[:, :, gripper_index] < below_rad).any(axis=1)
    return np.where(in_grasp, float(weight), 1.0).astype(np.float32)


def regress(model: PolicyModel, images: np.ndarray, joints: np.ndarray, labels: np.ndarray, loss_fn: LossFn,
            epochs: int, batch_size: int, lr: float, weight_decay: float, seed: int, log: Callable[[str], None],
            label: str, describe: Callable[[float], str] = lambda loss: f"loss {loss:.4f}",
            histories: np.ndarray | None = None, image_shift_px: int = 0,
            frame_weights: np.ndarray | None = None) -> list[float]:
    """Minibatch AdamW with a cosine schedule over (images (N, H, W, 3) uint8, joints (N, n) [rad],
    labels (N, K, n) [rad], histories (N, H, n) [rad] or None); only parameters that require
    gradients are optimized (a frozen encoder stays as loaded). image_shift_px: each minibatch's
    images randomly shifted by up to that many pixels (training.augment.random_shift; 0: as they
    are). frame_weights (N,) or None: each frame's weight in the loss (grasp_frame_weights). Returns
    the mean loss of each epoch."""
    images_t = torch.from_numpy(np.ascontiguousarray(images))
    joints_t = torch.from_numpy(joints.astype(np.float32))
    labels_t = torch.from_numpy(labels.astype(np.float32))
    histories_t = None if histories is None else torch.from_numpy(histories.astype(np.float32))
    weights_t = None if frame_weights is None else torch.from_numpy(frame_weights.astype(np.float32))
    if weights_t is not None and weights_t.shape != (len(images_t),):
        raise ValueError(f"frame_weights must be ({len(images_t)},), got {tuple(weights_t.shape)}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs))
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for epoch in progress(range(epochs), epochs, f"[{label}] epochs"):
        order = torch.randperm(len(images_t), generator=generator)
        total, count = 0.0, 0
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            loss = loss_fn(model, random_shift(images_t[idx], image_shift_px, generator), joints_t[idx], labels_t[idx],
                           None if histories_t is None else histories_t[idx],
                           None if weights_t is None else weights_t[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            count += len(idx)
        schedule.step()
        losses.append(total / max(count, 1))
        if epoch == epochs - 1 or epoch % max(1, epochs // 4) == 0:
            log(f"[{label}] epoch {epoch + 1}/{epochs} {describe(losses[-1])}")
    model.eval()
    return losses


def fit(model: PolicyModel, data: Dataset, epochs: int, batch_size: int, lr: float, weight_decay: float,
        seed: int, log: Callable[[str], None], label: str, image_shift_px: int = 0,
        grasp_weighting: tuple[int, float, float] | None = None) -> list[float]:
    """Regress normalized chunk deltas (MSE), images shifted by up to image_shift_px [px];
    grasp_weighting (gripper joint index, jaw below [rad], weight) or None: the grasp's frames
    weighted (grasp_frame_weights). Returns the mean loss of each epoch."""
    images, joints, labels = data.arrays()
    weights = None
    if grasp_weighting is not None:
        gripper_index, below_rad, weight = grasp_weighting
        weights = grasp_frame_weights(joints, labels, gripper_index, below_rad, weight)
        log(f"[{label}] {int((weights != 1.0).sum())} of {len(weights)} frames in a grasp, weighted {weight:g}")
    return regress(model, images, joints, labels, normalized_delta_loss, epochs, batch_size, lr, weight_decay,
                   seed, log, label, histories=data.history_array() if model.history_length else None,
                   image_shift_px=image_shift_px, frame_weights=weights)


def round_epochs(epochs_per_round: int, round_minibatches: int, frames: int, batch_size: int) -> int:
    """Whole epochs a DAgger round refits for: epochs_per_round, or with a minibatch budget
    (round_minibatches > 0) as many as fit in it over `frames` frames in batches of batch_size, at
    least one and at most epochs_per_round."""
    if round_minibatches <= 0:
        return epochs_per_round
    per_epoch = max(1, math.ceil(frames / batch_size))
    return max(1, min(epochs_per_round, round_minibatches // per_epoch))


def round_budget(config: TrainConfig, round_index: int) -> tuple[int, int]:
    """(epoch cap, minibatch budget) of DAgger round `round_index` (1-based): the last round's own
    (final_round_epochs / final_round_minibatches) where set, else the per-round ones."""
    epochs, minibatches = config.epochs_per_round, config.round_minibatches
    if round_index == config.dagger_rounds:
        epochs = config.final_round_epochs or epochs
        minibatches = config.final_round_minibatches or minibatches
    return epochs, minibatches


def student_controller(model: PolicyModel) -> Controller:
    """The student as a rollout controller: the same forward pass select_action runs."""

    def act(image: np.ndarray, q: np.ndarray, history: np.ndarray | None) -> np.ndarray:
        past = torch.from_numpy(history.astype(np.float32))[None] \
            if model.history_length and history is not None else None
        with torch.inference_mode():
            out = model(torch.from_numpy(image)[None], torch.from_numpy(q.astype(np.float32))[None], past)
        return out[0].double().numpy()

    return act


class Trainer:
    """Runs the whole recipe; state lives in `work_dir` so an interrupted run resumes."""

    def __init__(self, config: TrainConfig, out: Path, work_dir: Path, log: Callable[[str], None] = print,
                 workers: int = 0) -> None:
        self.config = config
        self.out = Path(out)
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log = log
        torch.set_num_threads(config.num_threads)
        self.params = with_sim_loop_override(load_sim_params(config.sim_params), config.sim_loop, config.source)
        if config.task:
            self.params = with_task(self.params, config.task, f"{config.source}: task")
        self.preprocess = PreprocessConfig.from_yaml(config.preprocess)
        # Checked here (a warning is shown once); each worker builds its own pipeline from the config.
        ImagePipeline(self.preprocess, on_warning=lambda text: log(f"[warning] {text}"))
        # This world only names the joints; every episode runs on a fresh one (training.parallel).
        self.world = SimWorld(self.params, config.robot_description, seed=config.seed, render=False)
        job = EpisodeJob(config.sim_params, config.robot_description, self.preprocess.to_dict(),
                         list(self.world.joint_names), config.rollout.to_dict(), config.chunk_length, config.dt_s,
                         pushes=config.pushes, teacher=config.teacher, teacher_checkpoint=config.teacher_checkpoint,
                         recovery_teacher=config.recovery_teacher, task=config.task or None,
                         joint_history_s=tuple(config.joint_history_s),
                         sim_loop=dict(config.sim_loop) or None)
        self.pool = EpisodePool(job, workers, num_threads=config.num_threads)
        self.spec = make_policy_spec(
            self.world.joint_names, self.preprocess, architecture=config.architecture, hparams=config.hparams,
            chunk_length=config.chunk_length, dt_s=config.dt_s, sim_params_version=self.params.version,
            joint_history_s=config.joint_history_s,
        )
        self.history: list[dict[str, Any]] = []

    # -- episodes -------------------------------------------------------------------------------
    def collect(self, episodes: int, student: PolicyModel | None, randomize: bool, seed_offset: int,
                label: str) -> tuple[list[EpisodeRecord], float]:
        seeds = [episode_seed(self.config.seed, seed_offset + i) for i in range(episodes)]
        records = self.pool.run(seeds, student, randomize, on_done=counting_progress(episodes, f"[{label}] episodes"))
        successes = sum(bool(r.outcome.get("success")) for r in records)
        return records, successes / max(1, episodes)

    # -- state ----------------------------------------------------------------------------------
    def _state_path(self) -> Path:
        return self.work_dir / "state.json"

    def _grasp_weighting(self) -> tuple[int, float, float] | None:
        """(gripper joint index, jaw below [rad], weight) for `fit`, None when the grasp is not weighted."""
        c = self.config
        if c.grasp_frame_weight == 1.0:
            return None
        gripper = get_robot(c.robot, c.source).gripper  # the config checked that there is one
        return list(self.world.joint_names).index(gripper), c.grasp_jaw_below_rad, c.grasp_frame_weight

    def _bc_hash(self, with_source: bool = False) -> str:
        """Hash of what the saved data and BC student depend on. The DAgger and evaluation settings
        are not in it, so a finished run can be resumed with more rounds, nor is the config file's
        own path (a copy with more rounds resumes too). with_source: the hash as work directories
        written before 2026-12-04 have it (with the path), still accepted."""
        later = {"dagger_rounds", "dagger_episodes", "epochs_per_round", "eval_episodes", "num_threads",
                 "round_minibatches", "final_round_minibatches", "final_round_epochs"}
        if not with_source:
            later.add("source")
        return content_hash({k: v for k, v in self.config.to_dict().items() if k not in later})

    def _save_state(self, stage: int, model: PolicyModel, data: Dataset) -> None:
        data.save(self.work_dir / "dataset.npz")
        torch.save(model.state_dict(), self.work_dir / "student.pt")
        state = {"stage": stage, "history": self.history, "bc_hash": self._bc_hash()}
        self._state_path().write_text(json.dumps(state, indent=2))

    def _load_state(self, model: PolicyModel) -> tuple[int, Dataset]:
        path = self._state_path()
        if not path.exists():
            return -1, Dataset()
        state = json.loads(path.read_text())
        if state.get("bc_hash") not in (self._bc_hash(), self._bc_hash(with_source=True)):
            self.log(f"[train] {self.work_dir} holds a run of another config; starting fresh")
            return -1, Dataset()
        model.load_state_dict(torch.load(self.work_dir / "student.pt", weights_only=True))
        self.history = state["history"]
        self.log(f"[train] resuming after stage {state['stage']} from {self.work_dir}")
        return int(state["stage"]), Dataset.load(self.work_dir / "dataset.npz")

    # -- recipe ---------------------------------------------------------------------------------
    def run(self, resume: bool = True) -> dict[str, Any]:
        c = self.config
        torch.manual_seed(c.seed)
        start = time.monotonic()
        model = build_model(c.architecture, self.spec, **c.hparams)
        stage, data = self._load_state(model) if resume else (-1, Dataset())
        # The commit that trains the weights is the one checked out now, at the start (kept in the
        # work dir, so a resumed run still names the tree its first stages ran on).
        git = training_git_state(self.work_dir, share_dir(), fresh=stage < 0)
        curves = TrainingLog(self.work_dir, f"sim2real train: {c.source}")
        try:
            result = self._run_stages(model, stage, data, start, git, curves)
        finally:
            written = curves.close()
        self.log(f"[train] curves: tensorboard --logdir {written['tensorboard']}; summary {written['png']}")
        return {**result, "curves": written}

    def _log_stage(self, curves: TrainingLog, stage: int, losses: list[float], lr: float, success: float,
                   frames: int, collect_s: float, episodes_frames: int) -> None:
        """One stage's scalars: its epoch losses (x = global epoch), then success, frames, learning
        rate and collection speed (x = stage)."""
        first_epoch = sum(len(row.get("losses", [])) for row in self.history[:-1])
        for epoch, loss in enumerate(losses):
            curves.add(first_epoch + epoch, {"loss/behavior_cloning_mse": loss})
        curves.add(stage, {"train/success": success, "train/frames": frames, "train/learning_rate": lr,
                           "perf/frames_per_s": episodes_frames / max(collect_s, 1e-9)})

    def _run_stages(self, model: PolicyModel, stage: int, data: Dataset, start: float, git: dict[str, Any],
                    curves: TrainingLog) -> dict[str, Any]:
        c = self.config
        if stage < 0:
            tick = time.monotonic()
            records, teacher_rate = self.collect(c.bc_episodes, None, c.randomize, 0, "bc teacher")
            collect_s = time.monotonic() - tick
            for r in records:
                data.add(r)
            images, joints, labels = data.arrays()
            model.set_normalization_from_data(joints, labels, data.history_array())
            losses = fit(model, data, c.epochs_bc, c.batch_size, c.lr, c.weight_decay, c.seed, self.log, "bc",
                         c.image_shift_px, self._grasp_weighting())
            self.history.append({"stage": 0, "kind": "bc", "episodes": c.bc_episodes, "frames": len(data),
                                 "teacher_success": teacher_rate, "final_loss": losses[-1], "losses": losses})
            self._log_stage(curves, 0, losses, c.lr, teacher_rate, len(data), collect_s, len(data))
            self.log(f"[train] bc: {len(data)} frames, teacher success {teacher_rate:.0%}, loss {losses[-1]:.4f}")
            stage = 0
            self._save_state(stage, model, data)
        for round_index in range(stage + 1, c.dagger_rounds + 1):
            offset = dagger_offset(round_index)
            tick = time.monotonic()
            records, student_rate = self.collect(c.dagger_episodes, model, c.randomize, offset,
                                                 f"dagger {round_index}/{c.dagger_rounds}")
            collect_s = time.monotonic() - tick
            before = len(data)
            for r in records:
                data.add(r)
            epochs = round_epochs(*round_budget(c, round_index), len(data), c.batch_size)
            losses = fit(model, data, epochs, c.batch_size, c.lr * 0.5, c.weight_decay,
                         c.seed + round_index, self.log, f"dagger {round_index}", c.image_shift_px,
                         self._grasp_weighting())
            recovery = {}
            if c.recovery_teacher:  # how many episodes the recoverer labelled from a failed grasp on
                recovery = {"episodes_with_recovery_labels":
                            sum("recovery_labels_from_s" in r.outcome for r in records)}
            self.history.append({"stage": round_index, "kind": "dagger", "episodes": c.dagger_episodes,
                                 "frames": len(data), "student_success_while_collecting": student_rate,
                                 "final_loss": losses[-1], "losses": losses, **recovery})
            self._log_stage(curves, round_index, losses, c.lr * 0.5, student_rate, len(data), collect_s,
                            len(data) - before)
            said = f", recovery labels in {recovery['episodes_with_recovery_labels']} episodes" if recovery else ""
            self.log(f"[train] dagger round {round_index}: student success {student_rate:.0%} while collecting, "
                     f"{len(data)} frames, loss {losses[-1]:.4f}{said}")
            self._save_state(round_index, model, data)
        evaluation = {}
        if c.eval_episodes:
            assert_unseen_episodes(c.seed, range(EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + c.eval_episodes),
                                   self.training_episodes(), c.source)
            records, rate = self.collect(c.eval_episodes, model, False, EVAL_SEED_OFFSET, "eval nominal")
            wins = sum(bool(r.outcome.get("success")) for r in records)
            evaluation = {"episodes": c.eval_episodes, "success_rate": rate,
                          "ci95": list(wilson_interval(wins, c.eval_episodes))}
            self.log(f"[train] nominal-sim success {rate:.0%} (95% CI {evaluation['ci95'][0]:.2f}-"
                     f"{evaluation['ci95'][1]:.2f}) over {c.eval_episodes} episodes")
        # Paths relative to the repository (or name + content hash): the file travels, the machine's
        # layout does not (core/provenance.py).
        config = portable_provenance(c.to_dict(), [share_dir()])
        provenance = {
            "robot": c.robot, "task": self.params.task.name,
            "method": f"behavior cloning from a privileged {c.teacher.upper()} teacher + DAgger",
            "teacher": self._teacher_provenance(),
            "config": config, "config_hash": content_hash(config), "seed": c.seed,
            "randomize": c.randomize, "frames": len(data),
            "rounds": [{k: v for k, v in row.items() if k != "losses"} for row in self.history],
            "evaluation": evaluation, "training_episodes": self.training_episodes(),
            "parent": None, "data": "sim (rendered through config preprocess)",
            "sim_params_file": portable_path(c.sim_params, [share_dir()]),
            "sim_params_version": sim_params_version(c.sim_params),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **git,
            "train_time_s": round(time.monotonic() - start, 1),
        }
        spec = make_policy_spec(
            self.world.joint_names, self.preprocess, architecture=c.architecture, hparams=model.hparams,
            chunk_length=c.chunk_length, dt_s=c.dt_s, sim_params_version=self.params.version, provenance=provenance,
            joint_history_s=c.joint_history_s,
        )
        self.out.parent.mkdir(parents=True, exist_ok=True)
        digest = save_checkpoint(self.out, model, spec)
        self.log(f"[train] wrote {self.out} (hash {digest}) in {time.monotonic() - start:.0f} s")
        return {"checkpoint": str(self.out), "hash": digest, "history": self.history, "evaluation": evaluation}

    def training_episodes(self) -> dict[str, Any]:
        """Which episodes training played: run seed and episode index ranges [first, last) (the
        world of episode i is episode_seed(seed, i)); evaluation checks it never replays them."""
        c = self.config
        return {"seed": c.seed,
                "index_ranges": training_index_ranges(c.bc_episodes, c.dagger_rounds, c.dagger_episodes)}

    def _teacher_provenance(self) -> dict[str, Any]:
        if self.config.teacher == "expert":
            return {"kind": "expert", "expert": "reactive_pick"}
        if self.config.teacher != "ppo":
            return {"kind": "ik"}
        from ..rl.teacher_checkpoint import load_teacher

        loaded = load_teacher(self.config.teacher_checkpoint)
        recovery = {"recovery": {"kind": "expert", "expert": "reactive_pick"}} if self.config.recovery_teacher else {}
        return {"kind": "ppo", "checkpoint": portable_path(self.config.teacher_checkpoint, [share_dir()]),
                "hash": loaded.checkpoint_hash,
                "evaluation": {k: v for k, v in loaded.spec.provenance.get("evaluation", {}).items()
                               if k != "per_episode"}, **recovery}

    def close(self) -> None:
        self.pool.close()
        self.world.close()


def make_expert(world: SimWorld) -> ReachExpert:
    """The IK teacher for a world's robot: its commanded joints, tool link and home pose."""
    home = world.params.home_pose(world.joint_names)
    home_q = np.clip([home.get(n, 0.0) for n in world.joint_names], world.lower, world.upper)
    return ReachExpert(world.model, world.joint_names, world.ee_link, np.asarray(home_q))
