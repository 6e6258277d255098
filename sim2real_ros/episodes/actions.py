"""Recorded actions read at any time: what the robot was commanded to do at a query time."""
from __future__ import annotations

import numpy as np


def sample_actions(times_ns: np.ndarray, values: np.ndarray, query_ns: np.ndarray, max_gap_ns: int) -> np.ndarray:
    """Recorded actions at `query_ns` (any shape): linear interpolation between the neighbours when
    they are at most `max_gap_ns` apart, else the nearest one within `max_gap_ns`, else NaN.

    times_ns (M,) sorted, values (M, n). Returns query_ns.shape + (n,). Of several actions with the
    same time the last one wins (the newest command sent).
    """
    query = np.asarray(query_ns, dtype=np.int64)
    n = values.shape[1] if values.ndim == 2 else 0
    out = np.full(query.shape + (n,), np.nan)
    if len(times_ns) == 0:
        return out
    flat = query.ravel()
    right = np.searchsorted(times_ns, flat, side="right")  # first action after the query
    left = right - 1
    has_left, has_right = left >= 0, right < len(times_ns)
    li, ri = np.clip(left, 0, len(times_ns) - 1), np.clip(right, 0, len(times_ns) - 1)
    t_left, t_right = times_ns[li], times_ns[ri]
    gap = t_right - t_left
    d_left, d_right = flat - t_left, t_right - flat
    result = np.full((len(flat), n), np.nan)
    interp = has_left & has_right & (gap <= max_gap_ns)
    weight = np.where(gap > 0, d_left / np.maximum(gap, 1), 1.0)[:, None]
    result[interp] = ((1 - weight) * values[li] + weight * values[ri])[interp]
    use_left = ~interp & has_left & (d_left <= max_gap_ns) & (~has_right | (d_left <= d_right))
    use_right = ~interp & ~use_left & has_right & (d_right <= max_gap_ns)
    result[use_left] = values[li][use_left]
    result[use_right] = values[ri][use_right]
    return result.reshape(query.shape + (n,))
