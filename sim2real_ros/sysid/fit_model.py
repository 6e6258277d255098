"""The fast-model search of `sysid fit`: the search space, the optimizers and the identifiability check.

The search runs over the actuation latency [s] and the log of kp, kd, damping per excited joint, on
joint_model's per-joint transfer functions (the sim's own PD/Euler recursion and PyBullet's inertia;
fast enough for thousands of evaluations). Identifiability: each parameter is moved by +/-20 %
(latency: +/-10 ms); its effect is the RMS trajectory change as a fraction of the joint's motion, and
its flat weight how much of it lies in flat directions of the Gauss-Newton Hessian.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import differential_evolution, minimize

from .fit_data import FitData
from .fit_options import (
    LOG_RANGE,
    MIN_EFFECT,
    MIN_MOTION_RAD,
    PERTURB_FRACTION,
    PERTURB_LATENCY_S,
    UNSTABLE_COST,
    FitOptions,
)
from .joint_model import ModelGrid, simulate_joint
from .latency import SysidError
from .replay import KINDS, Dynamics

Slot = tuple[str, int]  # (kind, joint index); the latency's joint is -1


class FastProblem:
    """The search space (latency [s] and log parameters) on the fast per-joint model."""

    def __init__(self, data: FitData, grid: ModelGrid, inertia: np.ndarray, nominal: Dynamics,
                 fitted_joints: list[int], kinds: list[str], fit_latency: bool, options: FitOptions) -> None:
        self.inertia, self.base = inertia, nominal
        self.joints, self.kinds, self.fit_latency = fitted_joints, kinds, fit_latency
        self.mask = data.train_mask(options.warmup_s)
        if np.count_nonzero(self.mask) < 20:
            raise SysidError(f"only {np.count_nonzero(self.mask)} state samples to fit on after the warm-up; "
                             "record longer or lower --holdout")
        self.grid = grid.for_samples(self.mask)
        self.recorded = data.states[self.mask]
        motion = np.std(self.recorded, axis=0)
        self.scale = np.maximum(motion, MIN_MOTION_RAD)
        self.slots: list[Slot] = ([("latency", -1)] if fit_latency else []) + [
            (k, j) for j in fitted_joints for k in kinds]
        self.evaluations = 0
        self.max_latency_s = options.max_latency_s

    def x_of(self, dyn: Dynamics) -> np.ndarray:
        return np.array([dyn.latency_s if k == "latency" else math.log(max(dyn.values(k)[j], 1e-9))
                         for k, j in self.slots])

    def dynamics(self, x: np.ndarray, base: Dynamics | None = None) -> Dynamics:
        base = base or self.base
        changes: dict[str, Any] = {k: base.values(k).copy() for k in KINDS}
        latency = base.latency_s
        for (kind, j), value in zip(self.slots, x, strict=True):
            if kind == "latency":
                latency = float(value)
            else:
                changes[kind][j] = math.exp(value)
        return base.replace_values(latency_s=latency, **changes)

    def bounds(self) -> list[tuple[float, float]]:
        out = []
        for kind, j in self.slots:
            if kind == "latency":
                out.append((0.0, self.max_latency_s))
            else:
                center = math.log(max(self.base.values(kind)[j], 1e-6))
                out.append((center - LOG_RANGE, center + LOG_RANGE))
        return out

    def trajectories(self, dyn: Dynamics) -> np.ndarray:
        """Model positions (M_train, n_fitted) [rad] of the fitted joints."""
        self.evaluations += 1
        cols = [simulate_joint(self.grid, j, dyn.latency_s, dyn.kp[j], dyn.kd[j] + dyn.damping[j],
                               self.inertia[j]) for j in self.joints]
        return np.stack(cols, axis=1)

    def cost_of(self, dyn: Dynamics) -> float:
        with np.errstate(all="ignore"):
            err = (self.trajectories(dyn) - self.recorded[:, self.joints]) / self.scale[self.joints]
            value = float(np.mean(err**2))
        # Unstable candidates (the sim would blow up too) get a large, finite cost.
        return min(value, UNSTABLE_COST) if math.isfinite(value) else UNSTABLE_COST

    def cost(self, x: np.ndarray) -> float:
        return self.cost_of(self.dynamics(np.asarray(x)))


def nelder_mead(fun: Callable[[np.ndarray], float], x0: np.ndarray, bounds: list[tuple[float, float]],
                slots: Sequence[Slot], max_evals: int) -> tuple[np.ndarray, int]:
    """Nelder-Mead with a simplex sized to the parameters (10 ms latency, 15 % in log), restarted
    once from its result (a collapsed simplex is the method's usual way to stop early). (x, evaluations)."""
    x = np.clip(x0, [b[0] for b in bounds], [b[1] for b in bounds])
    total = 0
    for _ in range(2):
        simplex = [x]
        for i, (kind, _j) in enumerate(slots):
            point = x.copy()
            step = 0.01 if kind == "latency" else 0.15
            point[i] = point[i] + step if point[i] + step <= bounds[i][1] else point[i] - step
            simplex.append(point)
        result = minimize(fun, x, method="Nelder-Mead", bounds=bounds,
                          options={"initial_simplex": np.array(simplex), "maxfev": max(10, max_evals // 2),
                                   "xatol": 1e-4, "fatol": 1e-9, "adaptive": len(x) > 5})
        total += int(result.nfev)
        x = result.x
    return x, total


def latency_scan_grid(max_latency_s: float) -> np.ndarray:
    """The latencies [s] the search starts by scanning: 0 .. max_latency_s every 2 ms."""
    return np.arange(0.0, max_latency_s + 1e-9, 0.002)


@dataclass(frozen=True)
class SearchResult:
    """The fast-model optimum x (latency [s], log parameters) and the cost evaluations it took."""

    x: np.ndarray
    evaluations: int


def search(problem: FastProblem, options: FitOptions, start: Dynamics) -> SearchResult:
    """Minimize the fast-model cost from `start`. The latency starts at the best of a grid scan (the
    cost has a local minimum per period of a periodic command), then DE (optionally) and Nelder-Mead."""
    bounds = problem.bounds()
    x0 = problem.x_of(start)
    evaluations = 0
    if problem.fit_latency:
        # Grid scan of the latency with the other parameters at their start values.
        grid = latency_scan_grid(options.max_latency_s)
        costs = []
        for latency in grid:
            x = x0.copy()
            x[0] = latency
            costs.append(problem.cost(x))
        evaluations += len(grid)
        x0[0] = grid[int(np.argmin(costs))]
    if options.method == "differential-evolution":
        result = differential_evolution(problem.cost, bounds, x0=np.clip(x0, *zip(*bounds, strict=True)),
                                        seed=options.seed, popsize=10, maxiter=max(5, options.max_evaluations // (
                                            10 * len(bounds))), tol=1e-8, polish=False, init="sobol")
        evaluations += int(result.nfev)
        x0 = result.x
    x, used = nelder_mead(problem.cost, x0, bounds, problem.slots, options.max_evaluations)
    return SearchResult(x, evaluations + used)


@dataclass(frozen=True)
class Identifiability:
    """Per search parameter (p,): effect (trajectory change of a +/-20 % or +/-10 ms move, as a fraction
    of the motion) and flat weight (0..1); flat: the Hessian's flat eigenvectors (p,)."""

    effects: np.ndarray
    flat_weight: np.ndarray
    flat: list[np.ndarray]

    def negligible(self) -> list[int]:
        """Parameters whose move changes the trajectory by less than MIN_EFFECT."""
        return [i for i in range(len(self.effects)) if self.effects[i] < MIN_EFFECT]


def flat_weights(columns: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-parameter weight (p,) in flat directions of H = S^T S / N, S = trajectory change per
    perturbation (normalized, (N, p)), and the flat eigenvectors."""
    h = columns.T @ columns / max(1, columns.shape[0])
    eigenvalues, vectors = np.linalg.eigh(h)
    flat = [vectors[:, i] for i in range(len(eigenvalues)) if math.sqrt(max(eigenvalues[i], 0.0)) < MIN_EFFECT]
    weight = np.sum([v**2 for v in flat], axis=0) if flat else np.zeros(h.shape[0])
    return weight, flat


def identifiability(problem: FastProblem, x: np.ndarray) -> Identifiability:
    """Effect, flat weight and flat directions of each search parameter at x."""
    reference = problem.trajectories(problem.dynamics(x)) / problem.scale[problem.joints]
    effects, columns = [], []
    for i, (kind, _j) in enumerate(problem.slots):
        delta = PERTURB_LATENCY_S if kind == "latency" else math.log(1.0 + PERTURB_FRACTION)
        moved = []
        for sign in (1.0, -1.0):
            xp = x.copy()
            xp[i] = max(0.0, xp[i] + sign * delta) if kind == "latency" else xp[i] + sign * delta
            with np.errstate(all="ignore"):
                change = problem.trajectories(problem.dynamics(xp)) / problem.scale[problem.joints] - reference
            # An unstable neighbour certainly changes the trajectory: count it as a large effect.
            moved.append(np.nan_to_num(change, nan=10.0, posinf=10.0, neginf=-10.0).clip(-10.0, 10.0))
        # Effect on the joints it acts on (the latency acts on all).
        effects.append(max(float(np.sqrt(np.mean(m**2))) * (1 if kind == "latency" else len(problem.joints))
                           ** 0.5 for m in moved))
        # Per-joint parameters act on one column of n: undo that dilution so thresholds match `effects`.
        dilution = 1.0 if kind == "latency" else math.sqrt(len(problem.joints))
        columns.append(((moved[0] - moved[1]) / 2.0).ravel() * dilution)
    weight, flat = flat_weights(np.stack(columns, axis=1))
    return Identifiability(np.array(effects), weight, flat)


def refit_without(problem: FastProblem, negligible: list[int], fitted_x: np.ndarray, nominal: Dynamics,
                  max_evaluations: int) -> np.ndarray:
    """x with the `negligible` parameters at their nominal values and the others re-fitted around them
    (Nelder-Mead from fitted_x); fitted_x itself when nothing is negligible."""
    if not negligible:
        return fitted_x
    keep = [i for i in range(len(fitted_x)) if i not in negligible]
    nominal_x = problem.x_of(nominal)
    x = nominal_x.copy()
    if keep:
        def reduced(z: np.ndarray) -> float:
            full = nominal_x.copy()
            full[keep] = z
            return problem.cost(full)
        bounds = problem.bounds()
        x[keep], _ = nelder_mead(reduced, fitted_x[keep], [bounds[i] for i in keep],
                                 [problem.slots[i] for i in keep], max_evaluations // 2)
    return x


def with_nominal_values(dyn: Dynamics, slots: Sequence[Slot], indices: list[int], nominal: Dynamics) -> Dynamics:
    """`dyn` with the parameters at `indices` of `slots` set to their nominal values exactly
    (exp(log(v)) is not always v)."""
    exact = {k: dyn.values(k).copy() for k in KINDS}
    for i in indices:
        kind, j = slots[i]
        if kind == "latency":
            dyn = dyn.replace_values(latency_s=nominal.latency_s)
        else:
            exact[kind][j] = nominal.values(kind)[j]
    return dyn.replace_values(**exact)
