"""`validate`: the staged gate before a supervised real rollout, and the sim-vs-real report.

Stage 1: success rate in the nominal sim.
Stage 2: success rate with the sim params' randomization plus extra latency and sensor noise.
Stages 1 and 2 measure on the full ROS graph (a GraphEvaluator the caller passes in; the cli
passes runtime.graph_eval.evaluate_in_graph: the nodes as processes over DDS, what runs on the
robot; validation sits below the runtime and never imports it) and on the core path (training.evaluation.
evaluate_in_sim: the same policy in one process, no ROS), with the same seed and episode count.
`sim_paths` chooses: "both" (default), "graph" (the graph only), "core" (the core only, for quick
development runs). The stage's figure is the graph's; it passes only when the graph figure exists
and every measured path's Wilson lower bound reaches the threshold (validation.gates.
sim_success_stage), so with "core" stages 1 and 2 always fail: the gate cannot pass on the core
path alone. A graph that fails to come up or stalls fails its stage (the error is in the report).
Stage 3: offline action error of the policy against the human's commands on real bags (the
replay evaluator: evaluation.replay_offline), pooled over bags, with a block-bootstrap interval.
Stage 4 (only with `robot_sim`, when no robot is attached): closed-loop success on a sim variant
standing in for the robot (e.g. config/sim_params_real_b.yaml), on the core path (training.
evaluation.evaluate_in_sim, the actuator compensating the deployment's configured latency) or
through an evaluator the caller passes in (the cli passes the graph's; validation does not import
the runtime). When stage 3 and stage 4 disagree (offline error passes and closed loop fails, or the
reverse), the report says so: the offline figure alone does not decide.
Every stage runs (the report is complete); the verdict names the first stage that fails.
"""
from __future__ import annotations

import copy
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..core.errors import BagError, Sim2RealError
from ..core.policy.checkpoint import checkpoint_hash, load_checkpoint, read_checkpoint
from ..core.stats import summary
from ..episodes.dataset import default_actuation_latency_s, expand_bags
from ..episodes.options import ReplayOptions
from ..evaluation.replay import build_report
from ..evaluation.replay_offline import replay_offline
from ..evaluation.report import _clean, write_report
from ..paths import config_path
from ..robots import robot_for_checkpoint, sim_params_for
from ..training.evaluation import evaluate_in_sim
from .gates import (
    PATH_TITLES,
    Gates,
    PathFigure,
    PerturbedGate,
    RealGate,
    RobotGate,
    SimGate,
    StageResult,
    block_bootstrap_mean,
    decide,
    error_stage,
    load_gates,
    sim_success_stage,
    success_stage,
)
from .report import write_validation_report
from .sim_vs_real import chunk_magnitudes, compare_failure_modes, read_real_episodes, real_outcomes


def perturbed_sim_params(base: str | Path | None, gate: PerturbedGate, out: Path) -> Path:
    """The base sim params with the gate's extra latency and noise added to the randomization
    ranges, written to `out` (camera calibration paths stay relative to config/)."""
    base = Path(base) if base else config_path("sim_params.yaml")
    data = yaml.safe_load(base.read_text())
    rand = copy.deepcopy(data.get("randomization", {}))
    low, high = rand.get("actuation_latency_s", [0.0, 0.0])
    rand["actuation_latency_s"] = [float(low) + gate.extra_latency_s, float(high) + gate.extra_latency_s]
    low, high = rand.get("noise_std", [0.0, 0.0])
    rand["noise_std"] = [min(255.0, float(low) + gate.extra_noise_std), min(255.0, float(high) + gate.extra_noise_std)]
    data["randomization"] = rand
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# {base} with validation perturbations (config/gates.yaml perturbed_sim)\n"
                   + yaml.safe_dump(data, sort_keys=False))
    return out


