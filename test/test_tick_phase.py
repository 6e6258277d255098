"""core.tick_phase: the control schedule locks onto chunk arrivals with bounded nudges."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.core.control.tick_phase import TickPhaseLock
from sim2real_ros.core.errors import ConfigError

MS = 1_000_000
PERIOD = 10 * MS


def simulate(phase_lock: TickPhaseLock | None, arrival_offset_ns: int, jitter_ns: int = 0, chunks: int = 60,
             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A 100 Hz schedule and 10 Hz chunks arriving at offset + k * 100 ms (+ jitter): per chunk, the
    wait for the next tick [ns], and every tick period [ns]. Nudges are applied to the deadline after
    the first tick following an arrival, as the actuator node does."""
    rng = np.random.default_rng(seed)
    arrivals = [arrival_offset_ns + k * 10 * PERIOD + int(rng.uniform(0, jitter_ns)) for k in range(chunks)]
    ticks, waits = [0], []
    deadline, pending, i = PERIOD, None, 0
    while i < len(arrivals) or pending is not None:
        ticks.append(deadline)
        while i < len(arrivals) and arrivals[i] <= deadline:
            waits.append(deadline - arrivals[i])
            pending = arrivals[i]
            i += 1
        deadline += PERIOD
        if pending is not None:
            if phase_lock is not None:
                deadline += phase_lock.shift_ns(pending, deadline)
            pending = None
    return np.array(waits), np.diff(ticks)


@pytest.mark.parametrize("offset_ms", [0.2, 3.0, 5.0, 7.0, 9.9])
def test_any_starting_phase_converges_to_the_lead(offset_ms):
    lock = TickPhaseLock(PERIOD, lead_ns=int(1.5 * MS), max_shift_ns=1 * MS)
    waits, periods = simulate(lock, int(offset_ms * MS))
    unlocked, _ = simulate(None, int(offset_ms * MS))
    assert abs(waits[-20:].mean() - 1.5 * MS) < 0.3 * MS, waits / MS
    assert np.all(np.abs(unlocked - unlocked[0]) < 1)  # without the lock the wait never changes
    # The rate is kept: no period moves by more than the largest nudge, and the mean stays.
    assert np.all(np.abs(periods - PERIOD) <= 1 * MS)
    assert abs(periods.mean() - PERIOD) < 0.05 * PERIOD


def test_jittery_arrivals_lock_near_their_typical_phase_and_cut_the_wait():
    lock = TickPhaseLock(PERIOD, lead_ns=int(1.5 * MS), max_shift_ns=1 * MS)
    waits, periods = simulate(lock, 8 * MS, jitter_ns=3 * MS, chunks=200, seed=3)
    unlocked, _ = simulate(None, 8 * MS, jitter_ns=3 * MS, chunks=200, seed=3)
    # Arrivals 8-11 ms after the unlocked grid: a third of them just miss a tick and wait ~9 ms more.
    assert np.percentile(unlocked[50:], 90) > 8 * MS
    assert np.percentile(waits[50:], 90) < 3.5 * MS
    assert waits[50:].mean() < 0.6 * unlocked[50:].mean()
    assert np.all(np.abs(periods - PERIOD) <= 1 * MS)


def test_shift_is_bounded_and_signed():
    lock = TickPhaseLock(PERIOD, lead_ns=1 * MS, max_shift_ns=1 * MS, gain=1.0)
    assert lock.shift_ns(arrival_ns=0, next_deadline_ns=1 * MS) == 0  # on target
    assert lock.shift_ns(arrival_ns=0, next_deadline_ns=3 * MS) == -1 * MS  # tick too late: sooner, capped
    assert lock.shift_ns(arrival_ns=0, next_deadline_ns=int(1.5 * MS)) == -int(0.5 * MS)
    assert lock.shift_ns(arrival_ns=0, next_deadline_ns=int(9.8 * MS)) == 1 * MS  # just missed: later, capped


@pytest.mark.parametrize("kwargs, field", [
    ({"period_ns": 0, "lead_ns": 0, "max_shift_ns": 0}, "period_ns"),
    ({"period_ns": PERIOD, "lead_ns": PERIOD, "max_shift_ns": 0}, "lead_ns"),
    ({"period_ns": PERIOD, "lead_ns": 0, "max_shift_ns": PERIOD}, "max_shift_ns"),
    ({"period_ns": PERIOD, "lead_ns": 0, "max_shift_ns": 0, "gain": 0.0}, "gain"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        TickPhaseLock(**kwargs)
