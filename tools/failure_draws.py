"""What the failed episodes of an eval-sim run drew: each episode's seed replayed through the world's
reset (no physics stepped), successes against failures, per drawn value.

    .venv/bin/python tools/failure_draws.py EVAL.json [EVAL2.json ...]

EVAL.json is `sim2real eval-sim ... --json EVAL.json` of a pick task (pick_lift, pick_place): its
robot, task and sim params file are taken from it, and the episodes from `per_episode` (their seeds).
For each drawn value (the cube's size, mass, friction, position and yaw; the actuation latency,
light, camera offset, image noise, servo scales, the push schedule) the median and range over the
successes and over the failures, then the success count by the cube's yaw relative to the direction
from the robot's base to the cube (a cube square to the approach at 0 deg, diagonal at 45 deg) [deg].
A value whose failures sit apart from its successes is where the policy is weak; none apart says the
failures are not explained by one drawn value.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sim2real_ros.robots import robot_description_for
from sim2real_ros.sim.params import load_sim_params, with_task
from sim2real_ros.sim.world import SimWorld

YAW_BINS_DEG = ((0.0, 15.0), (15.0, 30.0), (30.0, 45.01))


def _square_offset_deg(angle_rad: float) -> float:
    """How far a square's yaw is from square to a direction [deg], 0..45 (a square repeats every 90 deg)."""
    rest = angle_rad % (np.pi / 2)
    return float(np.degrees(min(rest, np.pi / 2 - rest)))


def episode_draws(info: dict[str, Any]) -> dict[str, float]:
    """The drawn values of one episode (SimWorld.reset's info) as plain numbers."""
    cube, r = info["cube"], info["randomization"]
    x, y = cube["position"][0], cube["position"][1]
    pushes = info.get("pushes", [])
    return {
        "cube size [m]": cube["size_m"], "cube mass [kg]": cube["mass_kg"],
        "cube friction": cube["lateral_friction"], "cube x [m]": x, "cube y [m]": y,
        "cube distance from base [m]": float(np.hypot(x, y)),
        "cube yaw to the approach [deg]": _square_offset_deg(cube["yaw_rad"] - np.arctan2(y, x)),
        "cube brightness": float(np.mean(cube["rgba"][:3])),
        "actuation latency [s]": r["actuation_latency_s"], "light intensity": r["light_intensity"],
        "camera offset [m]": float(np.linalg.norm(r["camera_offset_m"])),
        "image noise std": float(np.mean(r["noise_std"])),
        "servo speed scale": float(np.mean(r["servo_speed_scale"])),
        "servo gain scale": float(np.mean(r["servo_gain_scale"])),
        "pushes scheduled": float(len(pushes)),
        "first push [s]": min([p["start_s"] for p in pushes] or [float("nan")]),
        "largest push [N]": max([float(np.linalg.norm(p["force_n"])) for p in pushes] or [0.0]),
    }


def read_eval(path: Path) -> dict[str, Any]:
    """An eval-sim JSON with what this tool needs; SystemExit naming the file and the field otherwise."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not an eval-sim JSON ({exc})") from None
    for key in ("robot", "task", "sim_params_file", "per_episode", "perturb", "pushes"):
        if key not in report:
            raise SystemExit(f"{path}: no {key!r} (write it with `sim2real eval-sim ... --json`)")
    if report["task"] not in ("pick_lift", "pick_place"):
        raise SystemExit(f"{path}: task {report['task']!r} draws no cube; this tool reads pick tasks")
    return report


def analyse(path: Path) -> None:
    report = read_eval(path)
    params = with_task(load_sim_params(report["sim_params_file"]), report["task"], str(path))
    world = SimWorld(params, robot_description_for(report["robot"]), render=False, pushes=bool(report["pushes"]))
    try:
        rows = [(bool(ep["success"]), episode_draws(world.reset(randomize=bool(report["perturb"]), seed=ep["seed"])))
                for ep in report["per_episode"]]
    finally:
        world.close()
    ok = [d for success, d in rows if success]
    failed = [d for success, d in rows if not success]
    print(f"{path}: {report['robot']} {report['task']}, {len(ok)} successes, {len(failed)} failures")
    if not ok or not failed:
        return
    print(f"  {'drawn value':32s} {'successes: median [min, max]':>34s} {'failures: median [min, max]':>34s}")
    for key in ok[0]:
        a, b = (np.array([d[key] for d in group], float) for group in (ok, failed))
        cells = [f"{np.nanmedian(v):9.4f} [{np.nanmin(v):.3f}, {np.nanmax(v):.3f}]" if np.isfinite(v).any() else "-"
                 for v in (a, b)]
        print(f"  {key:32s} {cells[0]:>34s} {cells[1]:>34s}")
    for low, high in YAW_BINS_DEG:
        group = [success for success, d in rows if low <= d["cube yaw to the approach [deg]"] < high]
        print(f"  cube yaw to the approach {low:4.0f}-{min(high, 45.0):2.0f} deg: "
              f"{sum(group)}/{len(group)} successes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", type=Path, nargs="+", help="eval-sim JSON files (--json) of pick tasks")
    for path in parser.parse_args().evals:
        analyse(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
