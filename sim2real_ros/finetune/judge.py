"""Closed-loop judging of a fine-tuning: success before and after, where it matters and where it must not drop.

A lower offline action error does not make a better policy (a policy that copies the person's
commands frame by frame may still drift off in closed loop), so fine-tuning is judged by running
the policies: on the robot (here a sim variant standing in for it, e.g. config/sim_params_real_b.yaml)
and, for forgetting, on the nominal and perturbed sim of the parent's training distribution. Every
policy runs the same episode seeds (core path, training.evaluation.evaluate_in_sim, the actuator
compensating the deployment's configured latency), with Wilson 95% intervals. A change counts as
significant only when the two intervals do not overlap.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.policy.checkpoint import read_checkpoint
from ..training.evaluation import evaluate_in_sim
from .sim_data import training_distribution

# Fixed, reported seeds: the robot variant, the nominal sim, the perturbed sim (validate's offsets).
ROBOT_SEED = 5000
NOMINAL_SEED = 1000
PERTURBED_SEED = 51_000


def success_figure(result: dict[str, Any]) -> dict[str, Any]:
    """The compact success figure of an evaluate_in_sim result."""
    return {"successes": result["successes"], "episodes": result["episodes"], "rate": result["success_rate"],
            "ci95": result["ci95"], "failures": result["failures"], "seed": result.get("seed"),
            "actuation_latency_s": result.get("actuation_latency_s"),
            "actuation_latency_source": result.get("actuation_latency_source")}


def compare(before: dict[str, Any], after: dict[str, Any]) -> str:
    """'higher' | 'lower' (the 95% intervals do not overlap) | 'same within CIs'."""
    if after["ci95"][0] > before["ci95"][1]:
        return "higher"
    if after["ci95"][1] < before["ci95"][0]:
        return "lower"
    return "same within CIs"


def closed_loop(checkpoints: dict[str, str | Path], robot_sim: str | Path | None, episodes: int,
                sim_episodes: int | None = None, log: Callable[[str], None] = print,
                num_threads: int = 2) -> dict[str, Any]:
    """Success of each named checkpoint ({"before": parent, "after": tuned, ...}) on `robot_sim`
    (skipped when None; `episodes` each) and on the nominal and perturbed sim of the first
    checkpoint's training distribution (`sim_episodes` each, default `episodes`). Returns
    {"robot": {name: figure}, "nominal": ..., "perturbed": ..., "seeds": ..., "robot_sim": ...}."""
    names = list(checkpoints)
    spec, _, _ = read_checkpoint(checkpoints[names[0]])
    train_sim = training_distribution(spec)["sim_params"]
    sim_episodes = sim_episodes or episodes
    out: dict[str, Any] = {"robot_sim": None if robot_sim is None else str(robot_sim), "training_sim": train_sim,
                           "seeds": {"robot": ROBOT_SEED, "nominal": NOMINAL_SEED, "perturbed": PERTURBED_SEED},
                           "robot": {}, "nominal": {}, "perturbed": {}}
    runs = [("nominal", train_sim, False, NOMINAL_SEED, sim_episodes),
            ("perturbed", train_sim, True, PERTURBED_SEED, sim_episodes)]
    if robot_sim is not None:
        runs.insert(0, ("robot", str(robot_sim), False, ROBOT_SEED, episodes))
    for where, sim_config, perturb, seed, count in runs:
        for name in names:
            result = evaluate_in_sim(checkpoints[name], count, perturb=perturb, sim_config=sim_config, seed=seed,
                                     label=f"{where} {name}", num_threads=num_threads)
            figure = success_figure(result)
            out[where][name] = figure
            lo, hi = figure["ci95"]
            log(f"[judge] {where} {name}: {figure['successes']}/{figure['episodes']} (95% CI {lo:.2f}-{hi:.2f}) "
                f"{figure['failures']}")
    if len(names) > 1:
        base = names[0]
        out["changes"] = {where: {name: compare(out[where][base], out[where][name]) for name in names[1:]}
                          for where in ("robot", "nominal", "perturbed") if out[where]}
    return out


def disagreement(offline_before_rad: float | None, offline_after_rad: float | None, before: dict[str, Any],
                 after: dict[str, Any]) -> str:
    """A sentence when offline error and closed-loop success disagree (error down but success not
    up, or error up but success up), '' otherwise."""
    if offline_before_rad is None or offline_after_rad is None:
        return ""
    change = compare(before, after)
    down = offline_after_rad < offline_before_rad
    if down and change != "higher":
        return (f"offline action error fell ({1e3 * offline_before_rad:.1f} -> {1e3 * offline_after_rad:.1f} mrad) "
                f"but closed-loop success is {change} ({before['successes']}/{before['episodes']} -> "
                f"{after['successes']}/{after['episodes']}): the offline figure does not show a better policy")
    if not down and change == "higher":
        return (f"closed-loop success rose ({before['successes']}/{before['episodes']} -> {after['successes']}/"
                f"{after['episodes']}) although the offline action error did not fall "
                f"({1e3 * offline_before_rad:.1f} -> {1e3 * offline_after_rad:.1f} mrad)")
    return ""
