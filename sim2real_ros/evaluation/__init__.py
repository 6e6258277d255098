"""Evaluation of checkpoints against recorded bags (replay) and in the graph.

`evaluate_bag(bag, checkpoint, mode="offline"|"graph", report_dir, options)` is the entry point;
`ReplayOptions` its options. Imported lazily so that importing a submodule stays cheap (no torch).
"""
from __future__ import annotations

from typing import Any

__all__ = ["ReplayOptions", "evaluate_bag"]


def __getattr__(name: str) -> Any:
    if name == "ReplayOptions":
        from ..episodes.options import ReplayOptions

        return ReplayOptions
    if name == "evaluate_bag":
        from .replay import evaluate_bag

        return evaluate_bag
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
