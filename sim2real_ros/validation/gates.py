"""Validation gates (config/gates.yaml) and the verdict: pure logic, no sim, no ROS.

Each stage yields one figure with a 95% interval. A success-rate gate passes only when the
interval's lower bound reaches the threshold; an error gate only when the upper bound stays at or
under it. So a gate passes on evidence, not on a lucky small sample.

The sim stages (1 and 2) can measure success on two paths: "graph" (the full ROS graph, nodes as
processes over DDS: what runs on the robot) and "core" (the same policy and preprocessing called
in one process, no ROS). The graph is the product, so its figure is the stage's figure, and
`sim_success_stage` passes a stage only when the graph figure exists and every path that was
measured clears the threshold: with both measured, both Wilson lower bounds must reach it. A
stage with only the core figure fails ("graph figure missing"): a gate cannot pass on the core
path alone.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..core.errors import ConfigError
from ..core.schema import validate
from ..core.stats import wilson_interval
from ..paths import config_path

READY = "ready"
NOT_READY = "not_ready"
STAGES = ("nominal_sim", "perturbed_sim", "real_offline")
# Run only when asked for (`validate --robot-sim`: a closed-loop stage on a sim variant standing in
# for the robot when none is attached); when it ran, the verdict counts it like the others.
OPTIONAL_STAGES = ("robot_closed_loop",)
STAGE_TITLES = {"nominal_sim": "stage 1: nominal sim success", "perturbed_sim": "stage 2: perturbed sim success",
                "real_offline": "stage 3: offline action error on real bags",
                "robot_closed_loop": "stage 4: closed-loop success on the robot stand-in"}
# The paths a sim stage can measure success on; GATED_PATH's figure is the stage's figure.
SIM_PATHS = ("graph", "core")
GATED_PATH = "graph"
PATH_TITLES = {"graph": "full ROS graph", "core": "core path"}


@dataclass(frozen=True)
class SimGate:
    """episodes to run; min_success_rate the Wilson 95% lower bound must reach."""

    episodes: int = 30
    min_success_rate: float = 0.8


@dataclass(frozen=True)
class PerturbedGate(SimGate):
    """Plus what is added to the sim's randomization: extra_latency_s [s] to the actuation
    latency range, extra_noise_std [0-255] to the camera noise range."""

    min_success_rate: float = 0.6
    extra_latency_s: float = 0.02
    extra_noise_std: float = 3.0


@dataclass(frozen=True)
class RealGate:
    """max_action_mae_rad [rad]: the 95% upper bound of the action MAE must stay at or under it;
    min_frames: fewer evaluated frames fail; bootstrap_block_frames / bootstrap_samples: the
    block bootstrap of the interval."""

    max_action_mae_rad: float = 0.025
    min_frames: int = 30
    bootstrap_block_frames: int = 10
    bootstrap_samples: int = 1000


@dataclass(frozen=True)
class RobotGate(SimGate):
    """The closed-loop stage on a robot stand-in (`validate --robot-sim`): episodes, and the
    min_success_rate its Wilson 95% lower bound must reach (as stage 1's: the robot is the task)."""

    episodes: int = 20


@dataclass(frozen=True)
class Gates:
    nominal_sim: SimGate = field(default_factory=SimGate)
    perturbed_sim: PerturbedGate = field(default_factory=PerturbedGate)
    real_offline: RealGate = field(default_factory=RealGate)
    robot_closed_loop: RobotGate = field(default_factory=RobotGate)
    source: str = "defaults"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "nominal_sim": asdict(self.nominal_sim),
                "perturbed_sim": asdict(self.perturbed_sim), "real_offline": asdict(self.real_offline),
                "robot_closed_loop": asdict(self.robot_closed_loop)}


# Gate field -> (type, rules) for core.schema's validator (the node parameter files use the same);
# every other field is a finite number >= 0.
_FIELD_RULES: dict[str, tuple[str, dict[str, list]]] = {
    "episodes": ("integer", {"gt<>": [0]}),
    "bootstrap_block_frames": ("integer", {"gt<>": [0]}),
    "bootstrap_samples": ("integer", {"gt<>": [0]}),
    "min_frames": ("integer", {"gt_eq<>": [1]}),
    "min_success_rate": ("double", {"bounds<>": [0.0, 1.0]}),
    "max_action_mae_rad": ("double", {"gt<>": [0.0]}),
}
_OTHER_FIELDS = ("double", {"gt_eq<>": [0.0]})


def _check(source: str, section: str, gate: Any) -> None:
    for name, value in asdict(gate).items():
        kind, rules = _FIELD_RULES.get(name, _OTHER_FIELDS)
        validate(source, f"{section}.{name}", kind, value, rules)


