"""Pair each policy image with the joint state measured nearest its capture time (pure, no rclpy).

Images and joint states arrive on separate topics at different rates. The policy needs the joint
positions at the image's capture time, so each image is matched to the buffered joint state whose
stamp is nearest, within a tolerance. An image older than a maximum age (against the caller's clock,
which is sim time under use_sim_time) is dropped: acting on it would command the past.

Also here: per-reason drop counters and rolling percentile statistics the policy node reports.
"""
from __future__ import annotations

import bisect
import enum
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..timebase import NS_PER_S
from .joint_history import breaks_history, sample_history

# A joint stamp this much older than the newest one means the clock was reset [ns].
CLOCK_RESET_NS = NS_PER_S


class DropReason(str, enum.Enum):
    """Why an observation or message was not turned into a chunk (the diagnostics key names)."""

    STALE = "stale"  # image older than max age when its turn came
    UNPAIRED = "unpaired"  # no joint state within the pairing tolerance of the image stamp
    SUPERSEDED = "superseded"  # a newer image arrived before inference got to this one
    BAD_IMAGE = "bad_image"  # wrong encoding or size, malformed data
    BAD_JOINT_STATE = "bad_joint_state"  # NaN/Inf, wrong length, missing joints
    INFERENCE_ERROR = "inference_error"  # the model raised
    THROTTLED = "throttled"  # sooner after the last observation used than the policy's observation period


@dataclass(frozen=True)
class PairingConfig:
    """tolerance_ns: largest |image stamp - joint stamp| accepted [ns]. max_age_ns: largest
    now - image stamp accepted [ns]. history: joint states kept for matching."""

    tolerance_ns: int
    max_age_ns: int
    history: int = 256

    def __post_init__(self) -> None:
        if self.tolerance_ns < 0:
            raise ConfigError("pairing", "tolerance_ns", self.tolerance_ns, "must be >= 0")
        if self.max_age_ns <= 0:
            raise ConfigError("pairing", "max_age_ns", self.max_age_ns, "must be > 0")
        if self.history < 1:
            raise ConfigError("pairing", "history", self.history, "must be >= 1")


@dataclass(frozen=True)
class Pairing:
    """Outcome of pairing one image.

    positions: joint positions (n,) [rad] when paired, else None. joint_stamp_ns: stamp of the
    joint state used. wait: no match yet, but a joint state still to come could match (keep the
    image and try again). drop: the reason the image is dropped, else None.
    """

    positions: np.ndarray | None = None
    joint_stamp_ns: int | None = None
    wait: bool = False
    drop: DropReason | None = None


class ObservationPairer:
    """Joint-state history (already in the policy's joint order) and nearest-stamp matching."""

    def __init__(self, config: PairingConfig) -> None:
        self.config = config
        self._stamps: deque[int] = deque(maxlen=config.history)
        self._positions: deque[np.ndarray] = deque(maxlen=config.history)
        # The stamp [ns] of the last sample no motion could reach (None: none held): the joint
        # history starts there (add_joint_state).
        self._history_start_ns: int | None = None

    def __len__(self) -> int:
        return len(self._stamps)

    @property
    def newest_stamp_ns(self) -> int | None:
        return self._stamps[-1] if self._stamps else None

    def add_joint_state(self, stamp_ns: int, positions: np.ndarray) -> bool:
        """Buffer one joint state (positions (n,) [rad] in the policy's joint order); True if kept.

        Stamps normally increase. A stamp more than CLOCK_RESET_NS older than the newest means the
        clock went back (a sim reset, a bag replay restarting): the history belongs to another
        timeline and is discarded. A sample no motion could reach from the newest (a sim episode's
        restart teleports the arm home on a clock that runs on: joint_history.breaks_history) starts
        the policy's joint history over there; pairing still sees every sample. A slightly
        out-of-order sample is ignored (its neighbours are newer measurements); a repeated stamp
        replaces the previous sample.
        """
        newest = self.newest_stamp_ns
        if newest is not None and stamp_ns > newest and breaks_history(newest, self._positions[-1], stamp_ns,
                                                                        positions):
            self._history_start_ns = int(stamp_ns)
        if newest is not None and stamp_ns < newest - CLOCK_RESET_NS:
            self._stamps.clear()
            self._positions.clear()
            self._history_start_ns = None
        elif newest is not None and stamp_ns < newest:
            return False
        elif newest is not None and stamp_ns == newest:
            self._positions[-1] = positions
            return True
        self._stamps.append(int(stamp_ns))
        self._positions.append(positions)
        return True

    def pair(self, image_stamp_ns: int, now_ns: int) -> Pairing:
        """Match an image captured at `image_stamp_ns` [ns], at time `now_ns` [ns] of the same clock."""
        if now_ns - image_stamp_ns > self.config.max_age_ns:
            return Pairing(drop=DropReason.STALE)
        if not self._stamps:
            return Pairing(wait=True)
        stamps = self._stamps
        index = bisect.bisect_left(stamps, image_stamp_ns)
        candidates = [i for i in (index - 1, index) if 0 <= i < len(stamps)]
        best = min(candidates, key=lambda i: abs(stamps[i] - image_stamp_ns))
        if abs(stamps[best] - image_stamp_ns) <= self.config.tolerance_ns:
            return Pairing(positions=self._positions[best], joint_stamp_ns=stamps[best])
        if stamps[-1] < image_stamp_ns - self.config.tolerance_ns:
            # Joint states lag the image: the matching one may still be in flight.
            return Pairing(wait=True)
        return Pairing(drop=DropReason.UNPAIRED)

    def history(self, stamp_ns: int, lags_s: Sequence[float]) -> np.ndarray:
        """The buffered joint positions at stamp_ns - lag for each lag [s], (H, n) [rad]
        (core/control/joint_history.sample_history: linear between samples, the oldest held
        before them), from the last sample no motion could reach on (add_joint_state). Call after a
        successful pair (the buffer is not empty)."""
        start = self._history_start_ns
        if start is None or start <= self._stamps[0]:
            return sample_history(self._stamps, self._positions, stamp_ns, lags_s)
        first = bisect.bisect_left(self._stamps, start)
        return sample_history(list(self._stamps)[first:], list(self._positions)[first:], stamp_ns, lags_s)


