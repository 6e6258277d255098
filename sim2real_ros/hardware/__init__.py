"""Servo-bus hardware without ROS: the Feetech STS protocol, a pyserial bus client, LeRobot calibration,
the driver's logic and a protocol-level bus emulator on a pseudo-terminal (docs/so101.md)."""
