"""Phase-lock a fixed-rate control schedule to the arrival of action chunks (pure, no rclpy).

Why: a 10 Hz policy and a 100 Hz control loop run off independent clocks, so each chunk waits for
the next control tick for a delay that depends only on the two schedules' relative phase: set at
random when the nodes start, then held for the whole run (100 ms is exactly ten 10 ms periods). In
a bad run every chunk waited 8-10 ms; in a good one, 1 ms. Locking the phase makes the good case
the only case without changing the rate: after each arrival the schedule is nudged, by at most
`max_shift_ns` per chunk, so that the first tick after a typical arrival comes `lead_ns` after it.
A chunk arriving later than typical (jitter) still waits for the next tick, as before.

The rate stays the configured one: only the deadline after an arrival moves, by a bounded amount,
so one period in ten is up to max_shift_ns shorter or longer.
"""
from __future__ import annotations

from ..errors import ConfigError


class TickPhaseLock:
    """period_ns: control period [ns]. lead_ns: wanted delay from a chunk's arrival to the next
    tick [ns] (time to take the chunk in). max_shift_ns: largest nudge per arrival [ns]. gain: share
    of the phase error corrected per arrival (0..1]; below 1 so one late chunk does not swing it."""

    def __init__(self, period_ns: int, lead_ns: int, max_shift_ns: int, gain: float = 0.5) -> None:
        if period_ns <= 0:
            raise ConfigError("tick phase lock", "period_ns", period_ns, "must be > 0")
        if not 0 <= lead_ns < period_ns:
            raise ConfigError("tick phase lock", "lead_ns", lead_ns, f"must be in [0, period {period_ns})")
        if not 0 <= max_shift_ns <= period_ns // 2:
            raise ConfigError("tick phase lock", "max_shift_ns", max_shift_ns, "must be in [0, period / 2]")
        if not 0 < gain <= 1:
            raise ConfigError("tick phase lock", "gain", gain, "must be in (0, 1]")
        self.period_ns = int(period_ns)
        self.lead_ns = int(lead_ns)
        self.max_shift_ns = int(max_shift_ns)
        self.gain = float(gain)

    def shift_ns(self, arrival_ns: int, next_deadline_ns: int) -> int:
        """[ns] to add to the next deadline, for a chunk that arrived at `arrival_ns` while the next
        tick is due at `next_deadline_ns` (same clock). Negative: tick sooner."""
        delay = (next_deadline_ns - arrival_ns) % self.period_ns  # wait of this chunk for a tick
        error = delay - self.lead_ns
        # Past half a period late, moving the previous tick forward over the arrival is shorter.
        if error > self.period_ns // 2:
            error -= self.period_ns
        shift = -int(round(self.gain * error))
        return max(-self.max_shift_ns, min(self.max_shift_ns, shift))
