"""What every benchmark script shares: latency statistics and the --quick/--json command line."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def latency_stats(values_ms: Sequence[float] | np.ndarray, digits: int = 4) -> dict[str, float]:
    """p50, p90, p99, max, spread (interquartile range) and count of durations [ms]."""
    v = np.asarray(values_ms, dtype=float)
    if v.size == 0:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "max": float("nan"),
                "spread_iqr": float("nan"), "n": 0}
    q25, q50, q75, q90, q99 = np.percentile(v, [25, 50, 75, 90, 99])
    return {"p50": round(float(q50), digits), "p90": round(float(q90), digits), "p99": round(float(q99), digits),
            "max": round(float(v.max()), digits), "spread_iqr": round(float(q75 - q25), digits), "n": int(v.size)}


def bench_main(run: Callable[[bool], dict[str, Any]], description: str, argv: list[str] | None = None) -> int:
    """`script [--quick] [--json OUT]`: run the benchmark, print its figures as JSON, maybe save them."""
    parser = argparse.ArgumentParser(description=description.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials (a smoke run, noisier figures)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    print_and_save(run(args.quick), args.json)
    return 0


def print_and_save(results: dict[str, Any], json_path: Path | None) -> None:
    """Print a benchmark's figures as JSON and, given a path, write them there too."""
    text = json.dumps(results, indent=2)
    print(text)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text + "\n")


def median_over_runs(runs: Sequence[Any]) -> Any:
    """Several runs' figures of one benchmark, combined (`sim2real bench --repeat N`).

    A number (in every run) becomes {"median", "min", "max", "runs"}: the median and the spread
    over the runs, and each run's value in run order. A dict is combined key by key over the keys
    every run has (a key one run lacks is left out, not guessed). Anything else (text, lists, a
    value that is a number in some runs only) is kept as the list of the runs' values. NaN runs are
    left out of the median and spread (a phase without samples) but kept in "runs".
    """
    if not runs:
        return {}
    if all(isinstance(r, bool) for r in runs):
        return list(runs)
    if all(isinstance(r, int | float) and not isinstance(r, bool) for r in runs):
        values = [float(r) for r in runs]
        finite = [v for v in values if np.isfinite(v)]
        if not finite:
            return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "runs": values}
        return {"median": round(float(np.median(finite)), 4), "min": min(finite), "max": max(finite),
                "runs": values}
    if all(isinstance(r, dict) for r in runs):
        common = [k for k in runs[0] if all(k in r for r in runs[1:])]
        return {k: median_over_runs([r[k] for r in runs]) for k in common}
    return list(runs)


# ----------------------------------------------------------------------------------------------
# Load beside a benchmark (issue 36): quiet and loaded phases interleaved in one run.
QUIET, LOADED = "quiet", "loaded"
_BUSY_LOOP = "while True:\n    pass\n"


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot (/proc/stat; (0, 0) where it is missing)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _autogroup() -> bool | None:
    """Whether the kernel schedules sessions as groups (sched_autogroup_enabled); None where unknown."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


class BusyLoad:
    """One busy process per CPU (a Python `while True: pass`, SCHED_OTHER at nice 0: what a robot
    computer's other work looks like to the scheduler), switched on and off between phases, with
    the machine's load measured per phase: the 1-minute load average and the share of CPU time
    busy ("cpu_busy"), both over everything on the machine, not only this benchmark."""

    def __init__(self, processes: int | None = None, own_sessions: bool = False) -> None:
        self.processes = int(processes or os.cpu_count() or 1)
        # own_sessions: each busy process in a session of its own, as work started elsewhere (another
        # terminal, a service) is; where the kernel schedules sessions as groups (autogroup), the
        # benchmark's session then keeps its share. Default: in this session, the harder case.
        self.own_sessions = bool(own_sessions)
        self._children: list[subprocess.Popen] = []
        self._busy: dict[str, list[float]] = {QUIET: [], LOADED: []}
        self._loadavg: dict[str, list[float]] = {QUIET: [], LOADED: []}
        self._phase: tuple[str, tuple[int, int]] | None = None

    @property
    def on(self) -> bool:
        return bool(self._children)

    def phase(self, loaded: bool) -> str:
        """End the current phase's measurement, switch the load, start measuring the next phase."""
        self._close_phase()
        if loaded and not self._children:
            self._children = [subprocess.Popen([sys.executable, "-c", _BUSY_LOOP], stdin=subprocess.DEVNULL,
                                               start_new_session=self.own_sessions)
                              for _ in range(self.processes)]
        elif not loaded:
            self._stop_children()
        name = LOADED if loaded else QUIET
        self._phase = (name, _cpu_times())
        return name

    def _close_phase(self) -> None:
        if self._phase is None:
            return
        name, (busy0, total0) = self._phase
        busy1, total1 = _cpu_times()
        if total1 > total0:
            self._busy[name].append((busy1 - busy0) / (total1 - total0))
        self._loadavg[name].append(os.getloadavg()[0])
        self._phase = None

    def _stop_children(self) -> None:
        for child in self._children:
            child.kill()
        for child in self._children:
            child.wait()
        self._children = []

    def close(self) -> None:
        self._close_phase()
        self._stop_children()

    def report(self) -> dict[str, Any]:
        """{busy_processes, cpus, per phase: cpu_busy (mean share), load_average_1min (mean at phase ends)}."""
        out: dict[str, Any] = {"busy_processes": self.processes, "cpus": os.cpu_count(),
                               "busy_sessions": "own" if self.own_sessions else "shared",
                               "sched_autogroup": _autogroup()}
        for name in (QUIET, LOADED):
            busy, load = self._busy[name], self._loadavg[name]
            out[f"cpu_busy_{name}"] = round(float(np.mean(busy)), 3) if busy else None
            out[f"load_average_1min_{name}"] = round(float(np.mean(load)), 2) if load else None
        return out

    def __enter__(self) -> BusyLoad:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def interleaved(segments: int) -> list[bool]:
    """Which segments are loaded: quiet, loaded, quiet, loaded, ... (`segments` of them)."""
    return [k % 2 == 1 for k in range(segments)]
