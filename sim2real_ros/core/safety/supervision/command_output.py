"""The step limiter every command passes, holds included.

A command is clamped to the position limits and moves at most velocity x the time since the last
command sent (capped at one control period) from it, so the velocity limits hold however often the
supervisor ticks and no single input moves the command by more than one step. The first command
ever is limited from the measured position.
"""
from __future__ import annotations

import numpy as np

from ...timebase import NS_PER_S
from ..limits import SafetyLimits, clamp_command, clamp_position


class StepLimiter:
    """Remembers the last command sent [rad] and when, int [ns]; control_period_s [s] caps the step's time."""

    def __init__(self, limits: SafetyLimits, control_period_s: float) -> None:
        self.limits = limits
        self.control_period_s = control_period_s
        self.last_sent: np.ndarray | None = None
        self.last_send_ns: int | None = None

    def limit(self, wish: np.ndarray, now_ns: int, measured: np.ndarray | None) -> np.ndarray:
        """What may be sent for `wish` (n,) [rad] at now_ns; records it as sent. `measured` (n,) [rad]
        is the reference for the first command ever (None: no measurement yet)."""
        dt = self.control_period_s
        if self.last_send_ns is not None:
            # Ticks closer together than the control period (a node forwarding the policy's commands
            # as they arrive, an e-stop between ticks) move proportionally less: the velocity limit
            # holds at any tick rate.
            dt = min(max((now_ns - self.last_send_ns) / NS_PER_S, 0.0), self.control_period_s)
        reference = self.last_sent
        if reference is None and measured is not None:
            reference = clamp_position(measured, self.limits)
        sent = clamp_command(wish, reference, self.limits, dt)
        self.last_sent = sent
        self.last_send_ns = now_ns
        return sent

    def forget_time(self) -> None:
        """After a clock step back the time since the last command is unknown: the next step gets one period."""
        self.last_send_ns = None
