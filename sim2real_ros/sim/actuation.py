"""The actuator model, in pure numpy: a latency queue and a torque-limited PD loop.

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

    def reset(self, target: np.ndarray) -> None:
        """Drop queued commands and hold `target` [rad]."""
        self._pending.clear()
        self.active = np.asarray(target, dtype=float).copy()

    def __len__(self) -> int:
        return len(self._pending)


def pd_torque(q: np.ndarray, qd: np.ndarray, q_target: np.ndarray, kp: np.ndarray, kd: np.ndarray,
              effort_limit: np.ndarray, feed_forward: np.ndarray | None = None) -> np.ndarray:
    """Motor torque (n,) [N*m] of a position loop: kp (q_target - q) - kd qd + feed_forward,
    clipped to +/- effort_limit. q [rad], qd [rad/s], kp [N*m/rad], kd [N*m*s/rad]."""
    tau = kp * (q_target - q) - kd * qd
    if feed_forward is not None:
        tau = tau + feed_forward
    return np.clip(tau, -effort_limit, effort_limit)
