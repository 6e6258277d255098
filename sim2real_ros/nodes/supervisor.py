"""Supervisor node: the only writer of the robot command topic (docs/design.md §4).

A thin shell around core.supervisor.Supervisor: declares and validates parameters, wires topics
and services, and serializes every call into the core with one short lock. Two threads: the
executor thread serves everything but the e-stop (ticks, inputs, services, state); the `estop`
subscription has a node, executor and thread of its own (EstopListener), whose wait set holds
nothing else, and publishes the hold from its callback instead of waiting for the next tick
(issue #6: p99 <= 10 ms from the e-stop's publication to the hold on the robot topic), then the
state that says ESTOP. Commands are decided and published under one lock (CommandOrder), so none
is dropped or reordered; state reports from both
threads one at a time, in order. The e-stop node is `<name>_estop` in the same namespace.
`estop` is reliable + transient local (docs/design.md §2); a publisher with a QoS this subscription cannot hear
(volatile or best effort), or of another message type (a std_msgs/String, an example_interfaces/Bool),
is itself treated as a pressed, faulty e-stop for as long as it exists, so no stop request is lost
silently. Each `estop` message is taken with its MessageInfo: the stop is kept per publisher GID
(released only when every publisher that pressed has released). The graph is polled on a steady
timer (GRAPH_POLL_PERIOD_S).

Time: stamps and the core's `now_ns` are the node's clock (sim time under use_sim_time), but every
timer runs on a steady clock and the tick passes the steady time too, so the watchdogs keep running
when `/clock` stops or jumps (the core holds on a node clock standing still). use_sim_time is
read-only after start: a change is refused (switching clocks under running watchdogs stopped them).
On a robot (use_sim_time false and auto_arm false) require_stop_source must be true: the node
refuses to start otherwise.

Topics (relative names): subscribes command/policy (JointState), command/teleop (JointState, a
leader arm: followed in TELEOP while the deadman is held), joint_states, joy, estop (Bool, true =
stop), `servo_diagnostics_topic` (DiagnosticArray, feetech_driver/diagnostics: a servo's overload or
overheat latches ESTOP); publishes forward_position_controller/commands (Float64MultiArray, `joints` order),
supervisor/state (DiagnosticArray, latched), supervisor/interventions (DiagnosticArray, events).
Services: supervisor/reset, supervisor/arm, supervisor/hold (std_srvs/Trigger).
"""
from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from rclpy.topic_endpoint_info import TopicEndpointInfo
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger

from .. import conversions as msgconv
from .. import topics
from ..core.control.command_order import CommandForwarding, CommandOrder
from ..core.errors import ConfigError
from ..core.robot.joint_list import resolve_joint_list
from ..core.robot.urdf import RobotModel
from ..core.safety.joystick import load_joystick_mapping
from ..core.safety.limits import limits_from_urdf
from ..core.safety.supervisor import (
    InterventionEvent,
    Mode,
    SentCommand,
    Supervisor,
    SupervisorConfig,
    SupervisorStatus,
)
from ..core.safety.teleop import Jogger
from ..robots import robot_description_for
from ..topics import Intervention, StatusReport, SupervisorState
from .common import (
    EVENTS_QOS,
    JOINT_STATE_QOS,
    JOY_QOS,
    LATCHED_QOS,
    RELIABLE_LATEST_QOS,
    SERVO_DIAGNOSTICS_QOS,
    now_ns,
    qos_profile,
    run_node,
)
from .executor import single_threaded_executor
from .parameters import SUPERVISOR, SUPERVISOR_CONTROL_RATE_RANGE, SUPERVISOR_STATE_RATE_RANGE, declare_table

SOURCE = "supervisor parameters"
COMMAND_TOPIC = topics.ROBOT_COMMAND.name
ESTOP_TYPE = topics.ESTOP.msgtype
CLOSE_POLL_S = 0.1  # [s] the e-stop thread's longest wait before it checks whether it must stop
GRAPH_POLL_PERIOD_S = 0.1  # [s] how often the `estop` publishers are listed (steady clock)


