"""Replay metrics on hand-built predictions and recordings (pure: no ROS graph, no bag)."""
from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from sim2real_ros.conversions import make_joint_state, make_position_command
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.episodes.actions import sample_actions
from sim2real_ros.episodes.options import ReplayOptions
from sim2real_ros.episodes.recording import FLOAT_ARRAY, RecordingCollector
from sim2real_ros.episodes.topics import MissingTopicsError, resolve_topic, resolve_topics
from sim2real_ros.evaluation.metrics import Predictions, chunk_boundary_jumps, compare

NS = 1_000_000_000
JOINTS = ("a", "b", "c")
K, DT = 8, 0.05
LAGS = np.round(np.arange(-0.3, 0.301, 0.01), 6)


def trajectory(t_ns: np.ndarray) -> np.ndarray:
    """A smooth motion (..., 3) [rad] at times t_ns [ns]."""
    t = np.asarray(t_ns, dtype=float)[..., None] / NS
    return np.array([0.3, 0.2, 0.4]) * np.sin(2 * np.pi * np.array([0.5, 0.8, 0.3]) * t + np.array([0.0, 1.0, 2.0]))


def predictions_of(function, stamps_ns: np.ndarray, observed=None) -> Predictions:
    times = np.arange(K) * DT
    points = stamps_ns[:, None] + np.round(times * NS).astype(np.int64)[None, :]
    q = trajectory(stamps_ns) if observed is None else observed
    return Predictions(JOINTS, stamps_ns, times, function(points), q)


def recorded(shift_s: float = 0.0, period_s: float = 0.01, start_s: float = 0.0, end_s: float = 12.0):
    """Commands every period_s whose target (meant for their time) follows trajectory(t - shift)."""
    meant = np.arange(int(start_s * NS), int(end_s * NS), int(period_s * NS), dtype=np.int64)
    return meant, trajectory(meant - int(shift_s * NS))


STAMPS = np.arange(1 * NS, 10 * NS, NS // 10, dtype=np.int64)


def test_sample_actions_interpolates_takes_nearest_and_refuses_gaps():
    times = np.array([0, 10, 20, 100], dtype=np.int64)
    values = np.array([[0.0], [1.0], [2.0], [5.0]])
    out = sample_actions(times, values, np.array([5, 10, 15, 22, 60, 105, 200, -3]), max_gap_ns=10)
    assert out[:3, 0] == pytest.approx([0.5, 1.0, 1.5])
    assert out[3, 0] == 2.0  # past a run's end, within the gap: nearest
    assert np.isnan(out[4, 0])  # inside a 80 ns hole: nothing was commanded there
    assert out[5, 0] == 5.0 and np.isnan(out[6, 0])
    assert out[7, 0] == 0.0  # before the first, within the gap
    same_time = sample_actions(np.array([0, 10, 10, 20]), np.array([[0.0], [1.0], [3.0], [3.0]]), np.array([10]), 10)
    assert same_time[0, 0] == 3.0  # of two commands logged at once the newest counts


def _sample_one(times_ns, values, query_ns: int, max_gap_ns: int) -> np.ndarray:
    """sample_actions' rule for one query, written out point by point (the reference)."""
    n = values.shape[1]
    after = [i for i, t in enumerate(times_ns) if t > query_ns]
    right = after[0] if after else None
    left = (right - 1 if right is not None else len(times_ns) - 1) if len(times_ns) else None
    left = left if left is not None and left >= 0 else None
    if left is not None and right is not None and times_ns[right] - times_ns[left] <= max_gap_ns:
        gap = times_ns[right] - times_ns[left]
        weight = (query_ns - times_ns[left]) / gap if gap > 0 else 1.0
        return (1 - weight) * values[left] + weight * values[right]
    d_left = query_ns - times_ns[left] if left is not None else None
    d_right = times_ns[right] - query_ns if right is not None else None
    if d_left is not None and d_left <= max_gap_ns and (d_right is None or d_left <= d_right):
        return values[left]
    if d_right is not None and d_right <= max_gap_ns:
        return values[right]
    return np.full(n, np.nan)


def test_sample_actions_follows_its_rule_at_every_query():
    rng = np.random.default_rng(7)
    for _ in range(60):
        times = np.sort(rng.integers(0, 1000, int(rng.integers(0, 25)))).astype(np.int64)
        values = rng.normal(size=(len(times), 3))
        queries = rng.integers(-100, 1100, (5, 4))
        max_gap = int(rng.integers(0, 150))
        out = sample_actions(times, values, queries, max_gap)
        assert out.shape == (5, 4, 3)
        expected = np.array([_sample_one(times, values, int(q), max_gap) for q in queries.ravel()]).reshape(5, 4, 3)
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)  # NaN where NaN


