"""Student training step benchmark: milliseconds per minibatch of the trainer's regression
(training.trainer.regress), with glibc's default malloc thresholds and with the trainer's
(training/allocator.py: freed activation memory kept in the process), measured in the same run.

    .venv/bin/python benchmarks/bench_train_step.py [--quick] [--json OUT]
    sim2real bench --only train_step

The model is the pick_lift students' (config/train_pick_lift_so101_wrist.yaml: cnn_spatial_softmax,
96x96 images, a chunk of 10, 6 joints, a 4-point joint history, batches of 64, 2 torch threads) on
random data of the same shapes. Each measurement runs in a fresh process (the thresholds are per
process), the two settings alternating, `repeats` times each; the figure is ms per minibatch over
the measured minibatches (after 20 to warm up), with the process's minor page faults per minibatch.
Headline: `train_step_speedup`, the median of the per-repeat ratios default / kept.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from sim2real_ros.benchmarking import print_and_save  # noqa: E402

WARMUP_MINIBATCHES = 20
_GLIBC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def measure(keep: bool, minibatches: int, seed: int = 0) -> dict[str, float]:
    """In this process: ms per minibatch and minor page faults per minibatch of `regress` over
    random pick_lift-student-shaped data (keep: training/allocator.keep_freed_memory first)."""
    import resource
    import time

    import torch

    from sim2real_ros.core.policy.model import SpatialSoftmaxPolicy
    from sim2real_ros.training.allocator import keep_freed_memory
    from sim2real_ros.training.trainer import normalized_delta_loss, regress

    setting = keep_freed_memory() if keep else "default"
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    batch, total = 64, WARMUP_MINIBATCHES + minibatches
    rng = np.random.default_rng(seed)
    frames = batch * total
    images = rng.integers(0, 256, (frames, 96, 96, 3), dtype=np.uint8)
    joints, labels = rng.normal(size=(frames, 6)), rng.normal(size=(frames, 10, 6))
    histories = rng.normal(size=(frames, 4, 6))
    model = SpatialSoftmaxPolicy(6, 10, 96, 96, history_length=4)

    def run(start: int, count: int) -> None:
        part = slice(start * batch, (start + count) * batch)
        regress(model, images[part], joints[part], labels[part], normalized_delta_loss, 1, batch, 1e-3, 1e-5,
                seed, lambda _text: None, "bench", histories=histories[part])

    run(0, WARMUP_MINIBATCHES)
    faults, wall = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    run(WARMUP_MINIBATCHES, minibatches)
    elapsed = time.perf_counter() - wall
    return {"setting": setting, "ms_per_minibatch": 1e3 * elapsed / minibatches,
            "page_faults_per_minibatch": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / minibatches}


def _measure_in_child(keep: bool, minibatches: int) -> dict[str, float]:
    environment = {k: v for k, v in os.environ.items() if k not in _GLIBC_VARIABLES}
    out = subprocess.run([sys.executable, __file__, "--child", "keep" if keep else "default",
                          "--minibatches", str(minibatches)], env=environment, capture_output=True, text=True,
                         timeout=1800, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spread(values: list[float], digits: int = 2) -> dict[str, Any]:
    return {"median": round(float(np.median(values)), digits), "min": round(float(min(values)), digits),
            "max": round(float(max(values)), digits), "runs": [round(v, digits) for v in values]}


def run(quick: bool = False) -> dict[str, Any]:
    repeats, minibatches = (2, 40) if quick else (5, 150)
    load_before = os.getloadavg()
    figures: dict[str, list[dict[str, float]]] = {"default": [], "kept": []}
    for _ in range(repeats):
        for keep in (False, True):  # alternating: both see the same load
            figures["kept" if keep else "default"].append(_measure_in_child(keep, minibatches))
    ms = {name: [r["ms_per_minibatch"] for r in runs] for name, runs in figures.items()}
    ratios = [d / k for d, k in zip(ms["default"], ms["kept"], strict=True)]
    return {
        "repeats": repeats, "minibatches_per_repeat": minibatches, "batch_size": 64,
        "train_step_ms": _spread(ms["default"]), "train_step_kept_ms": _spread(ms["kept"]),
        "page_faults_per_minibatch": {name: _spread([r["page_faults_per_minibatch"] for r in runs], 0)
                                      for name, runs in figures.items()},
        "kept_setting": figures["kept"][0]["setting"],
        "train_step_speedup": round(float(np.median(ratios)), 3),
        "train_step_speedup_spread": _spread(ratios, 3),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 repeats of 40 minibatches (a smoke run)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", choices=("default", "keep"), help=argparse.SUPPRESS)
    parser.add_argument("--minibatches", type=int, default=150, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child == "keep", args.minibatches)))
        return
    print_and_save(run(args.quick), args.json)


if __name__ == "__main__":
    main()
