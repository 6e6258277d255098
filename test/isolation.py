"""How one test process is kept apart from the others: its DDS domain (by xdist worker) and which
modules share an xdist worker (test/conftest.py applies both)."""
from __future__ import annotations

import os
from collections.abc import Mapping

# Modules that share one expensive thing run on one xdist worker, one after the other (`--dist loadgroup`;
# every other module is a group of its own, so a module's fixtures are built once):
# - graph_bringup: full graphs as processes on the wall clock (SO-101 bring-ups, launch, soak). Two at once
#   on 2 cores starve each other ('arm refused: no fresh command/policy'), so they never overlap.
# - ray: the modules that start a local Ray cluster; one cluster at a time on this machine.
# - sim_recording / teleop_recording: the modules that read one session fixture, recorded once.
TEST_GROUPS = {
    "graph_bringup": ("test_bringup.py", "test_bringup_emulated.py", "test_so101.py", "test_launch.py",
                      "test_launcher_orphans.py", "test_soak_graph.py", "test_graph_eval.py", "test_demo.py"),
    "ray": ("test_rl.py", "test_rl_fault_tolerance.py", "test_rl_cluster.py"),
    "sim_recording": ("test_replay_graph.py", "test_replay_offline.py"),
    "teleop_recording": ("test_teleop_recording.py", "test_finetune.py", "test_validation.py"),
}
GROUP_OF_MODULE = {module: group for group, modules in TEST_GROUPS.items() for module in modules}


def xdist_worker() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker; (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not name.startswith("gw"):
        return 0, 1
    return int(name[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def domain_id_for(environ: Mapping[str, str], worker: tuple[int, int], pid: int, draw: int) -> int:
    """The ROS_DOMAIN_ID of one test process.

    SIM2REAL_TEST_DOMAIN_ID=D: D, plus the worker index under xdist. Otherwise one domain of
    SIM2REAL_TEST_DOMAIN_RANGE=LOW-HIGH (default 1-232: Fast DDS maps each to valid ports), from the
    worker's own slice of it: the range is cut into one disjoint slice per xdist worker, so two workers
    of one run never share a domain, and runs given disjoint ranges (make test: Kilted 1-116, Jazzy
    117-232) never meet. pid and draw (random) keep concurrent runs on one range apart.
    """
    index, count = worker
    if "SIM2REAL_TEST_DOMAIN_ID" in environ:
        return int(environ["SIM2REAL_TEST_DOMAIN_ID"]) + index
    text = environ.get("SIM2REAL_TEST_DOMAIN_RANGE", "1-232")
    low, high = (int(v) for v in text.split("-"))
    size = (high - low + 1) // count
    if size < 1:
        raise ValueError(f"SIM2REAL_TEST_DOMAIN_RANGE={text}: fewer domains than the {count} xdist workers")
    return low + index * size + (pid * 7919 + draw) % size
