"""What `sysid fit` is asked (FitOptions), what it reports per parameter (ParameterResult), and the
thresholds its stages share."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .latency import SysidError

FIT_CHOICES = ("latency", "kp", "kd", "damping", "friction")
METHODS = ("nelder-mead", "differential-evolution")
PERTURB_FRACTION = 0.2  # +/-20 % of a positive parameter
PERTURB_LATENCY_S = 0.01  # +/-10 ms: one control period at 100 Hz
MIN_EFFECT = 0.01  # a parameter moving the trajectory by less than 1 % of the motion is not identifiable
LOG_RANGE = math.log(20.0)  # positive parameters are searched within nominal /20 .. x20
MIN_MOTION_RAD = 1e-3  # floor of a joint's motion scale [rad]
UNSTABLE_COST = 1e6
FLAT_WEIGHT = 0.4  # a parameter this much inside flat directions is not determined on its own
# Why damping cannot be told from kd, whatever its size: the sim's torque is kp e - kd qd - damping qd,
# and kd sits inside the effort-limit clip, damping outside; they differ only while the limit saturates.
SUM_ONLY = ("kd.{joint} and damping.{joint} act on the motion only through their sum kd + damping (they differ only "
            "while the effort limit saturates): only the sum is determined, kd.{joint} carries it")


@dataclass(frozen=True)
class FitOptions:
    """fit: which of FIT_CHOICES to fit; method: METHODS; holdout_fraction: last part of the time
    kept for validation; max_latency_s [s]: latency search range; warmup_s [s]: start of the bag left
    out of the cost (commands in flight at the start are unknown); min_excitation_rad [rad]: a joint
    whose command moves less is not fitted; max_evaluations: per search run on the fast model;
    sim_polish_evals: Nelder-Mead evaluations on PyBullet replays (0 = none); seed: for DE."""

    fit: tuple[str, ...] = FIT_CHOICES
    method: str = "nelder-mead"
    holdout_fraction: float = 0.3
    max_latency_s: float = 0.25
    warmup_s: float = 0.5
    min_excitation_rad: float = 0.01
    max_evaluations: int = 4000
    sim_polish_evals: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [f for f in self.fit if f not in FIT_CHOICES]
        if unknown or not self.fit:
            raise SysidError(f"fit = {list(self.fit)}: choose from {list(FIT_CHOICES)}")
        if self.method not in METHODS:
            raise SysidError(f"method = {self.method!r}: choose from {list(METHODS)}")
        if not 0.0 < self.max_latency_s <= 2.0:
            raise SysidError(f"max_latency_s = {self.max_latency_s}: must be in (0, 2] s")
        if not 0.0 <= self.warmup_s < 10.0:
            raise SysidError(f"warmup_s = {self.warmup_s}: must be in [0, 10) s")
        if self.max_evaluations < 10 or self.sim_polish_evals < 0:
            raise SysidError(f"max_evaluations = {self.max_evaluations} (>= 10), sim_polish_evals = "
                             f"{self.sim_polish_evals} (>= 0)")


@dataclass(frozen=True)
class ParameterResult:
    """One fitted parameter: joint '' for the latency. value: what the new params file holds (the
    nominal value when not identifiable); fitted: the optimizer's number; effect: trajectory change
    of a +/-20 % (latency +/-10 ms) move, as a fraction of the joint's motion; flat_weight: how much of
    the parameter lies in flat directions of the cost (0..1)."""

    kind: str
    joint: str
    nominal: float
    fitted: float
    value: float
    identifiable: bool
    effect: float
    flat_weight: float
    reason: str = ""


def parameter_label(kind: str, joint: str) -> str:
    """The parameter's name in reports and params files: actuation_latency_s, or KIND.JOINT."""
    return "actuation_latency_s" if kind == "latency" else f"{kind}.{joint}"
