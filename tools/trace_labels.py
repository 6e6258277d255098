"""Where a student and its PPO teacher part ways: one episode per seed, traced observation by observation.

    .venv/bin/python tools/trace_labels.py --checkpoint STUDENT --teacher TEACHER [--seeds 11 12] [--drive teacher]

The student (or, with --drive teacher, the teacher through the same chunk path) drives an episode
under the graph's conditions; at every observation the teacher labels the state reached (what
DAgger trains on). Each line: time [s], tool point to target/cube distance [cm], the gripper's
measured position [rad] (last joint), the jaw target 5 points into the student's chunk and into
the teacher's label [rad], and the largest arm and jaw differences between the two chunks [rad].
A student that follows its labels closely but fails says the labels are the problem (a teacher not
corrective off its own distribution); one that departs from them says the student is.
"""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import load_checkpoint
from sim2real_ros.rl.env import EnvConfig
from sim2real_ros.rl.labeller import PPOChunkTeacher
from sim2real_ros.rl.teacher_checkpoint import load_teacher
from sim2real_ros.robots import robot_description_for, robot_for_checkpoint, sim_params_for_checkpoint
from sim2real_ros.sim.params import load_sim_params, with_task
from sim2real_ros.sim.world import SimWorld
from sim2real_ros.training.graph_conditions import GraphConditions
from sim2real_ros.training.rollout import RolloutConfig, run_episode

POINT = 5  # the chunk point compared (0.25 s ahead at dt 0.05 s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="the student (safetensors)")
    parser.add_argument("--teacher", required=True, help="the PPO teacher that labels (safetensors)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    parser.add_argument("--drive", choices=("student", "teacher"), default="student")
    parser.add_argument("--latency", type=float, default=0.05, help="[s] the actuation latency compensated")
    parser.add_argument("--episode-s", type=float, default=8.0, help="[s] episode cut")
    parser.add_argument("--randomize", action="store_true", help="the sim params' randomization (eval-sim --perturb)")
    parser.add_argument("--pushes", action="store_true", help="random pushes on the arm (eval-sim --pushes)")
    parser.add_argument("--sim-config", default=None,
                        help="sim params YAML (default: the file the student was trained on, as eval-sim takes it)")
    args = parser.parse_args()

    policy = load_checkpoint(args.checkpoint)
    teacher = load_teacher(args.teacher)
    task = EnvConfig.from_dict(teacher.spec.env, args.teacher).task or "reach"
    robot = robot_for_checkpoint(None, policy.spec.joint_names, policy.spec.provenance, args.checkpoint)
    # The student's own camera: a wrist-camera student traced through the mast camera says nothing.
    sim_params, _why = sim_params_for_checkpoint(robot, args.sim_config, policy.spec.provenance)
    params = with_task(load_sim_params(sim_params), task)
    description = robot_description_for(robot, "")
    pipeline = ImagePipeline(PreprocessConfig.from_dict(policy.spec.preprocess))
    config = RolloutConfig(actuation_latency_s=args.latency, max_episode_s=args.episode_s,
                           graph_conditions=GraphConditions())
    for seed in args.seeds:
        trace_episode(seed, policy, teacher, params, description, pipeline, config, args)


def trace_episode(seed: int, policy: Any, teacher: Any, params: Any, description: str, pipeline: ImagePipeline,
                  config: RolloutConfig, args: argparse.Namespace) -> None:
    """One episode with the student's chunk and the teacher's label at each observation, printed."""
    world = SimWorld(params, description, seed=seed, render=True, joints=list(policy.spec.joint_names),
                     pushes=args.pushes)
    labeller = PPOChunkTeacher(teacher, world, args.latency)
    rows: list[tuple[float, float, float, np.ndarray, np.ndarray]] = []
    # the live object where the task has one (pick tasks: the cube), else the task's target
    target = getattr(world.task, "cube_position", None)

    def traced(image: np.ndarray, q: np.ndarray, history: np.ndarray | None) -> np.ndarray:
        """The student's chunk and the teacher's label for the same state; one of them drives."""
        own = policy.select_action(image, q, history)
        label = labeller.chunk(q, None, policy.spec.chunk_length, policy.spec.dt_s)
        where = target(world) if target is not None else world.target_position()
        rows.append((world.episode_elapsed_s(), float(np.linalg.norm(world.ee_position() - where)), float(q[-1]),
                     own, label))
        return own if args.drive == "student" else label

    try:
        record = run_episode(world, pipeline, None, traced, policy.spec.chunk_length, policy.spec.dt_s, config,
                             randomize=args.randomize, seed=seed, record_images=False,
                             joint_history_s=tuple(policy.spec.joint_history_s))
    finally:
        world.close()
    print(f"seed {seed}: {args.drive} drives, success {record.outcome.get('success')}, "
          f"failure {record.outcome.get('failure')}")
    for t, distance, jaw, own, label in rows:
        error = np.abs(own[POINT] - label[POINT])
        print(f"  t {t:4.1f} s  tool-target {distance * 100:5.1f} cm  jaw {jaw:+.2f}  student jaw@{POINT} "
              f"{own[POINT, -1]:+.2f}  teacher jaw@{POINT} {label[POINT, -1]:+.2f}  |diff| arm "
              f"{error[:-1].max():.3f} jaw {error[-1]:.3f}")

if __name__ == "__main__":
    main()
