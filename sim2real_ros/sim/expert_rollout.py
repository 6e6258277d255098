"""The task's scripted expert driving the sim (privileged state, no camera, no policy): how well the
task can be solved at all, episode by episode, with the same outcome and failure categories as
eval-sim reports for a policy."""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..core.errors import ConfigError
from ..core.stats import success_by_pushes, wilson_interval
from .params import SimParams
from .tasks import REACTIVE_EXPERT_TASKS, make_scripted_expert
from .world import SimWorld, episode_seed

DEFAULT_CONTROL_HZ = 50.0


def run_expert_episode(world: SimWorld, randomize: bool = False, seed: int | None = None,
                       control_hz: float = DEFAULT_CONTROL_HZ, reactive: bool = False) -> dict[str, Any]:
    """One episode with the task's scripted expert commanding at control_hz [Hz] (sim time) until the
    task ends it (reactive: the task's reactive expert, which decides from the state). Returns the
    world's outcome with `failure` (the task's category) added."""
    if reactive and world.task.name not in REACTIVE_EXPERT_TASKS:
        raise ConfigError(world.params.source, "task.name", world.task.name,
                          f"has no reactive scripted expert ({', '.join(REACTIVE_EXPERT_TASKS)} have)")
    world.reset(randomize=randomize, seed=seed)
    expert = make_scripted_expert(world, "reactive" if reactive else "timed")
    expert.start(world)
    physics_per_tick = max(1, int(round(1.0 / (control_hz * world.params.physics.dt_s))))
    while world.episode_outcome() is None:
        world.set_command(expert.command(world))
        world.step(physics_per_tick)
    outcome = world.episode_outcome()
    assert outcome is not None
    outcome["failure"] = world.task.classify_failure(world, outcome)
    return outcome


def evaluate_expert(params: SimParams, robot_description: str, episodes: int, seed: int = 1000,
                    randomize: bool = False, pushes: bool = False,
                    control_hz: float = DEFAULT_CONTROL_HZ, reactive: bool = False) -> dict[str, Any]:
    """`episodes` episodes of the scripted expert (episode k has seed episode_seed(seed, k), as
    eval-sim's), each on a fresh world: a PyBullet world's next episode depends slightly on what it
    simulated before, so a row is reproducible from its seed alone. Success rate with its Wilson
    95 % interval, failure categories and the per-episode rows (reactive: run_expert_episode's)."""
    rows = []
    categories: tuple[str, ...] = ()
    for k in range(int(episodes)):
        world = SimWorld(params, robot_description, seed=seed, render=False, randomize=False, pushes=pushes)
        try:
            categories = tuple(world.task.failure_categories)
            outcome = run_expert_episode(world, randomize=randomize, seed=episode_seed(seed, k), control_hz=control_hz,
                                         reactive=reactive)
        finally:
            world.close()
        rows.append({"episode": k, "seed": int(outcome["seed"]), "success": bool(outcome["success"]),
                     "duration_s": float(outcome["duration_s"]),
                     "final_distance_m": float(outcome.get("final_distance_m", np.nan)),
                     "failure": outcome["failure"],
                     **({"pushes_applied": int(outcome["pushes_applied"])} if "pushes_applied" in outcome else {})})
    wins = sum(r["success"] for r in rows)
    push_info = {} if not pushes else {
        "pushes_applied_total": sum(r.get("pushes_applied", 0) for r in rows),
        "by_pushes": success_by_pushes([{"success": r["success"], "pushes_applied": r.get("pushes_applied", 0)}
                                        for r in rows])}
    return {"driver": "reactive_expert" if reactive else "scripted_expert", "task": params.task.name,
            "episodes": len(rows), "successes": wins,
            "success_rate": wins / max(1, len(rows)), "ci95": list(wilson_interval(wins, len(rows))),
            "failures": dict(sorted(Counter(r["failure"] for r in rows).items())),
            "failure_categories": list(categories), "perturb": bool(randomize),
            "pushes": bool(pushes), **push_info, "seed": int(seed), "sim_params_version": params.version,
            "per_episode": rows}
