"""actuator_node as a process over real DDS: chunks in, fixed-rate tick-stamped commands out."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from support import node_decl, running_nodes, wait_until
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros import conversions as cv
from sim2real_ros.core.control.chunk_buffer import ChunkBuffer, ChunkBufferConfig
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.nodes.actuator_node import ActuatorConfig
from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS

JOINTS = ["j_a", "j_b", "j_c"]
# The robot of JOINTS (a node refuses joints its URDF does not move): continuous joints without
# velocity limits, so joint jumps go unseen and only the chunks decide the commands.
JOINTS_URDF = """<robot name="three">
  <link name="base"/><link name="l1"/><link name="l2"/><link name="l3"/>
  <joint name="j_a" type="continuous"><parent link="base"/><child link="l1"/><axis xyz="0 0 1"/></joint>
  <joint name="j_b" type="continuous"><parent link="l1"/><child link="l2"/><axis xyz="0 1 0"/></joint>
  <joint name="j_c" type="continuous"><parent link="l2"/><child link="l3"/><axis xyz="0 1 0"/></joint>
</robot>"""
TWO_JOINT_URDF = """<robot name="two">
  <link name="base"/><link name="l1"/><link name="l2"/>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="l1"/>
    <axis xyz="0 0 1"/><limit lower="-2" upper="2" velocity="1" effort="5"/></joint>
  <joint name="elbow" type="revolute"><parent link="l1"/><child link="l2"/>
    <axis xyz="0 1 0"/><limit lower="-2" upper="2" velocity="1" effort="5"/></joint>
