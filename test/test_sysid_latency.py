"""Actuation latency from commanded vs measured positions: synthetic signals with known answers,
a real recorded bag, a bag written here (Float64MultiArray commands), the CLI, and excitation."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Writer
from rosbags.typesys import Stores, get_typestore
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from support import REPO_ROOT, SERVO_BAG, needs_servo_bag

from sim2real_ros.core.robot.urdf import JointLimits
from sim2real_ros.sysid.bag_io import load_streams
from sim2real_ros.sysid.excite import ExciteOptions, excitation, excitation_for_robot, write_sequence
from sim2real_ros.sysid.latency import LatencyOptions, SysidError, estimate_latency
from sim2real_ros.sysid.signals import JointStream, choose_time_source, stream_from_messages, wrap_period

REAL_BAG = SERVO_BAG
T0_NS = 1_700_000_000 * 10**9


def to_ns(t: np.ndarray) -> np.ndarray:
    return T0_NS + np.round(np.asarray(t) * 1e9).astype(np.int64)


def synthetic(
    latency_s: float, scale: np.ndarray, offset: np.ndarray, *, command_hz: float = 25.0, state_hz: float = 100.0,
    duration_s: float = 40.0, noise: float = 0.003, seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random held steps commanded at command_hz; measured at state_hz (other phase, jitter) as
    scale * command(t - latency) + offset + noise. Returns (tc, xc (K, n), tm, xm (M, n))."""
    rng = np.random.default_rng(seed)
    n = len(scale)
    tc = np.arange(0.0, duration_s, 1.0 / command_hz) + rng.uniform(0, 0.002, int(duration_s * command_hz))
    edges = np.cumsum(rng.uniform(0.4, 2.0, (200, n)), axis=0)
    levels = rng.uniform(-0.5, 0.5, (201, n))
    xc = np.stack([levels[np.searchsorted(edges[:, j], tc), j] for j in range(n)], axis=1)
    tm = np.arange(0.013, duration_s, 1.0 / state_hz) + rng.uniform(0, 0.001, len(np.arange(0.013, duration_s,
                                                                                             1.0 / state_hz)))
    held = np.clip(np.searchsorted(tc, tm - latency_s, side="right") - 1, 0, None)
    xm = scale * xc[held] + offset + rng.normal(0, noise, (len(tm), n))
    return tc, xc, tm, xm


def stream(topic: str, t: np.ndarray, x: np.ndarray, names: tuple[str, ...] = (), stamps: bool = True) -> JointStream:
    ns = to_ns(t)
    return JointStream(topic, "sensor_msgs/msg/JointState", ns, ns if stamps else None, x, names)


@pytest.mark.parametrize("latency_s", [0.004, 0.05, 0.3, 1.0])
def test_recovers_known_latency_scale_and_offset(latency_s: float) -> None:
    scale, offset = np.array([-2.5, 1.0]), np.array([0.7, -1.3])  # a gear ratio that counts backwards
    tc, xc, tm, xm = synthetic(latency_s, scale, offset, seed=int(latency_s * 1000))
    report = estimate_latency(stream("cmd", tc, xc, ("a", "b")), stream("state", tm, xm, stamps=False))
    slower_period = 1 / 25.0
    assert report.time_source == "log"  # the state has no stamps: never mix clocks
    assert report.matched_by_index
    assert report.latency_s == pytest.approx(latency_s, abs=slower_period)
    assert report.confidence > 0.5
    for joint, s, o in zip(report.joints, scale, offset, strict=True):
        assert joint.latency_s == pytest.approx(latency_s, abs=slower_period)
        assert joint.scale == pytest.approx(s, rel=0.03)
        assert joint.offset == pytest.approx(o, abs=0.03 * abs(o) + 0.02)
        assert joint.confidence > 0.5
        assert joint.uncertainty_s is not None and joint.uncertainty_s < 0.1


