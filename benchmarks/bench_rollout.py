"""Rollout benchmark: privileged-env steps/s on 1 and 2 Ray workers (the ratio, measured in one run,
interleaved) for PPO's rollout (the actor acting in the workers, one call per worker per
iteration, as `train-teacher` collects) and for the per-step path (one call per env step); the
seconds a killed rollout worker costs (SIGKILL by PID in the middle of a rollout call: the call
waits for a replacement worker, which plays that worker's block again); and with --pipeline the
whole learning pipeline: PPO teacher to its target, the student distilled from it, their success.

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


def _step_rate(pool: RolloutPool, steps: int, rng: np.random.Generator) -> float:
    actions = rng.uniform(-1, 1, size=(steps, pool.num_envs, pool.num_actions))
    pool.step(actions[0])  # warm: first call pays for serialization set-up
    start = time.perf_counter()
    for a in actions[1:]:
        pool.step(a)
    return (steps - 1) * pool.num_envs / (time.perf_counter() - start)


def _rollout_rate(pool: RolloutPool, policy: Any, std: np.ndarray, steps: int, round_index: int) -> float:
    """Env steps/s of PPO's rollout call (as train-teacher makes it: blocks of `ROLLOUT_STEPS`)."""
    pool.rollout(policy, std, 2, [0, round_index, 0])  # warm, as above
    start = time.perf_counter()
    done = 0
    while done < steps:
        block = min(ROLLOUT_STEPS, steps - done)
        pool.rollout(policy, std, block, [0, round_index, 1 + done])
        done += block
    return steps * pool.num_envs / (time.perf_counter() - start)


ROLLOUT_STEPS = 32  # policy steps per env per PPO iteration in the shipped teacher configs


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": float(min(values)), "max": float(max(values))}


def throughput(num_envs: int, steps: int, rounds: int) -> dict[str, Any]:
    """Env steps/s with 1 and 2 workers, alternating, `rounds` times each: PPO's rollout (the
    teacher_reach actor acting in the workers) and the per-step path, each pool measured on both."""
    from sim2real_ros.paths import share_dir
    from sim2real_ros.rl.ppo import gaussian_std
    from sim2real_ros.rl.teacher_checkpoint import read_teacher

    spec = load_teacher_config(config_path("teacher_reach.yaml")).env_spec()
    # The shipped reach teacher acts, with its trained noise: the network a PPO rollout runs.
    _, actor, _ = read_teacher(share_dir() / "policies" / "teacher_reach.safetensors")
    policy, std = actor.as_jit().eval(), gaussian_std(actor)
    init_ray(2)
    rng = np.random.default_rng(0)
    rates: dict[str, dict[int, list[float]]] = {"rollout": {1: [], 2: []}, "step": {1: [], 2: []}}
    try:
        for r in range(rounds):
            for w in (1, 2):  # one pool at a time: Ray has 2 CPUs, a worker takes one
                pool = RolloutPool(spec, num_envs, w)
                try:
                    rates["rollout"][w].append(_rollout_rate(pool, policy, std, steps, r))
                    rates["step"][w].append(_step_rate(pool, steps, rng))
                finally:
                    pool.close()
    finally:
        shutdown_ray()
    out: dict[str, Any] = {"num_envs": num_envs, "steps_per_round": steps, "rounds": rounds,
                           "rollout_steps_per_call": ROLLOUT_STEPS}
    for path, by_workers in rates.items():
        ratios = [b / a for a, b in zip(by_workers[1], by_workers[2], strict=True)]
        prefix = "" if path == "rollout" else "per_step_"
        out[f"{prefix}steps_per_s_1_worker"] = _spread(by_workers[1])
        out[f"{prefix}steps_per_s_2_workers"] = _spread(by_workers[2])
        out[f"{prefix}ratio_2_to_1"] = _spread(ratios)
        out[f"{prefix}ratios"] = [round(x, 3) for x in ratios]
    return out


def kill_cost(num_envs: int, steps: int, rounds: int) -> dict[str, Any]:
    """Seconds `steps` steps of PPO rollouts on 2 workers take undisturbed and with worker 0 killed
    (SIGKILL by PID) in the middle of the run's middle rollout call, alternating, `rounds` times; the
    cost is their difference, and the call that met the kill is timed on its own."""
    import signal
    import threading

    from sim2real_ros.paths import share_dir
    from sim2real_ros.rl.ppo import gaussian_std
    from sim2real_ros.rl.teacher_checkpoint import read_teacher

    spec = load_teacher_config(config_path("teacher_reach.yaml")).env_spec()
    _, actor, _ = read_teacher(share_dir() / "policies" / "teacher_reach.safetensors")
    policy, std = actor.as_jit().eval(), gaussian_std(actor)
    init_ray(2)
    plain, killed, replacing = [], [], []
    blocks = max(1, -(-steps // ROLLOUT_STEPS))
    try:
        for r in range(rounds):
            for kill in (False, True):
                pool = RolloutPool(spec, num_envs, 2, log=lambda text: None)
                try:
                    pool.rollout(policy, std, 2, [1, r, 0])
                    start = time.perf_counter()
                    block_s = 0.0
                    for k in range(blocks):
                        tick = time.perf_counter()
                        timer = None
                        if kill and k == blocks // 2:  # half-way through this call, by the last call's time
                            pid = pool.worker_info[0]["pid"]
                            timer = threading.Timer(block_s / 2, os.kill, (pid, signal.SIGKILL))
                            timer.start()
                        pool.rollout(policy, std, min(ROLLOUT_STEPS, steps - k * ROLLOUT_STEPS), [1, r, 1 + k])
                        if timer is not None:
                            timer.join()
                            replacing.append(time.perf_counter() - tick)
                        block_s = time.perf_counter() - tick
                    (killed if kill else plain).append(time.perf_counter() - start)
                finally:
                    pool.close()
    finally:
        shutdown_ray()
    costs = [b - a for a, b in zip(plain, killed, strict=True)]
    return {"num_envs": num_envs, "steps": steps, "rounds": rounds, "rollout_steps_per_call": ROLLOUT_STEPS,
            "undisturbed_s": [round(x, 2) for x in plain], "with_kill_s": [round(x, 2) for x in killed],
            "kill_cost_s": _spread(costs), "replacing_call_s": _spread(replacing)}


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
