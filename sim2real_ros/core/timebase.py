"""The stack's time base: integer nanoseconds everywhere (docs/design.md §3), one constant for all."""
from __future__ import annotations

NS_PER_S = 1_000_000_000
"""Nanoseconds per second: stamps, deadlines and ages are int [ns]; configuration is in [s]."""


def seconds_to_ns(seconds: float) -> int:
    """Seconds [s] -> integer nanoseconds [ns], rounded to the nearest."""
    return int(round(seconds * NS_PER_S))
