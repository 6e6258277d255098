"""The supervisor node as a process over real DDS: e-stop, reset, deadman, foreign publisher,
bad commands and limits, seen from the robot command topic."""
from __future__ import annotations

import dataclasses

import numpy as np
import pybullet_data
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import DescribeParameters
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger
from support import node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.joystick import load_joystick_mapping
from sim2real_ros.core.safety.limits import limits_from_urdf
from sim2real_ros.core.safety.supervisor import COMMAND_MARGIN_RAD, CONFIG_RANGES
from sim2real_ros.graph import declare_graph
from sim2real_ros.nodes.common import EVENTS_QOS, JOINT_STATE_QOS, JOY_QOS, LATCHED_QOS, RELIABLE_LATEST_QOS
from sim2real_ros.paths import config_path, urdf_path

URDF = str(urdf_path()) if urdf_path().is_file() else f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf"
MODEL = RobotModel.from_file(URDF)
NAMES = MODEL.joint_names
LIMITS = limits_from_urdf(MODEL, NAMES)
HOME = (LIMITS.lower + LIMITS.upper) / 2 + 0.05
MAPPING = load_joystick_mapping(config_path("joystick.yaml"))
COMMANDS = "forward_position_controller/commands"
# Generous timeouts: the test machine is shared, and the rig feeds the supervisor from this test process,
# which late in a long suite pauses for garbage collection (CI saw joint_states 0.502 s silent). These tests
# are about commands, modes and services; the watchdogs themselves are tested at fixed times (test_supervisor).
PARAMS = {"robot_description": URDF, "policy_timeout_s": 2.0, "joint_state_timeout_s": 2.0, "joy_timeout_s": 1.0,
          "handover_ramp_s": 0.2}
# Without auto_arm and sim time a supervisor is a robot's: it must require a live stop source (the
# joystick's e-stop button here).
HUMAN_ARMED = {**PARAMS, "require_stop_source": True}
# auto_arm: a sim-like graph, where the stop source may be left to the test.
AUTO_ARMED = {**PARAMS, "auto_arm": True}
TIMEOUT = 20.0


class Rig:
    """The test's side of the graph: a robot reporting HOME, a policy, a joystick, an e-stop."""

    def __init__(self, ros) -> None:
        self.ros = ros
        node = ros.node
        self.commands = ros.collect(Float64MultiArray, COMMANDS, _deep(RELIABLE_LATEST_QOS))
        self.states = ros.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS)
        self.events = ros.collect(DiagnosticArray, "supervisor/interventions", EVENTS_QOS)
        self.measured = HOME.copy()
        self.policy_messages: list[tuple[list[str], list[float]]] = [(NAMES, list(HOME))]
        self.joy_buttons: list[str] = []
        self.joy_axes: dict[int, float] = {}
        self.joy_on = False
        self.velocities: list[float] | None = None  # sent with each joint state when set [rad/s]
        self.efforts: list[float] | None = None  # [N*m]
        self._joint_pub = node.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
        self._policy_pub = node.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
        self._joy_pub = node.create_publisher(Joy, "joy", JOY_QOS)
        self.estop_pub = node.create_publisher(Bool, "estop", LATCHED_QOS)
        self._k = 0
        node.create_timer(0.02, self._feed)

    def _feed(self) -> None:
        stamp = self.ros.node.get_clock().now().nanoseconds
        self._joint_pub.publish(cv.make_joint_state(NAMES, self.measured, stamp, self.velocities, self.efforts))
        names, values = self.policy_messages[self._k % len(self.policy_messages)]
        self._k += 1
        msg = JointState(name=list(names), position=[float(v) for v in values])
        self._policy_pub.publish(msg)
        if self.joy_on:
            buttons = [0] * 15
            for role in self.joy_buttons:
                buttons[MAPPING.button(role)] = 1
            axes = [0.0] * 6
            for index, value in self.joy_axes.items():
                axes[index] = value
            self._joy_pub.publish(Joy(axes=axes, buttons=buttons))

    def state(self) -> dict[str, str]:
        return cv.diagnostic_values(self.states[-1]) if self.states else {}

    def wait_mode(self, mode: str, timeout_s: float = TIMEOUT) -> None:
        assert wait_until(lambda: self.state().get("mode") == mode, timeout_s), f"mode {mode} not reached: " \
            f"{self.state()}"

    def command_array(self, msg: Float64MultiArray) -> np.ndarray:
        return np.asarray(msg.data, dtype=float)

    def wait_more_commands(self, count: int) -> list[np.ndarray]:
        start = len(self.commands)
        self.ros.wait_for_messages(self.commands, start + count, TIMEOUT)
        return [self.command_array(m) for m in self.commands[start:]]

    def estop(self, active: bool) -> None:
        self.estop_pub.publish(Bool(data=active))

    def call(self, name: str) -> Trigger.Response:
        return self.ros.call(Trigger, name, timeout_s=TIMEOUT)


