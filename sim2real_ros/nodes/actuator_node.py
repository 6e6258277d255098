"""actuator_node: action chunks in, fixed-rate latency-compensated joint commands out (docs/design.md §3).

Subscribes  policy/action_chunk (trajectory_msgs/JointTrajectory), joint_states (sensor_msgs/JointState)
Publishes   command/policy (sensor_msgs/JointState: positions [rad], velocities [rad/s]) at
            `control_rate_hz`, stamped with the tick time; nothing while stale (the supervisor decides
            what the robot does when commands stop).
            ~/diagnostics (diagnostic_msgs/DiagnosticArray, ~1 Hz): chunk age at use, stale ticks,
            rejected chunks by reason, latency estimate and confidence, timer period statistics.

At tick t the command is the buffered chunks' target for t + actuation_latency_s (core.chunk_buffer).
The latency the joints actually show is estimated online from commands sent vs joint states
measured (core.latency_estimator) and reported; `use_estimated_latency` makes the node use it
(once its confidence reaches `latency_min_confidence`) instead of the configured value.

On the wall clock a new chunk does not wait for the next fixed tick (`tick_on_chunk`): its arrival
brings the tick forward (core.deadline_schedule), at least `min_command_interval_s` after the last
command, and the grid after it is placed so the next chunk, predicted from the last ones' intervals,
does not land within that interval after a tick; `chunk_wait_for_tick_ms_*`, `ticks_brought_forward`
and `grid_placed_for_next_chunk` in the diagnostics show it. A tick a chunk makes due at once runs
in the chunk's callback (`ticks_on_arrival`), not after a hand-off to the control thread.

All of that is core.actuator.ActuatorCore (time passed in, no rclpy); this node declares the
parameters, converts messages, calls the core under one lock, and publishes what it returns. The
estimate is recomputed with each diagnostics report (~1 Hz, steady clock).
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from .. import conversions as msgconv
from .. import topics
from ..core.control.actuator import HISTORY, ActuatorConfig, ActuatorCore, Rejection, percentiles_ms
from ..core.control.deadline_schedule import DeadlineSchedule
from ..core.control.tick_phase import TickPhaseLock
from ..core.errors import ConfigError, Sim2RealError
from ..core.report import Level
from ..core.robot.joint_list import resolve_joint_list
from ..core.robot.urdf import RobotModel
from ..core.safety.limits import limits_from_urdf
from .background import BackgroundLoop
from .common import JOINT_STATE_QOS, RELIABLE_LATEST_QOS, now_ns, run_node
from .parameters import ACTUATOR_NODE, declare_table

__all__ = ["ActuatorConfig", "ActuatorNode", "declare_parameters", "main"]

NODE_NAME = "actuator_node"
DIAGNOSTICS_PERIOD_S = 1.0


def declare_parameters(node: Node) -> ActuatorConfig:
    """Declare parameters.ACTUATOR_NODE (docs/parameters.md; `control_rate` and `actuation_latency`
    still accepted, with a warning, for one release) and validate them into an ActuatorConfig."""
    v = declare_table(node, ACTUATOR_NODE)
    description, joints = v.pop("robot_description"), v.pop("joints")
    for name in ("tick_phase_lock", "tick_on_chunk", "min_command_interval_s"):
        v.pop(name)  # the node's tick loop's, not the core's
    values = v
    source = f"{node.get_name()} parameters"
    try:
        model = RobotModel.from_description(description)
    except Sim2RealError as err:
        shown = description if len(description) <= 200 else description[:200] + "..."  # XML can be long
        raise ConfigError(source, "robot_description", shown, str(err)) from err
    # Chunks are matched by name but commands go out in this order: each joint named once, each one
    # the URDF moves.
    joints = list(resolve_joint_list(joints, model, source))
    velocity: tuple[float, ...] = ()
    try:
        velocity = tuple(float(v) for v in limits_from_urdf(model, joints, source=source).velocity)
    except Sim2RealError as err:
        # A URDF joint without a finite velocity limit: chunks still work, jumps go unseen.
        node.get_logger().warning(f"no URDF velocity limits for joints {list(joints)} ({err}); "
                                  "joint jumps will not drop buffered chunks")
    return ActuatorConfig(joints=tuple(joints), velocity_limits=velocity, source=source, **values)


class ActuatorNode(Node):
    """Thin shell around core.actuator.ActuatorCore (see the module docstring): every callback
    converts its message, calls the core under one lock, and publishes or logs what it returns."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.config = declare_parameters(self)
        cfg = self.config
        self._lock = threading.Lock()
        # Held for a whole wall-clock tick (command and schedule advance): a due tick runs either on
        # the control thread or, for a chunk that brought it forward, in the chunk's callback.
        self._tick_mutex = threading.Lock()
        self._ticks_on_arrival = 0  # ticks run in a chunk's callback (the count in the diagnostics)
        self._core = ActuatorCore(cfg)
        self._tick_cpu_s: deque[float] = deque(maxlen=HISTORY)
        # Where a chunk's time goes before its callback [s]: the DDS write -> this process's reception
        # (delivery) and reception -> the callback (dispatch: the executor's wake-up and take), from
        # the message info's system-clock stamps (one host, one clock).
        self._chunk_delivery_s: deque[float] = deque(maxlen=HISTORY)
        self._chunk_dispatch_s: deque[float] = deque(maxlen=HISTORY)

        # A single-threaded executor (main): on the wall clock the ticks come from a thread of their
        # own, so the executor only takes in chunks and joint states; on sim time the /clock timer
        # shares that thread with them (each callback well under a control period), at a third less
        # CPU than a multi-threaded executor's thread pool.
        control_group = MutuallyExclusiveCallbackGroup()
        io_group = MutuallyExclusiveCallbackGroup()
        self._command_pub = self.create_publisher(JointState, topics.POLICY_COMMAND.name, RELIABLE_LATEST_QOS)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "~/diagnostics", RELIABLE_LATEST_QOS)
        self.create_subscription(JointTrajectory, topics.ACTION_CHUNK.name, self._on_chunk, RELIABLE_LATEST_QOS,
                                 callback_group=io_group)
        self.create_subscription(JointState, topics.JOINT_STATES.name, self._on_joint_state, JOINT_STATE_QOS,
                                 callback_group=io_group)
        self._stop = threading.Event()
        self._control_loop: BackgroundLoop | None = None
        self._period_ns = int(round(cfg.control_period_s * 1e9))
        self._phase_lock: TickPhaseLock | None = None
        self._chunk_arrival_ns: int | None = None  # steady clock of the last chunk accepted, for the phase lock
        self._min_interval_ns: int | None = None  # tick_on_chunk: a chunk brings the next tick forward
        if self.get_parameter("tick_on_chunk").value:
            self._min_interval_ns = int(round(self.get_parameter("min_command_interval_s").value * 1e9))
            if self._min_interval_ns >= self._period_ns:
                raise ConfigError(f"{self.get_name()} parameters", "min_command_interval_s",
                                  self._min_interval_ns / 1e9, f"must be less than the control period "
                                  f"{cfg.control_period_s:g} s (or set tick_on_chunk false)")
        self._schedule: DeadlineSchedule | None = None  # the wall-clock loop's, shared with _on_chunk
        self._wake = threading.Event()  # set by a chunk that moved the next tick forward, and at stop
        if self.get_parameter("tick_phase_lock").value:
            self._phase_lock = TickPhaseLock(self._period_ns, lead_ns=int(0.15 * self._period_ns),
                                             max_shift_ns=int(0.1 * self._period_ns))
        if self.get_parameter("use_sim_time").value:
            # Sim time advances with /clock messages, which the executor takes in: a timer on it.
            self.create_timer(cfg.control_period_s, self._on_tick, callback_group=control_group)
        else:
            # On the wall clock, a thread of its own: an executor timer pays for rebuilding the wait
            # set in Python on every tick, and at 500 Hz that overhead, not the tick, saturates a core.
            self._control_loop = BackgroundLoop(self, "actuator_control", lambda _stop: self._wall_clock_loop(),
                                                join_timeout_s=2.0, stop_event=self._stop)
            self._control_loop.start()
        # Diagnostics run on the steady clock: a stalled sim clock must not silence the report.
        self.create_timer(DIAGNOSTICS_PERIOD_S, self._on_diagnostics, callback_group=io_group,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.get_logger().info(
            f"commanding {len(cfg.joints)} joints {list(cfg.joints)} at {cfg.control_rate_hz:g} Hz, "
            f"actuation_latency_s {cfg.actuation_latency_s * 1e3:.1f} ms, {cfg.interpolation}, {cfg.blending}"
        )

    # ------------------------------------------------------------------------------------------
    def _wall_clock_loop(self) -> None:
        """Tick at the deadlines of core.deadline_schedule.DeadlineSchedule on the steady clock
        (absolute, no drift; missed ticks skipped after an overrun; nudged towards chunk arrivals
        with tick_phase_lock)."""
        schedule = DeadlineSchedule(self._period_ns, time.monotonic_ns(), self._phase_lock, self._min_interval_ns)
        with self._lock:
            self._schedule = schedule
        while not self._stop.is_set():
            # Wait for the deadline; a chunk that brings it forward wakes the wait (tick_on_chunk).
            while True:
                with self._lock:
                    delay_ns = schedule.delay_ns(time.monotonic_ns())
                if delay_ns <= 0 or self._stop.is_set():
                    break
                self._wake.wait(delay_ns / 1e9)
                self._wake.clear()
            if self._stop.is_set() or not self.context.ok():
                return
            try:
                self._tick_if_due(schedule)
            except Exception as err:  # noqa: BLE001 - during shutdown the context goes away under us
                if self._control_loop.step_failed(err, "control tick failed", 1.0):
                    return

    def _tick_if_due(self, schedule: DeadlineSchedule) -> bool:
        """Run the wall-clock tick if the schedule says it is due (on whichever thread gets here
        first: the control thread, or a chunk's callback that brought it forward), then advance the
        schedule. False: not due (the other thread ran it)."""
        with self._tick_mutex:
            with self._lock:
                if schedule.delay_ns(time.monotonic_ns()) > 0:
                    return False
            try:
                self._on_tick()
            finally:
                with self._lock:
                    arrival, self._chunk_arrival_ns = self._chunk_arrival_ns, None
                    schedule.advance(time.monotonic_ns(), arrival)
                    if self._core.chunk_waiting:
                        # A chunk accepted while the tick ran found the old deadline: bring it forward now.
                        schedule.on_arrival(time.monotonic_ns())
        return True

    def destroy_node(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._control_loop is not None:
            self._control_loop.stop()
        super().destroy_node()

    def _on_tick(self) -> None:
        cpu_start = time.thread_time()
        tick_ns = now_ns(self)
        with self._lock:
            jumps = self._core.clock_jumps
            sample = self._core.tick(tick_ns)
            jumped = self._core.clock_jumps != jumps
        if jumped:
            self.get_logger().warning("clock jumped back by more than 1 s: dropped buffered chunks and latency history")
        if sample is None:
            return
        self._command_pub.publish(msgconv.make_joint_state(self.config.joints, sample.positions, tick_ns,
                                                      velocities=sample.velocities))
        with self._lock:
            self._tick_cpu_s.append(time.thread_time() - cpu_start)

    def _on_chunk(self, msg: JointTrajectory, info: dict) -> None:
        called_ns = time.time_ns()
        received_ns = now_ns(self)
        self._note_chunk_transit(info, called_ns)
        try:
            chunk = msgconv.trajectory_to_chunk(msg)
        except msgconv.MessageError as err:
            with self._lock:
                rejection: Rejection | None = self._core.on_bad_chunk_message(str(err))
        else:
            moved = due = False
            with self._lock:
                rejection = self._core.on_chunk(chunk, received_ns)
                schedule = self._schedule
                if rejection is None:
                    self._chunk_arrival_ns = time.monotonic_ns()
                    moved = schedule is not None and schedule.on_arrival(self._chunk_arrival_ns)
                    due = moved and schedule.delay_ns(time.monotonic_ns()) <= 0
            ticked = False
            if due and not self._stop.is_set():
                # Due now: command it from here rather than hand it to the control thread, whose
                # wake-up (the scheduler, then the GIL) cost about 0.5 ms at p50 on 2 cores.
                try:
                    ticked = self._tick_if_due(schedule)
                    self._ticks_on_arrival += ticked
                except Exception as err:  # noqa: BLE001 - during shutdown the context goes away under us
                    self.get_logger().warning(f"control tick for a new chunk failed: {err}", throttle_duration_sec=1.0)
            if moved and not ticked:
                self._wake.set()  # the control thread waits for the deadline brought forward
        if rejection is not None:
            self.get_logger().warning(f"rejected action chunk ({rejection.reason}): {rejection.text}",
                                   throttle_duration_sec=2.0)

    def _note_chunk_transit(self, info: dict, called_ns: int) -> None:
        """Record a chunk's delivery and dispatch times (0 stamps: the middleware gave none)."""
        written_ns, arrived_ns = int(info.get("source_timestamp", 0)), int(info.get("received_timestamp", 0))
        if written_ns > 0 and arrived_ns >= written_ns and called_ns >= arrived_ns:
            with self._lock:
                self._chunk_delivery_s.append((arrived_ns - written_ns) / 1e9)
                self._chunk_dispatch_s.append((called_ns - arrived_ns) / 1e9)

    def _on_joint_state(self, msg: JointState) -> None:
        if not self.config.estimate_latency and not self.config.velocity_limits:
            return  # nothing uses joint states then
        received_ns = now_ns(self)
        try:
            sample = msgconv.joint_state_to_sample(msg, use_velocities=False)  # positions only
        except msgconv.MessageError as err:
            with self._lock:
                rejection: Rejection | None = self._core.on_bad_joint_state(str(err))
        else:
            with self._lock:
                jumps = self._core.joint_jumps
                rejection = self._core.on_joint_state(sample.names, sample.positions, sample.stamp_ns, received_ns)
                jumped = self._core.last_jump if self._core.joint_jumps != jumps else ""
            if jumped:
                self.get_logger().warning(f"{jumped}: dropped the buffered chunks", throttle_duration_sec=1.0)
        if rejection is not None:
            self.get_logger().warning(f"rejected joint_states: {rejection.text}", throttle_duration_sec=2.0)

    # ------------------------------------------------------------------------------------------
    def _on_diagnostics(self) -> None:
        with self._lock:
            snapshot = self._core.estimator_snapshot()
        if snapshot is not None:
            estimate = snapshot.estimate()  # the correlation runs outside the lock: ticks go on
            with self._lock:
                self._core.apply_latency_estimate(estimate)
        with self._lock:
            values, level, message = self._core.report()
            tick_cpu = percentiles_ms(list(self._tick_cpu_s))
            delivery = percentiles_ms(list(self._chunk_delivery_s))
            dispatch = percentiles_ms(list(self._chunk_dispatch_s))
            values["ticks_brought_forward"] = self._schedule.rephases if self._schedule is not None else 0
            values["grid_placed_for_next_chunk"] = self._schedule.grid_placements if self._schedule is not None else 0
            values["ticks_on_arrival"] = self._ticks_on_arrival
        values["tick_cpu_ms_p50"], values["tick_cpu_ms_p99"] = tick_cpu["p50"], tick_cpu["p99"]
        values["chunk_delivery_ms_p50"], values["chunk_delivery_ms_p99"] = delivery["p50"], delivery["p99"]
        values["chunk_dispatch_ms_p50"], values["chunk_dispatch_ms_p99"] = dispatch["p50"], dispatch["p99"]
        self._diagnostics_pub.publish(msgconv.diagnostic_array(
            f"{self.get_name()}: commands", {key: _format(value) for key, value in values.items()}, now_ns(self),
            level=Level.WARN if level == "warn" else Level.OK, message=message,
            hardware_id=self.get_fully_qualified_name()))


def _format(value: float | int | str) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(lambda: ActuatorNode(), args, num_threads=1))  # see the comment in __init__


if __name__ == "__main__":
    main()
