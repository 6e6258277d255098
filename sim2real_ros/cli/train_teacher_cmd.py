"""`sim2real train-teacher --config CONFIG --out TEACHER`: PPO (rsl_rl) with privileged observations
over many randomized sims on Ray rollout workers."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..paths import config_path
from ..robots import ROBOT_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=config_path("teacher_reach.yaml"), help="teacher YAML")
    parser.add_argument("--out", type=Path, required=True, help="teacher checkpoint to write")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the resumable state lives (default: OUT with suffix .work)")
    parser.add_argument("--no-resume", action="store_true", help="ignore a previous run's state")
    parser.add_argument("--seed", type=int, default=None, help="override the config's seed")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=None,
                        help="override the config's robot (docs/robots.md); its URDF and sim params replace the "
                             "config's robot_description and sim_params")
    parser.add_argument("--iterations", type=int, default=None, help="override the config's PPO iterations")
    parser.add_argument("--workers", type=int, default=None,
                        help="Ray rollout workers (default: the config's, one per core; 0 = no Ray)")
    parser.add_argument("--ray-address", default=None,
                        help="join a Ray cluster (HOST:PORT or auto) instead of starting one locally")
    parser.add_argument("--json", action="store_true", help="print only the result JSON on stdout")


def run(args: argparse.Namespace) -> int:
    from ..core.errors import Sim2RealError
    from ..rl.cluster import ray_for_command, shutdown_ray
    from ..rl.ppo import TeacherTrainer, load_teacher_config

    def log(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    try:
        config = load_teacher_config(args.config, seed=args.seed, iterations=args.iterations, robot=args.robot)
        workers = ray_for_command(config.workers if args.workers is None else args.workers, args.ray_address)
        if workers:
            import ray

            log(f"[ppo] Ray: {len([n for n in ray.nodes() if n.get('Alive')])} node(s), "
                f"{int(ray.cluster_resources().get('CPU', 0))} CPUs ({args.ray_address or 'local'}); "
                f"{workers} rollout workers")
    except Sim2RealError as err:
        print(f"sim2real train-teacher: {err}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or args.out.with_suffix(".work")
    try:
        result = TeacherTrainer(config, args.out, work_dir, workers=workers, log=log).run(resume=not args.no_resume)
    finally:
        shutdown_ray()
    summary = {k: v for k, v in result.items() if k != "history"}
    if summary.get("evaluation"):
        summary["evaluation"] = {k: v for k, v in summary["evaluation"].items() if k != "per_episode"}
    print(json.dumps(summary, indent=2))
    return 0