def _deep(qos):
    """The same QoS with a deep history, so the test sees every command the supervisor sends."""
    from rclpy.qos import QoSProfile

    return QoSProfile(history=qos.history, depth=1000, reliability=qos.reliability, durability=qos.durability)


@pytest.fixture
def rig(ros):
    return Rig(ros)


def test_estop_beats_a_takeover_request_and_reset_waits_for_release(rig, tmp_path):
    with running_nodes([node_decl("supervisor", AUTO_ARMED)], tmp_path):
        rig.wait_mode("AUTONOMOUS")
        rig.joy_on = True
        rig.ros.wait_for_subscribers(rig.estop_pub)
        rig.wait_more_commands(3)
        # The joystick asks for a takeover and jogs while the e-stop is pressed.
        rig.joy_buttons = ["takeover", "deadman"]
        rig.joy_axes = {MAPPING.joint_axes[0]: 1.0}
        rig.estop(True)
        rig.wait_mode("ESTOP")
        assert "estop topic" in rig.state()["reason"]
        for q in rig.wait_more_commands(30):
            assert np.allclose(q, HOME, atol=1e-12), q
        response = rig.call("supervisor/reset")
        assert not response.success and "estop topic is true" in response.message
        assert rig.state()["mode"] == "ESTOP"
        rig.estop(False)
        assert wait_until(lambda: rig.state().get("estop_sources") == "", TIMEOUT)
        assert rig.state()["mode"] == "ESTOP"  # releasing does not reset
        rig.joy_buttons, rig.joy_axes = [], {}
        response = rig.call("supervisor/reset")
        assert response.success, response.message
        assert wait_until(lambda: rig.state().get("mode") in ("HOLD", "AUTONOMOUS"), TIMEOUT)


def test_estop_thread_hears_a_remapped_topic_in_a_namespace_and_holds(ros, tmp_path):
    """The e-stop node ignores the process's global arguments (a `__node:=` remap would rename it
    to the supervisor's name): namespace and topic remaps must still reach its subscription."""
    joint_pub = ros.node.create_publisher(JointState, "/arm1/joint_states", JOINT_STATE_QOS)
    commands = ros.collect(Float64MultiArray, "/arm1/forward_position_controller/commands", _deep(RELIABLE_LATEST_QOS))
    states = ros.collect(DiagnosticArray, "/arm1/supervisor/state", LATCHED_QOS)
    ros.node.create_timer(0.02, lambda: joint_pub.publish(
        cv.make_joint_state(NAMES, HOME, ros.node.get_clock().now().nanoseconds)))
    estop_pub = ros.node.create_publisher(Bool, "/arm1/safety/estop", LATCHED_QOS)
    decl = node_decl("supervisor", HUMAN_ARMED, remappings=(("estop", "safety/estop"),), name="sup_ns")
    with running_nodes([decl], tmp_path, namespace="arm1"):
        assert wait_until(lambda: len(commands) >= 3, TIMEOUT), "no hold while disarmed"
        ros.wait_for_subscribers(estop_pub)

        def graph() -> list[tuple[str, str]]:
            return ros.node.get_node_names_and_namespaces()

        assert wait_until(lambda: ("sup_ns_estop", "/arm1") in graph(), TIMEOUT), graph()
        assert graph().count(("sup_ns", "/arm1")) == 1, graph()
        estop_pub.publish(Bool(data=True))

        def reason() -> str:
            values = cv.diagnostic_values(states[-1]) if states else {}
            return values.get("mode", "") + ": " + values.get("reason", "")

        assert wait_until(lambda: reason().startswith("ESTOP") and "estop topic is true" in reason(), TIMEOUT), \
            reason()
        assert np.allclose(np.asarray(commands[-1].data), HOME, atol=1e-12)


