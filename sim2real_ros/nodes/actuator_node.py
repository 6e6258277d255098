"""actuator_node: action chunks in, fixed-rate latency-compensated joint commands out (DESIGN.md §3).

Subscribes  policy/action_chunk (trajectory_msgs/JointTrajectory), joint_states (sensor_msgs/JointState)
Publishes   command/policy (sensor_msgs/JointState: positions [rad], velocities [rad/s]) at
            `control_rate`, stamped with the tick time; nothing while stale (the supervisor decides
            what the robot does when commands stop).
            ~/diagnostics (diagnostic_msgs/DiagnosticArray, ~1 Hz): chunk age at use, stale ticks,
            rejected chunks by reason, latency estimate and confidence, timer period statistics.

At tick t the command is the buffered chunks' target for t + actuation_latency (core.chunk_buffer).
The latency the joints actually show is estimated online from commands sent vs joint states
measured (core.latency_estimator) and reported; `use_estimated_latency` makes the node use it
(once its confidence reaches `latency_min_confidence`) instead of the configured value.
"""
from __future__ import annotations

import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from .. import conversions as cv
from ..core.chunk_buffer import (
    BLENDINGS,
    INTERPOLATIONS,
    REJECT_REASONS,
    ChunkBuffer,
    ChunkBufferConfig,
    ChunkRejectedError,
    classify_message_error,
)
from ..core.errors import ConfigError, Sim2RealError
from ..core.latency_estimator import LatencyEstimate, LatencyEstimator, LatencyEstimatorConfig
from ..core.urdf import RobotModel
from ..paths import urdf_path
from .common import JOINT_STATE_QOS, RELIABLE_LATEST_QOS, declare, declare_array, now_ns, run_node

NODE_NAME = "actuator_node"
DIAGNOSTICS_PERIOD_S = 1.0
CLOCK_JUMP_NS = 1_000_000_000  # [ns] a backwards clock step larger than this is a restart, not jitter
PERIOD_HISTORY = 2000  # timer periods kept for the statistics (20 s at 100 Hz, 4 s at 500 Hz)


# Fields of the core configs that carry another name as node parameters.
_CORE_FIELD_TO_PARAMETER = {"window_s": "latency_window_s", "max_lag_s": "latency_max_s", "grid_dt_s": "control_rate"}


@dataclass(frozen=True)
class ActuatorConfig:
    """Validated parameters of the actuator node (see `declare_parameters` for their meaning)."""

    joints: tuple[str, ...]
    control_rate: float = 100.0
    actuation_latency: float = 0.0
    interpolation: str = "cubic"
    blending: str = "crossfade"
    crossfade_s: float = 0.05
    ensemble_decay: float = 0.01
    estimate_latency: bool = True
    use_estimated_latency: bool = False
    latency_window_s: float = 4.0
    latency_max_s: float = 0.25
    latency_min_confidence: float = 0.8
    source: str = NODE_NAME

    def __post_init__(self) -> None:
        def bad(field: str, problem: str) -> ConfigError:
            return ConfigError(self.source, field, getattr(self, field), problem)

        if not self.joints or any(not name for name in self.joints) or len(set(self.joints)) != len(self.joints):
            raise bad("joints", "must be distinct, non-empty joint names")
        if not (np.isfinite(self.control_rate) and 0.0 < self.control_rate <= 2000.0):
            raise bad("control_rate", "must be in (0, 2000] Hz")
        if not (np.isfinite(self.actuation_latency) and 0.0 <= self.actuation_latency <= 1.0):
            raise bad("actuation_latency", "must be in [0, 1] s")
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
        # The core configs check their own fields; re-raise their errors under this node's name.
        try:
            self.buffer_config()
            self.estimator_config()
        except ConfigError as err:
            parameter = _CORE_FIELD_TO_PARAMETER.get(err.field, err.field)
            raise ConfigError(self.source, parameter, err.value, err.problem) from err

    @property
    def control_period_s(self) -> float:
        return 1.0 / self.control_rate

    def buffer_config(self) -> ChunkBufferConfig:
        return ChunkBufferConfig(
            interpolation=self.interpolation, blending=self.blending, crossfade_s=self.crossfade_s,
            ensemble_decay=self.ensemble_decay, source=self.source,
        )

    def estimator_config(self) -> LatencyEstimatorConfig:
        return LatencyEstimatorConfig(
            window_s=self.latency_window_s, max_lag_s=self.latency_max_s, source=self.source,
            # Resample at least as finely as the control period, so one tick is several grid steps.
            grid_dt_s=min(0.002, 0.5 / self.control_rate),
        )


