"""PyBullet world, robot, tasks, domain randomization and scripted experts (no rclpy)."""
