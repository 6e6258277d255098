"""The validation report: report.md (verdict, stages, sim-vs-real table) and its plots.

The sim stages show each measured path (full ROS graph, core path) with its interval; the gated
figure is the graph's (validation.gates.sim_success_stage). The sim-vs-real table has a graph and a
core column for nominal and perturbed sim; a path that was not run shows n/a.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

REPORT_MD = "report.md"
COLUMNS = (("sim_nominal_graph", "sim nominal (graph)"), ("sim_nominal", "sim nominal (core)"),
           ("sim_perturbed_graph", "sim perturbed (graph)"), ("sim_perturbed", "sim perturbed (core)"),
           ("real", "real"), ("robot_sim", "robot stand-in (closed loop)"))
# Which stage's threshold each sim column is held to (the plot's red lines).
COLUMN_STAGE = {"sim_nominal_graph": "nominal_sim", "sim_nominal": "nominal_sim",
                "sim_perturbed_graph": "perturbed_sim", "sim_perturbed": "perturbed_sim",
                "robot_sim": "robot_closed_loop"}
PERCENTILES = ("p50", "p90", "p99", "max")


def _rate(cell: dict[str, Any] | None) -> str:
    if not cell or cell.get("rate") is None:
        return "n/a"
    lo, hi = cell.get("ci95") or (None, None)
    return f"{cell['rate']:.0%} [{lo:.2f}, {hi:.2f}] (n={cell.get('episodes')})"


def _stats(cell: dict[str, Any] | None, scale: float = 1.0, unit: str = "") -> str:
    if not cell or cell.get("mean") is None:
        return "n/a"
    return (f"mean {cell['mean'] * scale:.2f}{unit}, p50 {cell['p50'] * scale:.2f}, p90 {cell['p90'] * scale:.2f}, "
            f"max {cell['max'] * scale:.2f}")


def _failures(cell: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((cell or {}).items())) or "none"


def _path_cells(paths: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The figure and interval cells of a sim stage: one entry per path, the graph first."""
    figures, bounds = [], []
    for name in ("graph", "core"):
        cell = paths.get(name)
        if cell is None:
            figures.append(f"{name}: not run")
            continue
        if cell.get("figure") is None:
            figures.append(f"{name}: failed to run" if cell.get("error") else f"{name}: n/a")
            continue
        lo, hi = cell["interval"]
        figures.append(f"{name}: {cell['figure']:.0%} ({cell['successes']}/{cell['episodes']})")
        bounds.append(f"{name}: {lo:.2f}-{hi:.2f}")
    return "; ".join(figures), "; ".join(bounds) or "n/a"


