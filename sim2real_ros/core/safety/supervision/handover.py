"""The hand-over to the policy: the gap check and the ramp from the measured position.

Control goes to the policy only when its command is within handover_max_gap_rad of the measured
position on every joint. The ramp then blends from the measured position to the policy's command
over handover_ramp_s for a gap of handover_max_gap_rad and proportionally faster for a smaller one
(a policy already where the arm is takes over at once rather than lagging for the full ramp).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...timebase import NS_PER_S


def gap_refusal(q_policy: np.ndarray, q_meas: np.ndarray, joint_names: Sequence[str], max_gap_rad: float) -> str:
    """Why the policy's command (n,) [rad] is too far from the measured position (n,) [rad]; "" when it is not."""
    gap = np.abs(q_policy - q_meas)
    worst = int(np.argmax(gap))
    if gap[worst] <= max_gap_rad:
        return ""
    return (f"handover gap {gap[worst]:.3f} rad at joint '{joint_names[worst]}' "
            f"> handover_max_gap_rad {max_gap_rad}")


def ramp_duration_ns(q_from: np.ndarray, q_to: np.ndarray, ramp_s: float, max_gap_rad: float) -> int:
    """The ramp's duration int [ns]: ramp_s [s] scaled by the largest gap [rad] over max_gap_rad, at most ramp_s."""
    gap = float(np.max(np.abs(q_to - q_from)))
    fraction = min(1.0, gap / max_gap_rad)
    return int(round(ramp_s * fraction * NS_PER_S))


class HandoverRamp:
    """A running ramp: its start position (n,) [rad], start time and duration int [ns]."""

    def __init__(self) -> None:
        self.duration_ns = 0  # of the last ramp started (the arm request reports it)
        self.start_q: np.ndarray | None = None
        self.start_ns: int | None = None

    @property
    def running(self) -> bool:
        return self.start_ns is not None and self.start_q is not None

    def start(self, q_meas: np.ndarray | None, q_policy: np.ndarray | None, now_ns: int, ramp_s: float,
              max_gap_rad: float) -> None:
        """Ramp from q_meas to the policy from now_ns [ns]; ramp_s [s] = 0 switches ramps off."""
        if ramp_s <= 0:
            return
        assert q_meas is not None and q_policy is not None
        self.duration_ns = ramp_duration_ns(q_meas, q_policy, ramp_s, max_gap_rad)
        if self.duration_ns > 0:
            self.start_q = q_meas.copy()
            self.start_ns = now_ns
        # A zero-length ramp leaves an earlier start in place: with duration 0, apply() ends it at once.

    def clear(self) -> None:
        """No ramp (control left the policy)."""
        self.start_ns = self.start_q = None

    def apply(self, target: np.ndarray, now_ns: int) -> np.ndarray:
        """The ramped target (n,) [rad] at now_ns; the target itself once the ramp has ended (and ends it)."""
        if self.start_ns is None or self.start_q is None:
            return target
        s = (now_ns - self.start_ns) / self.duration_ns if self.duration_ns > 0 else 1.0
        if s >= 1.0:
            self.clear()
            return target
        return self.start_q + max(s, 0.0) * (target - self.start_q)
