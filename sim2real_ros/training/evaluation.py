"""Success rate of a checkpoint in the sim, through the same core code as the nodes."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..core.errors import ConfigError
from ..core.perception.preprocess_config import PreprocessConfig
from ..core.policy.backend import load_policy
from ..core.policy.checkpoint import LoadedPolicy
from ..core.policy.spec import check_against_data
from ..core.robot.urdf import RobotModel
from ..core.stats import success_by_pushes, summary, wilson_interval
from ..paths import config_path
from ..provenance import assert_unseen_episodes, sim_params_mismatch
from ..robots import checkpoint_task, robot_description_for, robot_for_checkpoint, sim_params_for_checkpoint
from ..sim.params import load_sim_params, trained_loop_note, with_sim_loop_override, with_task
from ..sim.world import episode_seed
from .episode_plan import training_index_ranges
from .graph_conditions import GraphConditions
from .parallel import EpisodeJob, EpisodePool, counting_progress
from .rollout import EpisodeRecord, RolloutConfig

# Where an evaluation's compensated actuation latency came from (reported in its JSON).
LATENCY_DEPLOYMENT = "deployment"  # config/params.yaml's actuator_node actuation_latency (what a robot compensates)
LATENCY_OVERRIDE = "override"      # given by the caller (`eval-sim --actuation-latency S`)
DEFAULT_DEPLOYMENT_LATENCY_S = 0.02


def deployment_actuation_latency_s(params_file: str | Path | None = None) -> float:
    """The latency [s] the deployed actuator compensates: `actuation_latency_s` (or its deprecated name
    `actuation_latency`) of actuator_node in config/params.yaml (or `params_file`), else 0.02 s.
    Not the sim variant's own true latency: a robot's actuator knows only its configured value (or
    what sysid measured)."""
    path = Path(params_file) if params_file else config_path("params.yaml")
    try:
        data = yaml.safe_load(path.read_text()) or {}
        parameters = data["/**/actuator_node"]["ros__parameters"]
        name = "actuation_latency_s" if "actuation_latency_s" in parameters else "actuation_latency"
        value = float(parameters[name])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return DEFAULT_DEPLOYMENT_LATENCY_S
    if not (np.isfinite(value) and value >= 0):
        raise ConfigError(str(path), f"/**/actuator_node.ros__parameters.{name}", value,
                          "must be a finite number >= 0 [s]")
    return value


def rollout_config_from(policy: LoadedPolicy, actuation_latency_s: float,
                        graph_conditions: GraphConditions | bool | None = True) -> RolloutConfig:
    """Evaluation rollouts: the training provenance's settings when present, the task's own timeout,
    and the graph's conditions (`graph_conditions`: True = the checkpoint's training ones or the
    defaults, a GraphConditions = these, False/None = the plain loop)."""
    trained = dict(policy.spec.provenance.get("config", {}).get("rollout", {}))
    known = set(RolloutConfig.__dataclass_fields__)
    trained = {k: v for k, v in trained.items() if k in known}
    if graph_conditions is True:
        graph_conditions = GraphConditions.from_value(trained.get("graph_conditions") or True)
    trained["graph_conditions"] = graph_conditions or None
    return RolloutConfig.from_dict({**trained, "max_episode_s": None, "actuation_latency_s": actuation_latency_s},
                                   f"{policy.spec.provenance.get('config', {}).get('source', 'checkpoint')} rollout")


def student_training_episodes(provenance: dict[str, Any]) -> dict[str, Any] | None:
    """The episodes a student's training played (run seed, index ranges): the provenance's record,
    or for checkpoints saved before it was recorded, rebuilt from the config (training.trainer:
    training.episode_plan)."""
    recorded = provenance.get("training_episodes")
    if isinstance(recorded, dict):
        return recorded
    config = provenance.get("config")
    if not isinstance(config, dict):
        return None
    try:
        seed, bc, rounds, per_round = (int(config["seed"]), int(config["bc_episodes"]), int(config["dagger_rounds"]),
                                       int(config["dagger_episodes"]))
    except (KeyError, TypeError, ValueError):
        return None
    return {"seed": seed, "index_ranges": training_index_ranges(bc, rounds, per_round)}


def episode_row(index: int, outcome: dict[str, Any]) -> dict[str, Any]:
    """One episode's line of the per-episode table: index, seed, success, duration [s], final
    distance [m], failure category (what the graph evaluation reports too, seed by seed), and in
    episodes with pushes the number that started (pushes_applied)."""
    return {"episode": index, "seed": int(outcome.get("seed", -1)), "success": bool(outcome.get("success")),
            "duration_s": float(outcome.get("duration_s", np.nan)),
            "final_distance_m": float(outcome.get("final_distance_m", np.nan)),
            "failure": outcome.get("failure", "unknown"),
            **({"pushes_applied": int(outcome["pushes_applied"])} if "pushes_applied" in outcome else {}),
            **({"graph": outcome["graph"]} if "graph" in outcome else {})}


def episode_metrics(records: list[EpisodeRecord]) -> dict[str, Any]:
    """success_rate + Wilson ci95, episode length, action magnitude statistics, failure categories."""
    n = len(records)
    wins = sum(bool(r.outcome.get("success")) for r in records)
    lengths = [float(r.outcome.get("duration_s", np.nan)) for r in records]
    # Action magnitude: how far each chunk asks to move from where the arm is [rad] (max over joints).
    magnitudes = [float(np.max(np.abs(a - q))) for r in records for a, q in zip(r.actions, r.joints, strict=True)]
    failures = Counter(r.outcome.get("failure", "unknown") for r in records)
    return {
        "episodes": n, "successes": wins, "success_rate": wins / max(n, 1), "ci95": list(wilson_interval(wins, n)),
        "episode_length_s": summary(lengths), "action_magnitude_rad": summary(magnitudes),
        "failures": dict(sorted(failures.items())),
        "per_episode": [episode_row(i, r.outcome) for i, r in enumerate(records)],
    }


def evaluate_in_sim(checkpoint: str | Path, episodes: int, perturb: bool = False,
                    sim_config: str | Path | None = None, robot_description: str | None = None,
                    seed: int = 1000, actuation_latency_s: float | None = None,
                    num_threads: int = 2, label: str = "eval",
                    graph_conditions: GraphConditions | bool | None = True, pushes: bool = False,
                    workers: int = 0, backend: str = "auto", robot: str | None = None,
                    timeout_s: float | None = None, log: Callable[[str], None] | None = None,
                    on_block: Callable[[int], None] | None = None, block: int = 4,
                    task: str | None = None, sim_loop: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run `episodes` sim episodes with the policy driving (core path: preprocessing pipeline,
    policy, actuator; with graph_conditions (default) the graph's timing and supervisor, see
    training.graph_conditions). perturb: sample the sim params' randomization ranges each episode.
    pushes: random pushes on the arm (the sim params' randomization.pushes; ConfigError if absent),
    counted per episode (pushes_applied) and in all (pushes_applied_total). workers: Ray rollout
    workers (ray must be initialized, rl.cluster.init_ray); 0 runs in this process. Each episode runs
    on a fresh world, so the results depend on the seeds only, not on the worker count. backend:
    auto (by the file) | torch | onnxruntime (a checkpoint or an exported ONNX policy, docs/onnx.md).
    actuation_latency_s [s]: the latency the rollout's actuator compensates; None = the deployment's
    configured value (config/params.yaml), never the sim variant's own true latency (which would
    flatter every "real" variant). The result reports the value and its source. robot: robots.ROBOTS
    name (None: the checkpoint's); its URDF and sim params are the defaults of robot_description and
    sim_config; a checkpoint trained for another robot raises CheckpointError naming both.
    timeout_s [s] / log: a Ray worker silent on one block of `block` episodes for longer is replaced
    (named in log); on_block(n): called after each finished block of n episodes. task: the sim task
    (sim/tasks.py: reach | reach_hold | pick_lift | pick_place) instead of the sim params' task.name.
    sim_loop: the sim loop over the sim params' own ({loop: fast, dt_s: 0.005, substeps: 2},
    sim.params.with_sim_loop_override; a bad one is a ConfigError naming --sim-loop)."""
    policy = load_policy(checkpoint, backend=backend, num_threads=num_threads)
    robot = robot_for_checkpoint(robot, policy.spec.joint_names, policy.spec.provenance, str(checkpoint))
    # What the workers load (then the same loop override): --sim-config, else the checkpoint's own file.
    params_file, params_from = sim_params_for_checkpoint(robot, sim_config, policy.spec.provenance)
    params = with_sim_loop_override(load_sim_params(params_file), sim_loop or {}, "eval-sim", "--sim-loop")
    if task is None:  # the task the checkpoint was trained on (students since issue 32 record it)
        task = checkpoint_task(policy.spec.provenance)
    if task is not None:
        params = with_task(params, task, f"{checkpoint}: provenance task")
    preprocess = PreprocessConfig.from_dict(policy.spec.preprocess, source=f"{checkpoint} preprocess")
    description = robot_description_for(robot, robot_description)
    # The sim drives the checkpoint's joints by name: each must be in the robot, and the
    # preprocessing the sim runs (the checkpoint's stored config) must be the one it was trained with.
    robot_name = "(robot_description XML)" if description.lstrip().startswith("<") else description
    check_against_data(policy.spec, RobotModel.from_description(description).joint_names, str(checkpoint),
                       f"sim robot {robot_name}", preprocess)
    if pushes and params.randomization.pushes is None:
        raise ConfigError(params.source, "randomization.pushes", None,
                          "pushes were asked for, but the sim params have no randomization.pushes ranges")
    if actuation_latency_s is None:
        latency, latency_source = deployment_actuation_latency_s(), LATENCY_DEPLOYMENT
    else:
        latency, latency_source = float(actuation_latency_s), LATENCY_OVERRIDE
        if not (np.isfinite(latency) and latency >= 0):
            raise ConfigError("eval-sim", "actuation_latency_s", actuation_latency_s,
                              "must be a finite number >= 0 [s]")
    config = rollout_config_from(policy, latency, graph_conditions)
    job = EpisodeJob(str(params_file), description, preprocess.to_dict(),
                     list(policy.spec.joint_names), config.to_dict(), policy.spec.chunk_length, policy.spec.dt_s,
                     pushes=pushes, record_images=False, backend=policy.backend, task=task,
                     joint_history_s=tuple(policy.spec.joint_history_s), sim_loop=dict(sim_loop or {}) or None)
    assert_unseen_episodes(seed, range(episodes), student_training_episodes(policy.spec.provenance), str(checkpoint))
    pool = EpisodePool(job, workers, num_threads=num_threads, timeout_s=timeout_s, log=log)
    progress_bar = counting_progress(episodes, f"[{label}] episodes")

    def done(n: int) -> None:
        progress_bar(n)
        if on_block is not None:
            on_block(n)

    try:
        seeds = [episode_seed(seed, i) for i in range(episodes)]
        records = pool.run(seeds, str(checkpoint), perturb, on_done=done, block=block)
    finally:
        pool.close()
    loop_note = trained_loop_note(policy.spec.provenance, policy.spec.sim_params_version, params, str(checkpoint))
    push_info = {}
    if pushes:
        push_info = {"push_params": dataclasses.asdict(params.randomization.pushes),
                     "pushes_applied_total": sum(int(r.outcome.get("pushes_applied", 0)) for r in records),
                     "by_pushes": success_by_pushes([{"success": bool(r.outcome.get("success")),
                                                      "pushes_applied": int(r.outcome.get("pushes_applied", 0))}
                                                     for r in records])}
    return {"checkpoint": str(checkpoint), "checkpoint_hash": policy.checkpoint_hash, "backend": policy.backend,
            "robot": robot, "task": params.task.name,
            "perturb": perturb,
            "pushes": bool(pushes), **push_info, "sim_params_file": str(params.source),
            "sim_params_from": params_from, "sim_params_version": params.version,
            "trained_sim_params_version": policy.spec.sim_params_version,
            "sim_params_warning": None if loop_note else sim_params_mismatch(
                policy.spec.sim_params_version, params.version, str(checkpoint), str(params.source)),
            "sim_loop_note": loop_note,
            "mode": "core",
            "graph_conditions": None if config.graph_conditions is None else config.graph_conditions.to_dict(),
            "actuation_latency_s": latency, "actuation_latency_source": latency_source,
            "sim_actuation_latency_s": params.actuator.actuation_latency_s, "seed": int(seed),
            **episode_metrics(records)}
