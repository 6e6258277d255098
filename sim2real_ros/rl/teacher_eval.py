"""A PPO teacher checkpoint evaluated like a student (`sim2real eval-sim --checkpoint teacher.safetensors`).

The teacher acts on privileged observations (rl/env.py), so it runs on the reach env, not through
the camera pipeline; the seeds and the report are those of training.evaluation.evaluate_in_sim:
episode i of `--seed S` plays the world of episode_seed(S, i), and the JSON has the same fields
(success rate, Wilson ci95, episode length, failures, per-episode rows), plus success counted
separately over pushed and unpushed episodes. An evaluation that would replay a training world
(same run seed, an index training played) is refused.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ConfigError
from ..core.stats import success_by_pushes, summary, wilson_interval
from ..provenance import assert_unseen_episodes, sim_params_mismatch
from ..robots import robot_description_for, robot_for_checkpoint, sim_params_for
from ..sim.params import load_sim_params, trained_loop_note, with_sim_loop_override
from ..sim.task_base import SUCCESS
from .batch import EnvSpec
from .pool import RolloutPool
from .teacher_checkpoint import load_teacher

DEFAULT_EVAL_ENVS = 8  # worlds stepped side by side; the results depend on it (slot assignment), so it is reported


def teacher_training_episodes(provenance: dict[str, Any]) -> dict[str, Any] | None:
    """The training episode record of a teacher's provenance; for teachers saved before it was
    recorded, rebuilt from the config's seed and num_envs and the steps played (rl/ppo.training_episodes)."""
    recorded = provenance.get("training_episodes")
    if isinstance(recorded, dict):
        return recorded
    config = provenance.get("config")
    steps, iterations = provenance.get("steps"), provenance.get("iterations")
    if not isinstance(config, dict) or not isinstance(steps, int) or not isinstance(iterations, int):
        return None
    seed, num_envs = config.get("seed"), config.get("num_envs")
    if not isinstance(seed, int) or not isinstance(num_envs, int):
        return None
    from .ppo import legacy_training_ranges

    return {"seed": seed, "index_ranges": legacy_training_ranges(iterations, steps, num_envs)}


def evaluate_teacher_in_sim(checkpoint: str | Path, episodes: int, perturb: bool = False, pushes: bool = False,
                            sim_config: str | Path | None = None, robot_description: str | None = None,
                            seed: int = 1000, workers: int = 0, robot: str | None = None,
                            num_envs: int = DEFAULT_EVAL_ENVS,
                            sim_loop: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run `episodes` privileged episodes with the teacher's deterministic (mean) action.

    perturb: the sim params' randomization ranges each episode; pushes: random pushes on the arm
    (the sim params' randomization.pushes; ConfigError if absent). workers: Ray rollout workers (ray
    initialized) or 0. robot: robots.ROBOTS name (None: the teacher's). sim_loop: the sim loop over
    the sim params' own (sim.params.with_sim_loop_override). Raises CheckpointError for a
    bad file, ReusedTrainingEpisodeError when an episode would be a training one."""
    teacher = load_teacher(checkpoint)
    spec = teacher.spec
    robot = robot_for_checkpoint(robot, spec.joint_names, spec.provenance, str(checkpoint))
    params_file = sim_params_for(robot, sim_config)  # what the workers load (then the same loop override)
    params = with_sim_loop_override(load_sim_params(params_file), sim_loop or {}, "eval-sim", "--sim-loop")
    if pushes and params.randomization.pushes is None:
        raise ConfigError(params.source, "randomization.pushes", None,
                          "pushes were asked for, but the sim params have no randomization.pushes ranges")
    indices = range(int(episodes))
    assert_unseen_episodes(seed, indices, teacher_training_episodes(spec.provenance), str(checkpoint))
    env = {**spec.env, "randomize": bool(perturb), "pushes": bool(pushes)}
    slots = max(1, min(int(num_envs), int(episodes)))
    env_spec = EnvSpec(str(params_file), robot_description_for(robot, robot_description), env,
                       dict(spec.rewards), int(seed), slots, sim_loop=dict(sim_loop or {}) or None)
    pool = RolloutPool(env_spec, slots, workers)
    try:
        if pool.obs_dim != spec.obs_dim:
            raise ConfigError(str(checkpoint), "observation_layout", spec.obs_dim,
                              f"the env for robot {robot} observes {pool.obs_dim} values")
        rows = pool.run_episodes(indices, teacher.policy)
    finally:
        pool.close()
    per_episode = [{"episode": i, "seed": int(r["seed"]), "success": bool(r["success"]),
                    "duration_s": float(r["duration_s"]), "final_distance_m": float(r["final_distance_m"]),
                    "failure": SUCCESS if r["success"] else str(r.get("failure", "not_reached")),
                    "pushes_applied": int(r.get("pushes_applied", 0))} for i, r in zip(indices, rows, strict=True)]
    # A teacher cloned or trained on a sim loop override (its config's sim_loop) and run on another loop:
    # the line that names both, instead of a bare version mismatch.
    loop_note = trained_loop_note(spec.provenance, spec.sim_params_version, params, str(checkpoint))
    wins = sum(r["success"] for r in per_episode)
    n = len(per_episode)
    return {"checkpoint": str(checkpoint), "checkpoint_hash": teacher.checkpoint_hash,
            "backend": "torch (teacher, privileged observations)", "kind": "teacher", "robot": robot,
            "task": str(spec.env.get("task", "reach")),
            "perturb": bool(perturb), "pushes": bool(pushes),
            **({"pushes_applied_total": sum(r["pushes_applied"] for r in per_episode)} if pushes else {}),
            "sim_params_version": params.version, "trained_sim_params_version": spec.sim_params_version,
            "sim_params_warning": None if loop_note else sim_params_mismatch(
                spec.sim_params_version, params.version, str(checkpoint), str(params.source)),
            "sim_loop_note": loop_note,
            "mode": "privileged", "num_envs": slots, "seed": int(seed),
            "episodes": n, "successes": wins, "success_rate": wins / max(n, 1),
            "ci95": list(wilson_interval(wins, n)),
            "by_pushes": success_by_pushes(per_episode),
            "episode_length_s": summary([r["duration_s"] for r in per_episode]),
            "final_distance_m": summary(np.asarray([r["final_distance_m"] for r in per_episode])),
            "failures": dict(sorted(Counter(r["failure"] for r in per_episode).items())),
            "per_episode": per_episode}
