"""Helpers for tests over real DDS: a spinning probe node and graph processes.

No sleeps-and-hope: every wait is a deadline loop on a condition.
"""
from __future__ import annotations

import os
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
