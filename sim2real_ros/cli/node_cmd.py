"""`sim2real node NAME [--ros-args ...]`: the pip-environment equivalent of `ros2 run sim2real_ros NAME`.

It imports the node module and calls its main() with the same arguments, so it works whether the
package was installed by colcon (scripts in lib/sim2real_ros) or by pip (scripts in .venv/bin).
Started by `sim2real launch` (GraphLauncher), the node dies with its launcher (lifeline.py).
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import sys

from ..runtime.lifeline import LAUNCHER_PID_ENV, bound_exit, die_with_launcher

REFUSED_AT_START = 2  # run_node's exit code for a configuration refused while building the node
NODES = ("sim_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor", "recorder", "viz_node",
         "feetech_driver", "camera_node", "leader_arm", "sim_camera")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=NODES, help="node executable")
    parser.add_argument("ros_args", nargs=argparse.REMAINDER, help="--ros-args ... passed to rclpy")


def run(args: argparse.Namespace) -> int:
    # Before the node's (slow) imports: the launcher may be killed at any moment from here on.
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if not die_with_launcher():
        print(f"[ERROR] {args.name}: the launcher (pid {launcher}) is gone; not starting", file=sys.stderr, flush=True)
        return 1
    # A crash in C prints every thread's Python stack from here on, the node's imports included (a
    # recorder once died with SIGSEGV, rc -11, before it logged a line; run_node enables it again).
    faulthandler.enable()
    module = importlib.import_module(f"sim2real_ros.nodes.{args.name}")
    try:
        try:
            code = int(module.main([f"sim2real_ros.{args.name}", *args.ros_args]) or 0)
        except SystemExit as done:  # the nodes' main() ends in sys.exit(run_node(...))
            code = 0 if done.code is None else done.code if isinstance(done.code, int) else 1
        if code == REFUSED_AT_START:
            # The node refused its configuration, said why and cleaned up (run_node). Its exit code
            # is the contract a launcher reads: leave without the interpreter's finalization, where
            # DDS and extension destructors run (a CI run saw one such exit end in SIGSEGV, rc -11).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    finally:
        if launcher:
            # The node has done its cleanup; the interpreter's own exit (DDS and extension
            # destructors) must not keep it alive past the launcher's grace (CI, Jazzy: a node
            # outlived its SIGKILLed launcher by 9 s, beyond the watchdog's reach).
            bound_exit()
