"""Shared control: the policy's command plus the human's bounded correction.

While the deadman is held in SHARED, the jog velocity [rad/s] times shared_authority is integrated
into an offset, each joint's offset bounded by shared_max_offset_rad [rad]. The offset is dropped
whenever SHARED is left (the coordinator resets it), so a hand-back ramps like any other.
"""
from __future__ import annotations

import numpy as np


class SharedCorrection:
    """The human's offset (n,) [rad] on top of the policy's command."""

    def __init__(self, n: int, authority: float, max_offset_rad: float) -> None:
        self.authority = authority
        self.max_offset_rad = max_offset_rad
        self.offset = np.zeros(n)

    def reset(self) -> None:
        self.offset = np.zeros(self.offset.shape[0])

    def integrate(self, velocity: np.ndarray, dt_s: float) -> None:
        """Add authority x velocity (n,) [rad/s] x dt_s [s], bounded per joint."""
        self.offset = np.clip(self.offset + self.authority * velocity * dt_s,
                              -self.max_offset_rad, self.max_offset_rad)

    def apply(self, target: np.ndarray) -> np.ndarray:
        """The policy's target (n,) [rad] with the offset."""
        return target + self.offset
