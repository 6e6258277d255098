"""`sim2real bench [--json OUT] [--quick] [--only NAME...] [--repeat N]`: every benchmark of the stack in one go.

Each benchmarks/bench_<area>.py exposes run(quick) -> dict. This command runs them one after the
other (never in parallel: the machine is small and figures would disturb each other), prints a
summary, and writes one JSON with the headline keys at the top level plus every figure per area.

--repeat N runs the selected areas N times in rounds (area A, B, A, B...: a machine whose load
drifts disturbs every area alike) and reports each figure as its median with min, max and every
run's value (benchmarking.median_over_runs); the runs themselves are kept under `rounds`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
import traceback
from pathlib import Path
from typing import Any

from ..benchmarking import median_over_runs
from ..paths import share_dir

# Headline keys (issue 9) -> (area, key in that area's result).
HEADLINES: dict[str, tuple[str, str]] = {
    "e2e_latency_ms": ("e2e", "e2e_latency_ms"),
    "e2e_latency_loaded_ms": ("e2e", "e2e_latency_loaded_ms"),  # one busy process per CPU beside (issue 36)
    "estop_reaction_ms": ("estop", "estop_reaction_ms"),
    "estop_reaction_loaded_ms": ("estop", "estop_reaction_loaded_ms"),
    # The e-stop's publication -> the hold's (DDS source timestamps): without the probe's own wake-up.
    "estop_reaction_to_publication_ms": ("estop", "estop_reaction_to_publication_ms"),
    "estop_reaction_loaded_to_publication_ms": ("estop", "estop_reaction_loaded_to_publication_ms"),
    "control_period_ms": ("actuator", "control_period_ms"),
    "preprocess_ms": ("preprocess", "preprocess_ms"),
    "baseline_ratio": ("preprocess", "baseline_ratio"),
    "inference_ms": ("policy", "inference_ms"),
    "replay_fps": ("replay", "replay_fps"),
    "replay_read_ratio": ("replay", "replay_read_ratio"),
    "sim_realtime_factor": ("sim", "sim_realtime_factor"),
    "rollout_ratio_2_to_1": ("rollout", "rollout_ratio_2_to_1"),
    "sim_loop_speedup": ("sim_loop", "sim_loop_speedup"),  # fast : reference loop, decisions per core (issue 32)
    "soak_violations": ("soak", "soak_violations"),
    # The student trainer's minibatch, glibc's default malloc thresholds : the trainer's (issue 32).
    "train_step_speedup": ("train_step", "train_step_speedup"),
}


def benchmark_files() -> dict[str, Path]:
    """area -> benchmarks/bench_<area>.py found in the share directory."""
    folder = share_dir() / "benchmarks"
    return {p.stem.removeprefix("bench_"): p for p in sorted(folder.glob("bench_*.py"))}


def run_benchmark(path: Path, quick: bool) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(f"sim2real_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module.run(quick=quick)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, default=None, help="write all figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer trials (a smoke run, noisier figures)")
    parser.add_argument("--only", nargs="*", default=None, help="areas to run (default: all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the areas this many times, in rounds, and report medians with min/max (default 1)")


def run(args: argparse.Namespace) -> int:
    files = benchmark_files()
    areas = args.only or list(files)
    unknown = [a for a in areas if a not in files]
    if unknown:
        print(f"unknown benchmark areas {unknown}; available: {sorted(files)}")
        return 2
    if args.repeat < 1:
        print(f"sim2real bench: --repeat {args.repeat}: must be >= 1")
        return 2
    rounds: list[dict[str, Any]] = []
    failures: set[str] = set()
    for index in range(args.repeat):
        results: dict[str, Any] = {}
        for area in areas:
            label = area if args.repeat == 1 else f"{area} (round {index + 1}/{args.repeat})"
            print(f"[bench] {label} ...", flush=True)
            start = time.monotonic()
            try:
                results[area] = run_benchmark(files[area], args.quick)
            except Exception as err:  # noqa: BLE001 - one broken benchmark must not hide the others
                traceback.print_exc()
                failures.add(area)
                results[area] = {"error": f"{type(err).__name__}: {err}"}
            print(f"[bench] {label} done in {time.monotonic() - start:.1f} s", flush=True)
        rounds.append(results)
    if args.repeat == 1:
        combined = rounds[0]
    else:
        # An area that failed in any round is reported by its errors, not a median of the others.
        combined = {area: ({"errors": [r[area].get("error") for r in rounds if "error" in r[area]]}
                           if area in failures else median_over_runs([r[area] for r in rounds]))
                    for area in areas}
    summary = {key: combined[area][name] for key, (area, name) in HEADLINES.items()
               if isinstance(combined.get(area), dict) and name in combined[area]}
    output = {**summary, "areas": combined, "quick": args.quick, "repeat": args.repeat}
    if args.repeat > 1:
        output["rounds"] = rounds
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(output, indent=2))
        print(f"[bench] wrote {args.json}")
    return 1 if failures else 0
