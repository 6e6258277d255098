"""Launcher processes for test_launcher_orphans.py, run as `python test/lifeline_procs.py ROLE`.

worker-thread: a GraphLauncher running the real supervisor node, started from a worker thread
    that ends when a line arrives on stdin ("thread ended" is printed then); the launcher itself
    lives on until killed.
stubborn: a launcher starting one process that ties its life to it (lifeline.die_with_launcher,
    1 s grace) and then ignores SIGTERM, as a node whose cleanup hangs would; that process prints
    "ready PID".
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

STUBBORN_GRACE_S = 1.0  # [s]


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


def stubborn_launcher() -> None:
    from sim2real_ros.runtime.lifeline import launcher_environment

    env = {**os.environ, **launcher_environment(os.getpid(), from_main_thread=True)}
    subprocess.Popen([sys.executable, __file__, "stubborn-node"], env=env)
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


if __name__ == "__main__":
    {"worker-thread": worker_thread_launcher, "stubborn": stubborn_launcher,
     "stubborn-node": stubborn_node}[sys.argv[1]]()
