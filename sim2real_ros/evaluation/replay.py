"""`evaluate_bag`: a checkpoint against a recorded bag, offline or through the running graph."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..bags import BagReader
from ..core.policy.backend import load_policy
from ..episodes.bag_source import find_topics
from ..episodes.options import MODES, ReplayOptions
from .metrics import NS_PER_S, compare
from .replay_offline import ReplayRun, check_policy_against_bag, preprocess_for, replay_offline
from .report import _clean, write_report

# (bag, checkpoint, loaded policy, options, log_dir) -> (run, graph info): runtime.replay_graph.replay_graph.
GraphReplay = Callable[..., tuple[ReplayRun, dict[str, Any]]]


def evaluate_bag(bag: Path, checkpoint: Path, mode: str = "offline", report_dir: Path | None = None,
                 options: ReplayOptions | None = None, *, graph_replay: GraphReplay | None = None) -> dict[str, Any]:
    """Replay `bag` through `checkpoint` and compare the predicted chunks with the recorded actions.

    mode: "offline" (the core code, no ROS) or "graph" (the bag played into the replay graph's
    nodes by `graph_replay`, which the runtime layer provides: `runtime.replay_graph.evaluate_bag_in_graph`
    passes it). report_dir: where report.json, report.md and the plots go (None: nothing written).
    Returns the report.json content. Raises MissingTopicsError (a BagError) when the bag lacks a
    needed topic, CheckpointError for a bad checkpoint, ConfigError for bad options.
    """
    if mode not in MODES:
        raise ValueError(f"unknown replay mode {mode!r}; choose one of {MODES}")
    if mode == "graph" and graph_replay is None:
        raise ValueError("graph mode needs graph_replay: use runtime.replay_graph.evaluate_bag_in_graph")
    options = options or ReplayOptions()
    bag, checkpoint = Path(bag), Path(checkpoint)
    started = time.perf_counter()
    policy = load_policy(checkpoint, backend=options.backend, device=options.device,
                         num_threads=options.num_threads or None)
    graph_info: dict[str, Any] | None = None
    if mode == "offline":
        run = replay_offline(bag, policy, options)
    else:
        with BagReader(bag) as reader:  # offline, replay_offline checks this itself
            check_policy_against_bag(policy, reader, find_topics(reader, options), preprocess_for(policy, options))
        run, graph_info = graph_replay(bag, checkpoint, policy, options, log_dir=report_dir)
    report, comparison = build_report(run, options)
    report.update({
        "bag": str(bag), "checkpoint": str(checkpoint), "checkpoint_hash": policy.checkpoint_hash,
        "backend": policy.backend, "mode": mode,
        "elapsed_s": time.perf_counter() - started,
    })
    if graph_info is not None:
        report["graph"] = graph_info
    if report_dir is not None:
        return write_report(report, Path(report_dir), comparison, run.predictions, plots=options.plots)
    return _clean({**report, "plots": []})


def build_report(run: ReplayRun, options: ReplayOptions):
    """(report dict without bag/checkpoint identity, Comparison) of a replay run."""
    recording = run.recording
    latency_ns = int(round(options.actuation_latency_s * NS_PER_S))
    lags = np.arange(options.lag_min_s, options.lag_max_s + options.lag_step_s / 2, options.lag_step_s)
    comparison = compare(run.predictions, recording.action_send_ns + latency_ns, recording.action_values,
                         recording.action_human, int(round(options.action_tolerance_s * NS_PER_S)), lags)
    metrics = comparison.metrics
    skipped = dict(run.skipped)
    skipped.update({k: v for k, v in metrics["frames"]["skipped"].items()})
    skipped = {k: int(v) for k, v in skipped.items()}
    evaluated = metrics["frames"]["evaluated"]
    if evaluated == 0:
        print(f"[replay] warning: no frame could be compared (skipped: {skipped})", file=sys.stderr, flush=True)
    duration = ((run.bag_end_ns - run.bag_start_ns) / NS_PER_S
                if run.bag_start_ns is not None and run.bag_end_ns is not None else None)
    end_ns = int(run.predictions.stamps_ns[-1]) if len(run.predictions.stamps_ns) else 0
    report = {
        "options": options.to_dict(),
        "topics": run.topics.as_dict(),
        "bag_duration_s": duration,
        "clock": {"log_minus_stamp_s": recording.clock.offset_ns / NS_PER_S,
                  "log_times_shifted": recording.clock.applied, "joint_states": recording.clock.samples},
        "frames": {
            "images": run.images_total,
            "predicted": metrics["frames"]["predicted"],
            "evaluated": evaluated,
            "skipped": skipped,
            "skipped_total": int(sum(skipped.values())),
        },
        "recorded": {
            "joint_states": int(len(recording.joint_stamps_ns)),
            "actions": int(len(recording.action_send_ns)),
            "human_actions": int(recording.action_human.sum()),
            "mode_time_s": recording.mode_durations_s(end_ns) if len(recording.modes) else {},
        },
        "recording_problems": dict(recording.problems),
        "metrics": {k: v for k, v in metrics.items() if k != "frames"},
        "stats": run.stats,
    }
    return report, comparison
