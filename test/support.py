"""Helpers for tests over real DDS: a spinning probe node and graph processes.

No sleeps-and-hope: every wait is a deadline loop on a condition.
"""
from __future__ import annotations

import os
import resource
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sim2real_ros.cli.launcher import GraphLauncher
from sim2real_ros.graph import NodeDecl
from sim2real_ros.orchestration.probe import RosProbe, wait_until  # noqa: F401 - re-exported for tests

REPO_ROOT = Path(__file__).resolve().parent.parent
# Apache-2.0 bags recorded by `ros2 bag record` (rosbag2's test resources), vendored with their notice.
TALKER_BAGS = REPO_ROOT / "test" / "data" / "bags"
# Bags whose licence keeps them out of the repository (GPL-3.0): read where present, else skipped.
SHARED_BAGS = Path(os.environ.get("SIM2REAL_SHARED_BAGS", REPO_ROOT.parent / "shared" / "data" / "bags"))
SERVO_BAG = SHARED_BAGS / "real_servo_arm_a"
needs_servo_bag = pytest.mark.skipif(
    not SERVO_BAG.is_dir(),
    reason=f"the real servo-arm bag (GPL-3.0, not vendored) is not at {SERVO_BAG}; set SIM2REAL_SHARED_BAGS")


@contextmanager
def running_nodes(decls: list[NodeDecl], log_dir: Path, namespace: str = ""):
    """Start nodes as processes (the same launcher `sim2real launch` uses); stop them at the end.

    Output goes to log_dir/graph.log and is printed if the test fails.
    """
    log = log_dir / "graph.log"
    launcher = GraphLauncher(decls, namespace=namespace, echo=False, log_file=log)
    launcher.start()
    try:
        yield launcher
    except BaseException:
        print(log.read_text() if log.exists() else "(no node output)")
        raise
    finally:
        launcher.shutdown()


def node_decl(executable: str, parameters: dict[str, Any] | None = None,
              remappings: tuple[tuple[str, str], ...] = (), name: str | None = None) -> NodeDecl:
    """A single node declaration for tests (no params file: node defaults + these overrides)."""
    return NodeDecl(executable, name or executable, dict(parameters or {}), remappings, ())


def run_measured(args: list[str], limit_bytes: int, timeout_s: float, cwd: Path,
                 stdout: Path, stderr: Path, stdin: Path | None = None,
                 env: dict[str, str] | None = None) -> tuple[int, int]:
    """Run `args` with its address space limited to `limit_bytes` (a safety net: a process that
    tried to allocate tens of GB fails instead of taking the machine). Returns (exit code, peak
    resident set size [bytes] of that process alone, from wait4). Kills it after timeout_s [s]."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    with open(stdout, "wb") as out, open(stderr, "wb") as err, open(stdin or os.devnull, "rb") as inp:
        proc = subprocess.Popen(args, stdin=inp, stdout=out, stderr=err, cwd=cwd, env=env,
                                preexec_fn=limit)  # noqa: PLW1509 - the test process starts no threads first
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            raise TimeoutError(f"{args} still running after {timeout_s} s")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: tell Popen
    return proc.returncode, usage.ru_maxrss * 1024
