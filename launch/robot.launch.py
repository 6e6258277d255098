"""ros2 launch sim2real_ros robot.launch.py [namespace:=...] [robot_description:=...] [checkpoint:=...] ...

On an SO-101: robot:=so101 port:=/dev/ttyACM0 calibration:=FILE camera:=0 [leader_port:=... leader_calibration:=...]
starts feetech_driver and camera_node too; robot:=so101 emulate:=true rehearses on an emulated arm
(docs/so101.md "Running on an SO-101").

The robot graph, built from the one declaration in sim2real_ros/graph.py (same as `sim2real launch robot`).
"""
from sim2real_ros.launch_support import launch_description


def generate_launch_description():
    return launch_description("robot")
