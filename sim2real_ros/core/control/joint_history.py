"""The student's short joint history: joint positions at fixed times before the observation.

One image cannot tell a student how fast the arm moves, whether the jaw is closing or opening, or
that the servos lag more than in training (issue 32: "a student that can adapt"). A policy whose
spec lists `joint_history_s` (lags [s], e.g. 0.1, 0.2, 0.3, 0.4) also sees, with each image, the
measured joint positions at `stamp - lag` for each lag: (H, n) absolute positions [rad], which the
model turns into deltas from the current positions (core/policy/model.py).

Everything that builds an observation builds its history here, from the joint states it holds:
the policy node (its pairing buffer), offline replay (the bag's joint states), and the sim
rollouts that train and evaluate the student (the joint states the graph would have published).
So the history a policy is trained on and the one it runs on are sampled the same way:

- q(t) between two samples is linear in time between them (joint states come at 100 Hz or more, a
  lag is 0.1 s or more);
- before the oldest sample held, the oldest sample: at the start of an episode or a stream the arm
  is taken to have been where it was first measured (as training's episodes start at rest);
- after the newest sample (never for lags > 0 once the image is paired), the newest sample;
- a sample no motion could reach from the one before (breaks_history: a sim episode's reset that
  teleports the arm home, a re-homed encoder) starts the history over: what came before belongs to
  another episode, and a history across it tells the policy the arm flew 0.6 rad in 10 ms, which no
  training episode showed it (the sim graph's episodes after the first began that way).

Why joint positions and not also the policy's own previous chunk (the issue's other option): a
clone that sees its own previous action learns to copy it (the "copycat" failure of behaviour
cloning with action history), and a previous-chunk input would chain each observation to the
previous inference, which batched offline replay cannot evaluate ahead. The measured positions carry
what the chunk did to the arm.

Pure numpy; no rclpy, no torch.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..timebase import NS_PER_S

MAX_HISTORY_POINTS = 32  # lags per policy: 4-8 here
MAX_HISTORY_S = 2.0  # [s] the oldest lag: the 0.3-0.5 s, with room
# Joint states a buffer must hold to reach MAX_HISTORY_S back at up to this rate [Hz].
MAX_JOINT_STATE_HZ = 1000.0


# A step between two joint states beyond TELEPORT_SLACK_RAD + TELEPORT_SPEED_RAD_S x dt on any joint
# is no motion: twice a fast hobby servo's top speed (STS3215 about 6-7 rad/s unloaded) plus the
# supervisor's default jump slack (max_joint_jump_rad), so a real motion, however fast, never breaks it.
TELEPORT_SLACK_RAD = 0.2  # [rad]
TELEPORT_SPEED_RAD_S = 20.0  # [rad/s]


def breaks_history(previous_stamp_ns: int, previous: np.ndarray, stamp_ns: int, positions: np.ndarray) -> bool:
    """Whether the joint state (stamp_ns [ns], positions (n,) [rad]) cannot follow the previous one by
    any motion (a teleport: the history before it is another episode's)."""
    dt_s = max(stamp_ns - previous_stamp_ns, 0) / NS_PER_S
    step = np.max(np.abs(np.asarray(positions, dtype=np.float64) - np.asarray(previous, dtype=np.float64)),
                  initial=0.0)
    return bool(step > TELEPORT_SLACK_RAD + TELEPORT_SPEED_RAD_S * dt_s)


def check_history_lags(value: Any, source: str, field: str = "joint_history_s") -> tuple[float, ...]:
    """The lags [s] as a tuple: each a finite number in (0, MAX_HISTORY_S], strictly increasing, at
    most MAX_HISTORY_POINTS of them; an empty list means no history. ConfigError naming `field`."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ConfigError(source, field, value, "must be a list of lags [s] (e.g. [0.1, 0.2, 0.3, 0.4]) or []")
    if len(value) > MAX_HISTORY_POINTS:
        raise ConfigError(source, field, f"<{len(value)} lags>", f"more than MAX_HISTORY_POINTS = {MAX_HISTORY_POINTS}")
    lags = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item) \
                or not 0 < item <= MAX_HISTORY_S:
            shown = repr(list(value))  # bounded: a hostile file's entries may be long strings
            raise ConfigError(source, field, shown if len(shown) <= 200 else f"{shown[:200]}...",
                              f"each lag must be a number of seconds in (0, {MAX_HISTORY_S}]")
        lags.append(float(item))
    if any(b <= a for a, b in zip(lags, lags[1:], strict=False)):
        raise ConfigError(source, field, lags, "lags must increase strictly")
    return tuple(lags)


def buffer_length(lags_s: Sequence[float], joint_state_hz: float = MAX_JOINT_STATE_HZ, base: int = 256) -> int:
    """Joint states a pairing buffer must keep to reach the oldest lag back at `joint_state_hz`."""
    oldest = max(lags_s, default=0.0)
    return max(base, int(math.ceil(oldest * joint_state_hz)) + 64)


def sample_history(stamps_ns: Sequence[int], positions: Sequence[np.ndarray], stamp_ns: int,
                   lags_s: Sequence[float]) -> np.ndarray:
    """The joint positions (H, n) [rad] at `stamp_ns - lag` for each lag [s], from samples at
    increasing `stamps_ns` [ns] (positions (n,) each): linear between samples, the oldest before
    them, the newest after them (module docstring). ValueError when there is no sample."""
    if len(stamps_ns) == 0:
        raise ValueError("a joint history needs at least one joint state")
    out = np.empty((len(lags_s), len(positions[0])), dtype=np.float64)
    for row, lag in enumerate(lags_s):
        when = stamp_ns - int(round(lag * NS_PER_S))
        right = bisect.bisect_left(stamps_ns, when)
        if right == 0:
            out[row] = positions[0]
        elif right == len(stamps_ns):
            out[row] = positions[-1]
        else:
            t0, t1 = stamps_ns[right - 1], stamps_ns[right]
            weight = (when - t0) / (t1 - t0) if t1 > t0 else 1.0
            out[row] = (1.0 - weight) * np.asarray(positions[right - 1]) + weight * np.asarray(positions[right])
    return out


class JointTrack:
    """The joint states of one stream, newest last, for histories (the sim rollouts' buffer; the
    policy node's pairing buffer does the same with its own samples). Samples older than
    `keep_s` [s] before the newest are dropped; a stamp going back, or a sample no motion could
    reach (breaks_history), starts the track over."""

    def __init__(self, keep_s: float) -> None:
        self.keep_ns = int(round(max(keep_s, 0.0) * NS_PER_S)) + NS_PER_S // 10
        self.stamps: list[int] = []
        self.positions: list[np.ndarray] = []

    def add(self, stamp_ns: int, positions: np.ndarray) -> None:
        if self.stamps and stamp_ns <= self.stamps[-1]:
            if stamp_ns == self.stamps[-1]:
                self.positions[-1] = np.array(positions, dtype=np.float64)
                return
            self.stamps.clear()
            self.positions.clear()
        elif self.stamps and breaks_history(self.stamps[-1], self.positions[-1], stamp_ns, positions):
            self.stamps.clear()
            self.positions.clear()
        self.stamps.append(int(stamp_ns))
        self.positions.append(np.array(positions, dtype=np.float64))
        cut = bisect.bisect_left(self.stamps, stamp_ns - self.keep_ns)
        if cut > 64:  # trim in blocks, not every sample
            del self.stamps[:cut]
            del self.positions[:cut]

    def history(self, stamp_ns: int, lags_s: Sequence[float]) -> np.ndarray:
        """(H, n) [rad] at stamp_ns - lag (sample_history); (0, n) when there are no lags."""
        if not lags_s:
            return np.zeros((0, len(self.positions[-1]) if self.positions else 0))
        return sample_history(self.stamps, self.positions, stamp_ns, lags_s)


def checked_history(history: Any, lags_s: Sequence[float], joint_count: int) -> np.ndarray:
    """A history argument as (H, n) float64, H = len(lags_s); ValueError naming what is wrong. A
    policy without history takes None (or an empty (0, n) array)."""
    h = len(lags_s)
    if history is None:
        if h:
            raise ValueError(f"this policy needs the joint history at lags {list(lags_s)} s: "
                             f"joint_history ({h}, {joint_count}) [rad]")
        return np.zeros((0, joint_count))
    array = np.asarray(history, dtype=np.float64)
    if array.shape != (h, joint_count):
        raise ValueError(f"joint_history must have shape ({h}, {joint_count}), got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("joint_history contains NaN/Inf")
    return array