def test_deadman_release_holds_at_the_measured_position(rig, tmp_path):
    with running_nodes([node_decl("supervisor", HUMAN_ARMED)], tmp_path):
        rig.wait_mode("HOLD")
        rig.joy_on = True
        rig.wait_more_commands(5)
        rig.joy_buttons = ["takeover"]
        rig.wait_mode("TELEOP")
        rig.joy_buttons = ["deadman"]
        rig.joy_axes = {MAPPING.joint_axes[0]: 1.0}
        joint = MAPPING.groups_for(len(NAMES))[0][0]
        assert wait_until(lambda: rig.commands and rig.command_array(rig.commands[-1])[joint] > HOME[joint] + 0.02,
                          TIMEOUT), "jogging did not move the joint"
        rig.joy_buttons = []  # deadman released, stick still pushed
        assert wait_until(lambda: np.allclose(rig.command_array(rig.commands[-1]), HOME, atol=1e-12), TIMEOUT)
        for q in rig.wait_more_commands(20):
            assert np.allclose(q, HOME, atol=1e-12), q
        assert "deadman released" in rig.state()["reason"]
        rig.ros.wait_for_messages(rig.events, 1, TIMEOUT)
        takeover = cv.diagnostic_values(rig.events[0])
        assert takeover["event"] == "takeover" and takeover["mode"] == "TELEOP" and int(takeover["start_ns"]) > 0


def test_foreign_command_publisher_blocks_arming_and_an_unheard_estop_latches(rig, tmp_path):
    with running_nodes([node_decl("supervisor", HUMAN_ARMED)], tmp_path):
        rig.wait_mode("HOLD")
        rig.joy_on = True  # the live stop source arming needs
        intruder = rig.ros.node.create_publisher(Float64MultiArray, COMMANDS, RELIABLE_LATEST_QOS)
        assert wait_until(lambda: rig.state().get("foreign_publishers") == "1", TIMEOUT)
        response = rig.call("supervisor/arm")
        assert not response.success and "other publisher(s) on the robot command topic" in response.message
        assert rig.state()["mode"] == "HOLD"
        rig.ros.node.destroy_publisher(intruder)
        assert wait_until(lambda: rig.state().get("foreign_publishers") == "0", TIMEOUT)
        response = rig.call("supervisor/arm")
        assert response.success, response.message
        rig.wait_mode("AUTONOMOUS")
        # An e-stop button publishing with a QoS the supervisor cannot hear counts as pressed.
        unheard = rig.ros.node.create_publisher(Bool, "estop", 10)  # volatile
        rig.wait_mode("ESTOP")
        assert "cannot be heard" in rig.state()["reason"]
        response = rig.call("supervisor/reset")
        assert not response.success and "cannot be heard" in response.message
        rig.ros.node.destroy_publisher(unheard)
        assert wait_until(lambda: rig.call("supervisor/reset").success, TIMEOUT)


def test_bad_commands_never_reach_the_robot_and_limits_hold(rig, tmp_path):
    with running_nodes([node_decl("supervisor", AUTO_ARMED)], tmp_path):
        rig.wait_mode("AUTONOMOUS")
        decoy = HOME + 0.3
        rig.policy_messages = [
            (NAMES, list(HOME)),
            (NAMES, [float("nan")] * len(NAMES)),
            ([*NAMES[:-1], "someone_elses_joint"], list(decoy)),
            (NAMES[:-1], list(decoy[:-1])),
            (NAMES, list(HOME + 100.0)),  # not a position: beyond the limits by more than COMMAND_MARGIN_RAD
        ]
        assert wait_until(lambda: int(rig.state().get("rejected_policy", "0")) >= 10, TIMEOUT), rig.state()
        for q in rig.wait_more_commands(30):
            assert np.all(np.isfinite(q)) and np.allclose(q, HOME, atol=1e-9), q
        assert rig.state()["mode"] == "AUTONOMOUS"
        # A policy asking for the impossible but still a position: beyond every upper limit.
        rig.policy_messages = [(NAMES, list(LIMITS.upper + COMMAND_MARGIN_RAD / 2))]
        start = len(rig.commands)
        assert wait_until(lambda: np.allclose(rig.command_array(rig.commands[-1]), LIMITS.upper), TIMEOUT)
        sent = [rig.command_array(m) for m in rig.commands[start - 1:]]
        max_step = LIMITS.velocity / 100.0  # control_rate_hz 100
        for previous, q in zip(sent, sent[1:], strict=False):
            assert np.all(q <= LIMITS.upper) and np.all(q >= LIMITS.lower)
            assert np.all(np.abs(q - previous) <= max_step + 1e-9), (q - previous, max_step)
        assert int(rig.state()["clamped"]) > 0


