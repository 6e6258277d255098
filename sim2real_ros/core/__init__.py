"""Pure logic: numpy / torch / opencv only. Nothing in here imports rclpy; time is passed in."""