def gates_from_dict(data: Any, source: str) -> Gates:
    """Validate a gates mapping; ConfigError names the file, the field and the value."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, "<file>", data, "expected a mapping of stages")
    unknown = sorted(set(data) - set(STAGES) - set(OPTIONAL_STAGES))
    if unknown:
        raise ConfigError(source, unknown[0], data[unknown[0]],
                          f"unknown stage; known: {list(STAGES) + list(OPTIONAL_STAGES)}")
    built = {}
    for section, cls in (("nominal_sim", SimGate), ("perturbed_sim", PerturbedGate), ("real_offline", RealGate),
                         ("robot_closed_loop", RobotGate)):
        values = data.get(section) or {}
        if not isinstance(values, dict):
            raise ConfigError(source, section, values, "must be a mapping")
        known = set(cls.__dataclass_fields__)
        bad = sorted(set(values) - known)
        if bad:
            raise ConfigError(source, f"{section}.{bad[0]}", values[bad[0]], f"unknown field; known: {sorted(known)}")
        gate = cls(**values)
        _check(source, section, gate)
        built[section] = gate
    return Gates(**built, source=source)


def load_gates(path: str | Path | None = None) -> Gates:
    """Read config/gates.yaml (or `path`); missing fields take the defaults above."""
    path = Path(path) if path else config_path("gates.yaml")
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(str(path), "<file>", None, f"cannot read gates: {err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(str(path), "<file>", None, f"not valid YAML: {err}") from err
    return gates_from_dict(data, str(path))


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PathFigure:
    """One path's success figure in a sim stage: successes of episodes, the rate and its Wilson
    95% interval (None when no episode ran; `error` says why, e.g. the graph did not come up)."""

    path: str
    successes: int
    episodes: int
    error: str = ""

    @property
    def rate(self) -> float | None:
        return self.successes / self.episodes if self.episodes > 0 else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.successes, self.episodes) if self.episodes > 0 else None

    def passes(self, threshold: float) -> bool:
        interval = self.interval
        return interval is not None and interval[0] >= threshold

    def describe(self, threshold: float) -> str:
        title = PATH_TITLES.get(self.path, self.path)
        if self.rate is None or self.interval is None:
            return f"{title} not evaluated ({self.error or 'no episodes'})"
        lo, hi = self.interval
        return (f"{title} {self.rate:.0%} {self.successes}/{self.episodes} (95% CI {lo:.2f}-{hi:.2f}), lower bound "
                f"{lo:.2f} {'>=' if self.passes(threshold) else '<'} threshold {threshold:.2f}")

    def to_dict(self, threshold: float) -> dict[str, Any]:
        return {"figure": self.rate, "interval": list(self.interval) if self.interval else None,
                "successes": self.successes, "episodes": self.episodes, "passed": self.passes(threshold),
                "error": self.error}


@dataclass(frozen=True)
class StageResult:
    """One stage's gate: figure with its 95% interval, the threshold, and whether it passed.

    kind: "success_rate" (pass: interval low >= threshold) or "action_error" (pass: interval high
    <= threshold). ran: False when the stage's figure could not be measured (then it fails, `note`
    says why). paths: for the sim stages, each measured path's figure (PathFigure; see
    sim_success_stage); figure and interval are then the graph path's, None when it is missing.
    """

    stage: str
    kind: str
    figure: float | None
    interval: tuple[float, float] | None
    threshold: float
    passed: bool
    ran: bool = True
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    paths: tuple[PathFigure, ...] = ()

    def path(self, name: str) -> PathFigure | None:
        return next((p for p in self.paths if p.path == name), None)

    def describe(self) -> str:
        """One line: the figure, its interval and the threshold it is held to."""
        if self.paths:
            measured = "; ".join(p.describe(self.threshold) for p in self.paths)
            return (f"{STAGE_TITLES[self.stage]}: {'pass' if self.passed else 'FAIL'}: {measured}"
                    + (f" ({self.note})" if self.note else ""))
        if not self.ran or self.figure is None:
            return f"{STAGE_TITLES[self.stage]}: not evaluated ({self.note})"
        lo, hi = self.interval or (math.nan, math.nan)
        if self.kind == "success_rate":
            return (f"{STAGE_TITLES[self.stage]}: {self.figure:.0%} (95% CI {lo:.2f}-{hi:.2f}); lower bound "
                    f"{lo:.2f} {'>=' if self.passed else '<'} threshold {self.threshold:.2f}")
        return (f"{STAGE_TITLES[self.stage]}: MAE {self.figure * 1e3:.1f} mrad (95% CI {lo * 1e3:.1f}-{hi * 1e3:.1f}); "
                f"upper bound {hi * 1e3:.1f} {'<=' if self.passed else '>'} threshold {self.threshold * 1e3:.1f} mrad"
                + (f" ({self.note})" if self.note else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "title": STAGE_TITLES[self.stage], "kind": self.kind, "figure": self.figure,
                "interval": list(self.interval) if self.interval else None, "threshold": self.threshold,
                "passed": self.passed, "ran": self.ran, "note": self.note, "summary": self.describe(),
                "paths": {p.path: p.to_dict(self.threshold) for p in self.paths}, "details": self.details}


def success_stage(stage: str, successes: int, episodes: int, threshold: float,
                  details: dict[str, Any] | None = None) -> StageResult:
    """A success-rate gate: passes only when the Wilson 95% lower bound >= threshold."""
    if episodes <= 0:
        return StageResult(stage, "success_rate", None, None, threshold, False, False, "no episodes", details or {})
    lo, hi = wilson_interval(successes, episodes)
    return StageResult(stage, "success_rate", successes / episodes, (lo, hi), threshold, lo >= threshold, True, "",
                       details or {})


def sim_success_stage(stage: str, threshold: float, paths: list[PathFigure],
                      details: dict[str, Any] | None = None) -> StageResult:
    """A sim stage measured on one or both paths (PathFigure: "graph", "core").

    Passes only when the graph figure is there and every measured path's Wilson 95% lower bound
    reaches the threshold (graph and core both, when both ran). The stage's figure and interval are
    the graph's; without a graph figure the stage fails with ran=False and a note saying so, even
    when the core figure clears the threshold.
    """
    unknown = [p.path for p in paths if p.path not in SIM_PATHS]
    if unknown or len({p.path for p in paths}) != len(paths):
        raise ValueError(f"paths must be distinct, of {SIM_PATHS}; got {[p.path for p in paths]}")
    ordered = tuple(sorted(paths, key=lambda p: SIM_PATHS.index(p.path)))
    graph = next((p for p in ordered if p.path == GATED_PATH), None)
    measured = [p for p in ordered if p.episodes > 0]
    failing = [PATH_TITLES[p.path] for p in measured if not p.passes(threshold)]
    if graph is None or graph.interval is None:
        why = "the graph evaluation failed" if graph is not None and graph.error else "the graph was not run"
        note = f"graph figure missing: {why}; the core path alone cannot pass the gate"
        return StageResult(stage, "success_rate", None, None, threshold, False, False, note, details or {}, ordered)
    errors = [f"{PATH_TITLES[p.path]}: {p.error}" for p in ordered if p.interval is None]
    note = "; ".join([*(f"{f} below the threshold" for f in failing if len(measured) > 1), *errors])
    return StageResult(stage, "success_rate", graph.rate, graph.interval, threshold,
                       not failing and not errors, True, note, details or {}, ordered)


def error_stage(stage: str, mae: float | None, interval: tuple[float, float] | None, frames: int, gate: RealGate,
                details: dict[str, Any] | None = None, note: str = "") -> StageResult:
    """An action-error gate: passes only when frames >= min_frames and the upper bound <= threshold."""
    if mae is None or interval is None or frames == 0:
        return StageResult(stage, "action_error", None, None, gate.max_action_mae_rad, False, False,
                           note or "no frame could be evaluated", details or {})
    if frames < gate.min_frames:
        return StageResult(stage, "action_error", mae, interval, gate.max_action_mae_rad, False, True,
                           f"only {frames} frames evaluated, the gate needs {gate.min_frames}", details or {})
    return StageResult(stage, "action_error", mae, interval, gate.max_action_mae_rad,
                       interval[1] <= gate.max_action_mae_rad, True, note, details or {})


def block_bootstrap_mean(values_per_frame: list[np.ndarray], block: int, samples: int,
                         seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean of per-frame values, resampling blocks of `block` consecutive
    frames (within each sequence, e.g. each bag) so correlated neighbours move together."""
    blocks = [seq[i:i + block] for seq in values_per_frame for i in range(0, len(seq), block) if len(seq[i:i + block])]
    if not blocks:
        return math.nan, math.nan
    sums = np.array([b.sum() for b in blocks])
    counts = np.array([len(b) for b in blocks])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(blocks), size=(samples, len(blocks)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


@dataclass(frozen=True)
class Verdict:
    """ready only when every stage passed; otherwise the first failing stage is named, with its
    figure and threshold (`reason`), and every failing stage is listed."""

    verdict: str
    reason: str
    failed: tuple[str, ...]

    @property
    def text(self) -> str:
        return "ready for supervised rollout" if self.verdict == READY else "not ready"

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "text": self.text, "reason": self.reason, "failed_stages": list(self.failed)}


def decide(stages: list[StageResult]) -> Verdict:
    """The verdict over the stages in order (a missing stage counts as failed; an optional stage,
    OPTIONAL_STAGES, counts when it is there)."""
    by_name = {s.stage: s for s in stages}
    failed = []
    names = [*STAGES, *(n for n in OPTIONAL_STAGES if n in by_name)]
    for name in names:
        result = by_name.get(name)
        if result is None or not result.passed:
            failed.append(name)
    if not failed:
        return Verdict(READY, "every stage passed: " + "; ".join(by_name[n].describe() for n in names), ())
    first = by_name.get(failed[0])
    reason = first.describe() if first else f"{STAGE_TITLES[failed[0]]}: not evaluated"
    return Verdict(NOT_READY, reason, tuple(failed))
