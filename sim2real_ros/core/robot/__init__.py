"""core/robot."""