def test_bad_configuration_fails_at_start_naming_field_and_value(tmp_path):
    bad_yaml = tmp_path / "joystick_bad.yaml"
    bad_yaml.write_text("buttons: {deadman: -1}\n")
    cases = {  # node name -> (parameters, what its one error line must say)
        "sup_loose_limits": ({"velocity_limits": [100.0] * len(NAMES)},
                             "supervisor parameters: field 'velocity_limits'"),
        "sup_bad_joystick": ({"joystick_config": str(bad_yaml)}, f"{bad_yaml}: field 'buttons.deadman' = -1"),
        "sup_bad_timeout": ({"policy_timeout_s": -1.0}, "supervisor parameters: field 'policy_timeout_s' = -1.0"),
    }
    decls = [node_decl("supervisor", {**PARAMS, **params}, name=name) for name, (params, _) in cases.items()]
    with running_nodes(decls, tmp_path) as launcher:  # started side by side: one start-up cost
        assert wait_until(lambda: len(launcher.check()) == len(cases), 2 * TIMEOUT), "a node did not exit"
        assert sorted(launcher.check()) == sorted((name, 2) for name in cases)
    log = (tmp_path / "graph.log").read_text()
    for name, (_, expected) in cases.items():
        assert any(line.startswith(f"[{name}]") and expected in line for line in log.splitlines()), log


def test_out_of_range_parameters_fail_at_start_naming_parameter_and_value(tmp_path):
    """Timeouts and limits have upper bounds: a 1e9 s joint-state timeout would switch the watchdog off."""
    cases = {  # node name -> (parameters, its one error line)
        "sup_watchdog_off": ({"joint_state_timeout_s": 1e9},
                             "supervisor parameters: field 'joint_state_timeout_s' = 1000000000.0: "
                             "must be a finite number in [0.001, 2.0]"),
        "sup_no_confirm": ({"joint_jump_confirm_samples": 1},
                           "supervisor parameters: field 'joint_jump_confirm_samples' = 1: "
                           "must be an integer in [2, 50]"),
        "sup_no_history": ({"command_history_depth": 0}, "'command_history_depth' = 0:"),
        "sup_spacing": ({"min_forward_interval_s": 0.02},
                        "supervisor parameters: field 'min_forward_interval_s' = 0.02: must be below the control "
                        "period 0.01 s"),
        "sup_rate_high": ({"control_rate_hz": 5000.0},
                          "supervisor parameters: field 'control_rate_hz' = 5000.0: must be a finite number in "
                          "[1.0, 2000.0]"),
    }
    decls = [node_decl("supervisor", {**PARAMS, **params}, name=name) for name, (params, _) in cases.items()]
    with running_nodes(decls, tmp_path) as launcher:
        assert wait_until(lambda: len(launcher.check()) == len(cases), 2 * TIMEOUT), "a node did not exit"
        assert sorted(launcher.check()) == sorted((name, 2) for name in cases)
    log = (tmp_path / "graph.log").read_text()
    assert "Traceback" not in log, log
    for name, (_, expected) in cases.items():
        errors = [line for line in log.splitlines() if line.startswith(f"[{name}]") and "[ERROR]" in line]
        assert len(errors) == 1 and expected in errors[0], log


def test_parameter_ranges_are_declared_and_described(ros, tmp_path):
    """`ros2 param describe` (describe_parameters over DDS) shows every core bound of CONFIG_RANGES."""
    expected = {name: bounds for name, bounds in CONFIG_RANGES.items() if name != "control_period_s"}
    low, high = CONFIG_RANGES["control_period_s"]
    expected["control_rate_hz"] = (1.0 / high, 1.0 / low)
    names = [*expected, "require_stop_source"]
    with running_nodes([node_decl("supervisor", HUMAN_ARMED)], tmp_path):
        response = ros.call(DescribeParameters, "supervisor/describe_parameters",
                            DescribeParameters.Request(names=names), timeout_s=TIMEOUT, resend_period_s=2.0)
    described = dict(zip(names, response.descriptors, strict=True))
    for name, (low, high) in expected.items():
        descriptor = described[name]
        assert descriptor.name == name and descriptor.description and descriptor.read_only, descriptor
        if name == "joint_jump_confirm_samples":
            assert descriptor.type == ParameterType.PARAMETER_INTEGER and not descriptor.floating_point_range
            assert [(r.from_value, r.to_value) for r in descriptor.integer_range] == [(low, high)], descriptor
        else:
            assert descriptor.type == ParameterType.PARAMETER_DOUBLE and not descriptor.integer_range
            bounds = [(r.from_value, r.to_value) for r in descriptor.floating_point_range]
            assert bounds == [pytest.approx((low, high))], (name, bounds)
    stop_source = described["require_stop_source"]
    assert stop_source.type == ParameterType.PARAMETER_BOOL and "stop source" in stop_source.description


