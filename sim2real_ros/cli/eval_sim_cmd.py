"""`sim2real eval-sim [--checkpoint CKPT] [--robot arm6|so101] --episodes N [--perturb] [--pushes]
[--sim-config YAML] [--graph] [--actuation-latency S] --json OUT`.

The core path's actuator compensates the deployment's configured latency (config/params.yaml), as
the graph's actuator node does, unless --actuation-latency overrides it; the JSON says which
(`actuation_latency_s`, `actuation_latency_source`)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..paths import default_policy_path
from ..robots import ROBOT_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path(),
                        help="checkpoint or exported .onnx policy (default: the shipped policy)")
    parser.add_argument("--backend", choices=("auto", "torch", "onnxruntime"), default="auto",
                        help="core path: what runs the policy; auto picks by the file (docs/onnx.md)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--perturb", action="store_true", help="apply the sim params' randomization ranges")
    parser.add_argument("--pushes", action="store_true",
                        help="random pushes on the arm's links (the sim params' randomization.pushes ranges)")
    parser.add_argument("--sim-config", type=Path, default=None, help="sim params YAML (schema of config/)")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=None,
                        help="robot (docs/robots.md; default: the checkpoint's); its URDF and sim params are the "
                             "defaults; a checkpoint trained for the other robot is refused")
    parser.add_argument("--robot-description", default=None, help="URDF path (default: the robot's)")
    parser.add_argument("--graph", action="store_true", help="run the full ROS graph instead of the core path")
    parser.add_argument("--no-graph-conditions", action="store_true",
                        help="core path: the plain loop (observe from the episode start at a fixed inference delay, "
                             "no supervisor) instead of the graph's timing and supervisor (docs/graph_gap.md)")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--actuation-latency", type=float, default=None, metavar="S",
                        help="core path: the latency [s] the actuator compensates (default: the deployment's, "
                             "config/params.yaml; not the sim variant's own true latency)")
    parser.add_argument("--real-time-factor", type=float, default=None,
                        help="--graph: the sim's pace, sim s per wall s (default 0.3: on a machine that also runs "
                             "the whole graph, keeps the pipeline's sim-time latency near a robot computer's)")
    parser.add_argument("--record", type=Path, default=None,
                        help="--graph: also record the timing topics (no images) to this bag folder, for "
                             "`sim2real graph-gap`")
    parser.add_argument("--workers", type=int, default=0,
                        help="core path: Ray rollout workers (0 = in this process); results do not depend on it")
    parser.add_argument("--ray-address", default=None,
                        help="core path: join a Ray cluster (HOST:PORT or auto) instead of starting one locally")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")


def run(args: argparse.Namespace) -> int:
    if args.episodes <= 0:
        print(f"--episodes must be > 0, got {args.episodes}")
        return 2
    if args.actuation_latency is not None and not (0 <= args.actuation_latency < 1):
        print(f"--actuation-latency must be in [0, 1) s, got {args.actuation_latency}")
        return 2
    if args.graph and args.actuation_latency is not None:
        print("--actuation-latency applies to the core path; the graph's actuator reads config/params.yaml")
        return 2
    if args.graph:
        from ..runtime.graph_eval import DEFAULT_GRAPH_RTF, evaluate_in_graph

        rtf = DEFAULT_GRAPH_RTF if args.real_time_factor is None else args.real_time_factor
        if not 0 < rtf <= 10:
            print(f"--real-time-factor must be in (0, 10], got {rtf}")
            return 2
        from ..core.errors import CheckpointError

        try:
            result = evaluate_in_graph(args.checkpoint, args.episodes, perturb=args.perturb,
                                       sim_config=args.sim_config, robot_description=args.robot_description,
                                       seed=args.seed, real_time_factor=rtf, record_to=args.record,
                                       pushes=args.pushes, robot=args.robot)
        except CheckpointError as err:
            print(f"sim2real eval-sim: {err}", file=sys.stderr)
            return 2
    else:
        from ..core.errors import Sim2RealError
        from ..rl.cluster import ray_for_command, shutdown_ray
        from ..training.evaluation import evaluate_in_sim

        try:
            workers = ray_for_command(args.workers, args.ray_address)
        except Sim2RealError as err:
            print(f"sim2real eval-sim: {err}", file=sys.stderr)
            return 2
        try:
            result = evaluate_in_sim(args.checkpoint, args.episodes, perturb=args.perturb, sim_config=args.sim_config,
                                     robot_description=args.robot_description, seed=args.seed,
                                     graph_conditions=not args.no_graph_conditions, pushes=args.pushes,
                                     workers=workers, backend=args.backend,
                                     actuation_latency_s=args.actuation_latency, robot=args.robot)
        except Sim2RealError as err:
            print(f"sim2real eval-sim: {err}", file=sys.stderr)
            return 2
        finally:
            shutdown_ray()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    lo, hi = result["ci95"]
    pushes = f"; pushes on, {result['pushes_applied_total']} applied" if result.get("pushes") else ""
    print(f"success {result['success_rate']:.0%} (95% CI {lo:.2f}-{hi:.2f}) over {result['episodes']} episodes{pushes}")
    return 0
