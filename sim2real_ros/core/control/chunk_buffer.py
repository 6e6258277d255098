"""Action-chunk buffer: what position to command at a control tick (docs/design.md §3).

A chunk's `stamp_ns` is the capture time of the observation the policy saw; its point k is the
target for the absolute time `stamp_ns + times_s[k]`. At a control tick `tick_ns` the actuator
commands the target for the moment the command will take effect, `tick_ns + actuation_latency`
(the *target time*). This module answers "what is the target at that time", blending every chunk
that covers it:

Coverage
    A chunk covers the closed interval [stamp + times_s[0], stamp + times_s[-1]]. A target time
    before a chunk's first point is *not* covered by that chunk (point 0 is the target for the
    observation time; the policy said nothing about earlier times and we never extrapolate
    backwards): older chunks that still cover it are used instead. A target time past the last
    point of every chunk is *stale*: `sample` returns None and never extrapolates.

Interpolation
    "linear": piecewise linear positions; the velocity is the slope of the segment (a knot belongs
    to the segment to its right, the last knot to the segment on its left).
    "cubic": cubic Hermite with finite-difference (Catmull-Rom on non-uniform knots) tangents;
    position and velocity are continuous (C1) across chunk points. End tangents are one-sided
    differences. A single-point chunk is a constant with zero velocity.

Blending of overlapping chunks
    "crossfade" (newest wins): chunks are ordered by stamp; a chunk fades in linearly over
    `crossfade_s` of *tick* time from the tick it was received at, so at the switch the command
    moves continuously from the old chunk to the new one (the only change is what the two chunks
    disagree by, spread over the crossfade). Once a chunk has fully faded in, older chunks are
    dropped. `crossfade_s = 0` switches at once. (If the old chunk runs out during the fade, the new
    one takes over at once: the old one has nothing left to say.)
    "temporal_ensemble" (ACT, Zhao et al. 2023): the target is the weighted mean over every chunk
    covering the target time with w_i = exp(-ensemble_decay * i), where i = 0 is the OLDEST
    covering chunk (exactly ACT's `np.exp(-k * np.arange(n))` over actions ordered oldest first).
    So ensemble_decay > 0 weights older predictions more (ACT's choice, smoother), < 0 weights the
    newest more, 0 is a plain mean. If `crossfade_s > 0`, each weight is also multiplied by the
    chunk's fade-in ramp so a new chunk enters without a step; set crossfade_s = 0 for pure ACT.

Velocities are the exact time derivative of the blended position (including the fade ramp term),
so a C1 interpolation stays C1 through a crossfade.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..timebase import NS_PER_S
from .action_chunk import ActionChunk

INTERPOLATIONS = ("linear", "cubic")
BLENDINGS = ("crossfade", "temporal_ensemble")

# Reasons a chunk is refused; the node counts and reports rejections by these names.
REJECT_JOINTS = "joint_names"
REJECT_EMPTY = "empty"
REJECT_NON_FINITE = "non_finite"
REJECT_TIME_ORDER = "time_order"
REJECT_RAGGED = "ragged"
REJECT_STALE = "stale_on_arrival"
REJECT_MALFORMED = "malformed"
REJECT_BEFORE_JUMP = "before_joint_jump"  # observed before the measured joints jumped (core.joint_jump)
REJECT_REASONS = (
    REJECT_JOINTS, REJECT_EMPTY, REJECT_NON_FINITE, REJECT_TIME_ORDER, REJECT_RAGGED, REJECT_STALE,
    REJECT_MALFORMED, REJECT_BEFORE_JUMP,
)


class ChunkRejectedError(ValueError):
    """A chunk was refused; `reason` is one of REJECT_REASONS, the text says what was wrong."""

    def __init__(self, reason: str, text: str) -> None:
        self.reason = reason
        self.detail = text
        super().__init__(f"{reason}: {text}")


def classify_message_error(text: str) -> str:
    """Map the text of a conversions.MessageError raised by trajectory_to_chunk to a reject reason."""
    lowered = text.lower()
    if "no joint_names" in lowered or "no points" in lowered:
        return REJECT_EMPTY
    if "nan" in lowered or "inf" in lowered:
        return REJECT_NON_FINITE
    if "time_from_start" in lowered:
        return REJECT_TIME_ORDER
    if "positions for" in lowered:
        return REJECT_RAGGED
    return REJECT_MALFORMED


@dataclass(frozen=True)
class ChunkBufferConfig:
    """How chunks are interpolated and blended.

    interpolation: "linear" | "cubic".
    blending: "crossfade" | "temporal_ensemble".
    crossfade_s [s]: fade-in time of a new chunk (>= 0).
    ensemble_decay [1/chunk]: m in w_i = exp(-m * i), i = 0 the oldest covering chunk.
    max_chunks: chunks kept at most (oldest dropped first).
    """

    interpolation: str = "cubic"
    blending: str = "crossfade"
    crossfade_s: float = 0.05
    ensemble_decay: float = 0.01
    max_chunks: int = 16
    source: str = "ChunkBufferConfig"

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(self.source, "interpolation", self.interpolation, f"must be one of {INTERPOLATIONS}")
        if self.blending not in BLENDINGS:
            raise ConfigError(self.source, "blending", self.blending, f"must be one of {BLENDINGS}")
        if not (np.isfinite(self.crossfade_s) and 0.0 <= self.crossfade_s <= 10.0):
            raise ConfigError(self.source, "crossfade_s", self.crossfade_s, "must be in [0, 10] s")
        if not (np.isfinite(self.ensemble_decay) and abs(self.ensemble_decay) <= 10.0):
            raise ConfigError(self.source, "ensemble_decay", self.ensemble_decay, "must be finite, |m| <= 10")
        if not 1 <= self.max_chunks <= 1000:
            raise ConfigError(self.source, "max_chunks", self.max_chunks, "must be in [1, 1000]")


@dataclass(frozen=True)
class CommandSample:
    """The commanded target at one target time.

    positions (n,) [rad], velocities (n,) [rad/s] (the derivative of the blended interpolation),
    newest_stamp_ns [ns]: stamp of the newest chunk that contributed, n_chunks: how many did.
    """

    positions: np.ndarray
    velocities: np.ndarray
    newest_stamp_ns: int
    n_chunks: int


@dataclass
class _StoredChunk:
    """A chunk reordered to the buffer's joint order, with what interpolation needs precomputed."""

    stamp_ns: int
    received_ns: int
    times_s: np.ndarray  # (K,) [s] time_from_start
    positions: np.ndarray  # (K, n) [rad]
    tangents: np.ndarray  # (K, n) [rad/s] (cubic only; zeros for linear)
    end_ns: int
    start_ns: int = field(init=False)

    def __post_init__(self) -> None:
        self.start_ns = self.stamp_ns + int(round(float(self.times_s[0]) * NS_PER_S))


