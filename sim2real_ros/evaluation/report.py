"""The replay report: report.json (every metric), report.md (tables a person reads), PNG plots."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import NS_PER_S, Comparison, Predictions

REPORT_JSON = "report.json"
REPORT_MD = "report.md"


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN/Inf become null, numpy scalars and arrays plain Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def write_report(report: dict[str, Any], report_dir: Path, comparison: Comparison | None = None,
                 predictions: Predictions | None = None, plots: bool = True) -> dict[str, Any]:
    """Write report.json, report.md and (plots) the PNGs into report_dir; returns the JSON content
    (with the plot file names under "plots")."""
    report_dir.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    if plots and comparison is not None and predictions is not None and len(predictions.stamps_ns):
        files = write_plots(report_dir, comparison, predictions)
    report = _clean({**report, "plots": files})
    (report_dir / REPORT_JSON).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    (report_dir / REPORT_MD).write_text(markdown(report))
    return report


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _mrad(value: Any) -> str:
    """An angle [rad] shown in milliradians (errors of a good policy are a few mrad)."""
    return "–" if value is None else f"{1e3 * float(value):.3f}"


def markdown(report: dict[str, Any]) -> str:
    """report.md: summary, per-joint errors, error by chunk index, lag, magnitudes, jumps, skips."""
    metrics = report.get("metrics", {})
    frames = report.get("frames", {})
    lines = [
        f"# Replay report: {Path(str(report.get('checkpoint', ''))).name} on {Path(str(report.get('bag', ''))).name}",
        "",
        f"- mode: **{report.get('mode')}**, checkpoint hash `{report.get('checkpoint_hash')}`",
        f"- bag: `{report.get('bag')}` ({_fmt(report.get('bag_duration_s'), 1)} s)",
        f"- compared with: `{report.get('topics', {}).get('action')}` "
        f"({'commands sent in ' + ', '.join(report.get('options', {}).get('human_modes', [])) if report.get('options', {}).get('human_modes') else 'every command'}), "  # noqa: E501
        f"aligned at send time + {report.get('options', {}).get('actuation_latency_s')} s",
        f"- frames: {frames.get('images')} images, **{frames.get('evaluated')} evaluated**, "
        f"{frames.get('skipped_total')} skipped",
        f"- overall: MAE **{_mrad(metrics.get('overall', {}).get('mae'))} mrad**, "
        f"RMSE {_mrad(metrics.get('overall', {}).get('rmse'))} mrad over {metrics.get('points_evaluated')} "
        f"chunk points",
        "",
        "## Error per joint [mrad] (predicted - recorded)",
        "",
        "| joint | MAE | RMSE | bias | p99 abs | max abs | points |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, stats in metrics.get("per_joint", {}).items():
        lines.append(f"| {name} | {_mrad(stats['mae'])} | {_mrad(stats['rmse'])} | {_mrad(stats['bias'])} | "
                     f"{_mrad(stats['p99_abs'])} | {_mrad(stats['max_abs'])} | {stats['points']} |")
    lines += ["", "## Error by chunk index [mrad]", "", "| k | t [s] | MAE | RMSE | points |",
              "|---|---|---|---|---|"]
    for row in metrics.get("by_chunk_index", []):
        lines.append(f"| {row['k']} | {_fmt(row['t_s'], 3)} | {_mrad(row['mae'])} | {_mrad(row['rmse'])} | "
                     f"{row['points']} |")
    lag = metrics.get("lag", {})
    caveat = "" if lag.get("identifiable") else (
        " The RMSE hardly changes with the lag (the recording barely moves), so this lag means little.")
    lines += ["", "## Lag", "",
              f"Best alignment at lag **{_fmt(lag.get('best_lag_s'), 3)} s** (RMSE {_mrad(lag.get('rmse_at_best'))} "
              f"mrad; at 0 s: {_mrad(lag.get('rmse_at_zero'))} mrad). A positive lag means the recording does what "
              f"the policy predicts that much later.{caveat}"]
    magnitude = metrics.get("action_magnitude", {})
    lines += ["", "## Action magnitude |target - q at the observation| [mrad]", "",
              "| | mean | p50 | p90 | p99 | max |", "|---|---|---|---|---|---|"]
    for who in ("predicted", "human"):
        stats = magnitude.get(who, {})
        lines.append(f"| {who} | {_mrad(stats.get('mean'))} | {_mrad(stats.get('p50'))} | {_mrad(stats.get('p90'))} | "
                     f"{_mrad(stats.get('p99'))} | {_mrad(stats.get('max'))} |")
    jumps = metrics.get("chunk_boundary_jumps", {})
    lines += ["", "## Jumps at chunk boundaries [mrad]", "",
              f"mean {_mrad(jumps.get('mean'))}, p99 {_mrad(jumps.get('p99'))}, max {_mrad(jumps.get('max'))} "
              f"over {jumps.get('count')} overlapping points"]
    lines += ["", "## Skipped frames", "", "| reason | frames |", "|---|---|"]
    for reason, count in sorted(frames.get("skipped", {}).items()):
        lines.append(f"| {reason} | {count} |")
    problems = report.get("recording_problems") or {}
    if problems:
        lines += ["", "## Dropped recorded messages", "", "| problem | messages |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(problems.items())]
    if report.get("graph"):
        lines += ["", "## Graph", "", "```", json.dumps(report["graph"], indent=2), "```"]
    if report.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in report["plots"]]
    return "\n".join(lines) + "\n"


def write_plots(report_dir: Path, comparison: Comparison, predictions: Predictions) -> list[str]:
    """predicted_vs_recorded.png (per joint over time), error_histogram.png, error_by_chunk_index.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = predictions.joint_names
    t0 = int(predictions.stamps_ns[0])
    points_s = (predictions.point_times_ns - t0) / NS_PER_S
    files = []

    fig, axes = plt.subplots(len(names), 1, figsize=(10, 2.0 * len(names)), sharex=True, squeeze=False)
    last = predictions.targets.shape[1] - 1
    for j, name in enumerate(names):
        ax = axes[j, 0]
        human = comparison.human_at_points[:, 0, j]
        ax.plot(points_s[:, 0], human, color="black", lw=1.5, label="recorded (k=0 time)")
        ax.plot(points_s[:, 0], predictions.targets[:, 0, j], ".", ms=3, color="tab:blue", label="predicted k=0")
        ax.plot(points_s[:, last], predictions.targets[:, last, j], ".", ms=3, color="tab:orange",
                label=f"predicted k={last}")
        ax.set_ylabel(f"{name} [rad]")
    axes[0, 0].legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("time since first observation [s]")
    fig.tight_layout()
    fig.savefig(report_dir / "predicted_vs_recorded.png", dpi=80)
    plt.close(fig)
    files.append("predicted_vs_recorded.png")

    errors = comparison.errors[np.all(np.isfinite(comparison.errors), axis=2)]
    fig, ax = plt.subplots(figsize=(7, 4))
    if errors.size:
        for j, name in enumerate(names):
            ax.hist(errors[:, j], bins=40, histtype="step", label=name)
        ax.legend(fontsize=7)
    ax.set_xlabel("predicted - recorded [rad]")
    ax.set_ylabel("points")
    fig.tight_layout()
    fig.savefig(report_dir / "error_histogram.png", dpi=80)
    plt.close(fig)
    files.append("error_histogram.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    absolute = np.abs(comparison.errors)
    with np.errstate(invalid="ignore"):
        by_k = np.array([np.nanmean(absolute[:, k]) if np.isfinite(absolute[:, k]).any() else np.nan
                         for k in range(absolute.shape[1])])
    ax.plot(predictions.times_s, by_k, "o-")
    ax.set_xlabel("chunk point time k*dt [s]")
    ax.set_ylabel("MAE [rad]")
    fig.tight_layout()
    fig.savefig(report_dir / "error_by_chunk_index.png", dpi=80)
    plt.close(fig)
    files.append("error_by_chunk_index.png")
    return files