CONTROL_RATE_RANGE = SUPERVISOR_CONTROL_RATE_RANGE  # [Hz] the core's control period bounds, inverted
STATE_RATE_RANGE = SUPERVISOR_STATE_RATE_RANGE  # [Hz]


@dataclass(frozen=True)
class SupervisorNodeParams:
    """Node-level parameters (the core's timing lives in SupervisorConfig); no defaults: they are
    config/parameters/supervisor.yaml's, declared by declare_parameters."""

    robot_description: str
    joints: tuple[str, ...]
    ee_link: str
    joystick_config: str
    control_rate_hz: float
    state_rate_hz: float
    forward_policy_commands: bool
    min_forward_interval_s: float
    servo_diagnostics_topic: str
    command_history_depth: int

    def __post_init__(self) -> None:
        for name, (low, high) in (("control_rate_hz", CONTROL_RATE_RANGE), ("state_rate_hz", STATE_RATE_RANGE)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and low <= value <= high):
                raise ConfigError(SOURCE, name, value, f"must be in [{low:g}, {high:g}] Hz")
        if not self.robot_description.strip():
            raise ConfigError(SOURCE, "robot_description", self.robot_description, "is empty")
        if self.min_forward_interval_s >= 1.0 / self.control_rate_hz:
            raise ConfigError(SOURCE, "min_forward_interval_s", self.min_forward_interval_s,
                              f"must be below the control period {1.0 / self.control_rate_hz:g} s")

    @property
    def forward_interval_s(self) -> float:
        """[s] the shortest time between two forwarded policy commands (0: half a control period)."""
        return self.min_forward_interval_s or 0.5 / self.control_rate_hz


def declare_parameters(node: Node) -> tuple[SupervisorNodeParams, dict]:
    """Declare parameters.SUPERVISOR (docs/parameters.md; the numeric ones with the ranges of the
    core's CONFIG_RANGES, refused outside them); return node params and the core's config fields."""
    v = declare_table(node, SUPERVISOR, range_source=SOURCE)
    params = SupervisorNodeParams(
        robot_description=robot_description_for(str(v.pop("robot")), str(v.pop("robot_description")), SOURCE),
        joints=tuple(v.pop("joints")),
        ee_link=str(v.pop("ee_link")), joystick_config=str(v.pop("joystick_config")),
        control_rate_hz=float(v.pop("control_rate_hz")), state_rate_hz=float(v.pop("state_rate_hz")),
        forward_policy_commands=bool(v.pop("forward_policy_commands")),
        min_forward_interval_s=float(v.pop("min_forward_interval_s")),
        servo_diagnostics_topic=str(v.pop("servo_diagnostics_topic")).strip(),
        command_history_depth=int(v.pop("command_history_depth")),
    )
    v["auto_arm"], v["require_stop_source"] = bool(v["auto_arm"]), bool(v["require_stop_source"])
    for parameter, field in (("position_lower_limits", "lower"), ("position_upper_limits", "upper"),
                             ("velocity_limits", "velocity")):
        v[field] = v.pop(parameter)
    return params, v  # the rest are SupervisorConfig fields (limits: limits_from_urdf's)


def status_message(status: SupervisorStatus, stamp_ns: int) -> DiagnosticArray:
    """supervisor/state (topics.SupervisorState): mode, reason, e-stop sources and counters."""
    state = SupervisorState(
        mode=status.mode.value, reason=status.reason, estop_sources=tuple(status.estop_sources),
        intervention_active=status.intervention_start_ns is not None,
        intervention_start_ns=status.intervention_start_ns or 0, jog_mode=status.jog_mode,
        foreign_publishers=status.foreign_publishers, last_rejection=status.last_rejection,
        estop_vanished=status.estop_vanished, counters=dict(status.counters))
    return msgconv.payload_to_diagnostics(state.to_status(), stamp_ns)


