"""Sim benchmark: physics steps/s (no rendering), render time per frame at 320x240 and 640x480, and
the real-time factor of physics at 1 kHz with the camera at 30 Hz (what sim_node does, minus DDS); and
the render time per 320x240 frame of every registered robot (arm6, so101) in the same run, frames
interleaved so both see the same machine load.

    .venv/bin/python benchmarks/bench_sim.py [--quick] [--robots-only] [--json OUT]

Timings are wall-clock on whatever else the machine is doing; compare figures from one run.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from sim2real_ros.core.perception.camera_model import CameraModel
from sim2real_ros.paths import urdf_path
from sim2real_ros.robots import ROBOTS
from sim2real_ros.sim.params import load_sim_params
from sim2real_ros.sim.world import SimWorld


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1e3
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "spread_ms": float(np.percentile(ms, 90) - np.percentile(ms, 10)),
            "n": int(len(ms))}


def bench_physics(world: SimWorld, steps: int, repeats: int) -> dict[str, float]:
    """Physics steps per second (PD loop, gravity feed-forward, task check included)."""
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        world.step(steps)
        rates.append(steps / (time.perf_counter() - t0))
    return {"median_steps_per_s": float(np.median(rates)), "min_steps_per_s": float(np.min(rates)),
            "max_steps_per_s": float(np.max(rates)), "repeats": repeats, "steps_per_repeat": steps}


def bench_render(params, width: int, height: int, frames: int) -> dict[str, dict[str, float]]:
    """Render time per frame, pinhole only and with artifacts (distortion + noise)."""
    scale = width / 320.0
    camera = CameraModel(width, height, 220.0 * scale, 220.0 * scale, 162.5 * scale, 118.2 * scale,
                         "plumb_bob", (-0.05, 0.01, 0.0, 0.0, 0.0))
    world = SimWorld(params, str(urdf_path()), camera=camera)
    try:
        world.render()  # warm-up: distortion maps are built once per camera
        out = {}
        for name, artifacts in (("pinhole", False), ("with_artifacts", True)):
            samples = []
            for _ in range(frames):
                t0 = time.perf_counter()
                world.render(artifacts=artifacts)
                samples.append(time.perf_counter() - t0)
            out[name] = _stats(samples)
        return out
    finally:
        world.close()


def bench_render_by_robot(frames: int) -> dict[str, object]:
    """Render time per 320x240 frame (the sim camera, config/camera_sim.yaml) of each registered robot
    in its own sim params' world; one frame of each in turn, so a load change hits both. Reports
    pinhole and with-artifacts stats per robot (wall clock, and `*_cpu`: this thread's CPU time, which
    a loaded machine inflates far less), each robot's ratio to arm6's median, and the load average over
    the run (os.getloadavg, 1 min)."""
    worlds = {name: SimWorld(load_sim_params(r.sim_params_path()), str(r.urdf_path()), seed=1)
              for name, r in ROBOTS.items()}
    load_before = os.getloadavg()[0]
    try:
        kinds = ("pinhole", "with_artifacts", "pinhole_cpu", "with_artifacts_cpu")
        samples: dict[str, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in worlds}
        for world in worlds.values():
            world.render()  # warm-up: meshes into the renderer's caches, distortion maps
        for _ in range(frames):
            for kind, artifacts in (("pinhole", False), ("with_artifacts", True)):
                for name, world in worlds.items():
                    t0, c0 = time.perf_counter(), time.thread_time()
                    world.render(artifacts=artifacts)
                    samples[name][kind].append(time.perf_counter() - t0)
                    samples[name][f"{kind}_cpu"].append(time.thread_time() - c0)
    finally:
        for world in worlds.values():
            world.close()
    out: dict[str, object] = {n: {k: _stats(v) for k, v in by_kind.items()} for n, by_kind in samples.items()}
    base = out["arm6"]
    out["ratio_to_arm6_median"] = {n: {k: out[n][k]["median_ms"] / base[k]["median_ms"] for k in base}
                                   for n in samples}
    out["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0], "cpus": os.cpu_count()}
    return out


def bench_real_time_factor(world: SimWorld, sim_seconds: float, camera_hz: float = 30.0) -> dict[str, float]:
    """Sim seconds per wall second running 1 kHz physics and rendering (with artifacts) at camera_hz."""
    steps_per_frame = int(round(1.0 / camera_hz / world.params.physics_dt))
    frames = int(round(sim_seconds * camera_hz))
    t0 = time.perf_counter()
    for _ in range(frames):
        world.step(steps_per_frame)
        world.render()
    wall = time.perf_counter() - t0
    return {"real_time_factor": frames * steps_per_frame * world.params.physics_dt / wall,
            "sim_seconds": frames * steps_per_frame * world.params.physics_dt, "wall_seconds": wall}


def run(quick: bool = False, robots_only: bool = False) -> dict:
    """Run every sim benchmark; returns the figures (see module docstring)."""
    by_robot = bench_render_by_robot(10 if quick else 40)
    if robots_only:
        return {"render_by_robot_320x240": by_robot}
    params = load_sim_params()
    world = SimWorld(params, str(urdf_path()), render=False)
    try:
        results = {
            "physics": bench_physics(world, steps=500 if quick else 2000, repeats=3 if quick else 7),
            "render_320x240": bench_render(params, 320, 240, 10 if quick else 40),
            "render_640x480": bench_render(params, 640, 480, 5 if quick else 20),
        }
        world.reset()
        results["real_time_factor_camera_30hz"] = bench_real_time_factor(world, 1.0 if quick else 4.0)
        # The headline `sim2real bench` reports: the sim alone (physics + 30 Hz camera), unpaced.
        results["sim_realtime_factor"] = results["real_time_factor_camera_30hz"]["real_time_factor"]
        results["render_by_robot_320x240"] = by_robot
    finally:
        world.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--robots-only", action="store_true", help="only the render time of each robot")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    results = run(quick=args.quick, robots_only=args.robots_only)
    by_robot = results["render_by_robot_320x240"]
    for name in ROBOTS:
        for kind, s in by_robot[name].items():
            ratio = by_robot["ratio_to_arm6_median"][name][kind]
            print(f"render 320x240 {name} {kind}: median {s['median_ms']:.1f} ms, spread(p90-p10) "
                  f"{s['spread_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, {ratio:.2f} x arm6")
    load = by_robot["load_average_1min"]
    print(f"load average (1 min) {load['before']:.2f} -> {load['after']:.2f} on {load['cpus']} CPUs")
    if args.robots_only:
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return
    phys = results["physics"]
    print(f"physics (no render): median {phys['median_steps_per_s']:.0f} steps/s "
          f"(min {phys['min_steps_per_s']:.0f}, max {phys['max_steps_per_s']:.0f})")
    for key in ("render_320x240", "render_640x480"):
        for kind, s in results[key].items():
            print(f"{key} {kind}: median {s['median_ms']:.1f} ms, p90 {s['p90_ms']:.1f} ms, "
                  f"p99 {s['p99_ms']:.1f} ms, spread(p90-p10) {s['spread_ms']:.1f} ms")
    rtf = results["real_time_factor_camera_30hz"]
    print(f"real-time factor, 1 kHz physics + 30 Hz camera: {rtf['real_time_factor']:.2f} "
          f"({rtf['sim_seconds']:.1f} sim s in {rtf['wall_seconds']:.1f} wall s)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
