"""rclpy's stock EventsExecutor (SIM2REAL_EXECUTOR=events) runs the safety path: the supervisor as a
process over real DDS arms, follows the policy and holds on the e-stop, on Kilted and Jazzy alike.
Its figures against the lean executor and rclpy's SingleThreadedExecutor are in
benchmarks/bench_executors.py (docs/benchmarks.md)."""
from __future__ import annotations

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from support import node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.limits import limits_from_urdf
from sim2real_ros.nodes.common import JOINT_STATE_QOS, LATCHED_QOS, RELIABLE_LATEST_QOS
from sim2real_ros.nodes.executor import EXECUTOR_ENV, executor_choice
from sim2real_ros.paths import urdf_path

URDF = str(urdf_path())
MODEL = RobotModel.from_file(URDF)
LIMITS = limits_from_urdf(MODEL, MODEL.joint_names)
HOME = (LIMITS.lower + LIMITS.upper) / 2
TARGET = HOME + 0.02  # the policy's target: a small step the supervisor passes within its limits
COMMANDS = "forward_position_controller/commands"
TIMEOUT = 30.0


def test_the_events_choice_is_read_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.setenv(EXECUTOR_ENV, "events")
    assert executor_choice() == "events"
    monkeypatch.setenv(EXECUTOR_ENV, "evented")
    with pytest.raises(ConfigError, match="evented"):
        executor_choice()


def test_supervisor_on_the_events_executor_holds_on_estop(ros, tmp_path, monkeypatch):
    monkeypatch.setenv(EXECUTOR_ENV, "events")  # the launcher passes its environment to the node
    node = ros.node
    commands = ros.collect(Float64MultiArray, COMMANDS, RELIABLE_LATEST_QOS)
    states = ros.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS)
    joint_pub = node.create_publisher(JointState, "joint_states", JOINT_STATE_QOS)
    policy_pub = node.create_publisher(JointState, "command/policy", RELIABLE_LATEST_QOS)
    estop_pub = node.create_publisher(Bool, "estop", LATCHED_QOS)

    def feed() -> None:
        joint_pub.publish(cv.make_joint_state(MODEL.joint_names, HOME, node.get_clock().now().nanoseconds))
        policy_pub.publish(JointState(name=list(MODEL.joint_names), position=[float(v) for v in TARGET]))

    node.create_timer(0.02, feed)

    def mode() -> str:
        return cv.diagnostic_values(states[-1]).get("mode", "") if states else ""

    params = {"robot_description": URDF, "auto_arm": True, "handover_ramp_s": 0.0, "policy_timeout_s": 0.5,
              "joint_state_timeout_s": 0.5}
    with running_nodes([node_decl("supervisor", params)], tmp_path):
        assert wait_until(lambda: mode() == "AUTONOMOUS", TIMEOUT), mode()
        assert wait_until(lambda: commands and np.allclose(commands[-1].data, TARGET, atol=1e-9), TIMEOUT)
        ros.wait_for_subscribers(estop_pub)
        estop_pub.publish(Bool(data=True))
        assert wait_until(lambda: mode() == "ESTOP", TIMEOUT), mode()
        held = len(commands)
        assert wait_until(lambda: len(commands) >= held + 5, TIMEOUT)
        # holds go to the measured position (HOME), never to the policy's target
        assert all(not np.allclose(m.data, TARGET, atol=1e-9) for m in commands[held:])
    log = (tmp_path / "graph.log").read_text()
    # Neither of the supervisor's nodes can be served by the EventsExecutor (the e-stop thread's
    # callback takes the MessageInfo; the main node has a guard condition): both fall back
    assert "e-stop thread spinning on SingleThreadedExecutor" in log, log[-3000:]
    assert "spinning on SingleThreadedExecutor (executor events; SIM2REAL_EXECUTOR=events)" in log, log[-3000:]


