"""Training config (config/train_reach.yaml), validated at start-up."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.control.joint_history import check_history_lags
from ..core.errors import ConfigError
from ..paths import config_path
from ..robots import DEFAULT_ROBOT, get_robot, robot_description_for, sim_params_for
from ..sim.params import TASK_NAMES, load_sim_params, with_sim_loop_override
from ..sim.tasks import REACTIVE_EXPERT_TASKS
from .augment import MAX_SHIFT_PX
from .episode_plan import EPISODE_BLOCK, MAX_DAGGER_ROUNDS
from .rollout import RolloutConfig

MAX_GRASP_WEIGHT = 20.0  # grasp_frame_weight's bound: beyond it the approach's frames hardly count


@dataclass(frozen=True)
class TrainConfig:
    """seed; robot (robots.ROBOTS name, default arm6: its URDF and sim params are the defaults of
    robot_description and sim_params); robot_description (URDF path); sim_params / preprocess (YAML
    paths); randomize (domain randomization on/off); architecture + hparams;
    chunk_length (K); dt_s [s]; rollout settings;
    bc_episodes (teacher-driven); dagger_rounds x dagger_episodes (student-driven, teacher-labelled);
    epochs_bc / epochs_per_round; batch_size; lr; weight_decay; eval_episodes (student success
    measured after training); num_threads (torch); teacher: ik (the scripted IK solver) | ppo (a
    PPO teacher checkpoint, `teacher_checkpoint`, from `sim2real train-teacher`) | expert (the
    task's reactive scripted expert through the chunk look-ahead, rl/labeller.ScriptedChunkTeacher:
    pick_lift); pushes: random
    pushes in the collection episodes (the sim params' randomization.pushes); task: the sim task
    (sim/tasks.py; "" = the sim params' task.name), recorded in the checkpoint for eval-sim;
    joint_history_s: lags [s] of the student's joint history (core/control/joint_history.py: the
    measured joint positions that long before each image), [] for none; sim_loop: the sim loop the
    run collects and evaluates on, over the sim params' own (`{loop: fast, dt_s: 0.005, substeps: 2}`,
    sim.params.with_sim_loop_override; {} keeps the file's); image_shift_px: the student's training
    images randomly shifted by up to that many pixels (training.augment.random_shift; 0: off);
    round_minibatches: a DAgger round refits for at most about this many minibatches, in whole
    epochs over all the data so far (at least one; trainer.round_epochs), so late rounds over a large
    dataset cost what early ones do; 0: epochs_per_round epochs whatever the data;
    final_round_minibatches / final_round_epochs: the last DAgger round's own refit budget and epoch
    cap (0: round_minibatches / epochs_per_round as for the others): a long last refit over all the
    data, where the student fits the grasp states it underfits on the per-round budget;
    grasp_frame_weight / grasp_jaw_below_rad: the frames of a grasp (the measured jaw or any point
    of the labelled chunk below grasp_jaw_below_rad [rad]) count grasp_frame_weight times in every
    refit's loss (trainer.grasp_frame_weights; 1.0: unweighted; robots with a gripper only);
    recovery_teacher: "" (the teacher labels everything) | expert (with teacher: ppo on pick_lift: the
    reactive scripted expert labels an episode from its first failed grasp on,
    rl/labeller.RecoveringChunkTeacher)."""

    source: str
    seed: int = 0
    robot: str = DEFAULT_ROBOT
    robot_description: str = ""  # "" = the robot's URDF
    sim_params: str = ""  # "" = the robot's sim params
    preprocess: str = field(default_factory=lambda: str(config_path("preprocess.yaml")))
    randomize: bool = True
    architecture: str = "cnn_mlp"
    hparams: dict[str, Any] = field(default_factory=dict)
    chunk_length: int = 10
    dt_s: float = 0.05
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    bc_episodes: int = 120
    dagger_rounds: int = 3
    dagger_episodes: int = 40
    epochs_bc: int = 30
    epochs_per_round: int = 12
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-5
    eval_episodes: int = 30
    num_threads: int = 2
    teacher: str = "ik"
    teacher_checkpoint: str | None = None
    recovery_teacher: str = ""
    pushes: bool = False
    task: str = ""
    joint_history_s: tuple[float, ...] = ()
    sim_loop: dict[str, Any] = field(default_factory=dict)
    image_shift_px: int = 0
    round_minibatches: int = 0
    final_round_minibatches: int = 0
    final_round_epochs: int = 0
    grasp_frame_weight: float = 1.0
    grasp_jaw_below_rad: float = 0.6

    def __post_init__(self) -> None:
        object.__setattr__(self, "joint_history_s", check_history_lags(self.joint_history_s, self.source))
        get_robot(self.robot, self.source)
        object.__setattr__(self, "robot_description", robot_description_for(self.robot, self.robot_description))
        object.__setattr__(self, "sim_params", sim_params_for(self.robot, self.sim_params))
        positive = ("chunk_length", "batch_size", "epochs_bc", "num_threads")
        for name in positive:
            if int(getattr(self, name)) <= 0:
                raise ConfigError(self.source, name, getattr(self, name), "must be > 0")
        for name in ("bc_episodes", "dagger_rounds", "dagger_episodes", "epochs_per_round", "eval_episodes",
                     "round_minibatches", "final_round_minibatches", "final_round_epochs"):
            if int(getattr(self, name)) < 0:
                raise ConfigError(self.source, name, getattr(self, name), "must be >= 0")
        for name in ("bc_episodes", "dagger_episodes", "eval_episodes"):  # each stage's episodes in a block
            if int(getattr(self, name)) > EPISODE_BLOCK:
                raise ConfigError(self.source, name, getattr(self, name), f"must be <= {EPISODE_BLOCK}")
        if int(self.dagger_rounds) > MAX_DAGGER_ROUNDS:
            raise ConfigError(self.source, "dagger_rounds", self.dagger_rounds,
                              f"must be <= {MAX_DAGGER_ROUNDS} (training/episode_plan.py)")
        if not self.dt_s > 0:
            raise ConfigError(self.source, "dt_s", self.dt_s, "must be > 0 [s]")
        if not 0 < self.lr < 1:
            raise ConfigError(self.source, "lr", self.lr, "must be in (0, 1)")
        for name in ("robot_description", "sim_params", "preprocess"):
            if not Path(getattr(self, name)).is_file():
                raise ConfigError(self.source, name, getattr(self, name), "file not found")
        shift = self.image_shift_px
        if isinstance(shift, bool) or not isinstance(shift, int) or not 0 <= shift <= MAX_SHIFT_PX:
            raise ConfigError(self.source, "image_shift_px", shift, f"must be an integer in [0, {MAX_SHIFT_PX}] [px]")
        weight, below = self.grasp_frame_weight, self.grasp_jaw_below_rad
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 1.0 <= weight <= MAX_GRASP_WEIGHT:
            raise ConfigError(self.source, "grasp_frame_weight", weight,
                              f"must be a number in [1, {MAX_GRASP_WEIGHT:g}] (1: the grasp's frames unweighted)")
        if isinstance(below, bool) or not isinstance(below, (int, float)) or not math.isfinite(below):
            raise ConfigError(self.source, "grasp_jaw_below_rad", below, "must be a number [rad]")
        if weight != 1.0 and get_robot(self.robot, self.source).gripper is None:
            raise ConfigError(self.source, "grasp_frame_weight", weight,
                              f"robot {self.robot!r} has no gripper: a grasp's frames cannot be told apart")
        if self.sim_loop:  # checked here, not in the first worker: the error names this file's field
            with_sim_loop_override(load_sim_params(self.sim_params), self.sim_loop, self.source)
        if self.teacher not in ("ik", "ppo", "expert"):
            raise ConfigError(self.source, "teacher", self.teacher, "must be ik, ppo or expert")
        if self.task and self.task not in TASK_NAMES:
            raise ConfigError(self.source, "task", self.task, f"unknown task (known: {', '.join(TASK_NAMES)})")
        if self.task in ("pick_lift", "pick_place") and self.teacher == "ik":
            raise ConfigError(self.source, "teacher", self.teacher, f"the IK teacher reaches a point; {self.task} "
                              f"needs a grasp: teacher: ppo with a {self.task} teacher checkpoint"
                              + (", or teacher: expert" if self.task == "pick_lift" else ""))
        if self.teacher == "expert" and self.task not in REACTIVE_EXPERT_TASKS:
            raise ConfigError(self.source, "teacher", self.teacher,
                              f"a reactive scripted expert exists for {', '.join(REACTIVE_EXPERT_TASKS)}; "
                              f"task {self.task or '(the sim params task)'!r} needs teacher: ik or ppo")
        if self.recovery_teacher not in ("", "expert"):
            raise ConfigError(self.source, "recovery_teacher", self.recovery_teacher, "must be expert or left out")
        if self.recovery_teacher and (self.teacher != "ppo" or self.task not in REACTIVE_EXPERT_TASKS):
            raise ConfigError(self.source, "recovery_teacher", self.recovery_teacher,
                              f"the reactive expert takes over from a PPO teacher (teacher: ppo) on "
                              f"{', '.join(REACTIVE_EXPERT_TASKS)}; this config has teacher {self.teacher!r}, "
                              f"task {self.task or '(the sim params task)'!r}")
        if self.teacher == "ppo" and not (self.teacher_checkpoint and Path(self.teacher_checkpoint).is_file()):
            raise ConfigError(self.source, "teacher_checkpoint", self.teacher_checkpoint,
                              "teacher: ppo needs an existing teacher checkpoint (sim2real train-teacher --out ...)")

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()
                if k not in ("rollout", "joint_history_s", "sim_loop", "image_shift_px", "round_minibatches",
                             "recovery_teacher", "final_round_minibatches", "final_round_epochs",
                             "grasp_frame_weight", "grasp_jaw_below_rad")}
        data["rollout"] = self.rollout.to_dict()
        if self.joint_history_s:  # left out when empty: the config hashes of runs without history stay
            data["joint_history_s"] = list(self.joint_history_s)
        if self.sim_loop:  # the same for runs on the sim params' own loop
            data["sim_loop"] = dict(self.sim_loop)
        if self.image_shift_px:  # and without augmentation
            data["image_shift_px"] = self.image_shift_px
        if self.round_minibatches:  # and without a refit budget
            data["round_minibatches"] = self.round_minibatches
        if self.recovery_teacher:  # and labelled by their teacher alone
            data["recovery_teacher"] = self.recovery_teacher
        for name in ("final_round_minibatches", "final_round_epochs"):  # and with one budget for every round
            if getattr(self, name):
                data[name] = getattr(self, name)
        if self.grasp_frame_weight != 1.0:  # and with every frame weighted alike
            data["grasp_frame_weight"] = float(self.grasp_frame_weight)
            data["grasp_jaw_below_rad"] = float(self.grasp_jaw_below_rad)
        return data


def _resolve(value: str, base: Path) -> str:
    """Paths in the YAML are relative to config/ (the file's folder), like the sim params'."""
    path = Path(value)
    return str(path if path.is_absolute() else (base / path).resolve())


def load_train_config(path: str | Path, **overrides: Any) -> TrainConfig:
    """Read and validate a training YAML; `overrides` (e.g. from the command line) win."""
    path = Path(path)
    source = str(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(source, "<file>", None, f"cannot read training config: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(source, "<file>", data, "expected a mapping")
    known = set(TrainConfig.__dataclass_fields__) - {"source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(source, unknown[0], data[unknown[0]], f"unknown field (known: {sorted(known)})")
    data.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("robot") is not None:
        # Another robot: the YAML's files were its robot's; the overriding robot's own replace them.
        for key in ("robot_description", "sim_params"):
            if overrides.get(key) is None:
                data.pop(key, None)
    for key in ("robot_description", "sim_params", "preprocess", "teacher_checkpoint"):
        if key in data and data[key]:
            data[key] = _resolve(str(data[key]), path.parent)
        elif key in data:
            del data[key]
    rollout = data.pop("rollout", {}) or {}
    try:
        data["rollout"] = RolloutConfig.from_dict(rollout, f"{source} rollout")
    except TypeError as err:
        raise ConfigError(source, "rollout", rollout, str(err)) from err
    return TrainConfig(source=source, **data)