</robot>"""
ROBOT = {"robot_description": JOINTS_URDF, "joints": JOINTS}
# Keep every message the node sends, not just the newest (the publisher's depth 1 is its own).
KEEP_ALL = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


def ramp_chunk(names, stamp_ns: int, duration_s: float, dt: float = 0.05, slope=None) -> JointTrajectory:
    """Targets q_j(t) = 0.1 j + slope_j (t - stamp) [rad]: linear, so any interpolation is exact."""
    slope = np.asarray(slope if slope is not None else [0.5 * (j + 1) for j in range(len(names))])
    times = np.arange(0.0, duration_s + 1e-9, dt)
    positions = 0.1 * np.arange(len(names))[None, :] + times[:, None] * slope[None, :]
    return cv.chunk_to_trajectory(cv.ActionChunk(tuple(names), stamp_ns, times, positions))


def diagnostics_values(received: list) -> dict[str, str]:
    return cv.diagnostic_values(received[-1]) if received else {}


def wait_for_diagnostics(received: list, predicate, timeout_s: float = 20.0) -> dict[str, str]:
    assert wait_until(lambda: bool(received) and predicate(diagnostics_values(received)), timeout_s), (
        f"diagnostics never satisfied the condition; last: {diagnostics_values(received)}"
    )
    return diagnostics_values(received)


def test_chunks_in_commands_out_at_rate_with_tick_stamps(ros, tmp_path):
    latency_s = 0.05
    params = {**ROBOT, "control_rate_hz": 100.0, "actuation_latency_s": latency_s, "interpolation": "cubic"}
    with running_nodes([node_decl("actuator_node", params)], tmp_path):
        commands = ros.collect(JointState, "command/policy", KEEP_ALL)
        diagnostics = ros.collect(DiagnosticArray, "actuator_node/diagnostics", 10)
        chunk_pub = ros.publisher(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS)
        ros.wait_for_subscribers(chunk_pub, timeout_s=30.0)
        wait_for_diagnostics(diagnostics, lambda v: v.get("ticks", "0") != "0")
        assert commands == []  # nothing to command yet: nothing is published

        # The observation was taken 30 ms ago (inference delay); the chunk covers 1.5 s from then.
        stamp_ns = time.time_ns() - 30_000_000
        chunk_pub.publish(ramp_chunk(JOINTS, stamp_ns, 1.5))
        ros.wait_for_messages(commands, 60, timeout_s=20.0)

        # Stale after the chunk's end: the node stops publishing and counts stale ticks.
        end_ns = stamp_ns + 1_500_000_000
        before = wait_for_diagnostics(diagnostics, lambda v: int(v["stale_ticks"]) > 0 and int(v["published"]) > 0
                                      and time.time_ns() > end_ns)
        count = len(commands)
        wait_for_diagnostics(diagnostics, lambda v: int(v["stale_ticks"]) >= int(before["stale_ticks"]) + 50)
        assert len(commands) == count

    stamps = np.array([cv.stamp_to_ns(m.header.stamp) for m in commands])
    periods_ms = np.diff(stamps) / 1e6
    assert np.all(periods_ms > 0)
    assert 8.0 < np.median(periods_ms) < 12.0  # the configured 100 Hz, stamped with the tick time
    for msg, stamp in zip(commands, stamps, strict=True):
        assert list(msg.name) == JOINTS
        tau = (stamp - stamp_ns) / 1e9 + latency_s  # latency compensation: the target for tick + latency
        expected = 0.1 * np.arange(3) + tau * np.array([0.5, 1.0, 1.5])
        assert np.allclose(msg.position, expected, atol=1e-6)
        assert np.allclose(msg.velocity, [0.5, 1.0, 1.5], atol=1e-6)
    # The last command's target time lies inside the chunk: it never extrapolated.
    assert stamps[-1] + int(latency_s * 1e9) <= end_ns
    assert stamps[-1] + int(latency_s * 1e9) > end_ns - 100_000_000  # and it did not stop early
    values = diagnostics_values(diagnostics)
    assert values["chunks_accepted"] == "1" and values["chunks_rejected"] == "0"
    # Each command is the one chunk's target at its tick, stamped with the tick time: the age of the
    # chunk at each use is the command's stamp minus the chunk's, so the node's figures follow exactly.
    ages_ms = (stamps - stamp_ns) / 1e6
    assert float(values["chunk_age_at_use_ms_p50"]) == pytest.approx(np.percentile(ages_ms, 50), abs=0.01)
    assert float(values["chunk_age_at_use_ms_max"]) == pytest.approx(ages_ms.max(), abs=0.01)
    assert 8.0 < float(values["timer_period_ms_p50"]) < 12.0


def test_bad_chunks_are_rejected_counted_and_the_node_keeps_going(ros, tmp_path):
    params = {"robot_description": TWO_JOINT_URDF, "control_rate_hz": 50.0, "interpolation": "linear",
              "blending": "temporal_ensemble", "crossfade_s": 0.0}
    names = ["shoulder", "elbow"]  # from the URDF: no `joints` parameter given
    with running_nodes([node_decl("actuator_node", params)], tmp_path):
        commands = ros.collect(JointState, "command/policy", KEEP_ALL)
        diagnostics = ros.collect(DiagnosticArray, "actuator_node/diagnostics", 10)
        chunk_pub = ros.publisher(JointTrajectory, "policy/action_chunk", 10)
        ros.wait_for_subscribers(chunk_pub, timeout_s=30.0)

        now = time.time_ns()
        nan = ramp_chunk(names, now, 2.0)
        nan.points[3].positions = [float("nan"), 0.0]
        backwards = ramp_chunk(names, now, 2.0)
        backwards.points[2].time_from_start = backwards.points[1].time_from_start
        empty = ramp_chunk(names, now, 2.0)
        empty.points = []
        ragged = ramp_chunk(names, now, 2.0)
        ragged.points[0].positions = [0.0]
        bad = [
            (ramp_chunk(["shoulder", "wrist"], now, 2.0), "rejected_joint_names"),
            (ramp_chunk(names + ["elbow2"], now, 2.0, slope=[1.0, 1.0, 1.0]), "rejected_joint_names"),
            (nan, "rejected_non_finite"),
            (backwards, "rejected_time_order"),
            (empty, "rejected_empty"),
            (ragged, "rejected_ragged"),
            (ramp_chunk(names, now - 5_000_000_000, 1.0), "rejected_stale_on_arrival"),
        ]
        for i, (msg, _) in enumerate(bad):
            # The subscription keeps only the newest chunk (depth 1): one at a time, as a policy sends them.
            chunk_pub.publish(msg)
            wait_for_diagnostics(diagnostics, lambda v, i=i: v.get("chunks_received") == str(i + 1))
        expected = {key: sum(1 for _, k in bad if k == key) for _, key in bad}
        values = wait_for_diagnostics(diagnostics, lambda v: v.get("chunks_rejected") == str(len(bad)))
        for key, count in expected.items():
            assert values[key] == str(count), key
        assert values["chunks_accepted"] == "0" and values["published"] == "0"

        # Still alive and commanding once a good chunk comes.
        chunk_pub.publish(ramp_chunk(names, time.time_ns(), 2.0, slope=[0.2, -0.2]))
        ros.wait_for_messages(commands, 10, timeout_s=20.0)
        assert list(commands[0].name) == names
        assert all(np.all(np.isfinite(m.position)) for m in commands)
        values = wait_for_diagnostics(diagnostics, lambda v: v["chunks_accepted"] == "1")
        assert values["chunks_rejected"] == str(len(bad))


def test_sim_time_ticks_and_a_clock_jump_back_drops_old_chunks(ros, tmp_path):
    params = {**ROBOT, "control_rate_hz": 100.0, "actuation_latency_s": 0.02, "use_sim_time": True}
    sim_ns = [1000 * 1_000_000_000]
    stop = threading.Event()

    with running_nodes([node_decl("actuator_node", params)], tmp_path):
        clock_pub = ros.publisher(Clock, "clock", 10)
        commands = ros.collect(JointState, "command/policy", KEEP_ALL)
        diagnostics = ros.collect(DiagnosticArray, "actuator_node/diagnostics", 10)
        chunk_pub = ros.publisher(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS)

        def run_clock() -> None:  # sim time advancing 5 ms per 5 ms of wall time
            while not stop.wait(0.005):
                sim_ns[0] += 5_000_000
                clock_pub.publish(Clock(clock=cv.ns_to_stamp(sim_ns[0])))

        clock_thread = threading.Thread(target=run_clock, daemon=True)
        clock_thread.start()
        try:
            ros.wait_for_subscribers(chunk_pub, timeout_s=30.0)
            wait_for_diagnostics(diagnostics, lambda v: int(v.get("ticks", "0")) > 5)
            stamp_ns = sim_ns[0]
            chunk_pub.publish(ramp_chunk(JOINTS, stamp_ns, 30.0, dt=0.5))
            ros.wait_for_messages(commands, 20, timeout_s=20.0)
            sim_ns[0] = 10 * 1_000_000_000  # the sim restarted
            wait_for_diagnostics(diagnostics, lambda v: v["clock_jumps_back"] == "1" and int(v["stale_ticks"]) > 10)
            count = len(commands)
            wait_for_diagnostics(diagnostics, lambda v: int(v["stale_ticks"]) > 30)
        finally:
            stop.set()
            clock_thread.join(timeout=2.0)
    stamps = np.array([cv.stamp_to_ns(m.header.stamp) for m in commands])
    assert np.all(stamps >= stamp_ns)  # tick stamps are sim time, and nothing after the jump back
    assert len(commands) == count
    for msg, stamp in zip(commands, stamps, strict=True):
        tau = (stamp - stamp_ns) / 1e9 + 0.02
        assert np.allclose(msg.position, 0.1 * np.arange(3) + tau * np.array([0.5, 1.0, 1.5]), atol=1e-6)


def test_latency_estimate_is_reported_and_optionally_used(ros, tmp_path):
    """A test-side 'robot' holds each command from 60 ms after its stamp; the node estimates that and,
    with use_estimated_latency, compensates with it instead of the configured 0.

    Lockstep over DDS: the test owns the sim clock and advances it one control period at a time,
    only after the command of the previous tick has arrived, and stamps the robot's joint states in
    sim time. Every tick then happens at a known sim time and sees the same chunk and joint states,
    whatever the scheduling. Left to chance is only at which sim time the ~1 Hz (wall clock)
    diagnostics re-estimate and the switch to the estimate happens; no assertion depends on it.
    """
    echo_delay_ns, period_ns = 60_000_000, 10_000_000
    start_ns = 1000 * 1_000_000_000
    params = {**ROBOT, "control_rate_hz": 100.0, "actuation_latency_s": 0.0, "use_estimated_latency": True,
              "latency_window_s": 2.0, "latency_max_s": 0.2, "latency_min_confidence": 0.8, "use_sim_time": True}
    times = np.arange(0.0, 10.0 + 1e-9, 0.05)
    t_abs = start_ns / 1e9 + times
    positions = 0.3 * np.sin(2 * np.pi * np.array([0.9, 1.3, 0.7])[None, :] * t_abs[:, None])
    chunk_msg = cv.chunk_to_trajectory(cv.ActionChunk(tuple(JOINTS), start_ns, times, positions))
    with running_nodes([node_decl("actuator_node", params)], tmp_path):
        commands = ros.collect(JointState, "command/policy", KEEP_ALL)
        diagnostics = ros.collect(DiagnosticArray, "actuator_node/diagnostics", KEEP_ALL)
        clock_pub = ros.publisher(Clock, "clock", 10)
        state_pub = ros.publisher(JointState, "joint_states", 10)
        chunk_pub = ros.publisher(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS)
        for publisher in (clock_pub, state_pub, chunk_pub):
            ros.wait_for_subscribers(publisher, timeout_s=30.0)

        def set_clock(t_ns: int, until, what: str) -> None:
            """Publish sim time t_ns until `until()` holds. The clock subscription of rclpy is best
            effort: a lost message is sent again (the node's time just stays t_ns)."""
            deadline = time.monotonic() + 20.0
            while True:
                clock_pub.publish(Clock(clock=cv.ns_to_stamp(t_ns)))
                if wait_until(until, 0.05, poll_s=0.001):
                    return
                assert time.monotonic() < deadline, f"{what} (sim time {t_ns} ns)"

        set_clock(start_ns, lambda: bool(diagnostics) and cv.stamp_to_ns(diagnostics[-1].header.stamp) >= start_ns,
                  "the node never took the test's clock")
        chunk_pub.publish(chunk_msg)
        wait_for_diagnostics(diagnostics, lambda v: v["chunks_accepted"] == "1")

        def step(t_ns: int) -> None:
            """Sim time t_ns: one tick; then the robot's joint state, sampled half a period earlier
            (not in phase with the commands, as a real broadcaster), holding the newest command that
            had been acting for echo_delay_ns."""
            set_clock(t_ns, lambda: bool(commands) and cv.stamp_to_ns(commands[-1].header.stamp) >= t_ns,
                      "no command for the tick")
            measured_ns = t_ns - period_ns // 2
            due = [m for m in commands if cv.stamp_to_ns(m.header.stamp) <= measured_ns - echo_delay_ns]
            if due:
                state_pub.publish(cv.make_joint_state(JOINTS, np.array(due[-1].position), measured_ns))

        # 3 s of sim time: the 2 s window fills and the estimate replaces the configured 0.
        steps = 300
        for k in range(1, steps + 1):
            step(start_ns + k * period_ns)
        values = wait_for_diagnostics(diagnostics, lambda v: float(v["latency_confidence"]) >= 0.8
                                      and float(v["actuation_latency_in_use_s"]) > 0)
        # A few more ticks after the node said it uses the estimate: their commands must show it.
        for k in range(steps + 1, steps + 6):
            step(start_ns + k * period_ns)
        last_tick_ns = start_ns + (steps + 5) * period_ns
        values = wait_for_diagnostics(diagnostics, lambda v: float(v["latency_confidence"]) >= 0.8
                                      and cv.stamp_to_ns(diagnostics[-1].header.stamp) >= last_tick_ns)
        reported = [diagnostics_values([d]) for d in list(diagnostics)]

    estimate = float(values["latency_estimate_s"])
    assert abs(estimate - echo_delay_ns / 1e9) <= 0.01, values  # within one control period
    assert float(values["actuation_latency_in_use_s"]) == pytest.approx(estimate, abs=1e-5)
    assert values["actuation_latency_configured_s"] == "0"
    assert values["latency_estimate_status"] == "ok" and values["chunks_rejected"] == "0", values

    # Every command is the chunk's target for tick + the latency in use then: 0 until an estimate
    # was confident, then one of the estimates the diagnostics reported.
    stamps = np.array([cv.stamp_to_ns(m.header.stamp) for m in commands])
    ticks = stamps[stamps > start_ns]
    assert np.array_equal(ticks, start_ns + period_ns * np.arange(1, steps + 6)), "one command per tick"
    reference = ChunkBuffer(JOINTS, ChunkBufferConfig(interpolation="cubic"))
    reference.add(cv.trajectory_to_chunk(chunk_msg), start_ns)
    in_use = sorted({0.0} | {float(v["actuation_latency_in_use_s"]) for v in reported if v})

    def latency_used(msg: JointState) -> float:
        stamp = cv.stamp_to_ns(msg.header.stamp)
        for latency_s in in_use:
            sample = reference.sample_at(stamp, stamp + int(round(latency_s * 1e9)))
            # Diagnostics print 6 significant digits: 0.1 us of latency, < 1e-6 rad here.
            if sample is not None and np.allclose(msg.position, sample.positions, atol=1e-6):
                return latency_s
        raise AssertionError(f"command at {stamp} matches no latency in use {in_use}: {list(msg.position)}")

    used = [latency_used(m) for m in commands]
    switched = next(stamp for latency, stamp in zip(used, stamps, strict=True) if latency > 0)
    print(f"latency estimate {estimate:.6f} s (confidence {values['latency_confidence']}); in use from "
          f"{(switched - start_ns) / 1e9:.2f} s of sim time; latencies in use {in_use}")
    # Before 1.2 s of commands the 2 s window cannot estimate anything (1 s span + 0.2 s of lag).
    assert all(latency == 0.0 for latency, stamp in zip(used, stamps, strict=True) if stamp < start_ns + 1.2e9)
    assert all(abs(latency - echo_delay_ns / 1e9) <= 0.01 for latency in used[-5:]), used[-5:]


@pytest.mark.parametrize(
    "bad, expected",
    [({"interpolation": "quintic"}, ("interpolation", "'quintic'")),
     ({"control_rate_hz": 100}, ("control_rate_hz", "float", "INTEGER")),  # an int where a double is declared
     ({"control_rate": 100}, ("control_rate", "float", "control_rate_hz"))],  # the same, under the deprecated name
)
def test_bad_parameter_fails_at_start_naming_field_and_value(tmp_path, bad, expected):
    decl = node_decl("actuator_node", {**ROBOT, **bad})
    with running_nodes([decl], tmp_path) as launcher:
        assert wait_until(lambda: launcher.check() != [], 30.0), "the node did not exit on a bad parameter"
        assert launcher.check()[0][1] == 2
    log = (tmp_path / "graph.log").read_text()
    assert "Traceback" not in log
    for text in expected:
        assert text in log, log


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(control_rate_hz=0.0), "control_rate_hz"),
        (dict(control_rate_hz=float("inf")), "control_rate_hz"),
        (dict(actuation_latency_s=-0.02), "actuation_latency_s"),
        (dict(blending="median"), "blending"),
        (dict(crossfade_s=-1.0), "crossfade_s"),
        (dict(estimate_latency=False, use_estimated_latency=True), "use_estimated_latency"),
        (dict(latency_min_confidence=1.5), "latency_min_confidence"),
        (dict(latency_window_s=0.2), "latency_max_s"),
        (dict(joints=("a", "a")), "joints"),
    ],
)
def test_config_validation_names_field_and_value(kwargs, field):
    arguments = {"joints": ("a", "b"), **kwargs}
    with pytest.raises(ConfigError) as info:
        ActuatorConfig(**arguments)
    assert info.value.field == field
    assert info.value.source == "actuator_node"


