"""Launcher processes for test_launcher_orphans.py, run as `python test/lifeline_procs.py ROLE`.

worker-thread: a GraphLauncher running the real supervisor node, started from a worker thread
    that ends when a line arrives on stdin ("thread ended" is printed then); the launcher itself
    lives on until killed.
stubborn: a launcher starting one process that ties its life to it (lifeline.die_with_launcher,
    1 s grace) and then ignores SIGTERM, as a node whose cleanup hangs would; that process prints
    "ready PID".
hung-exit: the same launcher with a process that ends on SIGTERM as `sim2real node` does (main
    returns, then lifeline.bound_exit) but whose interpreter finalization then hangs (a destructor
    that never returns, as a DDS or extension one can), where no Python thread runs any more.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

STUBBORN_GRACE_S = 1.0  # [s]
HUNG_EXIT_DEADLINE_S = 1.0  # [s] bound_exit's deadline in the hung-exit process
HUNG_EXIT_GRACE_S = 60.0  # [s] its watchdog's grace: far too late to be what ends it


def worker_thread_launcher() -> None:
    from sim2real_ros.graph import NodeDecl
    from sim2real_ros.runtime.launcher import GraphLauncher

    launcher = GraphLauncher([NodeDecl("supervisor", "supervisor", {"require_stop_source": True})], echo=False)

    def start_then_wait() -> None:
        launcher.start()
        print(f"node {launcher.nodes[0].process.pid}", flush=True)
        sys.stdin.readline()

    worker = threading.Thread(target=start_then_wait)
    worker.start()
    worker.join()
    print("thread ended", flush=True)
    launcher.spin()  # until killed


def launcher_of(role: str) -> None:
    """A launcher starting `python lifeline_procs.py ROLE` tied to it, then living until killed."""
    from sim2real_ros.runtime.lifeline import launcher_environment

    env = {**os.environ, **launcher_environment(os.getpid(), from_main_thread=True)}
    subprocess.Popen([sys.executable, __file__, role], env=env)
    while True:
        time.sleep(1.0)  # until killed


def stubborn_node() -> None:
    from sim2real_ros.runtime.lifeline import die_with_launcher

    if not die_with_launcher(grace_s=STUBBORN_GRACE_S):
        sys.exit(1)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"ready {os.getpid()}", flush=True)
    while True:
        time.sleep(1.0)  # until killed


class _HangsWhenCollected:
    """Its destructor never returns; kept in another module's globals, it runs while the
    interpreter finalizes (daemon threads, the lifeline's watchdog among them, stopped)."""

    def __del__(self) -> None:
        while True:
            time.sleep(0.1)


def hung_exit_node() -> None:
    import json

    from sim2real_ros.runtime.lifeline import WATCH_PERIOD_S, bound_exit, die_with_launcher

    if not die_with_launcher(grace_s=HUNG_EXIT_GRACE_S):
        sys.exit(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    json.hang_at_exit = _HangsWhenCollected()  # type: ignore[attr-defined]
    try:
        # "ready" inside the try: the test kills the launcher as soon as it reads it, and a SIGTERM
        # handled between the print and the try skipped bound_exit (the node then lived the
        # watchdog's 60 s grace: seen in CI and once in 81 runs under load, "5.25 s" each time).
        print(f"ready {os.getpid()}", flush=True)
        while True:
            time.sleep(1.0)  # until SIGTERM (the kernel's, as the launcher dies)
    finally:
        bound_exit(HUNG_EXIT_DEADLINE_S)
        # Still in Python for a while, as a node's last cleanup may be: the watchdog notices the
        # launcher's death meanwhile and arms its own, later, timer, which must not replace this one.
        time.sleep(4 * WATCH_PERIOD_S)


if __name__ == "__main__":
    {"worker-thread": worker_thread_launcher, "stubborn": lambda: launcher_of("stubborn-node"),
     "stubborn-node": stubborn_node, "hung-exit": lambda: launcher_of("hung-exit-node"),
     "hung-exit-node": hung_exit_node}[sys.argv[1]]()