def _jumps_pair_by_pair(pred: Predictions) -> np.ndarray:
    """chunk_boundary_jumps' definition, one pair of chunks at a time with np.interp (the reference)."""
    times, jumps = pred.point_times_ns, []
    for i in range(1, len(pred.stamps_ns)):
        previous, current = times[i - 1], times[i]
        inside = (current >= previous[0]) & (current <= previous[-1])
        # Times relative to the previous chunk's stamp: float64 holds them exactly.
        query, grid = (current[inside] - previous[0]).astype(float), (previous - previous[0]).astype(float)
        interpolated = np.stack([np.interp(query, grid, pred.targets[i - 1, :, j]) for j in range(3)], axis=1)
        jumps.append(np.abs(pred.targets[i, inside] - interpolated))
    return np.concatenate(jumps) if jumps else np.zeros((0, 3))


def test_chunk_boundary_jumps_match_pair_by_pair_interpolation():
    rng = np.random.default_rng(3)
    for _ in range(40):
        stamps = np.sort(rng.integers(0, 2 * NS, int(rng.integers(2, 30)))).astype(np.int64)
        stamps[1] = stamps[0]  # two chunks of one stamp
        k = int(rng.integers(1, 12))
        pred = Predictions(JOINTS, stamps, np.arange(k) * DT, rng.normal(size=(len(stamps), k, 3)),
                           rng.normal(size=(len(stamps), 3)))
        np.testing.assert_allclose(chunk_boundary_jumps(pred), _jumps_pair_by_pair(pred), rtol=0, atol=1e-12)


def test_chunk_boundary_jumps_keep_nanoseconds_at_wall_clock_stamps():
    # Stamps of a real bag are ~1.7e18 ns: as float64 they lose 256 ns, which a 1 rad/s motion
    # turns into 2.6e-7 rad of made-up jumps. Every chunk here follows one linear motion.
    stamps = 1_733_000_000 * NS + np.arange(0, 3 * NS, 33_333_333, dtype=np.int64) + 17
    times = np.arange(K) * DT

    def linear(points):
        seconds = (points - stamps[0]).astype(float) / NS
        return np.stack([seconds, -seconds, 2 * seconds], axis=-1)

    points = stamps[:, None] + np.round(times * NS).astype(np.int64)[None, :]
    pred = Predictions(JOINTS, stamps, times, linear(points), np.zeros((len(stamps), 3)))
    jumps = chunk_boundary_jumps(pred)
    assert len(jumps) > 0 and jumps.max() < 1e-12


def test_same_trajectory_gives_near_zero_error_at_every_chunk_index():
    meant, values = recorded()
    metrics = compare(predictions_of(trajectory, STAMPS), meant, values, np.ones(len(meant), bool), NS // 20,
                      LAGS).metrics
    assert metrics["frames"]["evaluated"] == len(STAMPS)
    assert metrics["overall"]["mae"] < 1e-4
    assert len(metrics["by_chunk_index"]) == K and all(row["mae"] < 1e-4 for row in metrics["by_chunk_index"])
    assert metrics["lag"]["best_lag_s"] == pytest.approx(0.0, abs=0.011)
    assert metrics["lag"]["identifiable"]
    assert metrics["chunk_boundary_jumps"]["max"] < 1e-9  # every chunk is the same trajectory


def test_lag_search_finds_a_recording_that_acts_later():
    meant, values = recorded(shift_s=0.12)
    metrics = compare(predictions_of(trajectory, STAMPS), meant, values, np.ones(len(meant), bool), NS // 20,
                      LAGS).metrics
    assert metrics["lag"]["best_lag_s"] == pytest.approx(0.12, abs=0.011)
    assert metrics["lag"]["rmse_at_best"] < 0.05 * metrics["lag"]["rmse_at_zero"]
    assert metrics["overall"]["mae"] > 0.01


