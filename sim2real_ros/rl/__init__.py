"""Reinforcement learning at scale: a privileged reach environment, batched worlds on Ray rollout
workers, PPO (rsl_rl) for a teacher, and the teacher as a DAgger labeller for the vision student.

Imports no rclpy: everything here runs on a training machine or a Ray cluster.
"""