def robot_supervisor():
    """The robot graph's supervisor (its parameters and params file), with this module's timeouts."""
    decl = {d.name: d for d in declare_graph("robot")}["supervisor"]
    assert decl.parameters["require_stop_source"] is True and decl.parameters["auto_arm"] is False
    return dataclasses.replace(decl, parameters={**decl.parameters, **PARAMS})


def test_robot_supervisor_arms_only_with_a_live_stop_source_and_latches_when_it_goes_silent(rig, tmp_path):
    with running_nodes([robot_supervisor()], tmp_path):
        rig.wait_mode("HOLD")
        responses = []

        def arm() -> Trigger.Response:
            responses.append(rig.call("supervisor/arm"))
            return responses[-1]

        # Joint states and policy commands fresh, no joystick and no e-stop heartbeat: refused.
        assert wait_until(lambda: "no fresh" not in arm().message, TIMEOUT), responses[-1].message
        assert not responses[-1].success and "no live stop source" in responses[-1].message, responses[-1].message
        assert rig.state()["mode"] == "HOLD"
        # A joystick whose e-stop button reads released is a live stop source.
        rig.joy_on = True
        assert wait_until(lambda: arm().success, TIMEOUT), responses[-1].message
        rig.wait_mode("AUTONOMOUS")
        # The joystick goes silent for longer than joy_timeout_s: ESTOP, latched, holding.
        rig.joy_on = False
        rig.wait_mode("ESTOP")
        assert "stop source" in rig.state()["reason"], rig.state()
        for q in rig.wait_more_commands(30):
            assert np.allclose(q, HOME, atol=1e-9), q
        assert rig.state()["mode"] == "ESTOP"
        response = rig.call("supervisor/reset")
        assert not response.success and "no live stop source" in response.message, response.message
        rig.joy_on = True
        assert wait_until(lambda: rig.call("supervisor/reset").success, TIMEOUT)
        rig.wait_mode("HOLD")  # no auto_arm on a robot


def test_a_joy_message_with_the_estop_pressed_and_a_nan_axis_latches_estop(rig, tmp_path):
    """A stop request is honoured whenever it can be read: the NaN axis gets the message rejected,
    the e-stop button in it still stops the arm (nothing in the node drops it before the core)."""
    with running_nodes([node_decl("supervisor", AUTO_ARMED)], tmp_path):
        rig.wait_mode("AUTONOMOUS")
        rig.joy_buttons = ["estop"]
        rig.joy_axes = {MAPPING.joint_axes[0]: float("nan")}
        rig.joy_on = True
        rig.wait_mode("ESTOP")
        state = rig.state()
        assert "e-stop button" in state["reason"] and int(state["rejected_joy"]) >= 1, state
        for q in rig.wait_more_commands(20):
            assert np.allclose(q, HOME, atol=1e-9), q
        assert rig.state()["mode"] == "ESTOP"


def test_a_servo_alarm_on_the_driver_report_latches_estop(rig, tmp_path):
    """feetech_driver/diagnostics, read through topics.StatusReport: a status at level ERROR with an
    overload latches ESTOP (the same key at level OK does not)."""
    from sim2real_ros.core.report import Level

    with running_nodes([node_decl("supervisor", AUTO_ARMED)], tmp_path):
        rig.wait_mode("AUTONOMOUS")
        node = rig.ros.node
        driver = node.create_publisher(DiagnosticArray, "feetech_driver/diagnostics", RELIABLE_LATEST_QOS)
        rig.ros.wait_for_subscribers(driver)
        warning = cv.diagnostic_array("feetech_driver", {"overload": NAMES[1]}, 0, level=Level.WARN,
                                      message="overload", hardware_id="/dev/pty")
        driver.publish(warning)
        rig.wait_more_commands(10)
        assert rig.state()["mode"] == "AUTONOMOUS"
        alarm = cv.diagnostic_array("feetech_driver", {"overload": NAMES[1], f"load.{NAMES[1]}": "1.000"}, 0,
                                    level=Level.ERROR, message="overload", hardware_id="/dev/pty")
        driver.publish(alarm)
        rig.wait_mode("ESTOP")
        assert f"overload on {NAMES[1]}" in rig.state()["reason"], rig.state()
