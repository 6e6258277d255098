"""ros2 launch sim2real_ros sim.launch.py [namespace:=...] [robot_description:=...] [checkpoint:=...] ...

The sim graph, built from the one declaration in sim2real_ros/graph.py (same as `sim2real launch sim`).
"""
from sim2real_ros.launch_support import launch_description


def generate_launch_description():
    return launch_description("sim")
