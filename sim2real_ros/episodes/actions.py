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
    m = len(times_ns)
    if m == 0:
        return np.full(query.shape + (n,), np.nan)
    flat = query.ravel()
    right = np.searchsorted(times_ns, flat, side="right")  # first action after the query
    has_left, has_right = right > 0, right < m
    li, ri = np.maximum(right - 1, 0), np.minimum(right, m - 1)
    t_left, t_right = times_ns[li], times_ns[ri]
    gap = t_right - t_left
    d_left, d_right = flat - t_left, t_right - flat
    interp = has_left & has_right & (gap <= max_gap_ns)
    use_left = ~interp & has_left & (d_left <= max_gap_ns) & (~has_right | (d_left <= d_right))
    use_right = ~interp & ~use_left & has_right & (d_right <= max_gap_ns)
    # One gather per side and one blend for every point (this runs once per lag of the report's
    # sweep): a nearest neighbour is the blend of that neighbour with itself at weight 0.
    weight = np.where(interp, np.where(gap > 0, d_left / np.maximum(gap, 1), 1.0), 0.0)
    li = np.where(use_right, ri, li)
    ri = np.where(interp, ri, li)
    # Joints first: each gather and product then runs along the long axis of points (about 2x
    # faster than (points, joints) with a broadcast weight); the arithmetic is the same.
    by_joint = np.ascontiguousarray(np.asarray(values, dtype=float).T)
    result = np.take(by_joint, li, axis=1)
    result *= 1 - weight
    towards = np.take(by_joint, ri, axis=1)
    towards *= weight
    result += towards
    result[:, ~(interp | use_left | use_right)] = np.nan
    return np.ascontiguousarray(result.T).reshape(query.shape + (n,))
