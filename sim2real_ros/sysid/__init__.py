"""System identification: measure the real robot so the sim (and the actuator's latency
compensation) can match it. Pure numpy/scipy, no rclpy."""
