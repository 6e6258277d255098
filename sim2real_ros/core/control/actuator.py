"""The actuator's logic without ROS: action chunks and joint states in, one command per control tick out.

`ActuatorCore` is everything `nodes/actuator_node.py` does between a message arriving and a message
leaving, so a test that drives the core at fixed times (a lockstep sim loop, a unit test) tests what
the node does. Time is passed in as integer nanoseconds on the node's clock (sim time in sim);
nothing here reads a clock, sleeps or locks (the node serializes calls).

At tick t the command is the buffered chunks' target for t + latency in use (core.chunk_buffer,
docs/design.md §3). The latency the joints actually show is estimated from the commands sent vs the
joint states measured (core.latency_estimator); with `use_estimated_latency` it replaces the
configured `actuation_latency_s` once its confidence reaches `latency_min_confidence`.

With the joints' velocity limits configured, a measured joint jump (core.joint_jump: a teleported sim
robot at an episode reset, a re-homed encoder) drops the buffered chunks and refuses chunks observed
before it: they were planned for a position the arm is no longer at. Until a chunk observed after the
jump arrives, the actuator is stale and the supervisor holds. While a possible jump awaits
confirmation (its first samples, held back) the actuator sends nothing either (`jump_pending_ticks`):
if it is real, the commands of those ticks were planned for where the arm no longer is, and the
supervisor, which confirms jumps on the same samples, would otherwise take one of them for the
policy's first plan at the new position. One outlier sample costs one tick.
"""
from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..safety.joint_jump import JointJumpConfig, JointJumpDetector
from ..timebase import NS_PER_S
from .action_chunk import ActionChunk
from .chunk_buffer import (
    BLENDINGS,
    INTERPOLATIONS,
    REJECT_BEFORE_JUMP,
    REJECT_REASONS,
    ChunkBuffer,
    ChunkBufferConfig,
    ChunkRejectedError,
    CommandSample,
    classify_message_error,
)
from .latency_estimator import LatencyEstimate, LatencyEstimator, LatencyEstimatorConfig

DEFAULT_SOURCE = "actuator_node"
CLOCK_JUMP_NS = 1_000_000_000  # [ns] a backwards clock step larger than this is a restart, not jitter
HISTORY = 2000  # tick periods and chunk ages kept for the statistics (20 s at 100 Hz, 4 s at 500 Hz)

# Fields of the core configs that carry another name as node parameters.
_CORE_FIELD_TO_PARAMETER = {"window_s": "latency_window_s", "max_lag_s": "latency_max_s"}


