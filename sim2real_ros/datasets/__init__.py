"""Datasets other tools use, in and out of rosbag2: LeRobot (docs/datasets.md). No rclpy import."""
