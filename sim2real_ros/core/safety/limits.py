"""Joint limits and the command clamp: the last arithmetic between a command and the robot.

Pure numpy, no rclpy (docs/design.md §4, §6). Limits always come from the URDF; a configuration may
tighten them and is refused (ConfigError) when it tries to loosen them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..robot.urdf import RobotModel


@dataclass(frozen=True)
class SafetyLimits:
    """Per-joint limits in the configured joint order, all arrays of shape (n,).

    lower, upper: position limits [rad or m]; velocity: speed limits [rad/s or m/s], finite and > 0.
    physical_lower, physical_upper: the robot's own (URDF) position limits, which a configuration may
    have tightened into lower/upper; a measured position far outside them is not a measurement
    (None: the same as lower/upper).
    """

    joint_names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    physical_lower: np.ndarray | None = None
    physical_upper: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if self.physical_lower is None:
            object.__setattr__(self, "physical_lower", self.lower)
        if self.physical_upper is None:
            object.__setattr__(self, "physical_upper", self.upper)
        for field in ("lower", "upper", "velocity", "physical_lower", "physical_upper"):
            value = np.asarray(getattr(self, field), dtype=float)
            if value.shape != (n,):
                raise ConfigError("limits", field, value.tolist(), f"needs {n} values, one per joint")
            value.setflags(write=False)
            object.__setattr__(self, field, value)
        if not np.all(self.lower < self.upper):
            raise ConfigError("limits", "lower/upper", (self.lower.tolist(), self.upper.tolist()),
                              "every lower limit must be < its upper limit")
        if not (np.all(np.isfinite(self.velocity)) and np.all(self.velocity > 0)):
            raise ConfigError("limits", "velocity", self.velocity.tolist(), "must be finite and > 0")

    @property
    def n(self) -> int:
        return len(self.joint_names)

    def max_step(self, dt: float) -> np.ndarray:
        """Largest position change per tick of `dt` [s] allowed by the velocity limits (n,)."""
        return self.velocity * dt


def limits_from_urdf(
    model: RobotModel,
    joint_names: Sequence[str],
    lower: Sequence[float] = (),
    upper: Sequence[float] = (),
    velocity: Sequence[float] = (),
    velocity_scale: float = 1.0,
    source: str = "parameters",
) -> SafetyLimits:
    """The URDF's limits for `joint_names`, optionally tightened.

    `lower`, `upper`, `velocity` are per-joint overrides (empty: the URDF's); `velocity_scale` in
    (0, 1] scales the velocity limits. An override that would loosen a URDF limit, or a URDF joint
    without a finite velocity limit and no override, is a ConfigError naming the field and value.
    """
    names = list(joint_names)
    urdf = model.limits_arrays(names)
    if not (0.0 < velocity_scale <= 1.0):
        raise ConfigError(source, "velocity_scale", velocity_scale, "must be in (0, 1]; it may only tighten")

    def override(field: str, values: Sequence[float], default: np.ndarray) -> np.ndarray:
        if len(values) == 0:
            return default.copy()
        arr = np.asarray(list(values), dtype=float)
        if arr.shape != (len(names),):
            raise ConfigError(source, field, list(values), f"needs {len(names)} values in joint order {names}")
        if not np.all(np.isfinite(arr)):
            raise ConfigError(source, field, list(values), "must be finite")
        return arr

    lo = override("position_lower_limits", lower, urdf["lower"])
    hi = override("position_upper_limits", upper, urdf["upper"])
    vel = override("velocity_limits", velocity, urdf["velocity"])
    for i, name in enumerate(names):
        if lo[i] < urdf["lower"][i]:
            raise ConfigError(source, "position_lower_limits", lo.tolist(),
                              f"joint '{name}': {lo[i]} loosens the URDF lower limit {urdf['lower'][i]}")
        if hi[i] > urdf["upper"][i]:
            raise ConfigError(source, "position_upper_limits", hi.tolist(),
                              f"joint '{name}': {hi[i]} loosens the URDF upper limit {urdf['upper'][i]}")
        if not lo[i] < hi[i]:
            raise ConfigError(source, "position_lower_limits/position_upper_limits", (lo[i], hi[i]),
                              f"joint '{name}': lower must be < upper")
        if math.isfinite(urdf["velocity"][i]) and vel[i] > urdf["velocity"][i]:
            raise ConfigError(source, "velocity_limits", vel.tolist(),
                              f"joint '{name}': {vel[i]} loosens the URDF velocity limit {urdf['velocity'][i]}")
        if not (math.isfinite(vel[i]) and vel[i] > 0):
            raise ConfigError(source, "velocity_limits", vel.tolist(),
                              f"joint '{name}' has no finite velocity limit > 0 (URDF {model.source}); set one")
    return SafetyLimits(tuple(names), lo, hi, vel * velocity_scale, urdf["lower"], urdf["upper"])


def clamp_command(
    q_cmd: np.ndarray, q_prev_sent: np.ndarray | None, limits: SafetyLimits, dt: float
) -> np.ndarray:
    """What may actually be sent for the wish `q_cmd` (n,) [rad], one control tick of `dt` [s] after
    `q_prev_sent` (n,) [rad] (None: nothing was sent yet, only the position limits apply).

    The step from the previous command is limited to velocity * dt per joint, then the result is
    clipped to the position limits. Returns a new array (n,); raises ValueError on a non-finite or
    wrong-length input, which must never be turned into a command.
    """
    q_cmd = np.asarray(q_cmd, dtype=float)
    if q_cmd.shape != (limits.n,):
        raise ValueError(f"command has shape {q_cmd.shape}, expected ({limits.n},)")
    if not np.all(np.isfinite(q_cmd)):
        raise ValueError(f"command contains NaN/Inf: {q_cmd.tolist()}")
    if q_prev_sent is None:
        return np.clip(q_cmd, limits.lower, limits.upper)
    q_prev = np.asarray(q_prev_sent, dtype=float)
    max_step = limits.max_step(dt)
    q_next = q_prev + np.clip(q_cmd - q_prev, -max_step, max_step)
    # Clipping to the position limits after the step can only shorten the step, when q_prev was
    # inside the limits; from outside it moves toward the range, which is what a hold would want.
    return np.clip(q_next, limits.lower, limits.upper)


def clamp_position(q: np.ndarray, limits: SafetyLimits) -> np.ndarray:
    """Positions (n,) [rad] clipped to the position limits (used for hold targets)."""
    return np.clip(np.asarray(q, dtype=float), limits.lower, limits.upper)


class InvalidInputError(ValueError):
    """An input (command, joint state) is malformed; the text says what is wrong."""


def order_positions(
    names: Sequence[str], positions: Sequence[float], expected: Sequence[str], *, allow_extra: bool
) -> np.ndarray:
    """Positions (n,) of `expected` joints taken from a (names, positions) input.

    Raises InvalidInputError for NaN/Inf, a length mismatch, missing or (unless allow_extra) unknown or
    duplicate joint names. Joint states may carry extra joints (grippers); commands may not.
    """
    values = np.asarray(list(positions), dtype=float)
    names = list(names)
    if len(names) != len(values):
        raise InvalidInputError(f"{len(names)} names but {len(values)} positions")
    if not np.all(np.isfinite(values)):
        raise InvalidInputError(f"positions contain NaN/Inf: {values.tolist()}")
    if len(set(names)) != len(names):
        raise InvalidInputError(f"duplicate joint names {names}")
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in expected if n not in index]
    if missing:
        raise InvalidInputError(f"missing joints {missing} (got {names})")
    if not allow_extra and len(names) != len(expected):
        unknown = [n for n in names if n not in set(expected)]
        raise InvalidInputError(f"unknown joints {unknown} (expected exactly {list(expected)})")
    return values[[index[n] for n in expected]]