def declare_parameters(node: Node) -> ActuatorConfig:
    """Declare the node's parameters (with descriptions) and validate them into an ActuatorConfig."""
    description = declare(node, "robot_description", str(urdf_path()),
                          "URDF XML or a URDF file path; its movable joints are the default `joints`")
    joints = declare_array(node, "joints", Parameter.Type.STRING_ARRAY,
                           "joint names of the commands, in order (default: the URDF's movable joints)")
    values = dict(
        control_rate=declare(node, "control_rate", 100.0, "command publication rate [Hz]"),
        actuation_latency=declare(node, "actuation_latency", 0.0,
                                  "delay from sending a command to the joints acting on it [s]; the command "
                                  "at tick t is the chunk target for t + actuation_latency"),
        interpolation=declare(node, "interpolation", "cubic", "between chunk points: linear | cubic (C1 Hermite)"),
        blending=declare(node, "blending", "crossfade",
                         "overlapping chunks: crossfade (newest wins) | temporal_ensemble (ACT)"),
        crossfade_s=declare(node, "crossfade_s", 0.05, "fade-in time of a new chunk [s] (0: switch at once)"),
        ensemble_decay=declare(node, "ensemble_decay", 0.01,
                               "temporal_ensemble: m in w_i = exp(-m i), i = 0 the oldest chunk (m > 0 favours "
                               "older chunks, as ACT)"),
        estimate_latency=declare(node, "estimate_latency", True,
                                 "estimate the actuation latency from commands vs joint_states and report it"),
        use_estimated_latency=declare(node, "use_estimated_latency", False,
                                      "compensate with the estimated latency instead of actuation_latency once "
                                      "its confidence reaches latency_min_confidence"),
        latency_window_s=declare(node, "latency_window_s", 4.0, "history used by the latency estimate [s]"),
        latency_max_s=declare(node, "latency_max_s", 0.25, "largest latency the estimate searches [s]"),
        latency_min_confidence=declare(node, "latency_min_confidence", 0.8,
                                       "confidence (normalized correlation) needed to use the estimate [0..1]"),
    )
    if not joints:
        try:
            joints = RobotModel.from_description(description).joint_names
        except Sim2RealError as err:
            shown = description if len(description) <= 200 else description[:200] + "..."  # XML can be long
            raise ConfigError(f"{node.get_name()} parameters", "robot_description", shown, str(err)) from err
    return ActuatorConfig(joints=tuple(joints), source=f"{node.get_name()} parameters", **values)


