"""What `sysid fit` writes: a new versioned sim params YAML and a report (JSON, Markdown, PNG plots).

The params file is the input file's mapping with the fitted, identifiable values put into the
`actuator` section (per-joint values become {default: ..., joint: value} mappings) and a
`provenance.sysid` record (bag, base params version, what was fitted, what was not identifiable,
held-out errors). Its version is the content hash of that mapping, as for any sim params file;
load_sim_params ignores the unknown `provenance` key.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..core.hashing import content_hash
from ..sim.params import SimParams, load_sim_params
from .fit import FitResult
from .latency import SysidError

HEADER = ("# Sim parameters fitted by `sim2real sysid fit` (see provenance.sysid).\n"
          "# version (content hash of this mapping): {version}\n")


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def fitted_mapping(result: FitResult, params: SimParams, bag: str, extra: dict[str, Any] | None = None) -> dict:
    """The new sim params mapping (see the module doc)."""
    data = copy.deepcopy(params.to_dict())
    actuator = data.setdefault("actuator", {})
    # Every parameter's written value: fitted, or nominal where the data could not determine it.
    for p in result.parameters:
        if p.kind == "latency":
            actuator["actuation_latency_s"] = _round(p.value)
            continue
        current = actuator.get(p.kind)
        if not isinstance(current, dict):
            current = {"default": current}
        current[p.joint] = _round(p.value)
        actuator[p.kind] = current
    after, before = result.errors["after"]["holdout"], result.errors["before"]["holdout"]
    record = {
        "bag": str(bag),
        "bag_origin_ns": int(result.data.origin_ns),
        "base_params": {"source": params.source, "version": params.version},
        "method": result.method,
        "joints": list(result.fitted_joints),
        "fitted": sorted({f"{p.kind}.{p.joint}" if p.joint else "actuation_latency_s"
                          for p in result.parameters if p.identifiable}),
        "not_identifiable": result.not_identifiable,
        "holdout_normalized_mse": {"before": _round(before["normalized_mse"]),
                                   "after": _round(after["normalized_mse"])},
        **(extra or {}),
    }
    provenance = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    provenance = dict(provenance)
    provenance["sysid"] = record
    data["provenance"] = provenance
    return data


def write_fitted_params(result: FitResult, params: SimParams, bag: str, out: str | Path,
                        extra: dict[str, Any] | None = None) -> str:
    """Write the fitted params YAML; returns its version. The file is loaded back and validated."""
    out = Path(out)
    mapping = fitted_mapping(result, params, bag, extra)
    version = content_hash(mapping)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(HEADER.format(version=version) + yaml.safe_dump(mapping, sort_keys=False))
    loaded = load_sim_params(out)
    if loaded.version != version:
        raise SysidError(f"{out}: written params hash to {loaded.version}, expected {version}")
    return version


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def report_markdown(result: FitResult, version: str | None, bag: str) -> str:
    lines = [f"# sysid fit: {bag}", "",
             f"- method: {result.method}; fitted joints: {', '.join(result.fitted_joints)}",
             f"- time base: {result.data.time_source} ({result.data.time_source_reason}); "
             f"{result.data.duration_s:.1f} s, held out from {result.data.split_t:.1f} s",
             f"- new sim params version: {version or '-'}", "",
             "## Held-out error (PyBullet replay)", "",
             "| joint | RMS before [rad] | RMS after [rad] |", "|---|---|---|"]
    before, after = result.errors["before"]["holdout"], result.errors["after"]["holdout"]
    for name in result.joint_names:
        lines.append(f"| {name} | {_fmt(before['rms_rad'][name])} | {_fmt(after['rms_rad'][name])} |")
    ratio = after["normalized_mse"] / before["normalized_mse"] if before["normalized_mse"] > 0 else float("nan")
    lines += ["", f"Normalized MSE before {_fmt(before['normalized_mse'])}, after {_fmt(after['normalized_mse'])} "
              f"(after/before = {_fmt(ratio, '.3f')}); over the fitted joints "
              f"{_fmt(before['fitted_joints_normalized_mse'])} -> {_fmt(after['fitted_joints_normalized_mse'])}.",
              "", "## Parameters", "",
              "| parameter | nominal | fitted | written | effect of +/-20 % (10 ms) | status |",
              "|---|---|---|---|---|---|"]
    for p in result.parameters:
        name = "actuation_latency_s" if p.kind == "latency" else f"{p.kind}.{p.joint}"
        fitted = _fmt(p.fitted) if p.identifiable else "not identifiable"
        status = "identified" if p.identifiable else f"not identifiable: {p.reason}"
        lines.append(f"| {name} | {_fmt(p.nominal)} | {fitted} | {_fmt(p.value)} | {p.effect:.2%} | {status} |")
    if result.notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in result.notes]]
    lines += ["", "Plots: " + ", ".join(f"fit_{n}.png" for n in result.joint_names), ""]
    return "\n".join(lines)


def plot_joints(result: FitResult, directory: Path) -> list[Path]:
    """One PNG per joint: recorded, nominal sim and fitted sim positions, the held-out part shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = result.data
    paths = []
    for j, name in enumerate(result.joint_names):
        fig, ax = plt.subplots(figsize=(10, 3.5))
        ax.axvspan(data.split_t, data.duration_s, color="0.92", label="held out")
        ax.step(data.command_t, data.commands[:, j], where="post", color="0.6", lw=0.8, label="command")
        ax.plot(data.state_t, data.states[:, j], color="k", lw=1.2, label="recorded")
        ax.plot(data.state_t, result.traces["before"][:, j], color="tab:red", lw=0.9, ls="--", label="sim, nominal")
        ax.plot(data.state_t, result.traces["after"][:, j], color="tab:blue", lw=0.9, label="sim, fitted")
        ax.set_xlim(0, data.duration_s)
        ax.set_xlabel("time [s]")
        ax.set_ylabel(f"{name} [rad]")
        ax.legend(loc="upper right", fontsize=7, ncol=5)
        fig.tight_layout()
        path = directory / f"fit_{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(result: FitResult, directory: str | Path, bag: str, version: str | None,
                 extra: dict[str, Any] | None = None) -> list[Path]:
    """report.json, report.md and fit_<joint>.png in `directory` (created)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = result.to_dict() | {"bag": str(bag), "params_version": version, **(extra or {})}
    (directory / "report.json").write_text(json.dumps(_jsonable(data), indent=2))
    (directory / "report.md").write_text(report_markdown(result, version, bag))
    return [directory / "report.json", directory / "report.md", *plot_joints(result, directory)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    return value
