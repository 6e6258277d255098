"""`sim2real soak`: a short fault-injection soak of the running sim graph (every fault kind once).

Real processes over DDS: the sim graph with the robot's supervisor settings, the recorder, and the
injector killing and restarting nodes, freezing the camera, dropping joint states, stepping the
clock, hogging the CPU, sending foreign out-of-range commands, pressing the e-stop and silencing its
heartbeat. The invariants are checked on the recorder's bag (core/soak.py, unit-tested in
test_soak_core.py, where each check is shown to catch a violating recording)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from support import REPO_ROOT

from sim2real_ros.core.soak import FAULT_KINDS, VIOLATION_KINDS


def test_short_soak_injects_every_fault_kind_with_no_violation(tmp_path):
    out, report_file = tmp_path / "soak", tmp_path / "soak.json"
    # The first len(FAULT_KINDS) faults of every seed are one of each kind (core.soak.iter_faults);
    # --max-faults ends the run after them (about 70 s here); --minutes and the recovery
    # timeout only bound a slow machine.
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "soak", "--minutes", "10", "--seed", "5",
         "--max-faults", str(len(FAULT_KINDS)), "--recovery-timeout-s", "45", "--out", str(out),
         "--json", str(report_file)],
        capture_output=True, text=True, timeout=1500, cwd=REPO_ROOT)
    log = done.stdout[-4000:] + done.stderr[-3000:]
    assert done.returncode == 0, log
    report = json.loads(report_file.read_text())
    assert report["error"] == "", log
    assert report["faults_injected"] == {kind: 1 for kind in FAULT_KINDS}, (log, report["recovery_s"])
    assert report["violations"] == {kind: 0 for kind in VIOLATION_KINDS}, report["violation_details"]
    assert report["estops"]["pressed"] == report["estops"]["honoured"] == 1
    assert report["nodes_left_behind"] == []
    # the bag was read back: the robot's commands, the joint states and the modes are in it
    messages = report["bag"]["messages"]
    assert report["bag"]["commands"] > 100 and messages["/joint_states"] > 100 and messages["/supervisor/state"] > 10
    assert not report["bag"]["problems"]
    # each kind with its recovery time (a figure: how fast depends on the machine's load)
    assert set(report["recovery_s"]) == set(FAULT_KINDS)
    assert all(r["count"] == 1 for r in report["recovery_s"].values())


def test_a_process_left_behind_is_found_by_its_marker(tmp_path):
    from sim2real_ros.runtime.soak import left_behind

    marker = str(tmp_path / "sim2real_launch_marker")
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        # CI's sandbox may show the child's new command line a moment after Popen returns: wait
        # until /proc says it is the straggler (a precondition, not the thing under test)
        cmdline = Path(f"/proc/{straggler.pid}/cmdline")
        deadline = time.monotonic() + 10.0
        while marker.encode() not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        found = left_behind(marker)
        assert len(found) == 1 and f"pid {straggler.pid}:" in found[0]
    finally:
        straggler.kill()
        straggler.wait()
    assert left_behind(marker) == []