def markdown(report: dict[str, Any], plots: list[str]) -> str:
    table = report["sim_vs_real"]
    lines = [
        f"# Validation: {Path(report['checkpoint']).name} (`{report.get('checkpoint_hash')}`)", "",
        f"**Verdict: {report['verdict_text']}** — {report['reason']}", "",
        "## Stages", "",
        "| stage | figure | 95% interval | threshold | gate rule | result |", "|---|---|---|---|---|---|",
    ]
    for stage in report["stages"]:
        success = stage["kind"] == "success_rate"
        figure, interval = stage["figure"], stage["interval"]
        paths = stage.get("paths") or {}
        if paths:
            shown, bounds = _path_cells(paths)
        elif figure is None:
            shown, bounds = "n/a", "n/a"
        elif success:
            shown, bounds = f"{figure:.0%}", f"{interval[0]:.2f}-{interval[1]:.2f}"
        else:
            shown, bounds = f"{figure * 1e3:.1f} mrad", f"{interval[0] * 1e3:.1f}-{interval[1] * 1e3:.1f} mrad"
        threshold = f"{stage['threshold']:.2f}" if success else f"{stage['threshold'] * 1e3:.1f} mrad"
        rule = "lower bound >= threshold" if success else "upper bound <= threshold"
        if paths:
            rule = "graph measured, and every measured lower bound >= threshold"
        if stage["passed"]:
            result = "pass"
        elif not stage["ran"]:
            result = f"FAIL ({stage['note']})" if paths else f"FAIL (not run: {stage['note']})"
        else:
            result = f"FAIL ({stage['note']})" if stage["note"] else "FAIL"
        lines.append(f"| {stage['title']} | {shown} | {bounds} | {threshold} | {rule} | {result} |")
    lines += ["", "## Sim vs real", "",
              "| | " + " | ".join(title for _, title in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|",
              "| task success rate [95% CI] | "
              + " | ".join(_rate(table["success_rate"].get(c)) for c, _ in COLUMNS) + " |",
              "| episode length [s] | "
              + " | ".join(_stats(table["episode_length_s"].get(c)) for c, _ in COLUMNS) + " |",
              "| action magnitude [mrad] (per chunk: max abs(target - q)) | "
              + " | ".join(_stats(table["action_magnitude_rad"].get(c), 1e3) for c, _ in COLUMNS) + " |",
              "| failure categories | "
              + " | ".join(_failures(table["failures"].get(c)) if (table["success_rate"].get(c) or {}).get("rate")
                           is not None else "n/a" for c, _ in COLUMNS) + " |",
              "",
              f"Human commands on the real bags, same definition: "
              f"{_stats(table['action_magnitude_rad'].get('real_human'), 1e3)} mrad.", "",
              "Graph: the full ROS graph, nodes as processes over DDS (what runs on the robot); core: the same "
              "policy called in one process, no ROS. The graph evaluation does not measure action magnitudes.", "",
              "Real success counts the episodes the policy started (sim/episode outcomes in the bags); a person "
              "taking over ends the attempt (taken_over). Demonstrations: "
              f"{report['real_episodes']['demonstrations']['episodes']} episode(s), not counted.", "",
              "## Failure modes", "", report["failure_modes"]["message"], ""]
    if report.get("disagreement"):
        lines += ["## Offline error and closed-loop success disagree", "", report["disagreement"], ""]
    replay = next((s["details"].get("replay") for s in report["stages"] if s["stage"] == "real_offline"), None) or {}
    if replay.get("bags"):
        lines += ["## Real bags (offline replay against the human's commands)", "",
                  "| bag | frames evaluated | MAE [mrad] | RMSE [mrad] |", "|---|---|---|---|"]
        for bag in replay["bags"]:
            mae, rmse = (("n/a" if v is None else f"{v * 1e3:.1f}") for v in (bag.get("mae_rad"), bag.get("rmse_rad")))
            lines.append(f"| {Path(bag['bag']).name} | {bag['frames_evaluated']} | {mae} | {rmse} |")
        lines.append("")
        for bag, problem in (replay.get("problems") or {}).items():
            lines.append(f"- {bag}: {problem}")
    if plots:
        lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
    lines += [f"Per-bag replay reports: `replay/<bag>/report.md`. Gates: `{report['gates']['source']}`.", ""]
    return "\n".join(lines)


def write_plots(report: dict[str, Any], out: Path) -> list[str]:
    """success_rates.png (each stage's rate with its 95% interval) and action_magnitude.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = report["sim_vs_real"]
    files = []
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for x, (column, _title) in enumerate(COLUMNS):
        cell = table["success_rate"].get(column) or {}
        if cell.get("rate") is None:
            ax.text(x, 0.05, "n/a", ha="center")
            continue
        lo, hi = cell["ci95"]
        color = "tab:orange" if column == "real" else ("tab:green" if column.endswith("_graph") else "tab:blue")
        ax.bar(x, cell["rate"], color=color, alpha=0.7)
        # max(0, ...): the Wilson bound of 10/10 is 1 - 1e-16, not 1.
        ax.errorbar(x, cell["rate"], yerr=[[max(0.0, cell["rate"] - lo)], [max(0.0, hi - cell["rate"])]], color="k",
                    capsize=6)
    thresholds = {s["stage"]: s["threshold"] for s in report["stages"] if s["kind"] == "success_rate"}
    for x, (column, _title) in enumerate(COLUMNS):
        if COLUMN_STAGE.get(column) in thresholds:
            ax.hlines(thresholds[COLUMN_STAGE[column]], x - 0.4, x + 0.4, colors="r", linestyles="--")
    ax.set_xticks(range(len(COLUMNS)), [title.replace(" (", "\n(") for _, title in COLUMNS], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate (95% Wilson CI; red: gate)")
    fig.tight_layout()
    fig.savefig(out / "success_rates.png", dpi=100)
    plt.close(fig)
    files.append("success_rates.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    columns = [*COLUMNS, ("real_human", "real (human)")]
    for column, title in columns:
        cell = table["action_magnitude_rad"].get(column) or {}
        values = [cell.get(p) for p in PERCENTILES]
        if any(v is None for v in values):
            continue
        ax.plot(PERCENTILES, [1e3 * v for v in values], marker="o", label=title)
    ax.set_ylabel("per-chunk max |target - q| [mrad]")
    ax.set_xlabel("percentile")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "action_magnitude.png", dpi=100)
    plt.close(fig)
    files.append("action_magnitude.png")
    return files


def write_validation_report(report: dict[str, Any], out: Path, plots: bool = True) -> list[str]:
    """Write report.md (and the plots); returns the plot file names."""
    files = write_plots(report, out) if plots else []
    (out / REPORT_MD).write_text(markdown(report, files))
    return files
