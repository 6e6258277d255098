"""A fast per-joint model of the sim's actuator, for the optimizer's many evaluations.

The sim (sim/world.py) drives each joint with tau = kp (q_target(t - latency) - q) - kd qd
- damping qd (+ gravity feed-forward, which cancels gravity; + Coulomb friction) and integrates
with PyBullet's semi-implicit Euler at physics dt. For one joint moving while the others hold, that
is the linear recursion

    v[k+1] = v[k] + dt/m (kp (u[k] - q[k]) - (kd + damping) v[k]),   q[k+1] = q[k] + dt v[k+1]

with m the joint's own inertia (the diagonal of PyBullet's mass matrix along the recorded path).
Written as a transfer function it runs in scipy's lfilter (C speed), ~1000x faster than stepping
PyBullet, so Nelder-Mead and differential evolution can afford thousands of evaluations. It leaves
out what the replay in PyBullet keeps: Coulomb friction, effort limits, coupling between joints;
that is why friction is fitted, and every result validated, by replaying in PyBullet itself.
Pure numpy/scipy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter, lfiltic, savgol_filter

from .fit_data import FitData


@dataclass(frozen=True)
class ModelGrid:
    """The bag on the physics grid: base (T, n) [rad] is the target in effect at each physics step
    with zero latency (commands take effect at the first step at or after they arrive, as in the
    sim); sample_index (M,) maps state samples to steps; q0 (n,) [rad], v0 (n,) [rad/s]: the state
    at step 0."""

    dt_s: float
    base: np.ndarray
    sample_index: np.ndarray
    q0: np.ndarray
    v0: np.ndarray
    coupling: np.ndarray | None = None

    def with_coupling(self, torques: np.ndarray) -> ModelGrid:
        """The same grid with coupling torques (T, n) [N*m] that the other joints' recorded motion
        exerts on each joint."""
        return ModelGrid(self.dt_s, self.base, self.sample_index, self.q0, self.v0, torques)

    @classmethod
    def from_data(cls, data: FitData, dt_s: float, end_t: float | None = None) -> ModelGrid:
        end = data.duration_s if end_t is None else end_t
        steps = int(np.ceil(end / dt_s)) + 2
        received = np.ceil(np.maximum(data.command_t, 0.0) / dt_s - 1e-9).astype(int)
        # A step's target is the newest command received by then: fill forward by arrival index.
        first = np.full(steps, -1)
        first[np.clip(received, 0, steps - 1)] = np.arange(len(received))
        latest = np.maximum.accumulate(first)
        # Before the first command arrives the first command is taken as already in effect.
        base = data.commands[np.maximum(latest, 0)].astype(float)
        index = np.clip(np.round(data.state_t / dt_s).astype(int), 0, steps - 1)
        q0, v0 = data.state_at(0.0)
        return cls(dt_s, base, index, q0, v0)

    def for_samples(self, mask: np.ndarray) -> ModelGrid:
        """The grid cut short after the last selected state sample, sampling only those (M_sel,)."""
        index = self.sample_index[mask]
        end = int(index.max()) + 1 if len(index) else 1
        coupling = None if self.coupling is None else self.coupling[:end]
        return ModelGrid(self.dt_s, self.base[:end], index, self.q0, self.v0, coupling)

    def delayed(self, latency_s: float, joint: int) -> np.ndarray:
        """Target (T,) of one joint in effect at each step after latency_s [s]; fractional step
        delays interpolate between the neighbouring whole-step delays (the sim rounds to steps; this
        keeps the cost continuous for the optimizer)."""
        steps = max(0.0, latency_s) / self.dt_s
        whole = int(np.floor(steps))
        frac = steps - whole
        column = self.base[:, joint]
        first = column[0]

        def shift(d: int) -> np.ndarray:
            if d <= 0:
                return column
            if d >= len(column):
                return np.full_like(column, first)
            return np.concatenate([np.full(d, first), column[:-d]])

        lo = shift(whole)
        return lo if frac < 1e-9 else (1.0 - frac) * lo + frac * shift(whole + 1)


def transfer_function(kp: float, b: float, m: float, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """(numerator, denominator) in z^-1 of target -> position for the recursion in the module doc."""
    g = dt * dt * kp / m
    c = 1.0 - dt * b / m
    # q[k+1] - (1 + c - g) q[k] + c q[k-1] = g u[k]  (eliminating v)
    return np.array([0.0, g]), np.array([1.0, -(1.0 + c - g), c])


def recursion_stable(kp: float, b: float, m: float, dt: float) -> bool:
    """Whether the Euler recursion is stable (both poles inside the unit circle); an unstable
    candidate would also blow up in the sim."""
    g = dt * dt * kp / m
    c = 1.0 - dt * b / m
    return abs(c) < 1.0 and abs(1.0 + c - g) < 1.0 + c


def simulate_joint(grid: ModelGrid, joint: int, latency_s: float, kp: float, b: float, m: float) -> np.ndarray:
    """Positions (M,) [rad] of one joint at the state samples: kp [N*m/rad], b = kd + damping
    [N*m*s/rad], m [kg*m^2] inertia, latency_s [s]."""
    if not recursion_stable(kp, b, m, grid.dt_s):
        return np.full(len(grid.sample_index), np.inf)
    u = grid.delayed(latency_s, joint)
    if grid.coupling is not None:
        # A torque w acts like a target offset of w / kp (the recursion is linear).
        u = u + grid.coupling[:, joint] / kp
    q0, v0 = grid.q0[joint], grid.v0[joint]
    num, den = transfer_function(kp, b, m, grid.dt_s)
    # Deviations from the start position; the past (two steps back) moving at v0 under target u[0].
    zi = lfiltic(num, den, y=[-v0 * grid.dt_s, -2.0 * v0 * grid.dt_s], x=[u[0] - q0, u[0] - q0])
    q = lfilter(num, den, u - q0, zi=zi)[0] + q0
    return q[grid.sample_index]


def _accelerations(data: FitData) -> np.ndarray:
    """Recorded joint accelerations (M, n) [rad/s^2]: Savitzky-Golay second derivative (~70 ms window)."""
    dt = float(np.median(np.diff(data.state_t)))
    window = max(5, int(round(0.07 / dt)) | 1)
    if len(data.state_t) <= window:
        return np.zeros_like(data.states)
    return savgol_filter(data.states, window, 3, deriv=2, delta=dt, axis=0)


def inertia_and_coupling(world, data: FitData, grid: ModelGrid, period_s: float = 0.05) -> tuple[np.ndarray, ModelGrid]:
    """(inertia (n,) [kg*m^2], grid with coupling torques): each joint's own inertia (the diagonal of
    PyBullet's mass matrix along the recorded path, weighted by the joint's squared speed, where its
    inertia matters) and the torque -sum_k M_jk qdd_k the other commanded joints' recorded
    accelerations exert on it (mass matrix every period_s [s], interpolated onto the grid)."""
    client, robot = world.client, world.robot
    dof_names: list[str] = []
    for j in range(client.getNumJoints(robot)):
        info = client.getJointInfo(robot, j)
        if info[2] != client.JOINT_FIXED:
            dof_names.append(info[1].decode())
    home = dict(zip(world.all_joint_names, world.joint_positions(all_joints=True), strict=True))
    samples = max(10, int(data.duration_s / period_s))
    picks = np.unique(np.linspace(0, len(data.state_t) - 1, samples).astype(int))
    speed = np.abs(np.gradient(data.states, data.state_t, axis=0))
    accel = _accelerations(data)
    cols = [dof_names.index(name) for name in data.joint_names]
    n = len(cols)
    diag = np.empty((len(picks), n))
    torque = np.empty((len(picks), n))
    for row, i in enumerate(picks):
        q = dict(home)
        q.update({name: float(series[i]) for name, series in data.other_states.items()})
        q.update({name: float(data.states[i, j]) for j, name in enumerate(data.joint_names)})
        matrix = np.asarray(client.calculateMassMatrix(robot, [q.get(name, 0.0) for name in dof_names]))
        block = matrix[np.ix_(cols, cols)]
        diag[row] = np.diag(block)
        torque[row] = -(block - np.diag(np.diag(block))) @ accel[i]
    weights = speed[picks] ** 2 + 1e-12
    inertia = np.sum(diag * weights, axis=0) / np.sum(weights, axis=0)
    grid_t = np.arange(len(grid.base)) * grid.dt_s
    coupling = np.stack([np.interp(grid_t, data.state_t[picks], torque[:, j]) for j in range(n)], axis=1)
    return inertia, grid.with_coupling(coupling)
