"""Helpers for tests over real DDS: a spinning probe node and graph processes.

No sleeps-and-hope: every wait is a deadline loop on a condition.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sim2real_ros.graph import NodeDecl
from sim2real_ros.runtime.launcher import GraphLauncher
from sim2real_ros.runtime.probe import RosProbe, wait_until  # noqa: F401 - re-exported for tests

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


# Runs in a small Python between the test and the measured process: it forks the measured one
# (limit set, then exec) and writes its exit status and peak RSS to a file. Forking from the test
# process itself would count the test's own memory: a forked child's peak RSS (wait4's ru_maxrss)
# includes the pages it shared with its parent before exec, and pytest with torch, Ray and
# onnxruntime imported is ~300 MiB.
_MEASURE = r"""
import json, os, resource, sys
result, limit, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
pid = os.fork()
if pid == 0:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.execvp(args[0], args)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(result, "w") as handle:
    json.dump({"code": os.waitstatus_to_exitcode(status), "max_rss_kib": usage.ru_maxrss}, handle)
"""


def run_measured(args: list[str], limit_bytes: int, timeout_s: float, cwd: Path,
                 stdout: Path, stderr: Path, stdin: Path | None = None,
                 env: dict[str, str] | None = None) -> tuple[int, int]:
    """Run `args` with its address space limited to `limit_bytes` (a safety net: a process that
    tried to allocate tens of GB fails instead of taking the machine). Returns (exit code, peak
    resident set size [bytes] of that process alone, from wait4 in a small parent). Kills it after
    timeout_s [s]."""
    result = Path(stdout).with_name(Path(stdout).name + ".measured.json")
    result.unlink(missing_ok=True)
    with open(stdout, "wb") as out, open(stderr, "wb") as err, open(stdin or os.devnull, "rb") as inp:
        proc = subprocess.Popen([sys.executable, "-c", _MEASURE, str(result), str(limit_bytes), *args],
                                stdin=inp, stdout=out, stderr=err, cwd=cwd, env=env, start_new_session=True)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise TimeoutError(f"{args} still running after {timeout_s} s") from None
    measured = json.loads(result.read_text())
    return int(measured["code"]), int(measured["max_rss_kib"]) * 1024


def untrained_and_trained(pool: Any, teacher: Any, episodes: int = 16) -> tuple[Any, dict, dict]:
    """(the untrained actor of `teacher`'s spec, its evaluation, the teacher's evaluation) on the
    same `episodes` fixed evaluation episodes of `pool`: what a training test compares. The
    untrained weights are torch's seed 0, so every test compares against the same start."""
    import torch

    from sim2real_ros.rl.ppo import evaluate_policy
    from sim2real_ros.rl.teacher_checkpoint import build_actor

    torch.manual_seed(0)
    untrained = build_actor(teacher.spec).as_jit().eval()
    return untrained, evaluate_policy(pool, untrained, episodes), evaluate_policy(pool, teacher.policy, episodes)
