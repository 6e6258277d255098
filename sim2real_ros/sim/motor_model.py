"""The actuator model, in pure numpy: a latency queue, a torque-limited PD loop and (actuator.model:
servo) the speed- and acceleration-limited position loop of a servo, whose reference the PD tracks.

Every parameter has a physical meaning that system identification can fit: the delay from command
receipt to the position loop [s], the PD gains, the effort limit, and the gravity feed-forward.
Joint damping and Coulomb friction are passive joint properties applied by the world.
"""
from __future__ import annotations

from collections import deque

import numpy as np


class LatencyQueue:
    """Commands wait here until `latency_ns` of sim time has passed since they were received."""

    def __init__(self, initial_target: np.ndarray) -> None:
        self._pending: deque[tuple[int, np.ndarray]] = deque()
        self.active = np.asarray(initial_target, dtype=float).copy()

    def push(self, received_ns: int, latency_ns: int, q_target: np.ndarray) -> None:
        """Queue a target (n,) [rad] that takes effect at received_ns + latency_ns [ns]."""
        due = received_ns + latency_ns
        # A shorter latency after re-randomization must not reorder commands: keep due times sorted.
        if self._pending and due < self._pending[-1][0]:
            due = self._pending[-1][0]
        self._pending.append((due, np.asarray(q_target, dtype=float).copy()))

    def update(self, now_ns: int) -> np.ndarray:
        """The target in effect at `now_ns` [ns] (the newest command that is due)."""
        while self._pending and self._pending[0][0] <= now_ns:
            self.active = self._pending.popleft()[1]
        return self.active

    def average(self, start_ns: int, span_ns: int) -> np.ndarray:
        """The time average (n,) [rad] of the target in effect over [start_ns, start_ns + span_ns) [ns],
        leaving the queue as update() would at the end of that span: a physics step longer than the
        command resolution (the fast loop) still sees a command from its due time on, in proportion.
        Returns the active target itself (do not modify it) when no command falls due inside the span."""
        current = self.update(start_ns)
        end_ns = start_ns + span_ns
        if not self._pending or self._pending[0][0] >= end_ns:
            return current
        total = np.zeros_like(current)
        since = start_ns
        while self._pending and self._pending[0][0] < end_ns:
            due, target = self._pending.popleft()
            total += current * (due - since)
            since, current = due, target
        self.active = current
        total += current * (end_ns - since)
        return total / span_ns

    def newest(self) -> np.ndarray:
        """The last target received (n,) [rad], due or not (the active one when none is queued)."""
        return (self._pending[-1][1] if self._pending else self.active).copy()

    def reset(self, target: np.ndarray) -> None:
        """Drop queued commands and hold `target` [rad]."""
        self._pending.clear()
        self.active = np.asarray(target, dtype=float).copy()

    def __len__(self) -> int:
        return len(self._pending)


def pd_torque(q: np.ndarray, qd: np.ndarray, q_target: np.ndarray, kp: np.ndarray, kd: np.ndarray,
              effort_limit: np.ndarray, feed_forward: np.ndarray | None = None,
              qd_target: np.ndarray | None = None) -> np.ndarray:
    """Motor torque (n,) [N*m] of a position loop: kp (q_target - q) - kd qd + feed_forward
    (kd (qd_target - qd) when a target speed [rad/s] is given: the servo model), clipped to
    +/- effort_limit. q [rad], qd [rad/s], kp [N*m/rad], kd [N*m*s/rad]."""
    tau = kp * (q_target - q) - kd * qd if qd_target is None else kp * (q_target - q) + kd * (qd_target - qd)
    if feed_forward is not None:
        tau = tau + feed_forward
    return np.clip(tau, -effort_limit, effort_limit)


