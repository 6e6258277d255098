"""The sim-to-real proof on a stand-in robot with a real gap: record, validate, co-train, judge in closed loop.

"Real" is the sim with config/sim_params_real_b.yaml (camera mount, latency, table and target
outside the training ranges; the shipped policy succeeds on about half its episodes there). In one run:
  1. a scripted operator records teleoperation episodes through the full graph (demonstrations and
     interventions, one bag per episode; `sim2real teleop-record`);
  2. `validate` on those bags, core path, with the closed-loop stage on the stand-in (`--robot-sim`):
     failure categories and the sim-vs-real table;
  3. the checkpoint is fine-tuned on them twice from the same parent: co-trained (real_fraction 0.5,
     sim frames of its training distribution) and on real data only (real_fraction 1.0), 30% of the
     episodes held out (the held-out action error);
  4. closed-loop success of the parent and both fine-tuned policies on the stand-in, on the nominal
     and on the perturbed sim (forgetting): the same seeds (finetune.judge), Wilson 95% intervals,
     the actuator compensating the deployment's configured latency (config/params.yaml).

    .venv/bin/python benchmarks/bench_finetune.py [--json OUT] [--quick] [--checkpoint CKPT] [--work-dir DIR]
    sim2real bench --only finetune

About 10-12 minutes here (2026-12-01: 9.7 and 12.0 min on a shared machine) at 20 recorded
episodes and 20 evaluation episodes per policy and sim (--quick: 4 and 4, a smoke run). Without
policies/reach_default.safetensors (and no --checkpoint), a small policy is trained first (BC + one DAgger
round) and the figures say so. The machine is shared: wall times move with the load (reported).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from sim2real_ros.paths import config_path, default_policy_path, use_dds_profile

VARIANT = "sim_params_real_b.yaml"
RECORD_SEED = 11


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
    out = work / "small_policy.safetensors"
    trainer = Trainer(load_train_config(path), out, work / "train_work", log=lambda text: print(text, file=sys.stderr))
    try:
        trainer.run(resume=False)
    finally:
        trainer.close()
    return out


def _mrad(value: float | None) -> float | None:
    return None if value is None else round(1e3 * value, 2)


def run(quick: bool = False, checkpoint: str | Path | None = None, work_dir: str | Path | None = None,
        episodes: int | None = None, eval_episodes: int | None = None) -> dict[str, Any]:
    from sim2real_ros.core.perception.preprocess import ImagePipeline
    from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
    from sim2real_ros.core.policy.checkpoint import read_checkpoint
    from sim2real_ros.core.policy.model import build_model
    from sim2real_ros.episodes.dataset import LabelConfig, build_dataset
    from sim2real_ros.finetune.finetune import FinetuneConfig, finetune
    from sim2real_ros.finetune.judge import closed_loop, disagreement
    from sim2real_ros.finetune.sim_data import collect_sim_frames
    from sim2real_ros.runtime.teleop_recording import TeleopPlan, record_teleop_episodes
    from sim2real_ros.validation.validate import validate

    use_dds_profile()
    started = time.monotonic()
    log = lambda text: print(text, file=sys.stderr)  # noqa: E731
    episodes = episodes or (4 if quick else 20)
    eval_episodes = eval_episodes or (4 if quick else 20)
    variant = config_path(VARIANT)
    with tempfile.TemporaryDirectory(prefix="bench_finetune_") as tmp:
        work = Path(work_dir) if work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        figures: dict[str, Any] = {"quick": quick, "variant": str(variant), "load_average_start": os.getloadavg()}
        ckpt = Path(checkpoint) if checkpoint else default_policy_path()
        if not ckpt.is_file():
            t0 = time.monotonic()
            ckpt = small_policy(work, quick)
            figures["checkpoint_note"] = (f"{default_policy_path().name} did not exist: a small policy was trained "
                                          f"here ({time.monotonic() - t0:.0f} s)")
        figures["checkpoint"] = str(ckpt)

        # 1. recording
        t0 = time.monotonic()
        bag_dir = work / "real_bags"
        if not (bag_dir / "episodes.json").is_file():  # a kept work dir: reuse its recording
            record_teleop_episodes(bag_dir, episodes, variant, ckpt, seed=RECORD_SEED,
                                   plan=TeleopPlan(intervention_every=2), log=log)
        manifest = json.loads((bag_dir / "episodes.json").read_text())
        figures["recording"] = {"episodes": len(manifest["episodes"]), "seed": RECORD_SEED,
                                "wall_s": round(time.monotonic() - t0, 1),
                                "by_kind": {k: sum(e["kind"] == k for e in manifest["episodes"])
                                            for k in ("demonstration", "intervention", "policy")},
                                "operator_successes": sum(e["success"] for e in manifest["episodes"])}

        # 2. validation (core path: quick; never "ready" without the graph) with the closed-loop stage
        t0 = time.monotonic()
        report = validate(ckpt, [bag_dir], report_dir=work / "validation", episodes=max(1, eval_episodes // 2), log=log,
                          sim_paths="core", robot_sim=variant, plots=False)
        figures["validate"] = {"verdict": report["verdict"], "reason": report["reason"],
                               "stages": {s["stage"]: {"figure": s["figure"], "interval": s["interval"],
                                                       "threshold": s["threshold"], "passed": s["passed"]}
                                          for s in report["stages"]},
                               "sim_vs_real_success": report["sim_vs_real"]["success_rate"],
                               "sim_vs_real_failures": report["sim_vs_real"]["failures"],
                               "failure_modes": report["failure_modes"]["message"],
                               "disagreement": report["disagreement"], "wall_s": round(time.monotonic() - t0, 1)}

        # 3. fine-tuning: one dataset, one set of sim frames, two methods from the same parent
        t0 = time.monotonic()
        spec, state, _ = read_checkpoint(ckpt)
        pipeline = ImagePipeline(PreprocessConfig.from_dict(spec.preprocess, source=f"{ckpt} preprocess"))
        dataset = build_dataset([bag_dir], pipeline, spec.joint_names, spec.chunk_length, spec.dt_s, LabelConfig())
        parent = build_model(spec.architecture, spec, **spec.hparams)
        parent.load_state_dict(state)
        base = FinetuneConfig()
        sim = collect_sim_frames(spec, parent, base.sim_episodes, seed=base.seed, log=log)
        figures["data"] = {"real_frames": dataset.frames, "by_kind": dataset.summary()["by_kind"],
                           "sim_frames": sim.source, "wall_s": round(time.monotonic() - t0, 1)}
        tuned: dict[str, Path] = {}
        offline: dict[str, Any] = {}
        for name, fraction in (("cotrained", base.real_fraction), ("real_only", 1.0)):
            t0 = time.monotonic()
            out = work / f"{name}.safetensors"
            result = finetune(ckpt, [bag_dir], out, FinetuneConfig(real_fraction=fraction), log=log, dataset=dataset,
                              sim_frames=sim)
            tuned[name] = out
            offline[name] = {"real_fraction": fraction, "config": result["config"],
                             "holdout_episodes": len(result["holdout_episodes"]),
                             "holdout_mae_mrad": {"before": _mrad(result["before"]["holdout"]["mae_rad"]),
                                                  "after": _mrad(result["after"]["holdout"]["mae_rad"])},
                             "train_mae_mrad": {"before": _mrad(result["before"]["train"]["mae_rad"]),
                                                "after": _mrad(result["after"]["train"]["mae_rad"])},
                             **({"sim_mae_mrad": {"before": _mrad(result["before"]["sim"]["mae_rad"]),
                                                  "after": _mrad(result["after"]["sim"]["mae_rad"])}}
                                if "sim" in result["after"] else {}),
                             "wall_s": round(time.monotonic() - t0, 1)}
        figures["finetune"] = offline

        # 4. closed-loop judging, same seeds for every policy
        t0 = time.monotonic()
        judged = closed_loop({"before": ckpt, **tuned}, variant, eval_episodes, log=log)
        for name in tuned:
            judged.setdefault("disagreement", {})[name] = disagreement(
                1e-3 * offline[name]["holdout_mae_mrad"]["before"] if offline[name]["holdout_mae_mrad"]["before"]
                is not None else None,
                1e-3 * offline[name]["holdout_mae_mrad"]["after"] if offline[name]["holdout_mae_mrad"]["after"]
                is not None else None,
                judged["robot"]["before"], judged["robot"][name])
        judged["wall_s"] = round(time.monotonic() - t0, 1)
        figures["closed_loop"] = judged
        s0, s1 = judged["robot"]["before"], judged["robot"]["cotrained"]
        figures["targets"] = {
            "zero_shot_success": s0["rate"], "cotrained_success": s1["rate"],
            "gain_points": round(100 * (s1["rate"] - s0["rate"]), 1),
            "gain_at_least_30_points": s1["rate"] >= s0["rate"] + 0.3, "at_least_85_percent": s1["rate"] >= 0.85,
            "no_forgetting": all(judged["changes"][w]["cotrained"] != "lower" for w in ("nominal", "perturbed"))}
        figures["wall_s"] = round(time.monotonic() - started, 1)
        figures["load_average_end"] = os.getloadavg()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="4 recorded episodes, 4 evaluation episodes (smoke run)")
    parser.add_argument("--checkpoint", default=None,
                        help="policy to fine-tune (default: policies/reach_default.safetensors)")
    parser.add_argument("--work-dir", default=None, help="keep bags, reports and checkpoints here")
    parser.add_argument("--episodes", type=int, default=None, help="recorded episodes (default 20)")
    parser.add_argument("--eval-episodes", type=int, default=None, help="closed-loop episodes per policy and sim")
    args = parser.parse_args(argv)
    figures = run(args.quick, args.checkpoint, args.work_dir, args.episodes, args.eval_episodes)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
