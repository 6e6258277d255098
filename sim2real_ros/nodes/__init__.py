"""Thin rclpy nodes: parameters, publishers/subscriptions, timers. All logic lives in core/."""
