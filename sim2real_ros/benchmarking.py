"""What every benchmark script shares: latency statistics and the --quick/--json command line."""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def latency_stats(values_ms: Sequence[float] | np.ndarray, digits: int = 4) -> dict[str, float]:
    """p50, p90, p99, max, spread (interquartile range) and count of durations [ms]."""
    v = np.asarray(values_ms, dtype=float)
    if v.size == 0:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "max": float("nan"),
                "spread_iqr": float("nan"), "n": 0}
    q25, q50, q75, q90, q99 = np.percentile(v, [25, 50, 75, 90, 99])
    return {"p50": round(float(q50), digits), "p90": round(float(q90), digits), "p99": round(float(q99), digits),
            "max": round(float(v.max()), digits), "spread_iqr": round(float(q75 - q25), digits), "n": int(v.size)}


def bench_main(run: Callable[[bool], dict[str, Any]], description: str, argv: list[str] | None = None) -> int:
    """`script [--quick] [--json OUT]`: run the benchmark, print its figures as JSON, maybe save them."""
    parser = argparse.ArgumentParser(description=description.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials (a smoke run, noisier figures)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    results = run(args.quick)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0
