"""Small statistics shared by evaluation, validation and reports."""
from __future__ import annotations

import math

import numpy as np


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval (lower, upper) of a success rate; (0, 1) for zero trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1.0 + z * z / trials
    center = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def summary(values: np.ndarray | list[float]) -> dict[str, float]:
    """mean, std, p50, p90, p99, max of a sample (empty -> NaNs)."""
    a = np.asarray(values, dtype=float).ravel()
    if a.size == 0:
        return {k: float("nan") for k in ("mean", "std", "p50", "p90", "p99", "max")}
    return {"mean": float(a.mean()), "std": float(a.std()), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def success_by_pushes(rows: list[dict]) -> dict[str, dict]:
    """Success counted separately over episodes in which at least one push started ("pushed") and
    the others ("unpushed"): rows need "success" and "pushes_applied". Each group: episodes,
    successes, success_rate (None when empty) and the Wilson ci95."""
    groups: dict[str, dict] = {}
    for name, keep in (("pushed", lambda n: n > 0), ("unpushed", lambda n: n <= 0)):
        chosen = [r for r in rows if keep(int(r.get("pushes_applied", 0)))]
        wins = sum(bool(r["success"]) for r in chosen)
        groups[name] = {"episodes": len(chosen), "successes": wins,
                        "success_rate": wins / len(chosen) if chosen else None,
                        "ci95": list(wilson_interval(wins, len(chosen)))}
    return groups