@pytest.mark.parametrize(("overrides", "rate_hz", "latency_s", "warned"), [
    ({"control_rate": 50.0, "actuation_latency": 0.03}, 50.0, 0.03, ["control_rate", "actuation_latency"]),
    ({"control_rate": 50.0, "control_rate_hz": 200.0}, 200.0, 0.0, ["control_rate"]),  # the new name wins
    ({"control_rate_hz": 250.0, "actuation_latency_s": 0.01}, 250.0, 0.01, []),
])
def test_old_parameter_names_are_accepted_with_one_warning_naming_the_new_name(capfd, overrides, rate_hz,
                                                                               latency_s, warned):
    import rclpy
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from sim2real_ros.nodes import parameters
    from sim2real_ros.nodes.actuator_node import declare_parameters

    parameters._WARNED.clear()  # once per node and name in a process: each case is a fresh start
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = Node("actuator_node", context=context, start_parameter_services=False,
                    parameter_overrides=[Parameter(k, value=v) for k, v in {**ROBOT, **overrides}.items()])
        config = declare_parameters(node)
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    assert (config.control_rate_hz, config.actuation_latency_s) == (rate_hz, latency_s)
    err = capfd.readouterr().err
    for old in ("control_rate", "actuation_latency"):
        lines = [line for line in err.splitlines() if f"parameter '{old}' is deprecated" in line]
        assert len(lines) == (1 if old in warned else 0), err
        if lines:
            assert f"use '{old}_{'hz' if old == 'control_rate' else 's'}'" in lines[0]


