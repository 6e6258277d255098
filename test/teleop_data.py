"""The teleop recording the fine-tuning, validation and teleop tests share: a few episodes of the
scripted operator (takeovers through the joystick topic and the supervisor) on the "real A" sim
variant, one bag per episode, and two small checkpoints.

Built once per test session by the `teleop_recording` fixture (conftest.py).
"""
from __future__ import annotations

import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import read_checkpoint, save_checkpoint
from sim2real_ros.core.policy.model import build_model
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.runtime.scripted_operator import TeleopPlan
from sim2real_ros.runtime.teleop_recording import record_teleop_episodes
from sim2real_ros.training.untrained import init_checkpoint

JOINTS = tuple(RobotModel.from_description(str(urdf_path())).joint_names)
EPISODES = 3
# Labelled frames every episode must give: the fine-tuning test needs 12 over three episodes; a quiet
# recording gives 8-10 each at 10 Hz.
MIN_FRAMES_PER_EPISODE = 4
S = 1_000_000_000


@dataclass(frozen=True)
class TeleopRecording:
    out: Path  # folder of episode bags + episodes.json
    bags: list[Path]
    untrained: Path  # holds still (drove before the intervention)
    tiny: Path  # untrained weights with a ~5 cm action scale: moves, knows nothing


def tiny_checkpoint(path: Path, seed: int = 1) -> Path:
    """Random weights with a sensible normalization (actions of a few centiradians)."""
    init_checkpoint(path, JOINTS, PreprocessConfig.from_yaml(config_path("preprocess.yaml")), seed=seed)
    spec, state, _ = read_checkpoint(path)
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(state)
    n = len(JOINTS)
    model.set_normalization(np.zeros(n), np.ones(n), np.zeros(n), np.full(n, 0.05))
    save_checkpoint(path, model, spec)
    return path


def labelled_frames_in_every_episode(out: Path, checkpoint: Path) -> None:
    """Raise, with the labeller's reasons, unless every episode succeeded and its bag gives labelled
    frames (on a CI machine at load 4 one 1.4 s demonstration gave none; what it said was cut off in
    the report). The tests need EPISODES finished episodes: fine-tuning leaves out one the person did
    not finish, and a CI run at load 7.5 had a demonstration time out after 10 s."""
    import json

    listed = json.loads((out / "episodes.json").read_text())["episodes"]
    unfinished = [(e["index"], e["kind"], e["reason"]) for e in listed if not e["success"]]
    if unfinished or len(listed) != EPISODES:
        raise AssertionError(f"{len(listed)} episodes recorded, not finished: {unfinished}")

    from sim2real_ros.core.perception.preprocess import ImagePipeline
    from sim2real_ros.episodes.dataset import LabelConfig, build_dataset

    spec, _, _ = read_checkpoint(checkpoint)
    bags = sorted(p for p in out.iterdir() if p.is_dir())
    dataset = build_dataset(bags, ImagePipeline(PreprocessConfig.from_dict(spec.preprocess)), JOINTS,
                            spec.chunk_length, spec.dt_s, LabelConfig())
    enough = [e for e in dataset.usable() if len(e.stamps_ns) >= MIN_FRAMES_PER_EPISODE]
    if len(enough) != EPISODES:
        raise AssertionError(f"{len(enough)} of {EPISODES} episodes gave {MIN_FRAMES_PER_EPISODE}+ labelled frames: "
                             + json.dumps({k: v for k, v in dataset.summary().items() if k != "bags"}))


# A stopgap, said as one: under CI load the scripted operator's episodes sometimes give no labelled
# frame or do not finish (graph.log of a kept attempt: the graph's nodes came up 33 s apart, a
# demonstration's frames all "not_human_controlled"); the cause is not found yet.
ATTEMPTS = (1, 2, 3)


def build_teleop_recording(base: Path) -> TeleopRecording:
    """Record EPISODES scripted-operator episodes on the "real A" sim variant under `base`."""
    out = base / "episodes"
    untrained, tiny = base / "untrained.pt", base / "tiny.pt"
    if not (base / "done").exists():
        base.mkdir(parents=True, exist_ok=True)
        init_checkpoint(untrained, JOINTS, PreprocessConfig.from_yaml(config_path("preprocess.yaml")), seed=0)
        tiny_checkpoint(tiny)
        # A 10 Hz camera keeps the graph near real time on a busy machine; half real time keeps the
        # 100 Hz command stream whole in sim time when CI's other graphs starve the actuator (a CI
        # run at real time recorded a 2.8 s demonstration with 4 labelled frames: gaps over 0.1 s).
        plan = TeleopPlan(intervention_every=2, policy_s=1.5, camera_rate_hz=20.0, real_time_factor=0.5)
        for attempt in ATTEMPTS:
            if out.exists():  # a failed attempt: kept beside for its bags and graph.log, recorded afresh
                shutil.move(out, base / f"attempt_{attempt - 1}_episodes")
            try:
                record_teleop_episodes(out, EPISODES, config_path("sim_params_real_a.yaml"), untrained, seed=7,
                                       plan=plan)
                labelled_frames_in_every_episode(out, tiny)
                break
            except Exception:
                # This fixture is data, not a check: one more try on a machine too loaded to keep the
                # graph's pace. The first failure is printed and kept, never swallowed silently (a
                # session fixture's error is otherwise reported only once, at its first user).
                first = traceback.format_exc()
                (base / f"attempt_{attempt}_failed.txt").write_text(first)
                print(f"teleop recording attempt {attempt} failed:\n{first}", file=sys.stderr, flush=True)
                if attempt == ATTEMPTS[-1]:
                    raise
        (base / "done").write_text("ok")
    bags = sorted(p for p in out.iterdir() if p.is_dir())
    return TeleopRecording(out, bags, untrained, tiny)