def test_command_faster_than_state_and_noisy() -> None:
    tc, xc, tm, xm = synthetic(0.12, np.array([3.0]), np.array([0.1]), command_hz=200.0, state_hz=30.0, noise=0.02)
    report = estimate_latency(stream("cmd", tc, xc), stream("state", tm, xm))
    assert report.time_source == "header"
    assert report.latency_s == pytest.approx(0.12, abs=1 / 30.0)
    assert report.joints[0].scale == pytest.approx(3.0, rel=0.03)


def test_no_excitation_gives_zero_confidence() -> None:
    t = np.arange(0, 20, 0.04)
    rng = np.random.default_rng(1)
    command = stream("cmd", t, np.full((len(t), 1), 0.4))
    state = stream("state", t, 1.0 + rng.normal(0, 0.01, (len(t), 1)))
    report = estimate_latency(command, state)
    assert report.latency_s is None and report.confidence == 0.0
    assert report.joints[0].response == "none" and report.joints[0].latency_s is None


def test_unrelated_signals_get_low_confidence() -> None:
    tc, xc, _, _ = synthetic(0.1, np.array([1.0]), np.array([0.0]), seed=3)
    _, _, tm, xm = synthetic(0.1, np.array([1.0]), np.array([0.0]), seed=4)
    report = estimate_latency(stream("cmd", tc, xc), stream("state", tm, xm))
    assert report.confidence < 0.3


def test_wrapped_measurement_is_unwrapped() -> None:
    # Measured = 1.2 - command, read modulo pi/2 (as the real servo arm's q1): the wraps happen
    # in the middle of slow moves.
    t = np.arange(0, 60, 0.04)

    def command_at(time_s: np.ndarray) -> np.ndarray:
        return 0.35 * np.sin(2 * math.pi * 0.3 * time_s) + 0.25 * np.sin(2 * math.pi * 0.11 * time_s)

    command = command_at(t)
    measured = np.mod(1.2 - command_at(t - 0.2), math.pi / 2)
    assert wrap_period(measured) == pytest.approx(math.pi / 2)
    report = estimate_latency(stream("cmd", t, command[:, None]), stream("state", t, measured[:, None]))
    joint = report.joints[0]
    assert joint.unwrap_period == pytest.approx(math.pi / 2)
    assert joint.latency_s == pytest.approx(0.2, abs=0.04)
    assert joint.scale == pytest.approx(-1.0, rel=0.03)


def test_fast_step_response_is_not_taken_for_a_wrap() -> None:
    tc, xc, tm, xm = synthetic(0.05, np.array([2.0]), np.array([0.3]), seed=2)
    assert wrap_period(xm[:, 0]) is None


def test_insane_header_stamps_fall_back_to_log_time() -> None:
    t = np.arange(0, 10, 0.04)
    good = stream("good", t, np.zeros((len(t), 1)))
    zero = JointStream("zero", "x", to_ns(t), np.zeros(len(t), np.int64), np.zeros((len(t), 1)), ())
    assert choose_time_source(good, good)[0] == "header"
    source, reason = choose_time_source(good, zero)
    assert source == "log" and "zero" in reason


def test_messages_joint_state_and_float64_multiarray_with_malformed_ones() -> None:
    tc, xc, tm, xm = synthetic(0.08, np.array([1.5, -1.0, 0.5]), np.array([0.0, 0.2, -0.4]), seed=5)
    commands = []
    for t, x in zip(tc, xc, strict=True):
        commands.append((int(to_ns(t)), Float64MultiArray(data=[float(v) for v in x])))
    commands.insert(10, (commands[10][0], Float64MultiArray(data=[1.0, 2.0])))  # wrong length
    commands.insert(20, (commands[20][0], Float64MultiArray(data=[float("nan"), 0.0, 0.0])))
    states = []
    for t, x in zip(tm, xm, strict=True):
        msg = JointState(position=[float(v) for v in x])  # no names, as the real servo arm
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(to_ns(t)), 10**9)
        states.append((int(to_ns(t)), msg))
    command = stream_from_messages("forward_position_controller/commands", "std_msgs/msg/Float64MultiArray", commands)
    state = stream_from_messages("joint_states", "sensor_msgs/msg/JointState", states)
    assert command.dropped == 2 and command.stamp_ns is None
    report = estimate_latency(command, state)
    assert report.time_source == "log" and report.matched_by_index
    assert report.dropped_messages == {"forward_position_controller/commands": 2}
    assert report.latency_s == pytest.approx(0.08, abs=0.04)


