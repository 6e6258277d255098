"""Helpers for tests over real DDS: a spinning probe node and graph processes.

No sleeps-and-hope: every wait is a deadline loop on a condition.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim2real_ros.cli.launcher import GraphLauncher
from sim2real_ros.graph import NodeDecl
from sim2real_ros.orchestration.probe import RosProbe, wait_until  # noqa: F401 - re-exported for tests

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_BAGS = REPO_ROOT.parent / "shared" / "data" / "bags"


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
