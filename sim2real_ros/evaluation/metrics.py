"""Action error metrics: predicted chunks against recorded actions (pure numpy, no ROS).

Alignment (docs/design.md §3): point k of a chunk stamped s is the target for time s + k*dt; a recorded
command sent at tau is the target for tau + actuation_latency. Each predicted point is compared
with the recorded actions interpolated at its target time.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.timebase import NS_PER_S
from ..episodes.actions import sample_actions

_LAG_THREADS = min(4, os.cpu_count() or 1)  # threads of the lag sweep

HISTOGRAM_BINS = 40


@dataclass(frozen=True)
class Predictions:
    """Predicted chunks, sorted by stamp.

    stamps_ns (N,): observation capture times. times_s (K,): time_from_start of the points [s].
    targets (N, K, n) [rad]: absolute joint targets. observed_q (N, n) [rad]: the joint positions
    the policy saw (NaN where unknown).
    """

    joint_names: tuple[str, ...]
    stamps_ns: np.ndarray
    times_s: np.ndarray
    targets: np.ndarray
    observed_q: np.ndarray

    def __post_init__(self) -> None:
        n, k = len(self.joint_names), len(self.times_s)
        if self.targets.shape != (len(self.stamps_ns), k, n):
            raise ValueError(f"targets must be (N={len(self.stamps_ns)}, K={k}, n={n}), got {self.targets.shape}")
        if self.observed_q.shape != (len(self.stamps_ns), n):
            raise ValueError(f"observed_q must be (N, {n}), got {self.observed_q.shape}")

    @property
    def point_times_ns(self) -> np.ndarray:
        """(N, K) target time of every point [ns]."""
        offsets = np.round(np.asarray(self.times_s) * NS_PER_S).astype(np.int64)
        return self.stamps_ns[:, None].astype(np.int64) + offsets[None, :]

    @classmethod
    def empty(cls, joint_names: tuple[str, ...], times_s: np.ndarray) -> Predictions:
        n, k = len(joint_names), len(times_s)
        return cls(joint_names, np.zeros(0, dtype=np.int64), np.asarray(times_s, dtype=float),
                   np.zeros((0, k, n)), np.zeros((0, n)))


def _summary(values: np.ndarray) -> dict[str, float | int]:
    """mean, p50, p90, p99, max, count of a flat array (NaN-free); NaN stats when empty."""
    values = np.asarray(values, dtype=float).ravel()
    if values.size == 0:
        return {"count": 0, "mean": float("nan"), "p50": float("nan"), "p90": float("nan"),
                "p99": float("nan"), "max": float("nan")}
    return {"count": int(values.size), "mean": float(values.mean()), "p50": float(np.percentile(values, 50)),
            "p90": float(np.percentile(values, 90)), "p99": float(np.percentile(values, 99)),
            "max": float(values.max())}


def _error_stats(errors: np.ndarray) -> dict[str, float | int]:
    """MAE, RMSE, bias, max |e|, p50/p99 |e| of signed errors: (P,) for one joint or (P, n) chunk
    points x joints; "points" counts chunk points (rows), NaN rows are ignored."""
    errors = np.asarray(errors, dtype=float)
    rows = errors.reshape(errors.shape[0], int(np.prod(errors.shape[1:]))) if errors.ndim > 1 else errors[:, None]
    rows = rows[np.all(np.isfinite(rows), axis=1)]
    points = len(rows)
    errors = rows.ravel()
    if errors.size == 0:
        nan = float("nan")
        return {"points": 0, "mae": nan, "rmse": nan, "bias": nan, "p50_abs": nan, "p99_abs": nan, "max_abs": nan}
    absolute = np.abs(errors)
    return {"points": int(points), "mae": float(absolute.mean()), "rmse": float(np.sqrt(np.mean(errors ** 2))),
            "bias": float(errors.mean()), "p50_abs": float(np.percentile(absolute, 50)),
            "p99_abs": float(np.percentile(absolute, 99)), "max_abs": float(absolute.max())}


def _histogram_edges(values: np.ndarray) -> np.ndarray:
    """Bin edges spanning `values` (a small symmetric span around a constant or empty array)."""
    if values.size == 0:
        return np.zeros(0)
    low, high = float(values.min()), float(values.max())
    if high - low < 1e-12:
        low, high = low - 1e-6, high + 1e-6
    return np.linspace(low, high, HISTOGRAM_BINS + 1)


def chunk_boundary_jumps(pred: Predictions) -> np.ndarray:
    """|difference| (P, n) [rad] between each chunk's points and the previous chunk's prediction
    (linearly interpolated) for the same times, over the overlap of the two chunks.

    Every chunk has the same point offsets from its stamp, so chunk i's points sit at
    (stamp_i - stamp_i-1) + offsets on chunk i-1's grid: all pairs are interpolated at once.
    """
    n = len(pred.joint_names)
    if len(pred.stamps_ns) < 2:
        return np.zeros((0, n))
    offsets = np.round(np.asarray(pred.times_s) * NS_PER_S).astype(np.int64)  # (K,) [ns]
    stamps = pred.stamps_ns.astype(np.int64)
    at = (stamps[1:] - stamps[:-1])[:, None] + offsets[None, :]  # (N-1, K) on the previous grid [ns]
    inside = (at >= offsets[0]) & (at <= offsets[-1])
    previous = pred.targets[:-1]  # (N-1, K, n)
    if len(offsets) == 1:
        interpolated = previous
    else:
        # The segment [offsets[j], offsets[j+1]] holding each point, as np.interp picks it.
        j = np.clip(np.searchsorted(offsets, at, side="right") - 1, 0, len(offsets) - 2)
        rows = np.arange(len(at))[:, None]
        low, high = previous[rows, j], previous[rows, j + 1]  # (N-1, K, n)
        span = (offsets[j + 1] - offsets[j]).astype(float)
        fraction = np.where(span > 0, (at - offsets[j]) / np.where(span > 0, span, 1.0), 0.0)[..., None]
        interpolated = low + (high - low) * fraction
    return np.abs(pred.targets[1:] - interpolated)[inside]


@dataclass(frozen=True)
class Comparison:
    """The arrays behind the metrics (for plots): recorded actions at every predicted point
    (N, K, n, NaN where none), the signed errors predicted - recorded, which frames counted."""

    human_at_points: np.ndarray
    errors: np.ndarray
    frame_evaluated: np.ndarray
    metrics: dict[str, Any]


def compare(pred: Predictions, action_meant_ns: np.ndarray, action_values: np.ndarray, action_human: np.ndarray,
            max_gap_ns: int, lags_s: np.ndarray) -> Comparison:
    """Every metric of the report for predictions against recorded actions.

    action_meant_ns (M,) sorted: when each recorded action is meant to take effect (send time +
    actuation latency). action_human (M,): whether it counts (sent in a human mode).
    lags_s: lags searched [s]; the recorded actions are compared at t + lag.
    """
    k, n = len(pred.times_s), len(pred.joint_names)
    points = pred.point_times_ns
    human_times, human_values = action_meant_ns[action_human], action_values[action_human]
    human = sample_actions(human_times, human_values, points, max_gap_ns)
    errors = pred.targets - human
    valid_point = np.all(np.isfinite(errors), axis=2)  # (N, K)
    evaluated = valid_point.any(axis=1)
    skipped: dict[str, int] = {"no_human_action": 0, "not_in_human_mode": 0}
    if (~evaluated).any():
        anything = sample_actions(action_meant_ns, action_values, points[~evaluated], max_gap_ns)
        some_action = np.all(np.isfinite(anything), axis=2).any(axis=1)
        skipped["not_in_human_mode"] = int(some_action.sum()) if not action_human.all() else 0
        skipped["no_human_action"] = int((~evaluated).sum()) - skipped["not_in_human_mode"]

    valid_errors = errors[valid_point]  # (P, n)
    per_joint = {name: _error_stats(valid_errors[:, j]) for j, name in enumerate(pred.joint_names)}
    by_index = []
    for index in range(k):
        stats = _error_stats(errors[:, index][valid_point[:, index]])
        by_index.append({"k": index, "t_s": float(pred.times_s[index]), **stats})

    # Lag: compare with the recording shifted; the best lag has the smallest RMSE among lags that
    # still cover at least half the points of the best-covered lag (edges of the bag lose points).
    def at_lag(lag: float) -> dict[str, float | int]:
        shifted = sample_actions(human_times, human_values, points + int(round(lag * NS_PER_S)), max_gap_ns)
        # Squared errors summed over joints: a point with any NaN joint is NaN, so it drops out.
        squared = np.square(pred.targets - shifted, out=shifted).sum(axis=2)
        ok = np.isfinite(squared)
        count = int(ok.sum())
        rmse = float(np.sqrt(squared[ok].sum() / (count * n))) if count else float("nan")
        return {"lag_s": float(lag), "rmse": rmse, "points": count}

    # Two threads share the lags: numpy releases the GIL in the gathers and products that make
    # up nearly all of each lag's work, and nothing else runs once the replay is done.
    with ThreadPoolExecutor(max_workers=_LAG_THREADS, thread_name_prefix="replay-lag") as pool:
        curve = list(pool.map(at_lag, lags_s))
    most = max((c["points"] for c in curve), default=0)
    eligible = [c for c in curve if c["points"] > 0 and c["points"] >= 0.5 * most]
    best = None
    if eligible:
        # Ties (a recording that does not move has the same RMSE at every lag) go to the smallest |lag|.
        lowest = min(c["rmse"] for c in eligible)
        best = min((c for c in eligible if c["rmse"] <= lowest * (1 + 1e-6) + 1e-12), key=lambda c: abs(c["lag_s"]))
    spread = (max(c["rmse"] for c in eligible) - best["rmse"]) if best else float("nan")
    zero = min(curve, key=lambda c: abs(c["lag_s"])) if curve else None

    predicted_magnitude = np.abs(pred.targets - pred.observed_q[:, None, :])  # (N, K, n)
    human_magnitude = np.abs(human - pred.observed_q[:, None, :])
    pm = predicted_magnitude[np.all(np.isfinite(predicted_magnitude), axis=2)]
    hm = human_magnitude[np.all(np.isfinite(human_magnitude), axis=2)]
    top = float(max(pm.max() if pm.size else 0.0, hm.max() if hm.size else 0.0)) or 1e-3
    edges = np.linspace(0.0, top, HISTOGRAM_BINS + 1)

    jumps = chunk_boundary_jumps(pred)
    flat_errors = valid_errors.ravel()
    error_edges = _histogram_edges(flat_errors)
    metrics = {
        "points_evaluated": int(valid_point.sum()),
        "frames": {"predicted": int(len(pred.stamps_ns)), "evaluated": int(evaluated.sum()), "skipped": skipped},
        "overall": _error_stats(valid_errors),
        "per_joint": per_joint,
        "by_chunk_index": by_index,
        "lag": {
            "best_lag_s": best["lag_s"] if best else None,
            "rmse_at_best": best["rmse"] if best else None,
            "rmse_at_zero": zero["rmse"] if zero else None,
            # The lag is only identifiable when shifting the recording changes the error noticeably.
            "identifiable": bool(best is not None and spread > 0.1 * max(best["rmse"], 1e-9) and spread > 1e-6),
            "curve": curve,
        },
        "action_magnitude": {
            "definition": "|target - joint position at the observation| per joint and chunk point [rad]",
            "predicted": _summary(pm),
            "human": _summary(hm),
            "per_joint_mean": {
                name: {"predicted": float(pm[:, j].mean()) if pm.size else float("nan"),
                       "human": float(hm[:, j].mean()) if hm.size else float("nan")}
                for j, name in enumerate(pred.joint_names)},
            "histogram": {"edges": edges.tolist(), "predicted": np.histogram(pm, edges)[0].tolist(),
                          "human": np.histogram(hm, edges)[0].tolist()},
        },
        "chunk_boundary_jumps": {
            "definition": "|chunk i point - chunk i-1 interpolated at the same time| over their overlap [rad]",
            **_summary(jumps),
            "per_joint_mean": {name: float(jumps[:, j].mean()) if len(jumps) else float("nan")
                               for j, name in enumerate(pred.joint_names)},
        },
        "error_histogram": {
            "edges": error_edges.tolist(),
            "counts": np.histogram(flat_errors, error_edges)[0].tolist() if flat_errors.size else [],
        },
    }
    return Comparison(human, errors, evaluated, metrics)