def evaluate_real_bags(checkpoint: str | Path, bags: list[Path], options: ReplayOptions, gate: RealGate,
                       report_dir: Path | None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Stage 3 on every bag: per-bag replay reports, pooled MAE [rad] with its 95% interval, and
    the action magnitudes of the policy (and of the human) on the real observations."""
    policy = load_checkpoint(checkpoint, device=options.device, num_threads=options.num_threads or None)
    per_frame: list[np.ndarray] = []
    predicted_magnitudes, human_magnitudes = [], []
    bag_reports, problems = [], {}
    for bag in bags:
        try:
            run = replay_offline(bag, policy, options)
        except (BagError, Sim2RealError, ValueError) as err:
            problems[str(bag)] = f"{type(err).__name__}: {err}"
            log(f"[validate] {bag}: cannot replay: {err}")
            continue
        report, comparison = build_report(run, options)
        report.update({"bag": str(bag), "checkpoint": str(checkpoint), "checkpoint_hash": policy.checkpoint_hash,
                       "mode": "offline"})
        if report_dir is not None:
            write_report(report, report_dir / "replay" / bag.name, comparison, run.predictions, plots=False)
        errors = np.abs(comparison.errors)  # (N, K, n), NaN where no human action
        valid = np.all(np.isfinite(errors), axis=2)
        frames = valid.any(axis=1)
        sums = np.where(valid[..., None], errors, 0.0).sum(axis=(1, 2))
        counts = valid.sum(axis=1) * errors.shape[2]
        per_frame.append(sums[frames] / counts[frames])
        predictions = run.predictions
        predicted_magnitudes.append(chunk_magnitudes(predictions.targets, predictions.observed_q))
        human_magnitudes.append(chunk_magnitudes(comparison.human_at_points[frames], predictions.observed_q[frames]))
        overall = report["metrics"]["overall"]
        bag_reports.append({"bag": str(bag), "frames_evaluated": int(frames.sum()), "mae_rad": overall["mae"],
                            "rmse_rad": overall["rmse"]})
    all_frames = np.concatenate(per_frame) if per_frame else np.zeros(0)
    # Pooled over chunk points: each frame weighs by its evaluated points, as the per-bag MAE does.
    mae = float(np.mean(all_frames)) if all_frames.size else None
    interval = (block_bootstrap_mean(per_frame, gate.bootstrap_block_frames, gate.bootstrap_samples)
                if all_frames.size else None)
    return {"bags": bag_reports, "problems": problems, "frames": int(all_frames.size), "mae_rad": mae,
            "ci95": list(interval) if interval else None,
            "action_magnitude_rad": summary(np.concatenate(predicted_magnitudes) if predicted_magnitudes else []),
            "human_action_magnitude_rad": summary(np.concatenate(human_magnitudes) if human_magnitudes else []),
            "options": options.to_dict()}


# "both": graph and core; "graph": the graph only; "core": the core path only (stages 1-2 then fail).
SIM_PATH_CHOICES = {"both": ("core", "graph"), "graph": ("graph",), "core": ("core",)}


def sim_vs_real_table(nominal: dict[str, Any], perturbed: dict[str, Any], real: dict[str, Any],
                      replay: dict[str, Any], nominal_graph: dict[str, Any] | None = None,
                      perturbed_graph: dict[str, Any] | None = None,
                      robot: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rows: success rate (+ ci95), episode length, action magnitude, failure categories; columns:
    sim nominal and sim perturbed on the core path (sim_nominal, sim_perturbed) and on the full
    ROS graph (sim_nominal_graph, sim_perturbed_graph), real, and the robot stand-in's closed loop
    (robot_sim, stage 4). A path that was not run has empty cells (rate None). The graph
    evaluation measures no action magnitude (n/a)."""
    nominal_graph, perturbed_graph = nominal_graph or {}, perturbed_graph or {}
    columns = {"sim_nominal_graph": nominal_graph, "sim_nominal": nominal,
               "sim_perturbed_graph": perturbed_graph, "sim_perturbed": perturbed, "real": real,
               "robot_sim": robot or {}}

    def success(column: dict[str, Any]) -> dict[str, Any]:
        return {"rate": column.get("success_rate"), "ci95": column.get("ci95"), "episodes": column.get("episodes")}

    return {
        "success_rate": {name: success(column) for name, column in columns.items()},
        "episode_length_s": {name: column.get("episode_length_s") for name, column in columns.items()},
        "action_magnitude_rad": {**{name: columns[name].get("action_magnitude_rad")
                                    for name in ("sim_nominal_graph", "sim_nominal", "sim_perturbed_graph",
                                                 "sim_perturbed", "robot_sim")},
                                 "real": replay.get("action_magnitude_rad"),
                                 "real_human": replay.get("human_action_magnitude_rad")},
        "failures": {name: column.get("failures", {}) for name, column in columns.items()},
    }


def sim_stage(stage: str, gate: SimGate, checkpoint: str | Path, episodes: int, perturb: bool,
              sim_config: str | Path | None, seed: int, paths: tuple[str, ...], robot_description: str | None,
              real_time_factor: float | None, log: Callable[[str], None],
              details: dict[str, Any] | None = None,
              log_dir: Path | None = None,
              graph_evaluator: GraphEvaluator | None = None) -> tuple[StageResult, dict[str, dict[str, Any]]]:
    """Stage 1 or 2 on the requested paths (same seed, same episodes); returns the stage and each
    path's evaluation ({"core": ..., "graph": ...}; a graph that failed: {"error": ...}). log_dir:
    where the graph's node output goes (graph_<stage>.log; None: a temporary file).
    graph_evaluator: runs the graph path (none given: the graph path fails, saying so)."""
    label = "nominal" if stage == "nominal_sim" else "perturbed"
    evaluations: dict[str, dict[str, Any]] = {}
    figures: list[PathFigure] = []
    if "core" in paths:
        log(f"[validate] {stage}: {episodes} {label} sim episodes on the {PATH_TITLES['core']}")
        core = evaluate_in_sim(checkpoint, episodes, perturb=perturb, sim_config=sim_config, seed=seed,
                               robot_description=robot_description, label=f"validate {label} core")
        evaluations["core"] = core
        figures.append(PathFigure("core", int(core["successes"]), int(core["episodes"])))
    if "graph" in paths:
        log(f"[validate] {stage}: {episodes} {label} sim episodes on the {PATH_TITLES['graph']}")
        try:
            if graph_evaluator is None:
                raise RuntimeError("no graph evaluator was given (the cli passes runtime.graph_eval's)")
            graph = graph_evaluator(checkpoint=checkpoint, episodes=episodes, perturb=perturb, sim_config=sim_config,
                                    robot_description=robot_description, seed=seed,
                                    real_time_factor=real_time_factor,
                                    log_file=None if log_dir is None else log_dir / f"graph_{stage}.log")
        except (RuntimeError, TimeoutError) as err:  # a node died, the graph never armed or stalled
            message = f"{type(err).__name__}: {err}"
            log(f"[validate] {stage}: the graph evaluation failed: {message}")
            evaluations["graph"] = {"error": message}
            figures.append(PathFigure("graph", 0, 0, error=message))
        else:
            evaluations["graph"] = graph
            figures.append(PathFigure("graph", int(graph["successes"]), int(graph["episodes"])))
    result = sim_success_stage(stage, gate.min_success_rate, figures, {**evaluations, **(details or {})})
    log(f"[validate] {result.describe()}")
    return result, evaluations


# evaluate_in_graph's keywords (checkpoint, episodes, perturb, sim_config, robot_description, seed,
# real_time_factor (None: its default), log_file) -> its result; raises RuntimeError/TimeoutError.
GraphEvaluator = Callable[..., dict[str, Any]]
# (checkpoint, episodes, sim_config, seed) -> an evaluate_in_sim-like result (successes, episodes,
# success_rate, ci95, failures, ...): the closed-loop stage's evaluator, passed in by the caller.
ClosedLoopEvaluator = Callable[[str | Path, int, str | Path, int], dict[str, Any]]
ROBOT_SEED = 5000


def robot_stage(gate: RobotGate, checkpoint: str | Path, robot_sim: str | Path, episodes: int, seed: int,
                evaluator: ClosedLoopEvaluator | None, log: Callable[[str], None],
                path: str = "core") -> tuple[StageResult, dict[str, Any]]:
    """Stage 4: closed-loop success on the robot stand-in `robot_sim` (a sim params YAML), core path
    unless an evaluator (`path` names it, e.g. "graph") is given. A failed evaluator fails the stage."""
    log(f"[validate] stage 4: {episodes} closed-loop episodes on {Path(robot_sim).name} ({path})")
    try:
        if evaluator is None:
            evaluation = evaluate_in_sim(checkpoint, episodes, sim_config=robot_sim, seed=seed,
                                         label="validate robot stand-in")
        else:
            evaluation = evaluator(checkpoint, episodes, robot_sim, seed)
    except (RuntimeError, TimeoutError) as err:
        message = f"{type(err).__name__}: {err}"
        log(f"[validate] stage 4: the closed-loop evaluation failed: {message}")
        return (StageResult("robot_closed_loop", "success_rate", None, None, gate.min_success_rate, False, False,
                            message, {"robot_sim": str(robot_sim), "path": path}), {"error": message})
    result = success_stage("robot_closed_loop", int(evaluation["successes"]), int(evaluation["episodes"]),
                           gate.min_success_rate, {"robot_sim": str(robot_sim), "path": path, "seed": seed,
                                                   "failures": evaluation.get("failures", {}),
                                                   "actuation_latency_s": evaluation.get("actuation_latency_s")})
    log(f"[validate] {result.describe()}")
    return result, evaluation


def offline_vs_closed_loop(offline: StageResult, closed: StageResult) -> str:
    """A sentence when the offline-error stage and the closed-loop stage disagree, '' otherwise."""
    if not (offline.ran and closed.ran) or offline.passed == closed.passed:
        return ""
    if offline.passed:
        return (f"the offline action error passes its gate but closed-loop success fails: {closed.describe()}. "
                f"A policy can copy the person's commands frame by frame and still fail in closed loop; "
                f"the closed-loop figure is the one to trust.")
    return (f"closed-loop success passes but the offline action error fails its gate ({offline.describe()}): "
            f"the policy reaches its goals differently from the person (e.g. faster or along another path).")


def nominal_sim_params(nominal: dict[str, Any]) -> dict[str, Any]:
    """The nominal stage's sim params version against the checkpoint's training one (from whichever
    path ran): {"version", "trained_version", "warning" (None when they agree)}."""
    for path in ("core", "graph"):
        result = nominal.get(path)
        if isinstance(result, dict) and "sim_params_version" in result:
            return {"version": result["sim_params_version"],
                    "trained_version": result.get("trained_sim_params_version"),
                    "warning": result.get("sim_params_warning")}
    return {"version": None, "trained_version": None, "warning": None}


def validate(checkpoint: str | Path, real_bags: list[str | Path] | None = None, gates: Gates | None = None,
             report_dir: str | Path | None = None, episodes: int | None = None,
             sim_config: str | Path | None = None, seed: int = 1000, replay_options: ReplayOptions | None = None,
             robot_description: str | None = None, plots: bool = True,
             log: Callable[[str], None] = print, sim_paths: str = "both",
             real_time_factor: float | None = None, robot_sim: str | Path | None = None,
             robot_evaluator: ClosedLoopEvaluator | None = None, robot_path: str = "core",
             graph_evaluator: GraphEvaluator | None = None, robot: str | None = None) -> dict[str, Any]:
    """Run the three stages (four with `robot_sim`) and write report.json, report.md and plots into report_dir.

    episodes: overrides the gates' episode counts of stages 1 and 2. sim_config: the nominal sim
    params (default: the robot's, docs/robots.md); stage 2 adds the gates' perturbations to it.
    robot: robots.ROBOTS name (None: the checkpoint's; one trained for another robot raises
    CheckpointError naming both before any stage runs).
    sim_paths: "both" (graph and core), "graph" or "core" (then stages 1-2 fail: no graph figure;
    see the module docstring). real_time_factor: the graph's sim pace (default DEFAULT_GRAPH_RTF).
    graph_evaluator: runs stages 1-2 on the graph (the cli passes runtime.graph_eval.evaluate_in_graph);
    without one, a requested graph path fails its stage.
    robot_sim: a sim params YAML standing in for the robot: stage 4, closed-loop success on it
    (gates.robot_closed_loop; `episodes` overrides its count too), through `robot_evaluator` when
    given (`robot_path` names it), else the core path.
    Returns the report (verdict, stages, sim-vs-real table, failure-mode comparison, disagreement).
    """
    if sim_paths not in SIM_PATH_CHOICES:
        raise ValueError(f"sim_paths must be one of {sorted(SIM_PATH_CHOICES)}, got {sim_paths!r}")
    paths = SIM_PATH_CHOICES[sim_paths]
    started = time.monotonic()
    digest = checkpoint_hash(checkpoint)
    # The robot decides the default sim params of every sim stage (the perturbed copy of stage 2 too).
    spec = read_checkpoint(checkpoint)[0]
    robot = robot_for_checkpoint(robot, spec.joint_names, spec.provenance, str(checkpoint))
    sim_config = sim_params_for(robot, sim_config)
    if "core" not in paths:
        load_checkpoint(checkpoint)  # a bad checkpoint: CheckpointError now, not a graph node dying later
    gates = gates or load_gates()
    out = Path(report_dir) if report_dir else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    bags = expand_bags(list(real_bags or []))
    options = replay_options or ReplayOptions(actuation_latency_s=default_actuation_latency_s(),
                                              action_tolerance_s=0.1, progress=False, plots=False)
    n1 = episodes or gates.nominal_sim.episodes
    n2 = episodes or gates.perturbed_sim.episodes
    common = {"checkpoint": checkpoint, "paths": paths, "robot_description": robot_description,
              "real_time_factor": real_time_factor, "log": log, "log_dir": out, "graph_evaluator": graph_evaluator}
    log(f"[validate] stage 1: {n1} nominal sim episodes ({' and '.join(PATH_TITLES[p] for p in paths)})")
    stage1, nominal = sim_stage("nominal_sim", gates.nominal_sim, episodes=n1, perturb=False, sim_config=sim_config,
                                seed=seed, **common)
    stages: list[StageResult] = [stage1]
    sim_params_check = nominal_sim_params(nominal)
    if sim_params_check["warning"]:
        log(f"[validate] warning: {sim_params_check['warning']}")
    log(f"[validate] stage 2: {n2} perturbed sim episodes")
    params_dir = out or Path(tempfile.mkdtemp(prefix="sim2real_validate_"))
    perturbed_file = perturbed_sim_params(sim_config, gates.perturbed_sim, params_dir / "sim_params_perturbed.yaml")
    stage2, perturbed = sim_stage("perturbed_sim", gates.perturbed_sim, episodes=n2, perturb=True,
                                  sim_config=perturbed_file, seed=seed + 50_000,
                                  details={"sim_params": str(perturbed_file)}, **common)
    stages.append(stage2)
    log(f"[validate] stage 3: offline action error on {len(bags)} real bag(s)")
    replay = evaluate_real_bags(checkpoint, bags, options, gates.real_offline, out, log) if bags else {
        "bags": [], "problems": {}, "frames": 0, "mae_rad": None, "ci95": None,
        "action_magnitude_rad": summary([]), "human_action_magnitude_rad": summary([])}
    note = "" if bags else "no real bags given (--real-bags)"
    stages.append(error_stage("real_offline", replay["mae_rad"], tuple(replay["ci95"]) if replay["ci95"] else None,
                              replay["frames"], gates.real_offline, {"replay": replay}, note))
    log(f"[validate] {stages[-1].describe()}")
    stand_in: dict[str, Any] = {}
    disagreement = ""
    if robot_sim is not None:
        stage4, stand_in = robot_stage(gates.robot_closed_loop, checkpoint, robot_sim,
                                    episodes or gates.robot_closed_loop.episodes, ROBOT_SEED, robot_evaluator, log,
                                    robot_path)
        stages.append(stage4)
        disagreement = offline_vs_closed_loop(stages[2], stage4)
        if disagreement:
            log(f"[validate] disagreement: {disagreement}")
    real_episodes = [e for bag in bags for e in read_real_episodes(bag, options.human_modes)]
    real = real_outcomes(real_episodes)
    # The graph's failures when it ran (what runs on the robot), the core path's otherwise.
    sim_path = "graph" if any("successes" in e.get("graph", {}) for e in (nominal, perturbed)) else "core"
    sim_failures = sum((Counter(e.get(sim_path, {}).get("failures", {})) for e in (nominal, perturbed)), Counter())
    failure_modes = {**compare_failure_modes(dict(sim_failures), real["failures"]), "sim_path": sim_path}
    verdict = decide(stages)
    report = {
        "verdict": verdict.verdict, "verdict_text": verdict.text, "reason": verdict.reason,
        "failed_stages": list(verdict.failed),
        "checkpoint": str(checkpoint),
        "checkpoint_hash": digest,
        "sim_paths": list(paths),
        "gates": gates.to_dict(), "stages": [s.to_dict() for s in stages],
        "sim_vs_real": sim_vs_real_table(nominal.get("core", {}), perturbed.get("core", {}), real, replay,
                                         nominal.get("graph"), perturbed.get("graph"), stand_in),
        "robot": robot, "sim_params_file": str(sim_config),
        "robot_sim": None if robot_sim is None else str(robot_sim), "disagreement": disagreement,
        "failure_modes": failure_modes, "real_episodes": real, "real_bags": [str(b) for b in bags],
        "sim_params": sim_params_check,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    report = _clean(report)
    if out is not None:
        report["plots"] = write_validation_report(report, out, plots=plots)
        (out / "report.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    log(f"[validate] verdict: {verdict.text}: {verdict.reason}")
    return report