@dataclass(frozen=True)
class ActuatorConfig:
    """Validated actuator settings (the node's parameters; see actuator_node.declare_parameters).

    joints: command joint order; control_rate_hz [Hz]; actuation_latency_s [s]: configured compensation;
    interpolation, blending, crossfade_s [s], ensemble_decay: chunk_buffer settings;
    estimate_latency / use_estimated_latency: estimate the latency / compensate with the estimate;
    latency_window_s [s], latency_max_s [s]: estimator history and search range;
    latency_min_confidence [0..1]: confidence needed before the estimate is used;
    velocity_limits (n,) [rad/s] (empty: no jump detection) and max_joint_jump_rad [rad]: what makes a
    measured step a jump (core.joint_jump);
    source: what error messages name (the node's parameters).
    """

    joints: tuple[str, ...]
    control_rate_hz: float = 100.0
    actuation_latency_s: float = 0.0
    interpolation: str = "cubic"
    blending: str = "crossfade"
    crossfade_s: float = 0.05
    ensemble_decay: float = 0.01
    estimate_latency: bool = True
    use_estimated_latency: bool = False
    latency_window_s: float = 4.0
    latency_max_s: float = 0.25
    latency_min_confidence: float = 0.8
    velocity_limits: tuple[float, ...] = ()
    max_joint_jump_rad: float = 0.2
    source: str = DEFAULT_SOURCE

    def __post_init__(self) -> None:
        def bad(field: str, problem: str) -> ConfigError:
            return ConfigError(self.source, field, getattr(self, field), problem)

        if not self.joints or any(not name for name in self.joints) or len(set(self.joints)) != len(self.joints):
            raise bad("joints", "must be distinct, non-empty joint names")
        if not (np.isfinite(self.control_rate_hz) and 0.0 < self.control_rate_hz <= 2000.0):
            raise bad("control_rate_hz", "must be in (0, 2000] Hz")
        if not (np.isfinite(self.actuation_latency_s) and 0.0 <= self.actuation_latency_s <= 1.0):
            raise bad("actuation_latency_s", "must be in [0, 1] s")
        if self.interpolation not in INTERPOLATIONS:
            raise bad("interpolation", f"must be one of {INTERPOLATIONS}")
        if self.blending not in BLENDINGS:
            raise bad("blending", f"must be one of {BLENDINGS}")
        if not (np.isfinite(self.latency_min_confidence) and 0.0 <= self.latency_min_confidence <= 1.0):
            raise bad("latency_min_confidence", "must be in [0, 1]")
        if self.use_estimated_latency and not self.estimate_latency:
            raise bad("use_estimated_latency", "needs estimate_latency = true")
        if self.latency_max_s > 1.0:
            raise bad("latency_max_s", "must be <= 1 s")
        # The core configs check their own fields; re-raise their errors under this config's names.
        try:
            self.buffer_config()
            self.estimator_config()
            self.jump_config()
        except ConfigError as err:
            parameter = _CORE_FIELD_TO_PARAMETER.get(err.field, err.field)
            raise ConfigError(self.source, parameter, err.value, err.problem) from err

    @property
    def control_period_s(self) -> float:
        """[s] between control ticks."""
        return 1.0 / self.control_rate_hz

    def buffer_config(self) -> ChunkBufferConfig:
        return ChunkBufferConfig(
            interpolation=self.interpolation, blending=self.blending, crossfade_s=self.crossfade_s,
            ensemble_decay=self.ensemble_decay, source=self.source,
        )

    def jump_config(self) -> JointJumpConfig | None:
        if not self.velocity_limits:
            return None
        return JointJumpConfig(self.joints, np.asarray(self.velocity_limits, dtype=float),
                               slack_rad=self.max_joint_jump_rad, source=self.source)

    def estimator_config(self) -> LatencyEstimatorConfig:
        return LatencyEstimatorConfig(window_s=self.latency_window_s, max_lag_s=self.latency_max_s,
                                      source=self.source)


@dataclass(frozen=True)
class Rejection:
    """An input the core refused: reason (one of REJECT_REASONS for chunks, "joint_state" for joint
    states) and what was wrong."""

    reason: str
    text: str


