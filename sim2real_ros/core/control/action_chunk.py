"""ActionChunk: the policy's output, a short plan of future joint targets (docs/design.md §3)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..timebase import NS_PER_S


@dataclass(frozen=True)
class ActionChunk:
    """A chunk of future joint targets (docs/design.md §3).

    positions (K, n) [rad]: point k is the target for time stamp_ns + times_s[k].
    times_s (K,) [s]: time_from_start of each point, strictly increasing.
    """

    joint_names: tuple[str, ...]
    stamp_ns: int
    times_s: np.ndarray
    positions: np.ndarray

    @property
    def end_ns(self) -> int:
        """Absolute time [ns] of the last point."""
        return self.stamp_ns + int(round(float(self.times_s[-1]) * NS_PER_S))
