"""The long fault-injection soak: the sim graph for 30 minutes under random faults (docs/safety.md).

    .venv/bin/python benchmarks/bench_soak.py [--quick] [--json OUT]

Runs `sim2real soak` in a child process (seed 0; 30 minutes of faults, 3 with --quick) and reports
its JSON: faults injected and violations by kind (target 0), e-stops pressed and honoured with the
latch and reaction times, recovery time after each fault kind (median / max), the bag's message
counts, nodes left behind, and the machine's 1-minute load average before and after.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim2real_ros.benchmarking import bench_main
from sim2real_ros.paths import use_dds_profile

SEED = 0


def run(quick: bool = False) -> dict[str, Any]:
    use_dds_profile()
    minutes = 3.0 if quick else 30.0
    with tempfile.TemporaryDirectory(prefix="bench_soak_") as tmp:
        report_file = Path(tmp) / "soak.json"
        done = subprocess.run(
            [sys.executable, "-m", "sim2real_ros.cli.main", "soak", "--minutes", str(minutes), "--seed", str(SEED),
             "--json", str(report_file)],
            capture_output=True, text=True, timeout=minutes * 60 + 900)
        if not report_file.is_file():
            raise RuntimeError(f"sim2real soak wrote no report (exit code {done.returncode}): "
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        report = json.loads(report_file.read_text())
    report.pop("faults", None)  # one line per fault: the counts and recovery figures say it
    return {"soak_violations": sum(report["violations"].values()), "exit_code": done.returncode, **report}


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__.splitlines()[0]))