def percentiles_ms(values_s: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max [ms] of durations [s] (NaN when there are none)."""
    if not values_s:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    array = np.asarray(values_s) * 1e3
    return {"p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99)), "max": float(array.max())}


class ActuatorCore:
    """Chunk buffer + latency estimator + the counters the node reports (see the module docstring).

    Call order is the node's: `on_chunk` / `on_joint_state` as messages arrive, `tick` at each
    control period, `estimator_snapshot` + `apply_latency_estimate` (or `update_latency`) now and
    then, `report` for diagnostics. Not thread-safe.
    """

    def __init__(self, config: ActuatorConfig) -> None:
        self.config = config
        self._buffer = ChunkBuffer(config.joints, config.buffer_config())
        self._estimator = LatencyEstimator(config.estimator_config())
        self.estimate = LatencyEstimate(None, 0.0, 0.0, "not estimated yet")
        self.latency_in_use_s = config.actuation_latency_s
        self.ticks = 0
        self.published = 0
        self.stale_ticks = 0
        self.jump_pending_ticks = 0
        self.chunks_received = 0
        self.chunks_accepted = 0
        self.rejected: Counter[str] = Counter({reason: 0 for reason in REJECT_REASONS})
        self.joint_states_rejected = 0
        self.clock_jumps = 0
        jump_config = config.jump_config()
        self._jumps = JointJumpDetector(jump_config) if jump_config is not None else None
        self._jump_stamp_ns = -1  # chunks observed before this [ns] are refused
        self.last_jump = ""  # why the joints last jumped
        self._last_tick_ns: int | None = None
        self._periods_s: deque[float] = deque(maxlen=HISTORY)
        self._chunk_ages_s: deque[float] = deque(maxlen=HISTORY)
        self._arrival_ns: int | None = None  # [ns] the newest accepted chunk not yet in a command
        self._chunk_waits_s: deque[float] = deque(maxlen=HISTORY)  # arrival -> first command [s]
        self._last_rejection = ""
        self._rejections_reported = 0

    # ------------------------------------------------------------------------------------------
    def tick(self, now_ns: int) -> CommandSample | None:
        """The command for the control tick at `now_ns` [ns]: the target for now + latency in use
        (positions (n,) [rad], velocities (n,) [rad/s] over config.joints), or None while stale.

        A backwards clock step over CLOCK_JUMP_NS (sim restart, bag loop) drops buffered chunks and
        the latency history first: chunks stamped in the old timeline would never apply, or apply
        far too late (`clock_jumps` counts it, so the node can say so)."""
        self.ticks += 1
        arrival, self._arrival_ns = self._arrival_ns, None  # this tick takes in every chunk so far
        last = self._last_tick_ns
        if last is not None and now_ns > last:
            self._periods_s.append((now_ns - last) / NS_PER_S)
        elif last is not None and now_ns < last - CLOCK_JUMP_NS:
            self._buffer.clear()
            self._estimator.clear()
            self.clock_jumps += 1
        self._last_tick_ns = now_ns
        if self._jumps is not None and self._jumps.pending:
            self.stale_ticks += 1
            self.jump_pending_ticks += 1
            return None
        sample = self._buffer.sample(now_ns, self.latency_in_use_s)
        if sample is None:
            self.stale_ticks += 1
            return None
        self._chunk_ages_s.append((now_ns - sample.newest_stamp_ns) / NS_PER_S)
        if arrival is not None:
            # The first command that can carry the newest chunk: how long the chunk waited for it.
            self._chunk_waits_s.append(max(now_ns - arrival, 0) / NS_PER_S)
        if self.config.estimate_latency:
            self._estimator.add_command(now_ns, sample.positions)
        self.published += 1
        return sample

    @property
    def chunk_waiting(self) -> bool:
        """True from a chunk's acceptance until the next tick (which takes it in)."""
        return self._arrival_ns is not None

    def on_chunk(self, chunk: ActionChunk, now_ns: int) -> Rejection | None:
        """Buffer a chunk received at `now_ns` [ns]; None when accepted, else the counted Rejection."""
        self.chunks_received += 1
        if chunk.stamp_ns < self._jump_stamp_ns:
            return self._reject(REJECT_BEFORE_JUMP, f"chunk stamped {chunk.stamp_ns} ns, before the joints jumped at "
                                                    f"{self._jump_stamp_ns} ns")
        target_ns = now_ns + int(round(self.latency_in_use_s * NS_PER_S))
        try:
            self._buffer.add(chunk, now_ns, target_ns=target_ns)
        except ChunkRejectedError as err:
            return self._reject(err.reason, err.detail)
        self.chunks_accepted += 1
        self._arrival_ns = now_ns
        return None

    def on_bad_chunk_message(self, text: str) -> Rejection:
        """Count a chunk message that did not convert (conversions.MessageError text)."""
        self.chunks_received += 1
        return self._reject(classify_message_error(text), text)

    def _reject(self, reason: str, text: str) -> Rejection:
        self.rejected[reason] += 1
        self._last_rejection = f"{reason}: {text}"
        return Rejection(reason, text)

    def on_joint_state(self, names: Sequence[str], positions: np.ndarray, stamp_ns: int,
                       received_ns: int) -> Rejection | None:
        """A measured joint state: names, positions (len(names),) [rad], header stamp [ns] (0 when the
        driver leaves it unset: then `received_ns` [ns] is the best measurement time there is).
        Feeds the jump detector and the latency estimate (when configured); a state lacking a
        commanded joint is counted and refused."""
        if not self.config.estimate_latency and self._jumps is None:
            return None
        index = {name: i for i, name in enumerate(names)}
        missing = [name for name in self.config.joints if name not in index]
        if missing:
            return self.on_bad_joint_state(f"joint state lacks joints {missing} (it has {list(names)})")
        ordered = np.asarray(positions, dtype=float)[[index[name] for name in self.config.joints]]
        stamp = stamp_ns if stamp_ns > 0 else received_ns
        jump = self._jumps.update(ordered, stamp) if self._jumps is not None else ""
        if jump:
            self.last_jump = jump
            # Everything planned so far assumed the old position; so did the latency history.
            self._buffer.clear()
            self._estimator.clear()
            self._jump_stamp_ns = self._jumps.jump_stamp_ns
        if self._jumps is not None and self._jumps.pending:
            return None  # held back: an outlier or the start of a jump, not a measurement to trust yet
        if self.config.estimate_latency:
            self._estimator.add_measurement(stamp, ordered)
        return None

    @property
    def joint_jumps(self) -> int:
        """Measured joint jumps seen (0 without velocity limits)."""
        return 0 if self._jumps is None else self._jumps.jumps

    def on_bad_joint_state(self, text: str) -> Rejection:
        """Count a joint state that could not be used."""
        self.joint_states_rejected += 1
        return Rejection("joint_state", text)

    # ------------------------------------------------------------------------------------------
    def estimator_snapshot(self) -> LatencyEstimator | None:
        """A copy of the latency histories (None without estimate_latency), so the correlation can
        run while the caller lets ticks go on; pass its estimate() to apply_latency_estimate."""
        return self._estimator.copy() if self.config.estimate_latency else None

    def apply_latency_estimate(self, estimate: LatencyEstimate) -> None:
        """Report `estimate`; with use_estimated_latency and enough confidence, compensate with it."""
        self.estimate = estimate
        if (
            self.config.use_estimated_latency
            and estimate.latency_s is not None
            and estimate.confidence >= self.config.latency_min_confidence
        ):
            self.latency_in_use_s = float(estimate.latency_s)

    def update_latency(self) -> LatencyEstimate:
        """Estimate and apply in one call (single-threaded callers)."""
        snapshot = self.estimator_snapshot()
        if snapshot is not None:
            self.apply_latency_estimate(snapshot.estimate())
        return self.estimate

    # ------------------------------------------------------------------------------------------
    def report(self) -> tuple[dict[str, float | int | str], str, str]:
        """(values, level, message) for the diagnostics: counters, statistics, latency figures;
        level "ok" or "warn". Rejections count as news once: the next report is ok again."""
        periods = percentiles_ms(list(self._periods_s))
        ages = percentiles_ms(list(self._chunk_ages_s))
        waits = percentiles_ms(list(self._chunk_waits_s))
        estimate = self.estimate
        rejected_total = sum(self.rejected.values())
        values: dict[str, float | int | str] = {
            "ticks": self.ticks,
            "published": self.published,
            "stale_ticks": self.stale_ticks,
            "jump_pending_ticks": self.jump_pending_ticks,
            "chunks_received": self.chunks_received,
            "chunks_accepted": self.chunks_accepted,
            "chunks_rejected": rejected_total,
            **{f"rejected_{reason}": count for reason, count in self.rejected.items()},
            "joint_states_rejected": self.joint_states_rejected,
            "clock_jumps_back": self.clock_jumps,
            "joint_jumps": self.joint_jumps,
            "chunks_buffered": len(self._buffer),
            "chunk_age_at_use_ms_p50": ages["p50"],
            "chunk_age_at_use_ms_max": ages["max"],
            "chunk_wait_for_tick_ms_p50": waits["p50"],
            "chunk_wait_for_tick_ms_p99": waits["p99"],
            "chunk_wait_for_tick_ms_max": waits["max"],
            "actuation_latency_configured_s": self.config.actuation_latency_s,
            "actuation_latency_in_use_s": self.latency_in_use_s,
            "latency_estimate_s": float("nan") if estimate.latency_s is None else estimate.latency_s,
            "latency_confidence": estimate.confidence,
            "latency_excitation_rad_s": estimate.excitation,
            "latency_estimate_status": estimate.reason,
            "control_rate_hz": self.config.control_rate_hz,
            "timer_period_ms_p50": periods["p50"],
            "timer_period_ms_p99": periods["p99"],
            "timer_period_ms_max": periods["max"],
            "last_rejection": self._last_rejection,
        }
        new_rejections = rejected_total - self._rejections_reported
        self._rejections_reported = rejected_total
        if self.published > 0 and len(self._buffer) == 0:
            return values, "warn", "stale: no chunk covers the command time"
        if new_rejections > 0:
            return values, "warn", f"{new_rejections} chunks rejected in the last period: {self._last_rejection}"
        if self.published == 0:
            return values, "ok", "waiting for action chunks"
        return values, "ok", "commanding"

    def __len__(self) -> int:
        """Chunks buffered."""
        return len(self._buffer)
