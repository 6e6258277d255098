"""Benchmark: `sysid fit` on a 60 s bag of all 6 joints of the arm (written from a SimWorld with
drawn dynamics, no ROS): fit time, evaluations, time per fast-model evaluation and per PyBullet
replay step, and how well the drawn latency and gains come back. The fit runs `--repeat` times on
the same bag (median, p99 and spread of the fit time); the 1-minute load average is reported beside
it, since the machine is shared.

    .venv/bin/python benchmarks/bench_sysid_fit.py [--quick] [--repeat N] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim2real_ros.paths import urdf_path  # noqa: E402
from sim2real_ros.sim.params import load_sim_params  # noqa: E402
from sim2real_ros.sysid.bag_io import load_streams  # noqa: E402
from sim2real_ros.sysid.excite import ExcitationSequence, ExciteOptions, excitation_for_robot  # noqa: E402
from sim2real_ros.sysid.fit import FitOptions, fit  # noqa: E402
from sim2real_ros.sysid.fit_data import align  # noqa: E402
from sim2real_ros.sysid.joint_model import ModelGrid, simulate_joint  # noqa: E402
from sim2real_ros.sysid.sim_bag import COMMAND_TOPIC, STATE_TOPIC, record_sim_bag  # noqa: E402

JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6"]
BASE_POSE = np.array([0.0, 0.2, 1.2, 0.0, 1.0, 0.0])


def _sequence(duration_s: float) -> tuple[ExcitationSequence, float]:
    """Fit part then held-out part, all 6 joints, about duration_s [s] in total (the bag adds 1 s of
    settling). Holds and chirps scale with the length; ramps do not, hence the rescaling passes."""
    scale = duration_s / 60.0
    for _ in range(3):
        sequence, holdout = _scaled_sequence(scale)
        scale *= (duration_s - 1.0) / sequence.times_s[-1]
    return _scaled_sequence(scale)


def _scaled_sequence(scale: float) -> tuple[ExcitationSequence, float]:
    urdf = str(urdf_path())
    fit_part = excitation_for_robot(urdf, ExciteOptions(rate_hz=50.0, hold_s=0.3 * scale, chirp_s=2.5 * scale,
                                                        amplitude_fraction=0.03, speed_fraction=0.5), JOINTS)
    held = excitation_for_robot(urdf, ExciteOptions(rate_hz=50.0, hold_s=0.15 * scale, chirp_s=1.2 * scale,
                                                    amplitude_fraction=0.025, speed_fraction=0.5), JOINTS)
    offsets = np.vstack([fit_part.positions, held.positions])
    positions = np.tile(BASE_POSE, (len(offsets), 1)) + offsets
    return ExcitationSequence(tuple(JOINTS), np.arange(len(offsets)) / 50.0, positions), \
        0.95 * len(held.times_s) / len(offsets)


def _stats_s(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"median": round(statistics.median(samples), 2),
            "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
            "spread": round(ordered[-1] - ordered[0], 2), "runs": len(samples)}


def run(quick: bool = False, repeat: int | None = None) -> dict:
    """Record a bag (60 s; quick: 20 s), fit it `repeat` times (default 3; quick: 1), return figures."""
    repeat = (1 if quick else 3) if repeat is None else repeat
    params = load_sim_params()
    urdf = str(urdf_path())
    rng = np.random.default_rng(7)
    sequence, holdout = _sequence(20.0 if quick else 60.0)
    from sim2real_ros.sim.world import SimWorld

    world = SimWorld(params, urdf, render=False)
    nominal = world.dynamics()
    world.close()
    truth = {"actuation_latency_s": 0.035, "kp": nominal["kp"] * rng.uniform(0.8, 1.25, 6),
             "kd": nominal["kd"] * rng.uniform(0.8, 1.25, 6)}
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(tmp) / "bag"
        t0 = time.perf_counter()
        record_sim_bag(bag, params, urdf, sequence, dynamics=truth)
        record_s = time.perf_counter() - t0
        streams = load_streams(bag, [COMMAND_TOPIC, STATE_TOPIC])
        data = align(streams[COMMAND_TOPIC], streams[STATE_TOPIC], JOINTS, holdout)
        fit_times, loads = [], []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            result = fit(data, params, urdf, FitOptions())
            fit_times.append(time.perf_counter() - t0)
            loads.append(os.getloadavg()[0])
        # Cost of one fast-model evaluation (6 joints) vs one PyBullet step, measured here, in one run.
        grid = ModelGrid.from_data(data, params.physics.dt_s)
        samples = []
        for _ in range(5 if quick else 20):
            t = time.perf_counter()
            for j in range(6):
                simulate_joint(grid, j, 0.02, float(nominal["kp"][j]), float(nominal["kd"][j]), 0.05)
            samples.append(time.perf_counter() - t)
    values = {p.kind + ("." + p.joint if p.joint else ""): p for p in result.parameters}
    kp_err = [abs(values[f"kp.{j}"].value / truth["kp"][i] - 1) for i, j in enumerate(JOINTS)
              if values[f"kp.{j}"].identifiable]
    sim_s = sum(result.timings_s[k] for k in ("friction_sim", "sim_polish", "validate_sim"))
    sim_step_us = 1e6 * sim_s / max(1, result.evaluations["sim_steps"])
    before = result.errors["before"]["holdout"]["normalized_mse"]
    after = result.errors["after"]["holdout"]["normalized_mse"]
    samples_sorted = sorted(samples)
    return {
        "bag_duration_s": round(data.duration_s, 2),
        "joints": len(JOINTS),
        "fit_time_s": _stats_s(fit_times),
        "load_average_1min": [round(v, 2) for v in loads],
        "cpu_count": os.cpu_count(),
        "record_time_s": round(record_s, 2),
        "evaluations": result.evaluations["model"],
        "sim_replays": result.evaluations["sim_replays"],
        "timings_s": {k: round(v, 2) for k, v in result.timings_s.items()},
        "model_eval_ms": {"median": round(1e3 * statistics.median(samples), 2),
                          "p99": round(1e3 * samples_sorted[min(len(samples) - 1, int(0.99 * len(samples)))], 2),
                          "spread": round(1e3 * (samples_sorted[-1] - samples_sorted[0]), 2)},
        "sim_step_us": round(sim_step_us, 1),
        "latency_error_ms": round(1e3 * abs(values["latency"].value - truth["actuation_latency_s"]), 2),
        "kp_rel_error_max": round(max(kp_err), 4) if kp_err else None,
        "not_identifiable": result.not_identifiable,
        "holdout_mse_ratio": round(after / before, 4) if before > 0 else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=None, help="fits of the same bag (default 3; quick: 1)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    figures = run(quick=args.quick, repeat=args.repeat)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