def test_core_joint_states_reordered_zero_stamps_timed_at_reception_missing_joints_refused():
    """The ActuatorCore edge cases the DDS tests do not reach, at fixed times (no node)."""
    from sim2real_ros.core.control.actuator import ActuatorCore

    core = ActuatorCore(ActuatorConfig(joints=tuple(JOINTS), latency_window_s=2.0, latency_max_s=0.2))
    start_ns, period_ns = 5_000_000_000, 10_000_000
    chunk = cv.trajectory_to_chunk(ramp_chunk(JOINTS, start_ns, 3.0, dt=0.05))
    wavy = cv.ActionChunk(chunk.joint_names, chunk.stamp_ns, chunk.times_s,
                          chunk.positions + 0.2 * np.sin(7.0 * chunk.times_s)[:, None] * np.array([1.0, -1.0, 0.5]))
    assert core.on_chunk(wavy, start_ns) is None
    sent = []
    for k in range(250):
        now = start_ns + k * period_ns
        sent.append(core.tick(now).positions)
        if k >= 5:
            # Sampled half a period before the tick, holding the newest command that has acted for 40 ms
            # (stamp <= now - 45 ms); joint order reversed and a zero stamp (a driver that leaves it
            # unset): the reception time counts.
            assert core.on_joint_state(JOINTS[::-1], sent[k - 5][::-1], 0, now - period_ns // 2) is None
    rejection = core.on_joint_state(JOINTS[:2], np.zeros(2), start_ns, start_ns)
    assert rejection is not None and "j_c" in rejection.text
    estimate = core.update_latency()
    assert estimate.latency_s == pytest.approx(0.04, abs=0.002) and estimate.confidence > 0.95, estimate
    values, level, _ = core.report()
    assert values["joint_states_rejected"] == 1 and values["published"] == 250 and level == "ok"
    assert values["actuation_latency_in_use_s"] == 0.0  # use_estimated_latency is off by default


def test_core_a_measured_joint_jump_drops_chunks_planned_before_it():
    """A teleported arm (sim episode reset): chunks observed before the jump never command it again."""
    from sim2real_ros.core.control.actuator import ActuatorCore

    core = ActuatorCore(ActuatorConfig(joints=tuple(JOINTS), velocity_limits=(2.0, 2.0, 2.0)))
    start_ns, period_ns = 5_000_000_000, 10_000_000
    old = cv.trajectory_to_chunk(ramp_chunk(JOINTS, start_ns, 3.0))
    assert core.on_chunk(old, start_ns) is None
    q = np.array([0.0, 0.1, 0.2])
    for k in range(10):  # motion well within the limits: no jump
        now = start_ns + k * period_ns
        assert core.tick(now) is not None
        assert core.on_joint_state(JOINTS, q + 0.01 * k, now, now) is None
    jump_ns = start_ns + 10 * period_ns
    # One sample off is an outlier (a glitching encoder): nothing is dropped.
    core.on_joint_state(JOINTS, q + np.array([0.0, 2.5, 0.0]), jump_ns - period_ns // 2, jump_ns - period_ns // 2)
    assert core.joint_jumps == 0 and len(core) == 1
    # A jump persists over several samples; it counts from its first sample.
    for k in range(3):
        assert core.joint_jumps == 0
        core.on_joint_state(JOINTS, q + np.array([0.0, 0.6, 0.0]), jump_ns + k, jump_ns + k)
    assert core.joint_jumps == 1 and len(core) == 0
    assert core.tick(jump_ns + period_ns) is None  # stale until a chunk from after the jump
    # A chunk from an image taken before the jump, delivered late, is refused and counted.
    late = cv.trajectory_to_chunk(ramp_chunk(JOINTS, jump_ns - period_ns, 3.0))
    rejection = core.on_chunk(late, jump_ns + 2 * period_ns)
    assert rejection is not None and rejection.reason == "before_joint_jump"
    fresh = cv.trajectory_to_chunk(ramp_chunk(JOINTS, jump_ns + period_ns, 3.0))
    assert core.on_chunk(fresh, jump_ns + 3 * period_ns) is None
    assert core.tick(jump_ns + 4 * period_ns) is not None
    values, _, _ = core.report()
    assert values["joint_jumps"] == 1 and values["rejected_before_joint_jump"] == 1


def test_core_sends_nothing_while_a_jump_awaits_confirmation_and_one_outlier_costs_one_tick():
    """The supervisor confirms jumps on the same samples: a command sent between a jump's first sample
    and its confirmation would be a plan for the old position that it could take for a new one."""
    from sim2real_ros.core.control.actuator import ActuatorCore

    core = ActuatorCore(ActuatorConfig(joints=tuple(JOINTS), velocity_limits=(2.0, 2.0, 2.0)))
    start_ns, period_ns = 5_000_000_000, 10_000_000
    assert core.on_chunk(cv.trajectory_to_chunk(ramp_chunk(JOINTS, start_ns, 3.0)), start_ns) is None
    q = np.array([0.0, 0.1, 0.2])
    core.on_joint_state(JOINTS, q, start_ns, start_ns)
    assert core.tick(start_ns) is not None
    # One sample off: the next tick waits, the one after (the sample came back) commands again.
    core.on_joint_state(JOINTS, q + np.array([0.0, 2.5, 0.0]), start_ns + period_ns, start_ns + period_ns)
    assert core.tick(start_ns + period_ns) is None
    core.on_joint_state(JOINTS, q, start_ns + 2 * period_ns, start_ns + 2 * period_ns)
    assert core.tick(start_ns + 2 * period_ns) is not None
    # A real jump: silent from its first sample on, through the confirmation, until a new chunk.
    for k in range(3, 6):
        now = start_ns + k * period_ns
        core.on_joint_state(JOINTS, q + np.array([0.0, 0.6, 0.0]), now, now)
        assert core.tick(now) is None
    assert core.joint_jumps == 1 and core.jump_pending_ticks == 3  # the outlier's tick and two of the jump's
    values, _, _ = core.report()
    assert values["jump_pending_ticks"] == 3


def test_core_reports_how_long_each_chunk_waited_for_its_first_command():
    """Issue 36: chunk_wait_for_tick_ms_* = arrival -> the first tick after it, at fixed times."""
    from sim2real_ros.core.control.actuator import ActuatorCore

    core = ActuatorCore(ActuatorConfig(joints=tuple(JOINTS)))
    start_ns = 5_000_000_000
    assert core.on_chunk(cv.trajectory_to_chunk(ramp_chunk(JOINTS, start_ns, 3.0)), start_ns + 1_000_000) is None
    assert core.chunk_waiting
    assert core.tick(start_ns + 4_000_000) is not None  # waited 3 ms
    assert not core.chunk_waiting
    assert core.tick(start_ns + 14_000_000) is not None  # no new chunk: no wait counted
    assert core.on_chunk(cv.trajectory_to_chunk(ramp_chunk(JOINTS, start_ns + 10_000_000, 3.0)),
                         start_ns + 15_000_000) is None
    assert core.tick(start_ns + 16_000_000) is not None  # waited 1 ms
    values, _, _ = core.report()
    assert values["chunk_wait_for_tick_ms_max"] == pytest.approx(3.0)
    assert values["chunk_wait_for_tick_ms_p50"] == pytest.approx(2.0)


@pytest.mark.parametrize("tick_on_chunk", [True, False])
def test_a_chunk_brings_the_next_tick_forward_only_with_tick_on_chunk(ros, tmp_path, tick_on_chunk):
    """Issue 36, in the node: at 2 Hz a fixed tick is up to 500 ms away; chunks 150 ms apart each
    find the next tick ~350 ms off, so with tick_on_chunk they bring it forward (counted
    in ticks_brought_forward) and, due at once, are commanded from the chunk's callback
    (ticks_on_arrival); without it neither. Counts, not durations: no timing assert."""
    params = {**ROBOT, "control_rate_hz": 2.0, "tick_on_chunk": tick_on_chunk, "tick_phase_lock": False}
    with running_nodes([node_decl("actuator_node", params)], tmp_path):
        diagnostics = ros.collect(DiagnosticArray, "actuator_node/diagnostics", 10)
        chunk_pub = ros.publisher(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS)
        ros.wait_for_subscribers(chunk_pub, timeout_s=30.0)
        wait_for_diagnostics(diagnostics, lambda v: v.get("ticks", "0") != "0")
        for _ in range(3):
            chunk_pub.publish(ramp_chunk(JOINTS, time.time_ns(), 5.0))
            time.sleep(0.15)  # spacing the chunks (the assert below counts, it does not time)
        values = wait_for_diagnostics(diagnostics, lambda v: v["chunks_accepted"] == "3"
                                      and v["chunk_wait_for_tick_ms_max"] != "nan")
    if tick_on_chunk:
        # Each should; >= 1 leaves room for a chunk delayed past its tick on a loaded machine.
        assert int(values["ticks_brought_forward"]) >= 1, values
        # Due at once (2 ms after the last tick has long passed): commanded from the chunk's callback.
        assert int(values["ticks_on_arrival"]) >= 1, values
    else:
        assert values["ticks_brought_forward"] == "0", values
        assert values["ticks_on_arrival"] == "0", values
    # Each chunk's way in is split from the message info's stamps: the DDS write -> this process's
    # reception, then -> the callback. Both measured (real numbers, not NaN), none negative, and the
    # way in is part of the whole (the median of each below a second on any machine).
    for stage in ("chunk_delivery_ms", "chunk_dispatch_ms"):
        p50, p99 = float(values[f"{stage}_p50"]), float(values[f"{stage}_p99"])
        assert 0.0 <= p50 <= p99 < 1000.0, values