def event_message(event: InterventionEvent, stamp_ns: int) -> DiagnosticArray:
    """supervisor/interventions: one status per event (topics.Intervention)."""
    intervention = Intervention(event.event, event.start_ns, event.end_ns, event.mode.value, event.reason)
    return msgconv.payload_to_diagnostics(intervention.to_status(), stamp_ns)


def gid_key(gid: object) -> str:
    """A publisher GID as hex text: from MessageInfo's `publisher_gid` ({'data': bytes, ...}) or a
    TopicEndpointInfo's `endpoint_gid` (a list of ints); "" when it cannot be read."""
    if isinstance(gid, dict):
        gid = gid.get("data")
    try:
        return bytes(gid).hex() if gid is not None else ""
    except (TypeError, ValueError):
        return ""


def endpoint_name(info: TopicEndpointInfo) -> str:
    """The node behind an endpoint, as `ros2 node list` names it."""
    # The graph may list an endpoint before its node's name is known (rmw's placeholder names).
    if not info.node_name or info.node_name.startswith("_NODE_NAME_UNKNOWN_"):
        return "(node not yet known)"
    namespace = info.node_namespace.rstrip("/")
    return f"{namespace}/{info.node_name}"


def classify_estop_publishers(infos: list[TopicEndpointInfo]) -> tuple[list[str], list[str]]:
    """(GID keys of the publishers the `estop` subscription hears, why each other one is faulty)."""
    live, faulty = [], []
    for info in infos:
        if info.topic_type != ESTOP_TYPE:
            faulty.append(f"estop publisher {endpoint_name(info)} publishes {info.topic_type}, not {ESTOP_TYPE}: "
                          "a stop source that cannot be read")
        elif info.qos_profile.durability == DurabilityPolicy.VOLATILE \
                or info.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT:
            faulty.append(f"estop publisher {endpoint_name(info)} cannot be heard (QoS must be reliable + "
                          "transient local)")
        else:
            live.append(gid_key(info.endpoint_gid))
    return live, faulty


class EstopListener:
    """The `estop` subscription on a node and executor of its own, spun by a dedicated thread.

    Why not a callback group of the supervisor node: rclpy's executors build one wait set for all
    of a node's entities and dispatch from Python, so an e-stop that arrives while the 100 Hz tick,
    joint states and policy commands are being dispatched waits behind them (measured: p99 32 ms
    from DDS receipt to callback under camera + policy traffic). Here the wait set holds the e-stop
    subscription alone, and the thread that wakes on it runs the callback itself.

    The node lives in the supervisor's context and namespace but ignores the process's global
    arguments: a `__node:=` remap would otherwise give it the supervisor's name. Topic remaps are
    honoured because the caller passes the name the supervisor node resolved.
    """

    def __init__(self, owner: Node, topic: str, callback: Callable[[Bool, object], None]) -> None:
        self._node = Node(f"{owner.get_name()}_estop", namespace=owner.get_namespace(), context=owner.context,
                          use_global_arguments=False, enable_rosout=False, start_parameter_services=False)
        # A callback of two arguments gets each message's MessageInfo (rclpy on Kilted and Jazzy):
        # the publisher's GID keeps the stop per publisher.
        self._subscription = self._node.create_subscription(Bool, topic, callback, LATCHED_QOS)
        self._executor = single_threaded_executor(self._node)
        self._executor.add_node(self._node)
        self._node.get_logger().info(f"e-stop thread spinning on {type(self._executor).__name__}")
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="supervisor-estop", daemon=True)
        self._thread.start()

    @property
    def topic_name(self) -> str:
        """The fully resolved e-stop topic."""
        return self._subscription.topic_name

    def count_publishers(self) -> int:
        """Publishers on the e-stop topic the graph shows now (any type), from the e-stop thread."""
        return self._node.count_publishers(self._subscription.topic_name)

    def _spin(self) -> None:
        while not self._closing.is_set() and self._node.context.ok():
            try:
                # A bounded wait (a message still wakes it at once): close() then only has to wait
                # for the loop to notice, never trigger the executor under a waiting thread.
                self._executor.spin_once(timeout_sec=CLOSE_POLL_S)
            except (KeyboardInterrupt, ExternalShutdownException):
                return  # Ctrl-C: the supervisor node is going away too
            except Exception:
                # A failing callback must not end the thread: later e-stops would go unheard.
                if not self._node.context.ok():
                    return
                self._node.get_logger().error(f"e-stop callback failed:\n{traceback.format_exc()}")

    def close(self) -> None:
        """Stop the thread and destroy the node (idempotent).

        The thread ends first (within CLOSE_POLL_S), then the executor is shut down: triggering its
        guard condition while the thread still waited on it in a context Ctrl-C/SIGTERM had shut
        down crashed the process at exit (SIGSEGV, issue 34).
        """
        self._closing.set()
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._executor.shutdown()
        self._node.destroy_node()


