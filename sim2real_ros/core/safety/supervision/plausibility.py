"""Which positions are physical at all: a reading or a command far beyond the robot's limits is a fault."""
from __future__ import annotations

import math

import numpy as np

from ..limits import SafetyLimits

# A command further than this beyond the robot's position limits is not a position but a fault
# (a policy emitting 1e308 would overflow the ramp arithmetic); nearer ones are clamped [rad or m].
COMMAND_MARGIN_RAD = math.pi


def beyond_limits(q: np.ndarray, limits: SafetyLimits, margin: float) -> str:
    """Why `q` (n,) [rad] lies beyond the robot's (URDF) limits by more than `margin` [rad]; "" when it does not."""
    lower = limits.physical_lower - margin
    upper = limits.physical_upper + margin
    outside = (q < lower) | (q > upper)
    if not np.any(outside):
        return ""
    worst = int(np.argmax(outside))
    return (f"joint '{limits.joint_names[worst]}' at {q[worst]:.6g} is beyond its limits "
            f"[{limits.physical_lower[worst]:.3f}, {limits.physical_upper[worst]:.3f}] "
            f"by more than {margin:.3f}")
