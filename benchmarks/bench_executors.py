"""The executors a node can spin on, measured on the stack's two latency paths (issue 35, part 5).

Usage: .venv/bin/python benchmarks/bench_executors.py [--quick] [--json OUT]

Choices (SIM2REAL_EXECUTOR, nodes/executor.py): `lean` (LeanExecutor, this project's, on rclpy
internals), `rclpy` (SingleThreadedExecutor) and `events` (rclpy.experimental.EventsExecutor, for the
nodes it can serve: events_supports). Two paths, as their own benchmarks measure them:
- e-stop reaction: bench_estop.run_supervisor (the supervisor as a process, camera and policy
  traffic, trials alternating quiet and loaded blocks);
- camera-to-command: bench_e2e.run_robot_graph (the robot graph against the stand-in robot, quiet
  and loaded segments).
Interleaved rounds in one run: each round runs every choice once, in a shuffled order, so a change
in the machine's load during the run falls on all choices alike. Per choice: the pooled p50/p99 over
all rounds, and the per-round p99s (median and spread). The supervisor cannot be served by the
EventsExecutor (a guard condition, a MessageInfo callback): under `events` it falls back to rclpy's
SingleThreadedExecutor, so its e-stop figure is rclpy's, measured again.
"""
from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
for entry in (str(REPO_ROOT), str(HERE)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

import bench_e2e  # noqa: E402
import bench_estop  # noqa: E402

from sim2real_ros.benchmarking import LOADED, QUIET, BusyLoad, bench_main, latency_stats  # noqa: E402
from sim2real_ros.nodes.executor import DEFAULT_CHOICE, EXECUTOR_ENV  # noqa: E402

CHOICES = ("lean", "rclpy", "events", "per_node")
# `per_node`: SIM2REAL_EXECUTOR=lean with rclpy's executor on the camera path's two Python stages
# (their `executor` parameter): the supervisor and actuator keep the lean one, so its e-stop figure
# is lean's, not measured again.
PER_NODE = {"camera_preprocessor": {"executor": "rclpy"}, "policy_node": {"executor": "rclpy"}}
WITHIN = 0.10  # a stock executor becomes the default where its p99s are within 10% of the lean one's


def _round_figures(choice: str, estop_trials: int, e2e_s: float, load: BusyLoad, tmp: Path) -> dict:
    per_node = choice == "per_node"
    os.environ[EXECUTOR_ENV] = "lean" if per_node else choice  # the launcher passes its environment to every node
    if per_node:
        figures = {"estop_ms": {QUIET: [], LOADED: []}, "estop_missed": 0}
    else:
        estop = bench_estop.run_supervisor(estop_trials, True, load)
        figures = {"estop_ms": {phase: estop["per_phase"][phase]["reactions_ms"] for phase in (QUIET, LOADED)},
                   "estop_missed": estop["missed"]}
    figures.update({"e2e_failure": None, "e2e_p99_ms": {QUIET: None, LOADED: None},
                    "e2e_p50_ms": {QUIET: None, LOADED: None}})
    try:
        e2e = bench_e2e.run_robot_graph(bench_e2e._checkpoint(tmp), e2e_s, tmp, knobs=True, load=load,
                                        parameters=PER_NODE if per_node else None)
    except (TimeoutError, RuntimeError) as err:  # a graph that never commands is a finding, not a crash
        figures["e2e_failure"] = str(err)
        return figures
    figures["e2e_p99_ms"] = {QUIET: e2e["e2e_latency_ms"]["p99"], LOADED: e2e["e2e_latency_loaded_ms"]["p99"]}
    figures["e2e_p50_ms"] = {QUIET: e2e["e2e_latency_ms"]["p50"], LOADED: e2e["e2e_latency_loaded_ms"]["p50"]}
    return figures


def _spread(values: list[float]) -> dict:
    array = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if not array.size:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(float(np.median(array)), 2), "min": round(float(array.min()), 2),
            "max": round(float(array.max()), 2), "n": int(array.size)}


def run(quick: bool = False) -> dict:
    rounds = 2 if quick else 4
    estop_trials = 40 if quick else 120
    e2e_s = 6.0 if quick else 16.0
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randrange(150, 230)))
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    before = os.environ.get(EXECUTOR_ENV)
    load_before = os.getloadavg()[0]
    rng = random.Random(0)
    per_choice: dict[str, list[dict]] = {c: [] for c in CHOICES}
    order: list[list[str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_executors_") as tmp_name, BusyLoad() as load:
            for _ in range(rounds):
                this_round = list(CHOICES)
                rng.shuffle(this_round)
                order.append(this_round)
                for choice in this_round:
                    print(f"[bench_executors] round {len(order)}/{rounds}: {choice}", file=sys.stderr, flush=True)
                    per_choice[choice].append(_round_figures(choice, estop_trials, e2e_s, load, Path(tmp_name)))
            load_report = load.report()
    finally:
        if before is None:
            os.environ.pop(EXECUTOR_ENV, None)
        else:
            os.environ[EXECUTOR_ENV] = before
    out: dict = {"order": order, "rounds": rounds, "estop_trials_per_round": estop_trials, "e2e_s_per_round": e2e_s,
                 "default": DEFAULT_CHOICE}
    for choice, results in per_choice.items():
        figures: dict = {}
        for phase in (QUIET, LOADED):
            pooled = [v for r in results for v in r["estop_ms"][phase]]
            figures[f"estop_{phase}_ms"] = latency_stats(np.asarray(pooled))
            figures[f"estop_{phase}_p99_per_round_ms"] = _spread(
                [float(np.percentile(r["estop_ms"][phase], 99)) if r["estop_ms"][phase] else None for r in results])
            figures[f"e2e_{phase}_p99_per_round_ms"] = _spread([r["e2e_p99_ms"][phase] for r in results])
            figures[f"e2e_{phase}_p50_per_round_ms"] = _spread([r["e2e_p50_ms"][phase] for r in results])
        figures["estop_missed"] = sum(r["estop_missed"] for r in results)
        figures["e2e_failures"] = [r["e2e_failure"] for r in results if r["e2e_failure"]]
        out[choice] = figures
    lean = out["lean"]
    verdict = {}
    for choice in ("rclpy", "events", "per_node"):
        ratios = {}
        keys = (f"e2e_{QUIET}_p99_per_round_ms",) if choice == "per_node" else (
            f"estop_{QUIET}_p99_per_round_ms", f"e2e_{QUIET}_p99_per_round_ms")
        for key in keys:
            ours, theirs = lean[key]["median"], out[choice][key]["median"]
            ratios[key] = round(theirs / ours, 3) if ours and theirs else None
        verdict[choice] = {"p99_ratio_to_lean": ratios, "e2e_failures": len(out[choice]["e2e_failures"]),
                           "within_10_percent": not out[choice]["e2e_failures"]
                           and all(r is not None and r <= 1 + WITHIN for r in ratios.values())}
    out["verdict"] = verdict
    out["load"] = {**load_report, "load_average_1min_before": round(load_before, 2)}
    return out


if __name__ == "__main__":
    raise SystemExit(bench_main(run, __doc__))
