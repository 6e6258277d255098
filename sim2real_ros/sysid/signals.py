"""Joint position streams as arrays: extraction from messages, time base, unwrapping, resampling.

Pure numpy (no rclpy): messages are read duck-typed, so rosbags-deserialized objects and rclpy
messages both work. Everything the latency estimator needs to turn two messy recorded topics into
two signals on one uniform time grid lives here.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The resampling helpers are the latency correlation's (core), named here for the sysid modules.
from ..core.control.lag_correlation import linear, median_period_s, update_period_s, zero_order_hold
from ..core.timebase import NS_PER_S

__all__ = ["NS_PER_S", "JointStream", "choose_time_source", "linear", "median_period_s", "stamps_sane",
           "stream_from_messages", "times_s", "unwrap", "update_period_s", "wrap_period", "zero_order_hold"]

# Header stamps further than this from the recorder's log time are not trusted [s].
MAX_STAMP_LOG_OFFSET_S = 2.0
# Fraction of non-increasing header stamps tolerated before the stamps count as insane.
MAX_NON_MONOTONIC_FRACTION = 0.01


@dataclass(frozen=True)
class JointStream:
    """One recorded topic of joint positions.

    log_ns (N,) [ns]: recorder receive times. stamp_ns (N,) [ns] or None: header stamps (None for
    messages without a header, e.g. Float64MultiArray). positions (N, n) [rad or m]. names: joint
    names as published (empty when the messages carry none). dropped: malformed messages skipped.
    """

    topic: str
    msgtype: str
    log_ns: np.ndarray
    stamp_ns: np.ndarray | None
    positions: np.ndarray
    names: tuple[str, ...]
    dropped: int = 0
    drop_reasons: dict[str, int] = field(default_factory=dict)
    # Where stamp_ns came from: 'header' (the messages' own stamps) or 'publish' (the DDS source
    # timestamp the recorder stored as MCAP publish time, for messages without a header).
    stamps_from: str = "header"

    @property
    def n_joints(self) -> int:
        return int(self.positions.shape[1])

    def __len__(self) -> int:
        return int(self.positions.shape[0])


def _stamp_ns(msg: Any) -> int | None:
    header = getattr(msg, "header", None)
    if header is None:
        return None
    stamp = header.stamp
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def _positions_of(msg: Any) -> tuple[list[float], tuple[str, ...]]:
    """Positions and names of a JointState (position, name) or a Float64MultiArray (data)."""
    if hasattr(msg, "position"):
        return list(np.asarray(msg.position, dtype=float)), tuple(str(n) for n in msg.name)
    if hasattr(msg, "data"):
        return list(np.asarray(msg.data, dtype=float)), ()
    raise ValueError(f"message of type {type(msg).__name__} has neither 'position' nor 'data'")


def stream_from_messages(topic: str, msgtype: str, items: Iterable[tuple[int, Any]]) -> JointStream:
    """Build a JointStream from (log_time_ns, msg) pairs of one topic.

    The joint count is the most common message length; messages of another length, with NaN/Inf,
    or with a name list that changes, are dropped and counted (real recordings have a few).
    """
    rows: list[tuple[int, int | None, list[float], tuple[str, ...]]] = []
    reasons: Counter[str] = Counter()
    for log_ns, msg in items:
        try:
            positions, names = _positions_of(msg)
        except ValueError:
            reasons["not a joint position message"] += 1
            continue
        rows.append((int(log_ns), _stamp_ns(msg), positions, names))
    if not rows:
        return JointStream(topic, msgtype, np.zeros(0, np.int64), None, np.zeros((0, 0)), (), sum(reasons.values()),
                           dict(reasons))
    n = Counter(len(r[2]) for r in rows).most_common(1)[0][0]
    names = Counter(r[3] for r in rows if len(r[2]) == n).most_common(1)[0][0]
    kept = []
    for row in rows:
        if len(row[2]) != n:
            reasons[f"length {len(row[2])} != {n}"] += 1
        elif not all(math.isfinite(v) for v in row[2]):
            reasons["NaN/Inf position"] += 1
        elif row[3] != names:
            reasons["joint names differ"] += 1
        else:
            kept.append(row)
    kept.sort(key=lambda r: r[0])
    log_ns = np.array([r[0] for r in kept], dtype=np.int64)
    stamps = None
    if kept and all(r[1] is not None for r in kept):
        stamps = np.array([r[1] for r in kept], dtype=np.int64)
    positions = np.array([r[2] for r in kept], dtype=float).reshape(len(kept), n)
    return JointStream(topic, msgtype, log_ns, stamps, positions, names, sum(reasons.values()), dict(reasons))


def stamps_sane(stream: JointStream) -> tuple[bool, str]:
    """Whether header stamps can be trusted: present, non-zero, increasing, near the log time."""
    if stream.stamp_ns is None:
        return False, f"{stream.topic} has no header stamps"
    if len(stream) < 2:
        return False, f"{stream.topic} has fewer than 2 messages"
    if np.any(stream.stamp_ns <= 0):
        return False, f"{stream.topic} has zero header stamps"
    non_monotonic = float(np.mean(np.diff(stream.stamp_ns) <= 0))
    if non_monotonic > MAX_NON_MONOTONIC_FRACTION:
        return False, f"{stream.topic} header stamps go backwards ({non_monotonic:.1%} of steps)"
    offset_s = float(np.median(stream.stamp_ns - stream.log_ns)) / NS_PER_S
    if abs(offset_s) > MAX_STAMP_LOG_OFFSET_S:
        return False, f"{stream.topic} header stamps are {offset_s:+.3f} s from the log time"
    return True, "ok"


def choose_time_source(*streams: JointStream) -> tuple[str, str]:
    """'header' when every stream has sane header stamps, else 'log' for all (never mixed: two
    clocks would put their offset into the latency). Returns (source, reason)."""
    for stream in streams:
        ok, why = stamps_sane(stream)
        if not ok:
            return "log", why
    published = [s.topic for s in streams if s.stamps_from == "publish"]
    via = f" ({', '.join(published)}: the DDS source timestamp, stored as MCAP publish time)" if published else ""
    return "header", (f"header stamps{via} present, increasing and within {MAX_STAMP_LOG_OFFSET_S} s of the "
                      "log time")


def times_s(stream: JointStream, source: str, origin_ns: int) -> np.ndarray:
    """Sample times [s] relative to origin_ns in the chosen time base."""
    base = stream.stamp_ns if source == "header" and stream.stamp_ns is not None else stream.log_ns
    return (base - origin_ns).astype(float) / NS_PER_S


# Wrap periods a joint encoder plausibly folds positions into [rad]; none folds into less than this.
MIN_WRAP_PERIOD = 0.5
_NICE_PERIODS = (2 * math.pi, math.pi, math.pi / 2)


def wrap_period(x: np.ndarray) -> float | None:
    """The period a measured joint wraps at, or None when it does not wrap.

    A wrap (an encoder folding positions modulo pi, pi/2...) is a jump almost as large as the
    whole range of values, against the direction the joint is moving both just before and just
    after it (two changes of value each side, each above 3x the noise): the motion goes on, only the
    reading folds. A fast joint following a step command
    also jumps far, but from rest to rest, so it is not taken for a wrap. The period is the range of
    values, snapped to 2*pi, pi or pi/2 when within 5 %.
    """
    if len(x) < 4:
        return None
    # Sample-and-hold streams repeat values; the motion is in the changes.
    values = x[np.concatenate([[True], np.diff(x) != 0])]
    span = float(np.ptp(values))
    steps = np.diff(values)
    if span < MIN_WRAP_PERIOD or len(steps) < 3:
        return None
    big = np.flatnonzero(np.abs(steps) > 0.7 * span)
    if len(big) == 0:
        return None
    # Noise level from second differences, which smooth motion leaves near zero (MAD, robust to
    # the wraps themselves).
    noise = 1.4826 * float(np.median(np.abs(np.diff(steps)))) / math.sqrt(6) if len(steps) > 1 else 0.0
    threshold = max(3 * noise, 1e-9)
    wraps = rests = 0
    for i in big:
        if i < 2 or i > len(steps) - 3:
            continue  # too little motion seen on one side to tell
        around = np.concatenate([steps[i - 2: i], steps[i + 1: i + 3]])
        if np.all(np.abs(around) > threshold) and np.all(np.abs(around) < 0.3 * span) and np.all(
            np.sign(around) == -np.sign(steps[i])
        ):
            wraps += 1
        elif np.mean(np.abs(around)) <= threshold:
            rests += 1  # a jump from rest to rest: a fast joint following a step, not a wrap
    # Wraps near a turning point look ambiguous; rest-to-rest jumps rule a wrap out.
    if wraps == 0 or rests > 0 or 2 * wraps < len(big):
        return None
    for nice in _NICE_PERIODS:
        if abs(span - nice) < 0.05 * nice:
            return nice
    return span


def unwrap(x: np.ndarray, period: float) -> np.ndarray:
    """Remove jumps of about one period (numpy's unwrap with a custom period)."""
    return np.unwrap(x, period=period)