def test_joints_matched_by_name_in_any_order() -> None:
    tc, xc, tm, xm = synthetic(0.1, np.array([1.0, 2.0]), np.array([0.0, 0.0]), seed=6)
    report = estimate_latency(stream("cmd", tc, xc, ("a", "b")), stream("state", tm, xm[:, ::-1], ("b", "a")))
    assert not report.matched_by_index
    assert [j.scale for j in report.joints] == [pytest.approx(1.0, rel=0.03), pytest.approx(2.0, rel=0.03)]
    with pytest.raises(SysidError, match="no joint names in common"):
        estimate_latency(stream("cmd", tc, xc, ("a", "b")), stream("state", tm, xm, ("x", "y")))


def test_bad_options_and_short_overlap_are_named() -> None:
    with pytest.raises(SysidError, match="min_lag_s < max_lag_s"):
        LatencyOptions(min_lag_s=1.0, max_lag_s=0.5)
    with pytest.raises(SysidError, match="unwrap"):
        LatencyOptions(unwrap="sometimes")
    t = np.arange(0, 20, 0.04)
    x = np.sin(t)[:, None]
    with pytest.raises(SysidError, match="overlap"):
        estimate_latency(stream("cmd", t, x), stream("state", t + 19.5, x))


def write_bag(path, tc, xc, tm, xm) -> None:
    """A rosbag2 sqlite3 bag: Float64MultiArray commands (no header) and JointState states."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    types = store.types
    with Writer(path, version=8) as writer:
        command = writer.add_connection("forward_position_controller/commands", "std_msgs/msg/Float64MultiArray",
                                        typestore=store)
        state = writer.add_connection("joint_states", "sensor_msgs/msg/JointState", typestore=store)
        for t, x in zip(tc, xc, strict=True):
            msg = types["std_msgs/msg/Float64MultiArray"](types["std_msgs/msg/MultiArrayLayout"]([], 0), x.copy())
            writer.write(command, int(to_ns(t)), store.serialize_cdr(msg, msg.__msgtype__))
        for t, x in zip(tm, xm, strict=True):
            sec, nanosec = divmod(int(to_ns(t)), 10**9)
            header = types["std_msgs/msg/Header"](types["builtin_interfaces/msg/Time"](sec, nanosec), "")
            msg = types["sensor_msgs/msg/JointState"](header, ["j1", "j2"], x.copy(), np.zeros(0), np.zeros(0))
            writer.write(state, int(to_ns(t)), store.serialize_cdr(msg, msg.__msgtype__))


def test_bag_with_float64_multiarray_commands(tmp_path) -> None:
    tc, xc, tm, xm = synthetic(0.25, np.array([1.0, -0.5]), np.array([0.5, 0.0]), duration_s=30.0, seed=7)
    bag = tmp_path / "bag"
    write_bag(bag, tc, xc, tm, xm)
    streams = load_streams(bag, ["forward_position_controller/commands", "joint_states"])
    report = estimate_latency(streams["forward_position_controller/commands"], streams["joint_states"])
    assert [j.name for j in report.joints] == ["j1", "j2"]
    assert report.latency_s == pytest.approx(0.25, abs=0.04)


@pytest.fixture(scope="module")
def real_streams() -> dict[str, JointStream]:
    return load_streams(REAL_BAG, ["/servo/in/state", "/servo/out/state"])


@needs_servo_bag
def test_real_servo_bag_whole_and_halves_agree(real_streams) -> None:
    command, state = real_streams["/servo/in/state"], real_streams["/servo/out/state"]
    whole = estimate_latency(command, state)
    assert whole.time_source == "header" and whole.matched_by_index
    assert whole.latency_s is not None and math.isfinite(whole.latency_s)
    assert 0.0 < whole.latency_s < 1.0 and whole.confidence > 0.3
    q1, q2, q3 = whole.joints
    assert q2.latency_s is None and q2.confidence == 0.0  # q2 is never commanded to move
    assert q1.unwrap_period == pytest.approx(math.pi / 2) and q3.unwrap_period == pytest.approx(math.pi)
    assert q1.scale is not None and q1.scale < 0 and math.isfinite(q1.offset)
    start, end = whole.window_s
    middle = 0.5 * (start + end)
    bulk = estimate_latency(command, state, LatencyOptions(method="correlation"))
    for window in ((start, middle), (middle, end)):
        # The bulk lag (cross-correlation) agrees within its uncertainty.
        half = estimate_latency(command, state, LatencyOptions(window_s=window, method="correlation"))
        assert half.latency_s is not None
        assert abs(half.latency_s - bulk.latency_s) <= max(half.uncertainty_s, bulk.uncertainty_s)
        assert abs(half.joints[0].latency_s - bulk.joints[0].latency_s) <= max(
            half.joints[0].uncertainty_s, bulk.joints[0].uncertainty_s)
        # The dead time (response onset) agrees within one refresh interval of the reading, the
        # resolution the measurement allows (q1: 0.25 s first half, 0.07 s second half, 0.23 s whole).
        model_half = estimate_latency(command, state, LatencyOptions(window_s=window))
        assert abs(model_half.joints[0].dead_time_s - q1.dead_time_s) <= q1.update_period_s


@needs_servo_bag
def test_cli_json() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "sysid", "latency", "--bag", str(REAL_BAG),
         "--command-topic", "/servo/in/state", "--state-topic", "/servo/out/state", "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=os.environ.copy(),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"latency_s", "confidence", "joints", "time_source", "matched_by_index"} <= set(data)
    assert isinstance(data["latency_s"], float)
    for joint in data["joints"]:
        assert {"name", "latency_s", "confidence", "offset", "scale"} <= set(joint)
    assert [j["name"] for j in data["joints"]] == ["q1", "q2", "q3"]


@needs_servo_bag
def test_cli_names_a_missing_topic() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "sysid", "latency", "--bag", str(REAL_BAG),
         "--command-topic", "/nope", "--state-topic", "/servo/out/state"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )
    assert result.returncode == 2 and "/nope" in result.stderr


def test_excitation_stays_within_limits_and_speed(tmp_path) -> None:
    limits = [JointLimits(-2.9, 2.9, 3.0, 10.0), JointLimits(-1.0, 2.0, 1.0, 10.0)]
    options = ExciteOptions(rate_hz=50.0, speed_fraction=0.2)
    sequence = excitation(["a", "b"], limits, options)
    lower, upper = np.array([-2.9, -1.0]), np.array([2.9, 2.0])
    assert np.all(sequence.positions >= lower) and np.all(sequence.positions <= upper)
    speed = np.abs(np.diff(sequence.positions, axis=0)) * options.rate_hz
    assert np.all(speed <= 0.2 * np.array([3.0, 1.0]) + 1e-9)
    # Both joints are excited, one at a time.
    moving = np.abs(np.diff(sequence.positions, axis=0)) > 0
    assert moving[:, 0].any() and moving[:, 1].any() and not np.any(moving[:, 0] & moving[:, 1])
    write_sequence(sequence, tmp_path / "cmds.csv")
    rows = list(csv.reader((tmp_path / "cmds.csv").open()))
    assert rows[0] == ["time_s", "a", "b"] and len(rows) == len(sequence.times_s) + 1
    write_sequence(sequence, tmp_path / "cmds.yaml")
    data = yaml.safe_load((tmp_path / "cmds.yaml").read_text())
    assert data["joint_names"] == ["a", "b"] and len(data["positions"]) == len(sequence.times_s)
    with pytest.raises(SysidError, match="speed_fraction"):
        ExciteOptions(speed_fraction=2.0)


def test_excitation_for_the_package_arm() -> None:
    sequence = excitation_for_robot(None, ExciteOptions(chirp_s=2.0, hold_s=0.2))
    assert len(sequence.joint_names) >= 1 and np.all(np.isfinite(sequence.positions))
