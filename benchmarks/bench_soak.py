"""The long fault-injection soak: the sim graph for 30 minutes under random faults (docs/safety.md).

    .venv/bin/python benchmarks/bench_soak.py [--quick] [--json OUT]

Runs `sim2real soak` in a child process (seed 0; 30 minutes of faults, 3 with --quick) and reports
its JSON: faults injected and violations by kind (target 0), e-stops pressed and honoured with the
latch and reaction times, recovery time after each fault kind (median / max), the bag's message
counts, nodes left behind, and the machine's 1-minute load average before and after.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim2real_ros.benchmarking import bench_main
from sim2real_ros.paths import use_dds_profile

SEED = 0
KEPT = Path(__file__).resolve().parent.parent / "bench_out"  # a run with a violation is kept here


def run(quick: bool = False) -> dict[str, Any]:
    use_dds_profile()
    minutes = 3.0 if quick else 30.0
    # The run's folder (bag, graph.log, soak.json with every fault) is kept when it found a violation:
    # the bag is the evidence. Under bench_out/ (git ignores it), removed when the run was clean.
    KEPT.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f"soak_seed{SEED}_", dir=KEPT))
    report_file = out / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "soak", "--minutes", str(minutes), "--seed", str(SEED),
         "--out", str(out / "run"), "--json", str(report_file)],
        capture_output=True, text=True, timeout=minutes * 60 + 900)
    (out / "soak.log").write_text(done.stdout + done.stderr)
    if not report_file.is_file():
        raise RuntimeError(f"sim2real soak wrote no report (exit code {done.returncode}; kept {out}): "
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    report = json.loads(report_file.read_text())
    report.pop("faults", None)  # one line per fault: the counts and recovery figures say it (and run/soak.json)
    violations = sum(report["violations"].values())
    if violations == 0 and done.returncode == 0:
        shutil.rmtree(out)
    else:
        report["kept"] = str(out)
    return {"soak_violations": violations, "exit_code": done.returncode, **report}


if __name__ == "__main__":
    sys.exit(bench_main(run, __doc__.splitlines()[0]))
