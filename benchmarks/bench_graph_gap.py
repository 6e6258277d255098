"""The graph against the core path, quiet and under CPU load, episode by episode (docs/graph_gap.md).

For each variant (the nominal sim, and config/sim_params_real_a.yaml, a stand-in robot with other
latency, gains, camera unit, mount and rate), on the same episode seeds:
  - the core path as evaluations run it (graph_conditions on) and the plain loop (off);
  - the full ROS graph (`eval-sim --graph`) on a quiet machine and with one busy process per core
    beside it, each run recorded (timing topics only) and read back by evaluation.graph_timing.
Reports success with Wilson intervals, the seeds where the paths disagree, the supervisor's
counters (arm_refused after resets), and the per-episode timing of the graph (start to first
chunk and to armed, observation period, obs-to-chunk, command periods).

    .venv/bin/python benchmarks/bench_graph_gap.py [--quick] [--json OUT]

40 episodes per figure (6 with --quick). The full run takes about 25 minutes here: four graph runs
of about 5 minutes each. The machine's 1-minute load average before and at the end of each graph run
is reported with it (the busy processes put it near 2 + the graph's own on 2 cores).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sim2real_ros.benchmarking import bench_main, latency_stats
from sim2real_ros.evaluation.graph_timing import episode_timing, read_trace, timing_summary
from sim2real_ros.paths import config_path, default_policy_path, use_dds_profile
from sim2real_ros.runtime.graph_eval import evaluate_in_graph
from sim2real_ros.training.evaluation import evaluate_in_sim

SEED = 1000
BUSY_LOOP = "while True: pass"


def _success(result: dict[str, Any]) -> dict[str, Any]:
    return {"episodes": result["episodes"], "successes": result["successes"],
            "rate": round(result["success_rate"], 3), "ci95": [round(v, 3) for v in result["ci95"]],
            "failures": result["failures"]}


def _disagreements(core: dict[str, Any], graph: dict[str, Any]) -> list[dict[str, Any]]:
    """Episodes (same index, same seed) that one path solved and the other did not."""
    rows = []
    for c, g in zip(core["per_episode"], graph["per_episode"], strict=False):
        if c["seed"] == g["seed"] and c["success"] != g["success"]:
            rows.append({"episode": c["episode"], "seed": c["seed"], "core": c["failure"], "graph": g["failure"],
                         "graph_final_distance_m": round(g["final_distance_m"], 3)})
    return rows


def _core_start(core: dict[str, Any]) -> dict[str, Any]:
    """The core path's episode start under the graph's conditions: first chunk and arming [ms]."""
    rows = [r["graph"] for r in core["per_episode"] if "graph" in r]
    return {key: latency_stats([1e3 * r[key] for r in rows if r[key] is not None], 1)
            for key in ("first_chunk_s", "armed_s")}


class BusyProcesses:
    """`count` processes spinning at normal priority: a robot computer that is never idle."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> BusyProcesses:
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(self.count)]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def graph_run(checkpoint: Path, episodes: int, sim_config: Path | None, busy: int, work: Path) -> dict[str, Any]:
    bag = work / "bag"
    load_before = os.getloadavg()[0]
    with BusyProcesses(busy):
        result = evaluate_in_graph(checkpoint, episodes, sim_config=sim_config, seed=SEED, record_to=bag,
                                   log_file=work / "graph.log")
    rows = episode_timing(read_trace(bag))
    return {"result": result, "load_average_1min_before": round(load_before, 2),
            "load_average_1min_at_end": round(os.getloadavg()[0], 2), "busy_processes": busy,
            "timing": timing_summary(rows),
            "failed_episode_timing": [r for r in rows if not r["success"]]}


def run(quick: bool = False) -> dict[str, Any]:
    use_dds_profile()
    started = time.monotonic()
    episodes = 6 if quick else 40
    checkpoint = default_policy_path()
    busy = os.cpu_count() or 2
    variants = {"nominal": None, "real_a": config_path("sim_params_real_a.yaml")}
    figures: dict[str, Any] = {"quick": quick, "episodes": episodes, "seed": SEED, "checkpoint": str(checkpoint),
                               "cpu_count": busy}
    with tempfile.TemporaryDirectory(prefix="bench_graph_gap_") as tmp:
        for name, sim_config in variants.items():
            core = evaluate_in_sim(checkpoint, episodes, sim_config=sim_config, seed=SEED, label=f"core {name}")
            plain = evaluate_in_sim(checkpoint, episodes, sim_config=sim_config, seed=SEED, graph_conditions=False,
                                    label=f"plain {name}")
            variant: dict[str, Any] = {"core_graph_conditions": _success(core), "core_plain": _success(plain),
                                       "core_start_ms": _core_start(core)}
            for condition, load in (("graph_quiet", 0), ("graph_loaded", busy)):
                work = Path(tmp) / f"{name}_{condition}"
                work.mkdir()
                t0 = time.monotonic()
                run_ = graph_run(checkpoint, episodes, sim_config, load, work)
                graph = run_["result"]
                variant[condition] = {
                    **_success(graph), "wall_s": round(time.monotonic() - t0, 1),
                    "load_average_1min_before": run_["load_average_1min_before"],
                    "load_average_1min_at_end": run_["load_average_1min_at_end"],
                    "busy_processes": run_["busy_processes"], "supervisor": graph["supervisor"],
                    "obs_to_chunk_ms": graph["obs_to_chunk_ms"], "real_time_factor": graph["real_time_factor"],
                    "timing": run_["timing"], "failed_episode_timing": run_["failed_episode_timing"],
                    "disagreements_with_core": _disagreements(core, graph),
                    "gap_to_core_points": round(100 * (core["success_rate"] - graph["success_rate"]), 1),
                }
                print(f"[bench graph_gap] {name} {condition}: {graph['successes']}/{graph['episodes']} "
                      f"(core {core['successes']}/{core['episodes']}), arm_refused "
                      f"{graph['supervisor']['arm_refused']}, {time.monotonic() - t0:.0f} s", file=sys.stderr)
            figures[name] = variant
    figures["wall_s"] = round(time.monotonic() - started, 1)
    return figures


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__.splitlines()[0]))
