"""`sim2real eval-sim [--checkpoint CKPT | --expert [timed|reactive]] [--robot arm6|so101]
[--task reach|reach_hold|pick_lift|pick_place] --episodes N [--perturb] [--pushes] [--sim-config YAML]
[--sim-loop LOOP] [--graph | --emulate] [--actuation-latency S]
--json OUT`.

--sim-loop runs the core path (a student, a teacher or --expert) on another sim loop over the sim
params' own, as a training config's `sim_loop` does: `--sim-loop "{loop: fast, dt_s: 0.005, substeps: 2}"`
(or just `fast`); a student trained on that loop then evaluates on it without a copy of the file.

--emulate runs the SO-101's robot graph on the servo-bus emulator (runtime/emulated_eval.py).

--task runs another task than the sim params' task.name (sim/tasks.py); --expert lets the task's
scripted expert drive (privileged state, no policy): how solvable the task is (`--expert reactive`:
pick_lift's expert that decides from the state, the `teacher: expert` labeller). Each episode's
failure category is the task's own (docs/learning.md, "Tasks"), counted in `failures`.

The core path's actuator compensates the deployment's configured latency (config/params.yaml), as
the graph's actuator node does, unless --actuation-latency overrides it; the JSON says which
(`actuation_latency_s`, `actuation_latency_source`)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..paths import default_policy_path
from ..robots import ROBOT_NAMES, get_robot
from ..sim.params import TASK_NAMES
from ..sim.tasks import EXPERT_KINDS  # --expert: the timed plan (sim/pick_expert.py) or sim/reactive_pick_expert.py


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="checkpoint, exported .onnx policy or PPO teacher checkpoint (privileged observations; "
                             "default: the shipped reach policy of --robot, arm6's without it)")
    parser.add_argument("--backend", choices=("auto", "torch", "onnxruntime"), default="auto",
                        help="core path: what runs the policy; auto picks by the file (docs/onnx.md)")
    parser.add_argument("--task", choices=TASK_NAMES, default=None,
                        help="sim task (default: the sim params' task.name; docs/learning.md, Tasks)")
    parser.add_argument("--expert", nargs="?", const="timed", default=None, choices=EXPERT_KINDS,
                        help="the task's scripted expert drives (privileged state) instead of a checkpoint: timed "
                             "(default, a plan on the clock) or reactive (pick_lift: the phase from the state, "
                             "the teacher: expert labeller)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--perturb", action="store_true", help="apply the sim params' randomization ranges")
    parser.add_argument("--pushes", action="store_true",
                        help="random pushes on the arm's links (the sim params' randomization.pushes ranges)")
    parser.add_argument("--sim-config", type=Path, default=None,
                        help="sim params YAML (schema of config/; default: the config/ file the checkpoint was "
                             "trained on when it is unchanged since, else the robot's)")
    parser.add_argument("--sim-loop", default=None, metavar="LOOP",
                        help="core path: the sim loop over the sim params' own, as a training config's sim_loop: "
                             "'{loop: fast, dt_s: 0.005, substeps: 2}' or a loop name (docs/learning.md)")
    parser.add_argument("--robot", choices=ROBOT_NAMES, default=None,
                        help="robot (docs/robots.md; default: the checkpoint's); its URDF and sim params are the "
                             "defaults; a checkpoint trained for the other robot is refused")
    parser.add_argument("--robot-description", default=None, help="URDF path (default: the robot's)")
    parser.add_argument("--graph", action="store_true", help="run the full ROS graph instead of the core path")
    parser.add_argument("--emulate", action="store_true",
                        help="run the SO-101's robot graph on the servo-bus emulator (sim2real launch robot --robot "
                             "so101 --emulate), homing the arm between episodes through TELEOP (docs/so101.md)")
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
    parser.add_argument("--graph-log", type=Path, default=None, metavar="FILE",
                        help="--graph, --emulate: the nodes' output goes to this file (default: a file in the "
                             "temp folder, removed when the run succeeds and named in the error when it fails)")
    parser.add_argument("--record", type=Path, default=None,
                        help="--graph: also record the timing topics (no images) to this bag folder, for "
                             "`sim2real graph-gap`")
    parser.add_argument("--workers", type=int, default=0,
                        help="core path: Ray rollout workers (0 = in this process); results do not depend on it")
    parser.add_argument("--ray-address", default=None,
                        help="core path: join a Ray cluster (HOST:PORT or auto) instead of starting one locally")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")


def run(args: argparse.Namespace) -> int:
    if args.checkpoint is None:
        robot = args.robot or ("so101" if args.emulate else None)  # the emulator is an SO-101's bus
        args.checkpoint = get_robot(robot).policy_path() if robot else default_policy_path()
    if args.episodes <= 0:
        print(f"--episodes must be > 0, got {args.episodes}")
        return 2
    if args.actuation_latency is not None and not (0 <= args.actuation_latency < 1):
        print(f"--actuation-latency must be in [0, 1) s, got {args.actuation_latency}")
        return 2
    if args.graph and args.actuation_latency is not None:
        print("--actuation-latency applies to the core path; the graph's actuator reads config/params.yaml")
        return 2
    from ..rl.teacher_checkpoint import is_teacher_file

    args.sim_loop = _parse_sim_loop(args.sim_loop)
    if args.sim_loop is _BAD_SIM_LOOP:
        return 2
    if args.graph_log is not None and not (args.graph or args.emulate):
        print("--graph-log applies to --graph and --emulate (the core path starts no nodes)", file=sys.stderr)
        return 2
    if args.sim_loop and (args.graph or args.emulate):
        print("--sim-loop applies to the core path; the graph's sim node runs its sim params file (--sim-config)",
              file=sys.stderr)
        return 2
    if args.expert:
        if args.graph or args.emulate or args.actuation_latency is not None or args.workers:
            print("--expert runs in this process on privileged state: no --graph, --emulate, --actuation-latency "
                  "or --workers", file=sys.stderr)
            return 2
        result = _evaluate_expert(args)
        if result is None:
            return 2
    elif args.task is not None and (args.graph or args.emulate or is_teacher_file(args.checkpoint)):
        print("--task applies to the core path with a policy checkpoint (or --expert)", file=sys.stderr)
        return 2
    elif is_teacher_file(args.checkpoint):
        if args.graph or args.emulate or args.backend == "onnxruntime" or args.actuation_latency is not None:
            print("a teacher checkpoint runs on privileged observations only: no --graph, --emulate, "
                  "--backend onnxruntime or --actuation-latency", file=sys.stderr)
            return 2
        result = _evaluate_teacher(args)
        if result is None:
            return 2
    elif args.emulate:
        result = _evaluate_on_emulator(args)
        if result is None:
            return 2
    elif args.graph:
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
                                       pushes=args.pushes, robot=args.robot, log_file=args.graph_log)
        except (CheckpointError, RuntimeError, TimeoutError) as err:
            # A node that died, a graph that never armed or stalled: the message names it and the log.
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
                                     actuation_latency_s=args.actuation_latency, robot=args.robot,
                                     task=args.task, sim_loop=args.sim_loop)
        except Sim2RealError as err:
            print(f"sim2real eval-sim: {err}", file=sys.stderr)
            return 2
        finally:
            shutdown_ray()
    if result.get("sim_params_from") == "checkpoint":
        print(f"[eval-sim] sim params: {result['sim_params_file']} (the checkpoint was trained on it; "
              "--sim-config chooses another)", file=sys.stderr)
    if result.get("sim_loop_note"):
        print(f"[eval-sim] {result['sim_loop_note']}", file=sys.stderr)
    if result.get("sim_params_warning"):
        print(f"[warning] {result['sim_params_warning']}", file=sys.stderr)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    lo, hi = result["ci95"]
    pushes = f"; pushes on, {result['pushes_applied_total']} applied" if result.get("pushes") else ""
    print(f"success {result['success_rate']:.0%} (95% CI {lo:.2f}-{hi:.2f}) over {result['episodes']} episodes{pushes}")
    failures = ", ".join(f"{name} {count}" for name, count in (result.get("failures") or {}).items())
    if failures:
        print(f"  outcomes ({result.get('task', 'reach')}): {failures}")
    for group, row in (result.get("by_pushes") or {}).items():
        rate = "n/a" if row["success_rate"] is None else f"{row['success_rate']:.0%}"
        print(f"  {group}: {row['successes']}/{row['episodes']} ({rate})")
    return 0


_BAD_SIM_LOOP: dict = {}  # _parse_sim_loop's answer for a flag it refused (after saying why)


def _parse_sim_loop(text: str | None) -> dict | None:
    """--sim-loop: a YAML flow mapping ({loop: fast, dt_s: 0.005}) or a loop name; None when not
    given; _BAD_SIM_LOOP after printing why it is not one (its fields are checked where it is applied)."""
    if text is None:
        return None
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        print(f"sim2real eval-sim: --sim-loop {text!r}: not YAML ({err.__class__.__name__})", file=sys.stderr)
        return _BAD_SIM_LOOP
    if isinstance(value, str):
        value = {"loop": value}
    if not isinstance(value, dict) or not value:
        print(f"sim2real eval-sim: --sim-loop {text!r}: expected a loop name or a mapping of loop, dt_s [s] and "
              "substeps", file=sys.stderr)
        return _BAD_SIM_LOOP
    return value


def _evaluate_on_emulator(args: argparse.Namespace) -> dict | None:
    """eval-sim --emulate (runtime/emulated_eval.py); None after printing an error."""
    from ..core.errors import Sim2RealError

    others = [flag for flag, used in (("--graph", args.graph), ("--perturb", args.perturb),
                                      ("--pushes", args.pushes), ("--sim-config", args.sim_config),
                                      ("--robot-description", args.robot_description), ("--workers", args.workers),
                                      ("--record", args.record),
                                      ("--real-time-factor", args.real_time_factor is not None),
                                      ("--actuation-latency", args.actuation_latency is not None),
                                      ("--backend", args.backend != "auto")) if used]
    if others:
        print(f"sim2real eval-sim: --emulate runs the nominal SO-101 on its emulated bus: drop {', '.join(others)}",
              file=sys.stderr)
        return None
    from ..runtime.emulated_eval import evaluate_on_emulator

    try:
        return evaluate_on_emulator(args.checkpoint, args.episodes, seed=args.seed, robot=args.robot,
                                    log_file=args.graph_log)
    except (Sim2RealError, RuntimeError, TimeoutError) as err:
        print(f"sim2real eval-sim --emulate: {err}", file=sys.stderr)
        return None


def _evaluate_teacher(args: argparse.Namespace) -> dict | None:
    """eval-sim on a PPO teacher checkpoint (rl/teacher_eval.py); None after printing an error."""
    from ..core.errors import Sim2RealError
    from ..rl.cluster import ray_for_command, shutdown_ray
    from ..rl.teacher_eval import evaluate_teacher_in_sim

    try:
        workers = ray_for_command(args.workers, args.ray_address)
        try:
            return evaluate_teacher_in_sim(args.checkpoint, args.episodes, perturb=args.perturb, pushes=args.pushes,
                                           sim_config=args.sim_config, robot_description=args.robot_description,
                                           seed=args.seed, workers=workers, robot=args.robot,
                                           sim_loop=args.sim_loop)
        finally:
            shutdown_ray()
    except Sim2RealError as err:
        print(f"sim2real eval-sim: {err}", file=sys.stderr)
        return None


def _evaluate_expert(args: argparse.Namespace) -> dict | None:
    """eval-sim with the task's scripted expert driving (sim/expert_rollout.py); None after an error."""
    from ..core.errors import Sim2RealError
    from ..robots import DEFAULT_ROBOT, robot_description_for, sim_params_for
    from ..sim.expert_rollout import evaluate_expert
    from ..sim.params import load_sim_params, with_sim_loop_override, with_task

    robot = args.robot or DEFAULT_ROBOT
    try:
        params = with_sim_loop_override(load_sim_params(sim_params_for(robot, args.sim_config)), args.sim_loop or {},
                                        "eval-sim", "--sim-loop")
        if args.task is not None:
            params = with_task(params, args.task)
        result = evaluate_expert(params, robot_description_for(robot, args.robot_description), args.episodes,
                                 seed=args.seed, randomize=args.perturb, pushes=args.pushes,
                                 reactive=args.expert == "reactive")
    except Sim2RealError as err:
        print(f"sim2real eval-sim: {err}", file=sys.stderr)
        return None
    return {"robot": robot, **result}
