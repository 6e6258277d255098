"""What a core unit reports, without a message type: a level and key-value pairs.

The nodes turn a report into a diagnostic_msgs/DiagnosticArray with one helper
(`conversions.diagnostic_array`) and read one back with `conversions.diagnostic_values`.
"""
from __future__ import annotations

from enum import Enum


class Level(str, Enum):
    """Severity of a report (diagnostic_msgs/DiagnosticStatus OK, WARN, ERROR, STALE)."""

    OK = "ok"
    WARN = "warn"
    ERROR = "error"
    STALE = "stale"