def _percentiles_ms(values_s) -> dict[str, float]:
    if not values_s:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    array = np.asarray(values_s) * 1e3
    return {"p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99)), "max": float(array.max())}


class ActuatorNode(Node):
    """Thin shell around ChunkBuffer and LatencyEstimator (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.config = declare_parameters(self)
        cfg = self.config
        self._lock = threading.Lock()
        self._buffer = ChunkBuffer(cfg.joints, cfg.buffer_config())
        self._estimator = LatencyEstimator(cfg.estimator_config())
        self._estimate = LatencyEstimate(None, 0.0, 0.0, "not estimated yet")
        self._latency_in_use_s = cfg.actuation_latency
        # Counters (read by the diagnostics timer).
        self._ticks = 0
        self._published = 0
        self._stale_ticks = 0
        self._chunks_received = 0
        self._chunks_accepted = 0
        self._rejected: Counter[str] = Counter({reason: 0 for reason in REJECT_REASONS})
        self._joint_states_rejected = 0
        self._clock_jumps = 0
        self._last_tick_ns: int | None = None
        self._periods_s: deque[float] = deque(maxlen=PERIOD_HISTORY)
        self._chunk_ages_s: deque[float] = deque(maxlen=PERIOD_HISTORY)
        self._tick_cpu_s: deque[float] = deque(maxlen=PERIOD_HISTORY)
        self._last_rejection = ""
        self._rejections_reported = 0

        # The control timer gets its own callback group so chunk and joint-state callbacks (and the
        # latency estimate) never queue behind it, nor it behind them, in the multi-threaded executor.
        control_group = MutuallyExclusiveCallbackGroup()
        io_group = MutuallyExclusiveCallbackGroup()
        self._command_pub = self.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "~/diagnostics", RELIABLE_LATEST_QOS)
        self.create_subscription(JointTrajectory, "policy/action_chunk", self._on_chunk, RELIABLE_LATEST_QOS,
                                 callback_group=io_group)
        self.create_subscription(JointState, "joint_states", self._on_joint_state, JOINT_STATE_QOS,
                                 callback_group=io_group)
        self.create_timer(cfg.control_period_s, self._on_tick, callback_group=control_group)
        # Diagnostics run on the steady clock: a stalled sim clock must not silence the report.
        self.create_timer(DIAGNOSTICS_PERIOD_S, self._on_diagnostics, callback_group=io_group,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.get_logger().info(
            f"commanding {len(cfg.joints)} joints {list(cfg.joints)} at {cfg.control_rate:g} Hz, "
            f"actuation_latency {cfg.actuation_latency * 1e3:.1f} ms, {cfg.interpolation}, {cfg.blending}"
        )

    # ------------------------------------------------------------------------------------------
    def _on_tick(self) -> None:
        cpu_start = time.thread_time()
        tick_ns = now_ns(self)
        with self._lock:
            self._ticks += 1
            if self._last_tick_ns is not None and tick_ns > self._last_tick_ns:
                self._periods_s.append((tick_ns - self._last_tick_ns) / cv.NS_PER_S)
            elif self._last_tick_ns is not None and tick_ns < self._last_tick_ns - CLOCK_JUMP_NS:
                # Sim restarted or a bag looped: chunks stamped in the old timeline would never
                # apply (or apply far too late); start over rather than command from them.
                self._buffer.clear()
                self._estimator.clear()
                self._clock_jumps += 1
                self.get_logger().warn(f"clock jumped back by {(self._last_tick_ns - tick_ns) / 1e9:.3f} s: "
                                       "dropped buffered chunks and latency history")
            self._last_tick_ns = tick_ns
            sample = self._buffer.sample(tick_ns, self._latency_in_use_s)
            if sample is None:
                self._stale_ticks += 1
                return
            self._chunk_ages_s.append((tick_ns - sample.newest_stamp_ns) / cv.NS_PER_S)
            if self.config.estimate_latency:
                self._estimator.add_command(tick_ns, sample.positions)
        self._command_pub.publish(cv.make_joint_state(self.config.joints, sample.positions, tick_ns,
                                                      velocities=sample.velocities))
        with self._lock:
            self._published += 1
            self._tick_cpu_s.append(time.thread_time() - cpu_start)

    def _on_chunk(self, msg: JointTrajectory) -> None:
        received_ns = now_ns(self)
        with self._lock:
            self._chunks_received += 1
            try:
                chunk = cv.trajectory_to_chunk(msg)
                target_ns = received_ns + int(round(self._latency_in_use_s * cv.NS_PER_S))
                self._buffer.add(chunk, received_ns, target_ns=target_ns)
            except cv.MessageError as err:
                self._reject(classify_message_error(str(err)), str(err))
                return
            except ChunkRejectedError as err:
                self._reject(err.reason, err.detail)
                return
            self._chunks_accepted += 1

    def _reject(self, reason: str, text: str) -> None:
        self._rejected[reason] += 1
        self._last_rejection = f"{reason}: {text}"
        self.get_logger().warn(f"rejected action chunk ({reason}): {text}", throttle_duration_sec=2.0)

    def _on_joint_state(self, msg: JointState) -> None:
        if not self.config.estimate_latency:
            return
        try:
            sample = cv.joint_state_to_sample(msg)
            positions = cv.reorder(sample, self.config.joints)
        except cv.MessageError as err:
            with self._lock:
                self._joint_states_rejected += 1
            self.get_logger().warn(f"rejected joint_states: {err}", throttle_duration_sec=2.0)
            return
        # Drivers that leave the stamp at zero: the reception time is the best measurement time we have.
        stamp_ns = sample.stamp_ns if sample.stamp_ns > 0 else now_ns(self)
        with self._lock:
            self._estimator.add_measurement(stamp_ns, positions)

    # ------------------------------------------------------------------------------------------
    def _update_latency(self) -> None:
        if not self.config.estimate_latency:
            return
        with self._lock:
            snapshot = self._estimator.copy()  # the correlation itself runs outside the lock
        estimate = snapshot.estimate()
        with self._lock:
            self._estimate = estimate
            if (
                self.config.use_estimated_latency
                and estimate.latency_s is not None
                and estimate.confidence >= self.config.latency_min_confidence
            ):
                self._latency_in_use_s = float(estimate.latency_s)

    def _on_diagnostics(self) -> None:
        self._update_latency()
        with self._lock:
            periods = _percentiles_ms(list(self._periods_s))
            ages = _percentiles_ms(list(self._chunk_ages_s))
            tick_cpu = _percentiles_ms(list(self._tick_cpu_s))
            estimate = self._estimate
            values = {
                "ticks": self._ticks,
                "published": self._published,
                "stale_ticks": self._stale_ticks,
                "chunks_received": self._chunks_received,
                "chunks_accepted": self._chunks_accepted,
                "chunks_rejected": sum(self._rejected.values()),
                **{f"rejected_{reason}": count for reason, count in self._rejected.items()},
                "joint_states_rejected": self._joint_states_rejected,
                "clock_jumps_back": self._clock_jumps,
                "chunks_buffered": len(self._buffer),
                "chunk_age_at_use_ms_p50": ages["p50"],
                "chunk_age_at_use_ms_max": ages["max"],
                "actuation_latency_configured_s": self.config.actuation_latency,
                "actuation_latency_in_use_s": self._latency_in_use_s,
                "latency_estimate_s": float("nan") if estimate.latency_s is None else estimate.latency_s,
                "latency_confidence": estimate.confidence,
                "latency_excitation_rad_s": estimate.excitation,
                "latency_estimate_status": estimate.reason,
                "control_rate_hz": self.config.control_rate,
                "timer_period_ms_p50": periods["p50"],
                "timer_period_ms_p99": periods["p99"],
                "timer_period_ms_max": periods["max"],
                "tick_cpu_ms_p50": tick_cpu["p50"],
                "tick_cpu_ms_p99": tick_cpu["p99"],
                "last_rejection": self._last_rejection,
            }
            stale_now = self._published > 0 and len(self._buffer) == 0
            new_rejections = values["chunks_rejected"] - self._rejections_reported
            self._rejections_reported = values["chunks_rejected"]
            waiting = self._published == 0
        status = DiagnosticStatus(name=f"{self.get_name()}: commands", hardware_id=self.get_fully_qualified_name())
        if stale_now:
            status.level, status.message = DiagnosticStatus.WARN, "stale: no chunk covers the command time"
        elif new_rejections > 0:
            status.level = DiagnosticStatus.WARN
            status.message = f"{new_rejections} chunks rejected in the last period: {values['last_rejection']}"
        elif waiting:
            status.level, status.message = DiagnosticStatus.OK, "waiting for action chunks"
        else:
            status.level, status.message = DiagnosticStatus.OK, "commanding"
        status.values = [KeyValue(key=key, value=_format(value)) for key, value in values.items()]
        array = DiagnosticArray()
        array.header.stamp = cv.ns_to_stamp(now_ns(self))
        array.status = [status]
        self._diagnostics_pub.publish(array)


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(lambda: ActuatorNode(), args))


if __name__ == "__main__":
    main()