def test_error_is_attributed_to_the_joint_and_the_chunk_index():
    meant, values = recorded()

    def biased(points):
        out = trajectory(points)
        out[..., 1] += 0.05  # joint b off by 50 mrad
        out[..., 2] += 0.01 * np.arange(K)[None, :]  # joint c drifts along the chunk
        return out

    metrics = compare(predictions_of(biased, STAMPS), meant, values, np.ones(len(meant), bool), NS // 20,
                      LAGS).metrics
    per_joint = metrics["per_joint"]
    assert per_joint["a"]["mae"] < 1e-4
    assert per_joint["b"]["mae"] == pytest.approx(0.05, abs=1e-4) and per_joint["b"]["bias"] == pytest.approx(0.05,
                                                                                                               abs=1e-4)
    assert per_joint["c"]["rmse"] > per_joint["c"]["mae"]
    by_k = [row["mae"] for row in metrics["by_chunk_index"]]
    assert by_k[0] == pytest.approx(0.05 / 3, abs=1e-4) and all(np.diff(by_k) > 0)


def test_frames_outside_human_modes_and_without_actions_are_counted_apart():
    meant, values = recorded(end_s=6.0)  # no command after 6 s
    human = meant >= 3 * NS  # a person took over at 3 s
    comparison = compare(predictions_of(trajectory, STAMPS), meant, values, human, NS // 20, LAGS)
    frames = comparison.metrics["frames"]
    end_of_chunk_s = (STAMPS + int((K - 1) * DT * NS)) / NS
    assert frames["evaluated"] == int(np.sum((end_of_chunk_s >= 3.0 - 0.05) & (STAMPS / NS <= 6.0 + 0.05)))
    assert frames["skipped"]["not_in_human_mode"] == int(np.sum(end_of_chunk_s < 3.0 - 0.05))
    assert frames["skipped"]["no_human_action"] == int(np.sum(STAMPS / NS > 6.0 + 0.05))
    # Points up to action_tolerance past either end of the human run take the nearest command.
    assert comparison.metrics["overall"]["mae"] < 2e-3


def test_magnitudes_and_chunk_boundary_jumps():
    stamps = STAMPS[:20]
    q = np.tile(trajectory(stamps[:1]), (len(stamps), 1))  # the robot holds still
    offsets = 0.01 * (np.arange(len(stamps)) % 2)  # every other chunk 10 mrad higher

    def jumpy(points):
        return np.broadcast_to(q[:, None, :] + 0.05 + offsets[:, None, None], points.shape + (3,)).copy()

    pred = predictions_of(jumpy, stamps, observed=q)
    jumps = chunk_boundary_jumps(pred)
    overlap = int(np.sum(np.arange(K) * DT <= (K - 1) * DT - 0.1))  # points of chunk i inside chunk i-1
    assert jumps.shape == ((len(stamps) - 1) * overlap, 3)
    assert jumps == pytest.approx(0.01, abs=1e-9)
    meant, _ = recorded()
    holding = np.tile(q[0], (len(meant), 1))  # the person held the arm where it was
    metrics = compare(pred, meant, holding, np.ones(len(meant), bool), NS // 20, LAGS).metrics
    magnitude = metrics["action_magnitude"]
    assert magnitude["predicted"]["mean"] == pytest.approx(0.055, abs=1e-6)
    assert magnitude["human"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["overall"]["mae"] == pytest.approx(0.055, abs=1e-6)
    assert sum(magnitude["histogram"]["predicted"]) == magnitude["predicted"]["count"]


def test_topics_resolve_exactly_or_by_unambiguous_suffix_and_missing_ones_are_listed():
    available = {"/arm1/camera/image_raw": "sensor_msgs/msg/Image", "/joint_states": "sensor_msgs/msg/JointState",
                 "/arm1/joint_states": "sensor_msgs/msg/JointState", "/a/x": "std_msgs/msg/String",
                 "/b/x": "std_msgs/msg/String"}
    assert resolve_topic("camera/image_raw", available)[0] == "/arm1/camera/image_raw"
    assert resolve_topic("joint_states", available)[0] == "/joint_states"  # exact wins
    assert resolve_topic("x", available)[0] is None and "ambiguous" in resolve_topic("x", available)[1]
    with pytest.raises(MissingTopicsError) as err:
        resolve_topics("bagX", {"image": "camera/image_raw", "info": "camera/camera_info", "cmd": "x"}, available)
    text = str(err.value)
    assert "camera/camera_info" in text and "ambiguous" in text and "/arm1/joint_states" in text
    assert err.value.missing[0] == "camera/camera_info"
    with pytest.raises(MissingTopicsError, match="as std_msgs/msg/Float64MultiArray"):
        resolve_topics("bagX", {"js": "joint_states"}, available, {"js": ("std_msgs/msg/Float64MultiArray",)})


def test_options_name_the_bad_field_and_value():
    with pytest.raises(ConfigError, match="actuation_latency_s.*-0.1"):
        ReplayOptions(actuation_latency_s=-0.1)
    with pytest.raises(ConfigError, match="human_modes.*PILOT"):
        ReplayOptions(human_modes=("PILOT",))
    with pytest.raises(ConfigError, match="lag_min_s/lag_max_s"):
        ReplayOptions(lag_min_s=0.5, lag_max_s=0.1)
    assert ReplayOptions(human_modes=()).filters_modes is False


def test_collector_aligns_unstamped_commands_when_the_recorder_clock_differs():
    """A recorder on wall time (log time ~1.7e18 ns) with sim-time stamps: the log-time offset
    measured on joint states is taken off the commands' log times; modes pick human commands."""
    wall_offset = 1_700_000_000 * NS
    collector = RecordingCollector(JOINTS, FLOAT_ARRAY, ("c", "a", "b"), ("TELEOP",))
    for i in range(50):
        stamp = (i + 1) * 10_000_000
        measured = make_joint_state(JOINTS, np.full(3, i * 0.01), stamp)
        collector.add_joint_state(measured, stamp + wall_offset + 3_000_000)
        collector.add_action(make_position_command(np.array([3.0, 1.0, 2.0]) * i), stamp + wall_offset + 2_000_000)
    state = _state("TELEOP", 250_000_000)
    collector.add_supervisor_state(state, 250_000_000 + wall_offset)
    bad = Float64MultiArray(data=[1.0, float("nan"), 0.0])
    collector.add_action(bad, wall_offset)
    collector.add_joint_state(JointState(name=["a"], position=[0.0, 1.0]), wall_offset)
    recording = collector.finish()
    assert recording.clock.applied and recording.clock.offset_ns == wall_offset + 3_000_000
    assert recording.action_send_ns[9] == 10 * 10_000_000 - 1_000_000  # in the stamps' clock
    assert recording.action_values[9] == pytest.approx([9.0, 18.0, 27.0])  # reordered to a, b, c
    assert recording.action_human.sum() == 25  # sent at or after 250 ms: (i + 1) * 10 ms - 1 ms >= 250 ms
    assert recording.problems == {"bad_action": 1, "bad_joint_state": 1}


def test_joint_states_with_nan_velocities_are_recorded_as_the_policy_node_reads_them():
    # ros2_control's joint_state_broadcaster publishes NaN for an interface a joint lacks: the policy
    # node pairs such states (positions only), so the replay of its bag must too.
    collector = RecordingCollector(JOINTS, FLOAT_ARRAY, JOINTS, ("TELEOP",))
    for i in range(3):
        state = make_joint_state(JOINTS, np.full(3, 0.1 * i), (i + 1) * 10_000_000)
        state.velocity = [float("nan")] * 3
        assert collector.add_joint_state(state, (i + 1) * 10_000_000) == pytest.approx(np.full(3, 0.1 * i))
    collector.add_joint_state(make_joint_state(JOINTS, np.array([0.0, float("nan"), 0.0]), 50_000_000), 50_000_000)
    recording = collector.finish()
    assert len(recording.joint_stamps_ns) == 3
    assert recording.problems == {"bad_joint_state": 1}  # a NaN position is still refused


def _state(mode: str, stamp_ns: int):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    from sim2real_ros.conversions import ns_to_stamp

    msg = DiagnosticArray()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.status = [DiagnosticStatus(name="supervisor", values=[KeyValue(key="mode", value=mode)])]
    return msg


def test_no_comparable_point_gives_empty_statistics_not_an_error():
    meant, values = recorded(start_s=20.0, end_s=21.0)  # the commands come after every prediction
    metrics = compare(predictions_of(trajectory, STAMPS), meant, values, np.ones(len(meant), bool), NS // 20,
                      LAGS).metrics
    assert metrics["frames"]["evaluated"] == 0 and metrics["frames"]["skipped"]["no_human_action"] == len(STAMPS)
    assert metrics["overall"]["points"] == 0 and np.isnan(metrics["overall"]["mae"])
    assert metrics["lag"]["best_lag_s"] is None
