"""Rollout benchmark: privileged-env steps/s on 1 and 2 Ray workers (the ratio, measured in one run,
interleaved), the seconds a killed rollout worker costs (SIGKILL by PID mid-run; the step that
meets it waits for a replacement worker), and with --pipeline the whole learning pipeline: PPO
teacher to its target, the student distilled from it, and their success.

    .venv/bin/python benchmarks/bench_rollout.py [--quick] [--pipeline] [--json OUT]

Timings are wall-clock on whatever else the machine is doing: the load average is recorded
before and after; compare figures from one run.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim2real_ros.benchmarking import print_and_save
from sim2real_ros.paths import config_path
from sim2real_ros.rl.cluster import init_ray, shutdown_ray
from sim2real_ros.rl.pool import RolloutPool
from sim2real_ros.rl.ppo import load_teacher_config


def _rate(pool: RolloutPool, steps: int, rng: np.random.Generator) -> float:
    actions = rng.uniform(-1, 1, size=(steps, pool.num_envs, pool.num_actions))
    pool.step(actions[0])  # warm: first call pays for serialization set-up
    start = time.perf_counter()
    for a in actions[1:]:
        pool.step(a)
    return (steps - 1) * pool.num_envs / (time.perf_counter() - start)


def throughput(num_envs: int, steps: int, rounds: int) -> dict[str, Any]:
    """Env steps/s with 1 and 2 workers, alternating, `rounds` times each."""
    spec = load_teacher_config(config_path("teacher_reach.yaml")).env_spec()
    init_ray(2)
    rng = np.random.default_rng(0)
    rates: dict[int, list[float]] = {1: [], 2: []}
    try:
        for _ in range(rounds):
            for w in (1, 2):  # one pool at a time: Ray has 2 CPUs, a worker takes one
                pool = RolloutPool(spec, num_envs, w)
                try:
                    rates[w].append(_rate(pool, steps, rng))
                finally:
                    pool.close()
    finally:
        shutdown_ray()
    ratios = [b / a for a, b in zip(rates[1], rates[2], strict=True)]
    return {
        "num_envs": num_envs, "steps_per_round": steps, "rounds": rounds,
        "steps_per_s_1_worker": {"median": float(np.median(rates[1])), "min": float(min(rates[1])),
                                 "max": float(max(rates[1]))},
        "steps_per_s_2_workers": {"median": float(np.median(rates[2])), "min": float(min(rates[2])),
                                  "max": float(max(rates[2]))},
        "ratio_2_to_1": {"median": float(np.median(ratios)), "min": float(min(ratios)), "max": float(max(ratios))},
    }


def kill_cost(num_envs: int, steps: int, rounds: int) -> dict[str, Any]:
    """Seconds `steps` steps of 2 workers take undisturbed and with worker 0 killed (SIGKILL by PID)
    half-way, alternating, `rounds` times; the cost is their difference and the replacing step's."""
    import signal

    spec = load_teacher_config(config_path("teacher_reach.yaml")).env_spec()
    init_ray(2)
    rng = np.random.default_rng(1)
    plain, killed, replacing = [], [], []
    try:
        for _ in range(rounds):
            for kill in (False, True):
                pool = RolloutPool(spec, num_envs, 2, log=lambda text: None)
                try:
                    actions = rng.uniform(-1, 1, size=(steps, pool.num_envs, pool.num_actions))
                    pool.step(actions[0])
                    start = time.perf_counter()
                    for k, a in enumerate(actions[1:]):
                        if kill and k == steps // 2:
                            os.kill(pool.worker_info[0]["pid"], signal.SIGKILL)
                            tick = time.perf_counter()
                            pool.step(a)
                            replacing.append(time.perf_counter() - tick)
                        else:
                            pool.step(a)
                    (killed if kill else plain).append(time.perf_counter() - start)
                finally:
                    pool.close()
    finally:
        shutdown_ray()
    costs = [b - a for a, b in zip(plain, killed, strict=True)]
    return {"num_envs": num_envs, "steps": steps, "rounds": rounds,
            "undisturbed_s": [round(x, 2) for x in plain], "with_kill_s": [round(x, 2) for x in killed],
            "kill_cost_s": {"median": float(np.median(costs)), "min": float(min(costs)), "max": float(max(costs))},
            "replacing_step_s": {"median": float(np.median(replacing)), "min": float(min(replacing)),
                                 "max": float(max(replacing))}}


def pipeline(out_dir: Path, eval_episodes: int) -> dict[str, Any]:
    """Teacher (PPO) then student (BC + DAgger labelled by it), from scratch, then their success."""
    from sim2real_ros.rl.ppo import TeacherTrainer
    from sim2real_ros.training.config import load_train_config
    from sim2real_ros.training.evaluation import evaluate_in_sim
    from sim2real_ros.training.trainer import Trainer

    start = time.monotonic()
    init_ray(2)
    try:
        teacher_path = out_dir / "teacher.safetensors"
        teacher = TeacherTrainer(load_teacher_config(config_path("teacher_reach.yaml")), teacher_path,
                                 out_dir / "teacher.work", workers=2).run(resume=False)
        teacher_s = time.monotonic() - start
        config = load_train_config(config_path("train_reach_ppo.yaml"), teacher_checkpoint=str(teacher_path))
        trainer = Trainer(config, out_dir / "student.safetensors", out_dir / "student.work", workers=2)
        try:
            trainer.run(resume=False)
        finally:
            trainer.close()
        total_s = time.monotonic() - start
        student = {}
        for name, kwargs in {"nominal": {}, "perturbed": {"perturb": True},
                             "perturbed_pushes": {"perturb": True, "pushes": True}}.items():
            r = evaluate_in_sim(out_dir / "student.safetensors", eval_episodes, workers=2, **kwargs)
            student[name] = {"successes": r["successes"], "episodes": r["episodes"], "ci95": r["ci95"]}
    finally:
        shutdown_ray()
    t_eval = teacher["evaluation"]
    return {"teacher_wall_s": round(teacher_s, 1), "teacher_iterations": teacher["iterations"],
            "teacher_steps": teacher["steps"],
            "teacher_success": {"successes": t_eval["successes"], "episodes": t_eval["episodes"],
                                "ci95": t_eval["ci95"]},
            "pipeline_wall_s": round(total_s, 1), "student": student}


def run(quick: bool = False, with_pipeline: bool = False) -> dict[str, Any]:
    load_before = os.getloadavg()
    result: dict[str, Any] = {"throughput": throughput(32, 30 if quick else 100, 2 if quick else 5),
                              "worker_kill": kill_cost(32, 30 if quick else 100, 2 if quick else 3)}
    if with_pipeline:
        with tempfile.TemporaryDirectory(prefix="bench_rollout_") as tmp:
            result["pipeline"] = pipeline(Path(tmp), 20 if quick else 40)
    result["load_average_before"] = list(load_before)
    result["load_average_after"] = list(os.getloadavg())
    result["rollout_ratio_2_to_1"] = result["throughput"]["ratio_2_to_1"]["median"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pipeline", action="store_true", help="also train teacher + student from scratch")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    print_and_save(run(args.quick, args.pipeline), args.json)


if __name__ == "__main__":
    main()
