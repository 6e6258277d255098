"""rclpy's deprecated `logger.warn` forwards to `warning` from one place, so every `.warn(...)` call
shares one call site: two of them with different `throttle_duration_sec` raise "Logging filter
parameters cannot be changed between calls" and kill the node (it did, in actuator_node, on the
first joint jump after a rejected chunk). The package must call `warning` instead."""
from __future__ import annotations

import re
from pathlib import Path

import sim2real_ros

PACKAGE = Path(sim2real_ros.__file__).resolve().parent


def test_no_deprecated_logger_warn_calls():
    offenders = [f"{path.relative_to(PACKAGE)}:{number}"
                 for path in sorted(PACKAGE.rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"\.warn\(", line)]
    assert not offenders, f"use logger.warning(...), not warn(...): {offenders}"