def test_a_nodes_executor_parameter_overrides_the_environment_and_a_bad_one_is_named(ros, tmp_path, monkeypatch):
    """The graph can choose per node (graph.ROBOT_REALTIME): `executor: rclpy` on a node process
    while SIM2REAL_EXECUTOR says lean; `auto` follows the environment; a bad value ends the node at
    start-up (exit 2) naming the parameter and the value."""
    from sim2real_ros.runtime.launcher import GraphLauncher

    monkeypatch.setenv(EXECUTOR_ENV, "lean")
    with running_nodes([node_decl("supervisor", {"robot_description": URDF, "auto_arm": True, "executor": "rclpy"}),
                        node_decl("actuator_node", {"robot_description": URDF})], tmp_path):
        # both nodes' start-up lines (the supervisor's e-stop thread says "spinning on" too)
        said = {"spinning on SingleThreadedExecutor (executor rclpy; SIM2REAL_EXECUTOR=lean)",
                "spinning on LeanExecutor (executor lean; SIM2REAL_EXECUTOR=lean)"}
        assert wait_until(lambda: all(line in (tmp_path / "graph.log").read_text() for line in said), TIMEOUT), \
            (tmp_path / "graph.log").read_text()[-3000:]
    log = (tmp_path / "graph.log").read_text()
    assert "[supervisor]" in log.split("(executor rclpy;")[0].splitlines()[-1], log[-3000:]
    assert "[actuator_node]" in log.split("(executor lean;")[0].splitlines()[-1], log[-3000:]
    bad = GraphLauncher([node_decl("actuator_node", {"robot_description": URDF, "executor": "fast"})], echo=False,
                        log_file=tmp_path / "bad.log")
    bad.start()
    try:
        assert wait_until(lambda: bad.check(), TIMEOUT)
        assert bad.check() == [("actuator_node", 2)]
    finally:
        bad.shutdown()
    said = (tmp_path / "bad.log").read_text()
    assert "'executor' = 'fast'" in said and "one of" in said, said[-2000:]


def test_events_executor_serves_a_plain_node_and_refuses_message_info_callbacks():
    """In one process over real DDS: a node with one-argument callbacks spins on the EventsExecutor
    and gets its message; a node whose callback takes the MessageInfo (as the e-stop's does) gets
    rclpy's SingleThreadedExecutor, which delivers it."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from sim2real_ros.nodes.executor import single_threaded_executor

    context = Context()
    rclpy.init(context=context)
    try:
        talker = rclpy.create_node("events_talker", context=context)
        publisher = talker.create_publisher(Bool, "events_probe", LATCHED_QOS)
        got: dict[str, list] = {"plain": [], "with_info": []}
        plain = rclpy.create_node("events_plain", context=context)
        plain.create_subscription(Bool, "events_probe", lambda m: got["plain"].append(m.data), LATCHED_QOS)
        with_info = rclpy.create_node("events_with_info", context=context)
        with_info.create_subscription(Bool, "events_probe", lambda m, info: got["with_info"].append(info),
                                      LATCHED_QOS)
        executors = {name: single_threaded_executor(node, "events")
                     for name, node in (("plain", plain), ("with_info", with_info))}
        # rclpy.experimental.EventsExecutor is a factory function: compare the class it builds
        assert type(executors["plain"]).__name__ == "EventsExecutor", type(executors["plain"])
        assert isinstance(executors["with_info"], SingleThreadedExecutor)
        executors["plain"].add_node(plain)
        executors["with_info"].add_node(with_info)
        publisher.publish(Bool(data=True))
        for name, executor in executors.items():
            assert wait_until(lambda e=executor, n=name: e.spin_once(timeout_sec=0.05) or got[n], TIMEOUT), name
        assert got["plain"] == [True] and len(got["with_info"]) == 1
        for executor in executors.values():
            executor.shutdown()
    finally:
        rclpy.try_shutdown(context=context)
