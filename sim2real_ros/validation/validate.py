"""`validate`: the staged gate before a supervised real rollout, and the sim-vs-real report.

Stage 1: success rate in the nominal sim (training.evaluation.evaluate_in_sim).
Stage 2: success rate with the sim params' randomization plus extra latency and sensor noise.
Stage 3: offline action error of the policy against the human's commands on real bags (the
replay evaluator: evaluation.replay_offline), pooled over bags, with a block-bootstrap interval.
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

from ..core.checkpoint import load_checkpoint
from ..core.errors import BagError, Sim2RealError
from ..evaluation.options import ReplayOptions
from ..evaluation.replay import build_report
from ..evaluation.replay_offline import replay_offline
from ..evaluation.report import _clean, write_report
from ..finetune.dataset import default_actuation_latency_s, expand_bags
from ..paths import config_path
from ..training.evaluation import evaluate_in_sim
from ..training.stats import summary
from .gates import (
    Gates,
    PerturbedGate,
    RealGate,
    StageResult,
    block_bootstrap_mean,
    decide,
    error_stage,
    load_gates,
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


def sim_vs_real_table(nominal: dict[str, Any], perturbed: dict[str, Any], real: dict[str, Any],
                      replay: dict[str, Any]) -> dict[str, Any]:
    """Rows: success rate (+ ci95), episode length, action magnitude, failure categories; columns:
    sim nominal, sim perturbed, real."""

    def success(column: dict[str, Any]) -> dict[str, Any]:
        return {"rate": column.get("success_rate"), "ci95": column.get("ci95"), "episodes": column.get("episodes")}

    return {
        "success_rate": {"sim_nominal": success(nominal), "sim_perturbed": success(perturbed), "real": success(real)},
        "episode_length_s": {"sim_nominal": nominal.get("episode_length_s"),
                             "sim_perturbed": perturbed.get("episode_length_s"),
                             "real": real.get("episode_length_s")},
        "action_magnitude_rad": {"sim_nominal": nominal.get("action_magnitude_rad"),
                                 "sim_perturbed": perturbed.get("action_magnitude_rad"),
                                 "real": replay.get("action_magnitude_rad"),
                                 "real_human": replay.get("human_action_magnitude_rad")},
        "failures": {"sim_nominal": nominal.get("failures", {}), "sim_perturbed": perturbed.get("failures", {}),
                     "real": real.get("failures", {})},
    }


def validate(checkpoint: str | Path, real_bags: list[str | Path] | None = None, gates: Gates | None = None,
             report_dir: str | Path | None = None, episodes: int | None = None,
             sim_config: str | Path | None = None, seed: int = 1000, replay_options: ReplayOptions | None = None,
             robot_description: str | None = None, plots: bool = True,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the three stages and write report.json, report.md and plots into report_dir.

    episodes: overrides the gates' episode counts of stages 1 and 2. sim_config: the nominal sim
    params (default config/sim_params.yaml); stage 2 adds the gates' perturbations to it.
    Returns the report (verdict, stages, sim-vs-real table, failure-mode comparison).
    """
    started = time.monotonic()
    gates = gates or load_gates()
    out = Path(report_dir) if report_dir else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    bags = expand_bags(list(real_bags or []))
    options = replay_options or ReplayOptions(actuation_latency_s=default_actuation_latency_s(),
                                              action_tolerance_s=0.1, progress=False, plots=False)
    n1 = episodes or gates.nominal_sim.episodes
    n2 = episodes or gates.perturbed_sim.episodes
    log(f"[validate] stage 1: {n1} nominal sim episodes")
    nominal = evaluate_in_sim(checkpoint, n1, perturb=False, sim_config=sim_config, seed=seed,
                              robot_description=robot_description, label="validate nominal")
    stages: list[StageResult] = [success_stage("nominal_sim", nominal["successes"], nominal["episodes"],
                                               gates.nominal_sim.min_success_rate, {"evaluation": nominal})]
    log(f"[validate] {stages[-1].describe()}")
    log(f"[validate] stage 2: {n2} perturbed sim episodes")
    params_dir = out or Path(tempfile.mkdtemp(prefix="sim2real_validate_"))
    perturbed_file = perturbed_sim_params(sim_config, gates.perturbed_sim, params_dir / "sim_params_perturbed.yaml")
    perturbed = evaluate_in_sim(checkpoint, n2, perturb=True, sim_config=perturbed_file, seed=seed + 50_000,
                                robot_description=robot_description, label="validate perturbed")
    stages.append(success_stage("perturbed_sim", perturbed["successes"], perturbed["episodes"],
                                gates.perturbed_sim.min_success_rate,
                                {"evaluation": perturbed, "sim_params": str(perturbed_file)}))
    log(f"[validate] {stages[-1].describe()}")
    log(f"[validate] stage 3: offline action error on {len(bags)} real bag(s)")
    replay = evaluate_real_bags(checkpoint, bags, options, gates.real_offline, out, log) if bags else {
        "bags": [], "problems": {}, "frames": 0, "mae_rad": None, "ci95": None,
        "action_magnitude_rad": summary([]), "human_action_magnitude_rad": summary([])}
    note = "" if bags else "no real bags given (--real-bags)"
    stages.append(error_stage("real_offline", replay["mae_rad"], tuple(replay["ci95"]) if replay["ci95"] else None,
                              replay["frames"], gates.real_offline, {"replay": replay}, note))
    log(f"[validate] {stages[-1].describe()}")
    real_episodes = [e for bag in bags for e in read_real_episodes(bag, options.human_modes)]
    real = real_outcomes(real_episodes)
    sim_failures = Counter(nominal.get("failures", {})) + Counter(perturbed.get("failures", {}))
    failure_modes = compare_failure_modes(dict(sim_failures), real["failures"])
    verdict = decide(stages)
    report = {
        "verdict": verdict.verdict, "verdict_text": verdict.text, "reason": verdict.reason,
        "failed_stages": list(verdict.failed),
        "checkpoint": str(checkpoint), "checkpoint_hash": nominal.get("checkpoint_hash"),
        "gates": gates.to_dict(), "stages": [s.to_dict() for s in stages],
        "sim_vs_real": sim_vs_real_table(nominal, perturbed, real, replay),
        "failure_modes": failure_modes, "real_episodes": real, "real_bags": [str(b) for b in bags],
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    report = _clean(report)
    if out is not None:
        report["plots"] = write_validation_report(report, out, plots=plots)
        (out / "report.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    log(f"[validate] verdict: {verdict.text}: {verdict.reason}")
    return report