def finite_difference_tangents(times_s: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Tangents (K, n) [rad/s] for cubic Hermite: central differences over the two neighbours
    (Catmull-Rom on non-uniform knots), one-sided at the ends, zero for a single point."""
    count = len(times_s)
    tangents = np.zeros_like(positions)
    if count < 2:
        return tangents
    tangents[0] = (positions[1] - positions[0]) / (times_s[1] - times_s[0])
    tangents[-1] = (positions[-1] - positions[-2]) / (times_s[-1] - times_s[-2])
    if count > 2:
        tangents[1:-1] = (positions[2:] - positions[:-2]) / (times_s[2:] - times_s[:-2])[:, None]
    return tangents


def interpolate(
    times_s: np.ndarray, positions: np.ndarray, tangents: np.ndarray, tau_s: float, cubic: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Position (n,) [rad] and velocity (n,) [rad/s] of one chunk at time_from_start `tau_s` [s].

    Returns None when tau_s lies outside [times_s[0], times_s[-1]] (no extrapolation).
    """
    if tau_s < times_s[0] or tau_s > times_s[-1]:
        return None
    count = len(times_s)
    if count == 1:
        return positions[0].copy(), np.zeros(positions.shape[1])
    # Segment k spans [t_k, t_{k+1}); the last knot belongs to the last segment.
    k = min(int(np.searchsorted(times_s, tau_s, side="right")) - 1, count - 2)
    t0, t1 = float(times_s[k]), float(times_s[k + 1])
    h = t1 - t0
    s = (tau_s - t0) / h
    p0, p1 = positions[k], positions[k + 1]
    if not cubic:
        velocity = (p1 - p0) / h
        return p0 + s * (p1 - p0), velocity
    m0, m1 = tangents[k], tangents[k + 1]
    s2, s3 = s * s, s * s * s
    h00, h10, h01, h11 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s, -2 * s3 + 3 * s2, s3 - s2
    position = h00 * p0 + h10 * h * m0 + h01 * p1 + h11 * h * m1
    # d/dtau of the Hermite basis (d/ds divided by h).
    d00, d10, d01, d11 = 6 * s2 - 6 * s, 3 * s2 - 4 * s + 1, -6 * s2 + 6 * s, 3 * s2 - 2 * s
    velocity = (d00 * p0 + d01 * p1) / h + d10 * m0 + d11 * m1
    return position, velocity


class ChunkBuffer:
    """Holds recent action chunks and samples the blended target (see the module docstring).

    Not thread-safe: the node serializes calls. All times are integer nanoseconds on the node's
    clock (sim time in sim); durations are seconds.
    """

    def __init__(self, joint_names: list[str] | tuple[str, ...], config: ChunkBufferConfig | None = None) -> None:
        if not joint_names:
            raise ConfigError("ChunkBuffer", "joint_names", list(joint_names), "needs at least one joint")
        self.joint_names = tuple(joint_names)
        self.config = config or ChunkBufferConfig()
        self._chunks: list[_StoredChunk] = []  # ordered by stamp, oldest first
        self._index = {name: i for i, name in enumerate(self.joint_names)}

    # ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._chunks)

    def clear(self) -> None:
        self._chunks.clear()

    def add(self, chunk: ActionChunk, received_ns: int, target_ns: int | None = None) -> None:
        """Store `chunk`, received at tick time `received_ns` [ns].

        Columns are reordered to the buffer's joint order. `target_ns` [ns] (the target time at
        reception, tick + latency) lets a chunk that is already entirely in the past be refused.
        Raises ChunkRejectedError (reason, text) and stores nothing when the chunk is unusable.
        """
        names = tuple(chunk.joint_names)
        if set(names) != set(self.joint_names) or len(names) != len(self.joint_names):
            raise ChunkRejectedError(REJECT_JOINTS, f"chunk joints {list(names)} != expected {list(self.joint_names)}")
        positions = np.asarray(chunk.positions, dtype=float)
        times = np.asarray(chunk.times_s, dtype=float)
        if positions.ndim != 2 or positions.shape[0] == 0 or times.shape != (positions.shape[0],):
            raise ChunkRejectedError(REJECT_EMPTY, f"positions shape {positions.shape}, times shape {times.shape}")
        if positions.shape[1] != len(names):
            raise ChunkRejectedError(REJECT_RAGGED, f"{positions.shape[1]} columns for {len(names)} joints")
        if not (np.all(np.isfinite(positions)) and np.all(np.isfinite(times))):
            raise ChunkRejectedError(REJECT_NON_FINITE, "NaN/Inf in positions or times")
        if np.any(np.diff(times) <= 0):
            raise ChunkRejectedError(REJECT_TIME_ORDER, f"time_from_start must strictly increase, got {times.tolist()}")
        if names != self.joint_names:
            positions = positions[:, [names.index(n) for n in self.joint_names]]
        end_ns = chunk.stamp_ns + int(round(float(times[-1]) * NS_PER_S))
        if target_ns is not None and end_ns < target_ns:
            raise ChunkRejectedError(
                REJECT_STALE, f"last point at {end_ns} ns is before the target time {target_ns} ns "
                f"({(target_ns - end_ns) / 1e6:.1f} ms late)"
            )
        tangents = (
            finite_difference_tangents(times, positions) if self.config.interpolation == "cubic"
            else np.zeros_like(positions)
        )
        stored = _StoredChunk(chunk.stamp_ns, received_ns, times, positions, tangents, end_ns)
        # Keep stamp order; a chunk with an equal stamp counts as newer than the one already held.
        position = len(self._chunks)
        while position > 0 and self._chunks[position - 1].stamp_ns > stored.stamp_ns:
            position -= 1
        self._chunks.insert(position, stored)
        if len(self._chunks) > self.config.max_chunks:
            del self._chunks[: len(self._chunks) - self.config.max_chunks]

    # ------------------------------------------------------------------------------------------
    def _ramp(self, chunk: _StoredChunk, tick_ns: int) -> tuple[float, float]:
        """Fade-in weight in [0, 1] of `chunk` at `tick_ns`, and its rate [1/s]."""
        fade = self.config.crossfade_s
        if fade <= 0.0:
            return 1.0, 0.0
        elapsed_s = (tick_ns - chunk.received_ns) / NS_PER_S
        if elapsed_s >= fade:
            return 1.0, 0.0
        if elapsed_s <= 0.0:
            # Received "after" this tick (clock skew between threads): not faded in yet.
            return 0.0, 0.0
        return elapsed_s / fade, 1.0 / fade

    def prune(self, tick_ns: int, target_ns: int) -> None:
        """Drop chunks that can never be used again: stale ones (end before `target_ns`; target
        times only move forward) and, in crossfade mode, those older than a fully faded-in chunk."""
        self._chunks = [c for c in self._chunks if c.end_ns >= target_ns]
        if self.config.blending == "crossfade":
            for i in range(len(self._chunks) - 1, 0, -1):
                chunk = self._chunks[i]
                # Only a chunk that already covers the target may make the older ones obsolete.
                if chunk.start_ns <= target_ns and self._ramp(chunk, tick_ns)[0] >= 1.0:
                    del self._chunks[:i]
                    break

    def sample(self, tick_ns: int, actuation_latency_s: float) -> CommandSample | None:
        """The target for the time the command sent at `tick_ns` [ns] takes effect,
        `tick_ns + actuation_latency_s` [s]. None when no chunk covers that time (stale)."""
        target_ns = tick_ns + int(round(actuation_latency_s * NS_PER_S))
        self.prune(tick_ns, target_ns)
        return self.sample_at(tick_ns, target_ns)

    def sample_at(self, tick_ns: int, target_ns: int) -> CommandSample | None:
        """Blend every chunk covering `target_ns` [ns]; fade ramps use `tick_ns` [ns]. No pruning."""
        cubic = self.config.interpolation == "cubic"
        covering: list[tuple[_StoredChunk, np.ndarray, np.ndarray]] = []
        for chunk in self._chunks:
            tau_s = (target_ns - chunk.stamp_ns) / NS_PER_S
            value = interpolate(chunk.times_s, chunk.positions, chunk.tangents, tau_s, cubic)
            if value is not None:
                covering.append((chunk, value[0], value[1]))
        if not covering:
            return None
        if self.config.blending == "crossfade":
            position, velocity = self._crossfade(covering, tick_ns)
        else:
            position, velocity = self._ensemble(covering, tick_ns)
        return CommandSample(position, velocity, covering[-1][0].stamp_ns, len(covering))

    def _crossfade(self, covering, tick_ns: int) -> tuple[np.ndarray, np.ndarray]:
        # Fold oldest -> newest: x = (1 - a) x_prev + a x_i, dx = (1 - a) dx_prev + a dx_i + a' (x_i - x_prev).
        _, position, velocity = covering[0]
        position, velocity = position.copy(), velocity.copy()
        for chunk, pos_i, vel_i in covering[1:]:
            alpha, alpha_rate = self._ramp(chunk, tick_ns)
            velocity = (1 - alpha) * velocity + alpha * vel_i + alpha_rate * (pos_i - position)
            position = (1 - alpha) * position + alpha * pos_i
        return position, velocity

    def _ensemble(self, covering, tick_ns: int) -> tuple[np.ndarray, np.ndarray]:
        decay = self.config.ensemble_decay
        weights = np.empty(len(covering))
        weight_rates = np.empty(len(covering))
        for i, (chunk, _, _) in enumerate(covering):
            ramp, ramp_rate = self._ramp(chunk, tick_ns)
            if i == 0:
                # The oldest covering chunk always counts fully, so the sum of weights is never 0.
                ramp, ramp_rate = 1.0, 0.0
            base = float(np.exp(-decay * i))
            weights[i], weight_rates[i] = base * ramp, base * ramp_rate
        positions = np.stack([c[1] for c in covering])
        velocities = np.stack([c[2] for c in covering])
        total = weights.sum()
        position = weights @ positions / total
        # Quotient rule: d/dt (sum w x / sum w) = (sum w' x + sum w x' - position * sum w') / sum w.
        velocity = (weight_rates @ positions + weights @ velocities - position * weight_rates.sum()) / total
        return position, velocity
