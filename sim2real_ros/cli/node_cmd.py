"""`sim2real node NAME [--ros-args ...]`: the pip-environment equivalent of `ros2 run sim2real_ros NAME`.

It imports the node module and calls its main() with the same arguments, so it works whether the
package was installed by colcon (scripts in lib/sim2real_ros) or by pip (scripts in .venv/bin).
"""
from __future__ import annotations

import argparse
import importlib

NODES = ("sim_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor", "recorder")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=NODES, help="node executable")
    parser.add_argument("ros_args", nargs=argparse.REMAINDER, help="--ros-args ... passed to rclpy")


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"sim2real_ros.nodes.{args.name}")
    return int(module.main([f"sim2real_ros.{args.name}", *args.ros_args]) or 0)