class ImplicitPd:
    """The same position loop as pd_torque, evaluated on the state at the end of a physics step of
    dt [s] instead of at its start (a linearly implicit, "stable" PD, per joint): the fast loop's PD.

    With semi-implicit Euler (PyBullet's), qd' = qd + dt tau / I and q' = q + dt qd'; solving
    tau = kp (q_target - q') + kd (qd_target - qd') for tau gives
    [kp (q_target - q) - (kp dt + kd) qd + kd qd_target] / (1 + (kp dt + kd) dt / I). The explicit PD is
    unstable once kd dt / I > 2 (the SO-101 jaw at 5 ms: 2.2); this one is stable at any dt and tends
    to it as dt -> 0. kp [N*m/rad], kd [N*m*s/rad], effort_limit [N*m]: arrays (n,) over the joints.
    """

    def __init__(self, kp: np.ndarray, kd: np.ndarray, effort_limit: np.ndarray, dt: float) -> None:
        self.kp = np.asarray(kp, dtype=float).copy()
        self.kd = np.asarray(kd, dtype=float).copy()
        self.dt = float(dt)
        # Folded once per episode: the loop runs every physics step.
        self._velocity_gain = self.kp * self.dt + self.kd
        self._inertia_term = self._velocity_gain * self.dt
        self._upper = np.asarray(effort_limit, dtype=float).copy()
        self._lower = -self._upper

    def torque(self, q: np.ndarray, qd: np.ndarray, q_target: np.ndarray, qd_target: np.ndarray | None,
               inertia: np.ndarray, feed_forward: np.ndarray | None = None,
               held: np.ndarray | None = None) -> np.ndarray:
        """Motor torque (n,) [N*m], clipped to +/- effort_limit. q, q_target [rad]; qd, qd_target [rad/s]
        (qd_target None = 0: the pd model); inertia (n,) [kg m^2] > 0: each joint's own inertia now (the
        mass matrix's diagonal); feed_forward (n,) [N*m] added after the PD (gravity compensation).

        held (n,) bool, or None: joints a contact holds still (a jaw closed on an object). Their state
        at the end of the step is their state now, so their PD is the explicit one: the implicit
        formula assumes the joint's own inertia moves and would divide a held jaw's grip by
        1 + (kp dt + kd) dt / I (5.5 on the SO-101's jaw at 5 ms), where the motor really pushes
        kp * error."""
        error = q_target - q
        tau = self.kp * error - self._velocity_gain * qd
        if qd_target is not None:
            tau += self.kd * qd_target
        tau /= 1.0 + self._inertia_term / inertia
        if held is not None:
            explicit = self.kp * error - self.kd * (qd if qd_target is None else qd - qd_target)
            tau = np.where(held, explicit, tau)
        if feed_forward is not None:
            tau += feed_forward
        return np.minimum(np.maximum(tau, self._lower), self._upper)  # np.clip: the same, 2 us slower


class ServoLoop:
    """The position loop inside a servo (actuator.model: servo), per joint, in sim time.

    Each step of dt [s] the loop commands a speed gain * (target - reference) [rad/s] (zero within
    `deadband` [rad] of the target), limited to +/- max_speed [rad/s], reached at no more than
    max_acceleration [rad/s^2]; the reference [rad] integrates that speed. The PD loop tracks the
    reference and the speed (pd_torque's qd_target). All arrays (n,) over the same joints.
    """

    def __init__(self, initial: np.ndarray) -> None:
        self.reference = np.asarray(initial, dtype=float).copy()
        self.speed = np.zeros_like(self.reference)

    def reset(self, position: np.ndarray) -> None:
        """Hold `position` [rad] at rest."""
        self.reference = np.asarray(position, dtype=float).copy()
        self.speed = np.zeros_like(self.reference)

    def update(self, target: np.ndarray, dt: float, max_speed: np.ndarray, max_acceleration: np.ndarray,
               gain: np.ndarray, deadband: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Advance one step toward `target` [rad]; returns (reference [rad], speed [rad/s])."""
        error = target - self.reference
        wanted = np.where(np.abs(error) <= deadband, 0.0, np.clip(gain * error, -max_speed, max_speed))
        # Never overshoot within one step: the speed that lands exactly on the target.
        wanted = np.where(np.abs(wanted * dt) > np.abs(error), error / dt, wanted)
        step = max_acceleration * dt
        self.speed = self.speed + np.clip(wanted - self.speed, -step, step)
        self.reference = self.reference + self.speed * dt
        return self.reference, self.speed

    def update_unbranched(self, target: np.ndarray, dt: float, max_speed: np.ndarray,
                          speed_step: np.ndarray, gain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """update() for the case where neither of its branches can act: no deadband, and gain * dt
        < 0.5 (no step can overshoot its target). The same arithmetic in 8 numpy calls instead of 17 (the
        fast loop's budget); speed_step = max_acceleration * dt [rad/s]."""
        wanted = np.minimum(np.maximum(gain * (target - self.reference), -max_speed), max_speed)
        self.speed = self.speed + np.minimum(np.maximum(wanted - self.speed, -speed_step), speed_step)
        self.reference = self.reference + self.speed * dt
        return self.reference, self.speed
