"""rosbag2 tooling without ROS: read any bag, record crash-safe MCAP, inspect and repair.

Pure Python (rosbags, mcap, sqlite3); no rclpy import, so offline tools use it without a graph.
"""
from __future__ import annotations

from .reader import BagMessage, BagReader, TopicInfo, iter_messages, topic_types

__all__ = ["BagMessage", "BagReader", "TopicInfo", "iter_messages", "topic_types"]