class SupervisorNode(Node):
    """See the module docstring; all decisions are the core's."""

    def __init__(self) -> None:
        super().__init__("supervisor")
        params, core_fields = declare_parameters(self)
        model = RobotModel.from_description(params.robot_description)
        joints = list(resolve_joint_list(params.joints, model, SOURCE))
        limits = limits_from_urdf(
            model, joints, lower=core_fields.pop("lower"), upper=core_fields.pop("upper"),
            velocity=core_fields.pop("velocity"), velocity_scale=core_fields.pop("velocity_scale"), source=SOURCE)
        mapping = load_joystick_mapping(params.joystick_config)
        config = SupervisorConfig(control_period_s=1.0 / params.control_rate_hz, source=SOURCE, **core_fields)
        check_stop_source_on_robot(config, bool(self.get_parameter("use_sim_time").value))
        self._core = Supervisor(config, limits, Jogger(mapping, limits, model, params.ee_link))
        self._params = params
        self._last_state_key: tuple = ()
        self._last_change_key: tuple = ()
        self._last_rejections = 0
        # Timers on a steady clock: with use_sim_time a stopped /clock would stop them, and the
        # watchdogs with them. The tick reads both clocks (core: a node clock standing still holds).
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.add_on_set_parameters_callback(self._refuse_clock_change)
        self._forwarding = CommandForwarding(int(round(config.control_period_s * 1e9)),
                                             enabled=params.forward_policy_commands,
                                             min_interval_ns=int(round(params.forward_interval_s * 1e9)))

        # Reliable, newest only by default; a deeper history lets a stalled recorder still get every
        # command sent (the soak checks each step), while a depth-1 reader still gets the newest.
        self._command_pub = self.create_publisher(
            Float64MultiArray, COMMAND_TOPIC, qos_profile(topics.QosSpec(depth=params.command_history_depth)))
        self._commands = CommandOrder(lambda msg: self._publish(self._command_pub, msg))
        # Held for a core call and, for a command, its publish (CommandOrder), never for logging or
        # graph queries: the e-stop thread waits for at most one publish already in progress.
        self._core_lock = self._commands.lock
        self._state_pub = self.create_publisher(DiagnosticArray, topics.SUPERVISOR_STATE.name, LATCHED_QOS)
        self._events_pub = self.create_publisher(DiagnosticArray, topics.INTERVENTIONS.name, EVENTS_QOS)
        self.create_subscription(JointState, topics.JOINT_STATES.name, self._on_joint_state, JOINT_STATE_QOS)
        self.create_subscription(JointState, topics.POLICY_COMMAND.name, self._on_policy, RELIABLE_LATEST_QOS)
        self.create_subscription(Joy, topics.JOY.name, self._on_joy, JOY_QOS)
        self._teleop_sub = self.create_subscription(JointState, topics.TELEOP_COMMAND.name, self._on_teleop,
                                                    RELIABLE_LATEST_QOS)
        if params.servo_diagnostics_topic:
            # Reliable and volatile, as the driver publishes; depth 10 (topics.SERVO_DIAGNOSTICS_QOS).
            self.create_subscription(DiagnosticArray, params.servo_diagnostics_topic, self._on_servo_diagnostics,
                                     SERVO_DIAGNOSTICS_QOS)
        self.create_service(Trigger, topics.SUPERVISOR_RESET, self._on_reset)
        self.create_service(Trigger, topics.SUPERVISOR_ARM, self._on_arm)
        self.create_service(Trigger, topics.SUPERVISOR_HOLD, self._on_hold)
        self._control_timer = self.create_timer(config.control_period_s, self._on_tick, clock=self._steady)
        # A policy command too soon after the last tick goes out min_forward_interval_s later (one
        # shot, armed by reset(); command_order.CommandForwarding.deferred).
        self._deferred_timer = self.create_timer(params.forward_interval_s, self._on_deferred, clock=self._steady)
        self._deferred_timer.cancel()
        self.create_timer(1.0 / params.state_rate_hz, self._publish_state, clock=self._steady)
        self.create_timer(GRAPH_POLL_PERIOD_S, self._poll_estop_publishers, clock=self._steady)
        # Reports (state, events, log) come from both threads, one at a time and in order.
        self._report_lock = threading.Lock()
        # Not understood yet, so not used: on rclpy's EventsExecutor this node stopped sending holds
        # in ESTOP (test_events_executor) once it had no guard condition to make it fall back.
        self.events_executor_unsupported = "it stops sending holds in ESTOP on the EventsExecutor"
        self._estop = EstopListener(self, self.resolve_topic_name(topics.ESTOP.name), self._on_estop)
        self.get_logger().info(
            f"supervising {len(joints)} joints {joints} at {params.control_rate_hz} Hz; "
            f"auto_arm={config.auto_arm}; joystick {params.joystick_config}; "
            f"publishing {self._command_pub.topic_name}; e-stop on {self._estop.topic_name} (own thread)")
        self._publish_state()

    def destroy_node(self) -> None:
        self._estop.close()
        super().destroy_node()

    # ------------------------------------------------------------------------------------------
    def _publish(self, publisher, msg) -> None:
        """Publish; during shutdown (Ctrl-C invalidates the context under running callbacks) a failed
        publish is expected and dropped instead of surfacing as an unretrieved executor error."""
        try:
            publisher.publish(msg)
        except Exception:
            if self.context.ok():
                raise

    def _decide(self, decision: Callable[[int], SentCommand | None]) -> None:
        """Run one core call and publish the command it returns, if any, under the core lock.

        Called from the executor thread and from the e-stop thread: every decided command reaches
        the robot, in decision order (each is step-limited against the one before it).
        """
        def decide() -> Float64MultiArray | None:
            command = decision(now_ns(self))
            return None if command is None else msgconv.make_position_command(command.positions)

        self._commands.decide(decide)

    def _steady_ns(self) -> int:
        """The steady clock [ns]: never stops or jumps, whatever use_sim_time says."""
        return self._steady.now().nanoseconds

    def _refuse_clock_change(self, parameters: list) -> SetParametersResult:
        """use_sim_time is read-only after start: switching clocks under running watchdogs stopped them."""
        for parameter in parameters:
            if parameter.name == "use_sim_time" and parameter.value != self.get_parameter("use_sim_time").value:
                return SetParametersResult(successful=False, reason="use_sim_time is read-only after start "
                                           "(the supervisor's watchdogs run on the clock chosen at start)")
        return SetParametersResult(successful=True)

    def _on_estop(self, msg: Bool, info: object) -> None:
        """E-stop thread: the hold goes out from here, then the state that says ESTOP (not left to
        the executor thread, which a loaded machine kept from reporting within 100 ms in a soak).

        Two required arguments, so rclpy passes the MessageInfo (with a default for `info`, it
        would pass the message alone and every publisher would look the same)."""
        active = bool(msg.data)
        publisher = gid_key(info.get("publisher_gid")) if isinstance(info, dict) else ""
        # Without a GID, a release counts the publishers now (the e-stop thread's own node: its graph).
        count = None if active or publisher else self._estop.count_publishers()
        self._decide(lambda t: self._core.on_estop(active, t, publisher, count))
        self._after_input()

    def _on_joy(self, msg: Joy) -> None:
        self._decide(lambda t: self._core.on_joy(msg.axes, msg.buttons, t))
        self._after_input()

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            # Positions only: a NaN velocity or effort (an interface the joint lacks) is not ours to judge.
            sample = msgconv.joint_state_to_sample(msg, use_velocities=False)
        except msgconv.MessageError as err:
            with self._core_lock:
                self._core.record_rejection("rejected_joint_states", f"joint_states: {err}")
        else:
            with self._core_lock:
                self._core.on_joint_state(sample.names, sample.positions, now_ns(self), sample.stamp_ns)
        self._after_input()

    def _on_policy(self, msg: JointState) -> None:
        try:
            sample = msgconv.joint_state_to_sample(msg, use_velocities=False)
        except msgconv.MessageError as err:
            with self._core_lock:
                self._core.record_rejection("rejected_policy", f"command/policy: {err}")
        else:
            with self._core_lock:
                self._core.on_policy_command(sample.names, sample.positions, now_ns(self))
                # Forward it now rather than at the next tick (up to a control period later): the
                # commands then go out at the actuator's rate, in phase with it.
                autonomous, steady = self._core.mode == Mode.AUTONOMOUS, self._steady_ns()
                forward = self._forwarding.forward_now(autonomous, steady)
                defer = self._forwarding.deferred(autonomous, steady)
            if forward:
                self._forward()
            elif defer and self._deferred_timer.is_canceled():
                self._deferred_timer.reset()
        self._after_input()

    def _forward(self) -> None:
        """Tick now for a policy command."""
        self._deferred_timer.cancel()
        self._tick()
        # The timer is the fallback for when commands stop: restarting its period on every
        # forwarded command keeps it from waking the process 100 times a second for nothing.
        self._control_timer.reset()

    def _on_deferred(self) -> None:
        """min_forward_interval_s after a policy command that came too soon: send it, if still due."""
        self._deferred_timer.cancel()
        if not self.context.ok():
            return
        with self._core_lock:
            forward = self._forwarding.forward_now(self._core.mode == Mode.AUTONOMOUS, self._steady_ns())
        if forward:
            self._forward()
            self._after_input()

    def _on_teleop(self, msg: JointState) -> None:
        try:
            sample = msgconv.joint_state_to_sample(msg, use_velocities=False)
        except msgconv.MessageError as err:
            with self._core_lock:
                self._core.record_rejection("rejected_teleop", f"command/teleop: {err}")
        else:
            with self._core_lock:
                self._core.on_teleop_command(sample.names, sample.positions, now_ns(self))
        self._after_input()

    def _on_servo_diagnostics(self, msg: DiagnosticArray) -> None:
        for report in StatusReport.all_from_msg(msg):
            self._decide(lambda t, r=report: self._core.on_servo_diagnostics(r.name, r.hardware_id, r.is_error,
                                                                             dict(r.values), t))
        self._after_input()

    def _on_tick(self) -> None:
        if not self.context.ok():
            return
        if not self._forwarding.timer_ticks(self._core.mode == Mode.AUTONOMOUS, self._steady_ns()):
            return  # commands are being forwarded as they arrive; this timer is the fallback
        self._tick()
        self._after_input()

    def _tick(self) -> None:
        # Every publisher but ours counts: the supervisor must be the robot's only writer.
        foreign = max(0, self.count_publishers(self._command_pub.topic_name) - 1)
        # A leader arm on the graph matters only in TELEOP (a graph query: not on every policy command).
        leaders = self.count_publishers(self._teleop_sub.topic_name) if self._core.mode == Mode.TELEOP else 0

        def tick(t: int) -> SentCommand | None:
            steady = self._steady_ns()
            # Forwarding counts on the steady clock: on a stopped /clock it would wait forever.
            self._forwarding.ticked(steady)
            self._core.set_foreign_publishers(foreign)
            self._core.set_teleop_publishers(leaders)
            return self._core.tick(t, steady)

        self._decide(tick)

    def _trigger(self, action, response: Trigger.Response) -> Trigger.Response:
        with self._core_lock:
            ok, message = action(now_ns(self))
        response.success, response.message = bool(ok), message
        self.get_logger().info(f"{'accepted' if ok else 'refused'}: {message}")
        self._after_input()
        return response

    def _on_reset(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(self._core.request_reset, response)

    def _on_arm(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(lambda t: self._core.request_arm(t, "supervisor/arm service"), response)

    def _on_hold(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(lambda t: self._core.request_hold(t, "supervisor/hold service"), response)

    # ------------------------------------------------------------------------------------------
    def _after_input(self) -> None:
        """Publish intervention events and, when the mode or reason changed, the state."""
        with self._report_lock:
            self._report_change()

    def _report_change(self) -> None:
        with self._core_lock:
            key = self._core.change_key()
            if key == self._last_change_key:
                return  # the common case, kept cheap: it runs after every message and tick
            self._last_change_key = key
            events = self._core.pop_events()
            status = self._core.status(now_ns(self))
        stamp = now_ns(self)
        for event in events:
            self._publish(self._events_pub, event_message(event, stamp))
            self.get_logger().info(f"intervention {event.event}: {event.reason}")
        rejections = sum(v for k, v in status.counters.items() if k.startswith("rejected"))
        if rejections != self._last_rejections:
            self._last_rejections = rejections
            self.get_logger().warning(f"rejected input ({rejections} so far): {status.last_rejection}",
                                      throttle_duration_sec=2.0)
        state_key = (status.mode, status.reason)
        if state_key != self._last_state_key:
            self._last_state_key = state_key
            self.get_logger().info(f"{status.mode.value}: {status.reason}")
        self._publish(self._state_pub, status_message(status, stamp))

    def _publish_state(self) -> None:
        if not self.context.ok():
            return
        # Under the report lock: a periodic state read before an e-stop must not go out after the
        # e-stop thread's ESTOP (it would read as ESTOP -> AUTONOMOUS -> ESTOP).
        with self._report_lock:
            with self._core_lock:
                status = self._core.status(now_ns(self))
            self._publish(self._state_pub, status_message(status, now_ns(self)))
            self._report_change()

    def _poll_estop_publishers(self) -> None:
        """List the `estop` publishers: the heard ones' GIDs (a pressed one gone stays pressed until
        a reset), and every faulty one (unheard QoS, another type), each a pressed stop."""
        if not self.context.ok():
            return
        live, faulty = classify_estop_publishers(self.get_publishers_info_by_topic(self._estop.topic_name))
        self._decide(lambda t: self._core.set_estop_publishers(live, faulty, t))
        self._after_input()


def check_stop_source_on_robot(config: SupervisorConfig, use_sim_time: bool) -> None:
    """On a robot (wall time and no auto_arm, as graph.declare_graph("robot") declares it) a live stop
    source is always required: refuse require_stop_source false, naming the parameter."""
    if not use_sim_time and not config.auto_arm and not config.require_stop_source:
        raise ConfigError(SOURCE, "require_stop_source", False,
                          "must be true on a robot (use_sim_time false and auto_arm false): arming a real arm "
                          "needs a live stop source (an estop heartbeat or a joystick e-stop button)")


def main(args: list[str] | None = None) -> None:
    # One executor thread is enough for the node itself (its callbacks are short and nothing there
    # is urgent); the e-stop has its own thread and executor (EstopListener).
    sys.exit(run_node(lambda: SupervisorNode(), args, num_threads=1))


if __name__ == "__main__":
    main()
