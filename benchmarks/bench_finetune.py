"""The sim-to-real loop on a stand-in "real" robot: record, validate, fine-tune, measure again.

"Real" is the sim with config/sim_params_real_a.yaml (other latency, gains, lighting, camera unit
and mount). In one run:
  1. a scripted operator records teleoperation episodes through the full graph (demonstrations and
     interventions, one bag per episode; orchestration/teleop_recording.py);
  2. `validate` runs on those bags (stages 1-3 and the verdict);
  3. the checkpoint is fine-tuned on them (30% of the episodes held out);
  4. offline action error on the held-out episodes, and success in the "real" sim before and after
     (the same episode seeds; the rollout's actuator compensates the graph's configured latency,
     as the robot's actuator node would).

    .venv/bin/python benchmarks/bench_finetune.py [--json OUT] [--quick] [--checkpoint CKPT]

Without policies/reach_default.pt (and no --checkpoint), a small policy is trained first (BC +
one DAgger round) and the figures say so. The machine is shared: wall times move with the load.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from sim2real_ros.finetune.dataset import default_actuation_latency_s
from sim2real_ros.finetune.finetune import FinetuneConfig, finetune
from sim2real_ros.orchestration.teleop_recording import TeleopPlan, record_teleop_episodes
from sim2real_ros.paths import config_path, default_policy_path, use_dds_profile
from sim2real_ros.training.evaluation import evaluate_in_sim


def small_policy(work: Path, quick: bool) -> Path:
    """A small policy trained here, for when the shipped one does not exist yet."""
    from sim2real_ros.training.config import load_train_config
    from sim2real_ros.training.trainer import Trainer

    data = yaml.safe_load(config_path("train_reach.yaml").read_text())
    data.update({"sim_params": str(config_path("sim_params.yaml")), "preprocess": str(config_path("preprocess.yaml")),
                 "bc_episodes": 6 if quick else 40, "dagger_rounds": 1, "dagger_episodes": 3 if quick else 15,
                 "epochs_bc": 3 if quick else 20, "epochs_per_round": 2 if quick else 10, "eval_episodes": 0})
    path = work / "train_small.yaml"
    path.write_text(yaml.safe_dump(data))
    out = work / "small_policy.pt"
    trainer = Trainer(load_train_config(path), out, work / "train_work", log=lambda text: print(text, file=sys.stderr))
    try:
        trainer.run(resume=False)
    finally:
        trainer.close()
    return out


def _success(result: dict[str, Any]) -> dict[str, Any]:
    return {"episodes": result["episodes"], "successes": result["successes"], "rate": result["success_rate"],
            "ci95": result["ci95"], "failures": result["failures"],
            "episode_length_s_mean": result["episode_length_s"]["mean"]}


def run(quick: bool = False, checkpoint: str | Path | None = None,
        work_dir: str | Path | None = None) -> dict[str, Any]:
    use_dds_profile()
    started = time.monotonic()
    episodes = 4 if quick else 10
    eval_episodes = 4 if quick else 20
    real_a = config_path("sim_params_real_a.yaml")
    latency = default_actuation_latency_s()
    with tempfile.TemporaryDirectory(prefix="bench_finetune_") as tmp:
        work = Path(work_dir) if work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures: dict[str, Any] = {"quick": quick}
        ckpt = Path(checkpoint) if checkpoint else default_policy_path()
        if not ckpt.is_file():
            t0 = time.monotonic()
            ckpt = small_policy(work, quick)
            figures["checkpoint_note"] = (f"{default_policy_path().name} did not exist: a small policy was trained "
                                          f"here ({time.monotonic() - t0:.0f} s)")
        figures["checkpoint"] = str(ckpt)

        t0 = time.monotonic()
        if (work / "real_bags" / "episodes.json").is_file():  # a kept work dir: reuse its recording
            bags = sorted(p for p in (work / "real_bags").iterdir() if p.is_dir())
        else:
            bags = record_teleop_episodes(work / "real_bags", episodes, real_a, ckpt, seed=11,
                                          plan=TeleopPlan(intervention_every=2),
                                          log=lambda text: print(text, file=sys.stderr))
        manifest = json.loads((work / "real_bags" / "episodes.json").read_text())
        figures["recording"] = {"episodes": len(bags), "wall_s": round(time.monotonic() - t0, 1),
                                "by_kind": {k: sum(e["kind"] == k for e in manifest["episodes"])
                                            for k in ("demonstration", "intervention", "policy")},
                                "operator_successes": sum(e["success"] for e in manifest["episodes"])}

        from sim2real_ros.validation.validate import validate

        t0 = time.monotonic()
        report = validate(ckpt, [work / "real_bags"], report_dir=work / "validation", episodes=eval_episodes // 2,
                          log=lambda text: print(text, file=sys.stderr))
        figures["validate"] = {"verdict": report["verdict"], "reason": report["reason"],
                               "stages": {s["stage"]: {"figure": s["figure"], "interval": s["interval"],
                                                       "threshold": s["threshold"], "passed": s["passed"]}
                                          for s in report["stages"]},
                               "failure_modes": report["failure_modes"]["message"],
                               "wall_s": round(time.monotonic() - t0, 1)}

        t0 = time.monotonic()
        tuned = work / "finetuned.pt"
        result = finetune(ckpt, [work / "real_bags"], tuned, FinetuneConfig(epochs=100, lr=1e-4, holdout=0.3, seed=0),
                          log=lambda text: print(text, file=sys.stderr))
        figures["finetune"] = {
            "frames": result["dataset"]["frames"], "by_kind": result["dataset"]["by_kind"],
            "holdout_episodes": len(result["holdout_episodes"]),
            "holdout_mae_mrad": {"before": 1e3 * result["before"]["holdout"]["mae_rad"],
                                 "after": 1e3 * result["after"]["holdout"]["mae_rad"]},
            "train_mae_mrad": {"before": 1e3 * result["before"]["train"]["mae_rad"],
                               "after": 1e3 * result["after"]["train"]["mae_rad"]},
            "wall_s": round(time.monotonic() - t0, 1)}

        t0 = time.monotonic()
        before = evaluate_in_sim(ckpt, eval_episodes, sim_config=real_a, seed=5000, actuation_latency_s=latency,
                                 label="real_a before")
        after = evaluate_in_sim(tuned, eval_episodes, sim_config=real_a, seed=5000, actuation_latency_s=latency,
                                label="real_a after")
        figures["real_a_success"] = {"before": _success(before), "after": _success(after),
                                     "wall_s": round(time.monotonic() - t0, 1)}
        figures["wall_s"] = round(time.monotonic() - started, 1)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="4 episodes instead of 10, 4 evaluation episodes")
    parser.add_argument("--checkpoint", default=None, help="policy to fine-tune (default: policies/reach_default.pt)")
    parser.add_argument("--work-dir", default=None, help="keep bags, reports and checkpoints here")
    args = parser.parse_args(argv)
    figures = run(args.quick, args.checkpoint, args.work_dir)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