class DropCounter:
    """Counts of dropped inputs per DropReason (all reasons present, zero by default)."""

    def __init__(self) -> None:
        self._counts: Counter[DropReason] = Counter({reason: 0 for reason in DropReason})

    def add(self, reason: DropReason, count: int = 1) -> None:
        self._counts[reason] += count

    def __getitem__(self, reason: DropReason) -> int:
        return self._counts[reason]

    def as_dict(self) -> dict[str, int]:
        return {reason.value: self._counts[reason] for reason in DropReason}

    @property
    def total(self) -> int:
        return sum(self._counts.values())


class RollingStats:
    """The last `window` samples of a quantity and their percentiles."""

    def __init__(self, window: int = 500) -> None:
        self._samples: deque[float] = deque(maxlen=window)
        self.count = 0

    def add(self, value: float) -> None:
        self._samples.append(float(value))
        self.count += 1

    def summary(self, percentiles: Sequence[float] = (50, 99)) -> dict[str, float]:
        """{"p50", "p99", "max", "mean"} over the window (NaN when empty)."""
        if not self._samples:
            return {**{f"p{p:g}": float("nan") for p in percentiles}, "max": float("nan"), "mean": float("nan")}
        values = np.fromiter(self._samples, dtype=float)
        out = {f"p{p:g}": float(np.percentile(values, p)) for p in percentiles}
        out["max"] = float(values.max())
        out["mean"] = float(values.mean())
        return out


class ObservationThrottle:
    """Observe at the policy's rate, on average, from any camera rate: observations are due on a grid
    `period_s` [s] apart, and the first image whose capture stamp is at most a quarter period before
    the due time is accepted. A 30 Hz camera then gives every third frame for a 0.1 s period despite
    stamp jitter, and a 15 Hz one alternates two frames and one (133 and 67 ms: 10 Hz on average,
    where "at least 3/4 of a period after the last" gave 7.5 Hz). An image half a period or more late
    (a slow or stalled camera) starts the grid over at its stamp rather than letting a burst catch
    up. period_s = 0 accepts every image; a stamp going backwards (sim restart, bag loop) is
    accepted and starts the grid over."""

    def __init__(self, period_s: float) -> None:
        if not (period_s >= 0 and period_s < float("inf")):
            raise ConfigError("observation throttle", "period_s", period_s, "must be a finite number >= 0")
        self.period_s = period_s
        self._period_ns = int(round(period_s * NS_PER_S))
        self._early_ns = self._period_ns // 4
        self._last_ns: int | None = None
        self._due_ns: int | None = None

    def accept(self, stamp_ns: int) -> bool:
        last, due = self._last_ns, self._due_ns
        if last is not None and due is not None and stamp_ns >= last:
            if stamp_ns < due - self._early_ns:
                return False
            # On time: the next one is due a period after this one was; late: after this image.
            on_time = stamp_ns < due + self._period_ns // 2
            self._due_ns = (due if on_time else stamp_ns) + self._period_ns
        else:
            self._due_ns = stamp_ns + self._period_ns
        self._last_ns = stamp_ns
        return True
