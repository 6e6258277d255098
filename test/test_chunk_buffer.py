"""Chunk sampling at fixed times against hand-built chunks (no ROS, no clocks, no sleeps).

In the spirit of ros2_controllers' joint_trajectory_controller test_trajectory.cpp: before, at,
between and after the points, across chunk switches, for both interpolations and both blendings.
"""
from __future__ import annotations

import numpy as np
import pytest
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros import conversions as cv
from sim2real_ros.core.control.chunk_buffer import (
    REJECT_EMPTY,
    REJECT_JOINTS,
    REJECT_NON_FINITE,
    REJECT_RAGGED,
    REJECT_STALE,
    REJECT_TIME_ORDER,
    ChunkBuffer,
    ChunkBufferConfig,
    ChunkRejectedError,
    classify_message_error,
    interpolate,
)
from sim2real_ros.core.errors import ConfigError

S = 10_000_000_000  # a chunk stamp [ns]
MS = 1_000_000  # [ns]
JOINTS = ("a", "b")


def chunk(stamp_ns: int, positions, dt: float = 0.1, names=JOINTS) -> cv.ActionChunk:
    positions = np.asarray(positions, dtype=float)
    return cv.ActionChunk(tuple(names), stamp_ns, np.arange(len(positions)) * dt, positions)


def buffer(**kwargs) -> ChunkBuffer:
    return ChunkBuffer(JOINTS, ChunkBufferConfig(**kwargs))


RAMP = [[0.0, 0.0], [1.0, -1.0], [4.0, -2.0]]  # points at S, S+0.1 s, S+0.2 s


# ----------------------------------------------------------------------------------------------
# One chunk, linear
def test_linear_before_at_between_after_points():
    buf = buffer(interpolation="linear", crossfade_s=0.0)
    buf.add(chunk(S, RAMP), received_ns=S)
    assert buf.sample_at(S, S - 1) is None  # before point 0: not covered, never extrapolated
    at0 = buf.sample_at(S, S)
    assert np.allclose(at0.positions, [0, 0]) and np.allclose(at0.velocities, [10, -10])
    mid = buf.sample_at(S, S + 50 * MS)
    assert np.allclose(mid.positions, [0.5, -0.5]) and np.allclose(mid.velocities, [10, -10])
    at1 = buf.sample_at(S, S + 100 * MS)  # a knot belongs to the segment on its right
    assert np.allclose(at1.positions, [1, -1]) and np.allclose(at1.velocities, [30, -10])
    late = buf.sample_at(S, S + 175 * MS)
    assert np.allclose(late.positions, [3.25, -1.75])
    end = buf.sample_at(S, S + 200 * MS)  # the last knot belongs to the last segment
    assert np.allclose(end.positions, [4, -2]) and np.allclose(end.velocities, [30, -10])
    assert buf.sample_at(S, S + 200 * MS + 1) is None  # past the end: stale, no extrapolation
    assert end.newest_stamp_ns == S and end.n_chunks == 1


def test_sample_adds_the_actuation_latency_to_the_tick():
    buf = buffer(interpolation="linear", crossfade_s=0.0)
    buf.add(chunk(S, RAMP), received_ns=S)
    tick = S + 20 * MS
    compensated = buf.sample(tick, actuation_latency_s=0.05)
    assert np.allclose(compensated.positions, [0.7, -0.7])  # the target for S + 70 ms
    assert np.allclose(buf.sample(tick, 0.0).positions, [0.2, -0.2])
    # 160 ms of latency looks past the end once the tick passes S + 40 ms.
    assert buf.sample(S + 41 * MS, 0.16) is None
    assert len(buf) == 0  # and the stale chunk was dropped


def test_single_point_chunk_covers_only_its_instant():
    buf = buffer(interpolation="cubic", crossfade_s=0.0)
    buf.add(chunk(S, [[1.0, 2.0]]), received_ns=S)
    got = buf.sample_at(S, S)
    assert np.allclose(got.positions, [1, 2]) and np.allclose(got.velocities, 0)
    assert buf.sample_at(S, S + 1) is None


# ----------------------------------------------------------------------------------------------
# Cubic
def test_cubic_passes_through_points_with_finite_difference_tangents():
    buf = buffer(interpolation="cubic", crossfade_s=0.0)
    buf.add(chunk(S, RAMP), received_ns=S)
    for k, point in enumerate(RAMP):
        got = buf.sample_at(S, S + k * 100 * MS)
        assert np.allclose(got.positions, point)
    # Tangents: one-sided at the ends, central (Catmull-Rom) inside.
    assert np.allclose(buf.sample_at(S, S).velocities, [10, -10])
    assert np.allclose(buf.sample_at(S, S + 100 * MS).velocities, [20, -10])
    assert np.allclose(buf.sample_at(S, S + 200 * MS).velocities, [30, -10])


def test_cubic_reproduces_a_parabola_between_interior_points():
    times = np.arange(6) * 0.1
    positions = np.stack([times**2, 3 - 2 * times**2], axis=1)
    buf = buffer(interpolation="cubic", crossfade_s=0.0)
    buf.add(cv.ActionChunk(JOINTS, S, times, positions), received_ns=S)
    for tau in np.linspace(0.1, 0.4, 31):  # interior segments: exact tangents, exact parabola
        got = buf.sample_at(S, S + int(round(tau * 1e9)))
        assert np.allclose(got.positions, [tau**2, 3 - 2 * tau**2], atol=1e-9)
        assert np.allclose(got.velocities, [2 * tau, -4 * tau], atol=1e-6)


def _dense(buf: ChunkBuffer, start_ns: int, stop_ns: int, step_ns: int, latency_from_tick: bool = False):
    ticks = np.arange(start_ns, stop_ns, step_ns)
    samples = [buf.sample_at(int(t), int(t)) for t in ticks]
    assert all(s is not None for s in samples)
    return np.stack([s.positions for s in samples]), np.stack([s.velocities for s in samples])


def test_cubic_is_c1_and_linear_is_not():
    rng = np.random.default_rng(3)
    points = np.cumsum(rng.normal(size=(8, 2)), axis=0)
    step_ns = 100_000  # 0.1 ms
    for interpolation, velocity_continuous in (("cubic", True), ("linear", False)):
        buf = buffer(interpolation=interpolation, crossfade_s=0.0)
        buf.add(chunk(S, points), received_ns=S)
        positions, velocities = _dense(buf, S, S + 700 * MS, step_ns)
        # Position continuity (both): steps bounded by the largest speed times the step.
        assert np.max(np.abs(np.diff(positions, axis=0))) <= np.max(np.abs(velocities)) * 1e-4 * 1.01
        # Velocity continuity: the derivative of the sampled positions matches the returned velocity.
        assert np.allclose(np.diff(positions, axis=0) / 1e-4, velocities[:-1], atol=0.5 if interpolation == "cubic"
                           else 1e9)
        # Left and right limits of the velocity at every interior knot (1 us either side).
        jumps = []
        for k in range(1, 7):
            knot = S + k * 100 * MS
            left, right = buf.sample_at(S, knot - 1_000), buf.sample_at(S, knot + 1_000)
            jumps.append(np.max(np.abs(right.velocities - left.velocities)))
        if velocity_continuous:
            assert max(jumps) < 0.01 * np.max(np.abs(velocities))  # no jumps at the knots
        else:
            assert min(jumps) > 0.1  # linear: the slope jumps at every knot


def test_interpolate_refuses_outside_the_chunk():
    times = np.array([0.0, 0.1])
    pos = np.zeros((2, 1))
    assert interpolate(times, pos, pos, -1e-9, cubic=True) is None
    assert interpolate(times, pos, pos, 0.1 + 1e-9, cubic=False) is None


# ----------------------------------------------------------------------------------------------
# Chunk switches
def test_crossfade_newest_wins_with_a_ramp_in_tick_time():
    buf = buffer(interpolation="linear", crossfade_s=0.1)
    buf.add(chunk(S, np.zeros((11, 2))), received_ns=S)  # holds 0 for 1 s
    switch = S + 300 * MS
    buf.add(chunk(S + 200 * MS, np.ones((11, 2))), received_ns=switch)  # holds 1, stamped 100 ms earlier
    assert np.allclose(buf.sample(switch, 0.0).positions, 0)
    halfway = buf.sample(switch + 50 * MS, 0.0)
    assert np.allclose(halfway.positions, 0.5) and halfway.n_chunks == 2
    assert np.allclose(halfway.velocities, 10.0)  # d/dt of the ramp: (1 - 0) / 0.1 s
    done = buf.sample(switch + 100 * MS, 0.0)
    assert np.allclose(done.positions, 1) and np.allclose(done.velocities, 0)
    assert len(buf) == 1  # the old chunk is dropped once the new one has faded in
    assert done.newest_stamp_ns == S + 200 * MS


def test_crossfade_zero_switches_at_once_and_newest_is_by_stamp():
    buf = buffer(interpolation="linear", crossfade_s=0.0)
    buf.add(chunk(S + 100 * MS, np.ones((11, 2))), received_ns=S)
    buf.add(chunk(S, np.full((11, 2), 5.0)), received_ns=S + 1)  # older observation, arrives later
    assert np.allclose(buf.sample_at(S + 200 * MS, S + 200 * MS).positions, 1)


def test_newer_chunk_before_its_first_point_leaves_the_older_in_charge():
    buf = buffer(interpolation="linear", crossfade_s=0.02)
    buf.add(chunk(S, np.zeros((11, 2))), received_ns=S)
    buf.add(chunk(S + 500 * MS, np.ones((11, 2))), received_ns=S)
    # Faded in long ago, but its first point lies ahead: the older chunk still commands (and is kept).
    assert np.allclose(buf.sample(S + 400 * MS, 0.0).positions, 0)
    assert len(buf) == 2
    assert np.allclose(buf.sample(S + 500 * MS, 0.0).positions, 1)
    assert len(buf) == 1


@pytest.mark.parametrize("blending", ["crossfade", "temporal_ensemble"])
@pytest.mark.parametrize("interpolation", ["linear", "cubic"])
def test_no_jump_when_consecutive_chunks_agree(blending, interpolation):
    """Chunks that are samples of one trajectory at different stamps blend to that trajectory."""
    def trajectory(t_s):
        return np.stack([0.3 * np.sin(2 * np.pi * 0.5 * t_s), 0.2 * np.cos(2 * np.pi * 0.3 * t_s)], axis=-1)

    dt = 0.02
    buf = buffer(interpolation=interpolation, blending=blending, crossfade_s=0.05, ensemble_decay=0.2)
    tick_step = 2 * MS
    errors, steps = [], []
    previous = None
    for tick in range(S, S + 1_000 * MS, tick_step):
        if (tick - S) % (66 * MS) == 0:  # a chunk every 66 ms, observation 30 ms before reception
            stamp = tick - 30 * MS
            times = np.arange(20) * dt
            buf.add(cv.ActionChunk(JOINTS, stamp, times, trajectory(stamp / 1e9 + times)), received_ns=tick)
        got = buf.sample(tick, 0.05)
        assert got is not None
        errors.append(np.max(np.abs(got.positions - trajectory(tick / 1e9 + 0.05))))
        if previous is not None:
            steps.append(np.max(np.abs(got.positions - previous)))
        previous = got.positions
    tolerance = 2e-3 if interpolation == "linear" else 2e-4  # interpolation error only
    assert max(errors) < tolerance
    assert max(steps) < 0.3 * 2 * np.pi * 0.5 * 2e-3 * 1.5  # never faster than the trajectory itself


def test_crossfade_switch_steps_are_bounded_by_the_disagreement():
    buf = buffer(interpolation="linear", crossfade_s=0.04)
    buf.add(chunk(S, np.zeros((11, 2))), received_ns=S)
    buf.add(chunk(S + 100 * MS, np.full((11, 2), 0.8)), received_ns=S + 100 * MS)
    previous = buf.sample(S + 98 * MS, 0.0).positions
    largest = 0.0
    for tick in range(S + 100 * MS, S + 160 * MS, MS):
        now = buf.sample(tick, 0.0).positions
        largest = max(largest, float(np.max(np.abs(now - previous))))
        previous = now
    # 0.8 rad of disagreement spread over 40 ticks of 1 ms.
    assert largest == pytest.approx(0.8 / 40, rel=1e-6)


def test_temporal_ensemble_weights_follow_act():
    m = 0.5
    buf = buffer(interpolation="linear", blending="temporal_ensemble", crossfade_s=0.0, ensemble_decay=m)
    for i, value in enumerate((0.0, 1.0, 2.0)):  # oldest first
        buf.add(chunk(S + i * 10 * MS, np.full((11, 2), value)), received_ns=S + i * 10 * MS)
    got = buf.sample_at(S + 50 * MS, S + 50 * MS)
    weights = np.exp(-m * np.arange(3))  # i = 0 is the oldest covering chunk
    assert np.allclose(got.positions, weights @ np.array([0.0, 1.0, 2.0]) / weights.sum())
    assert got.n_chunks == 3
    assert got.positions[0] < 1.0  # m > 0 leans towards the older predictions
    # A negative decay leans towards the newest.
    newest_first = buffer(interpolation="linear", blending="temporal_ensemble", crossfade_s=0.0, ensemble_decay=-m)
    for i, value in enumerate((0.0, 1.0, 2.0)):
        newest_first.add(chunk(S + i * 10 * MS, np.full((11, 2), value)), received_ns=S)
    assert newest_first.sample_at(S, S + 50 * MS).positions[0] > 1.0
    # Only chunks covering the time count: past the oldest chunk's end, two remain.
    late = buf.sample_at(S + 1_000 * MS + 5 * MS, S + 1_005 * MS)
    w2 = np.exp(-m * np.arange(2))
    assert late.n_chunks == 2 and np.allclose(late.positions, w2 @ np.array([1.0, 2.0]) / w2.sum())


def test_temporal_ensemble_with_fade_in_has_no_step_at_arrival():
    buf = buffer(interpolation="linear", blending="temporal_ensemble", crossfade_s=0.05, ensemble_decay=0.0)
    buf.add(chunk(S, np.zeros((11, 2))), received_ns=S)
    before = buf.sample(S + 100 * MS, 0.0).positions
    buf.add(chunk(S + 100 * MS, np.ones((11, 2))), received_ns=S + 100 * MS)
    assert np.allclose(buf.sample(S + 100 * MS, 0.0).positions, before)
    assert np.allclose(buf.sample(S + 150 * MS, 0.0).positions, 0.5)  # mean of 0 and 1 once faded in


def test_stale_then_recovers():
    buf = buffer(interpolation="cubic")
    assert buf.sample(S, 0.05) is None  # nothing yet
    buf.add(chunk(S, RAMP), received_ns=S)
    assert buf.sample(S + 150 * MS, 0.05) is not None
    assert buf.sample(S + 151 * MS, 0.05) is None  # target S + 201 ms: past the last point
    buf.add(chunk(S + 200 * MS, RAMP), received_ns=S + 210 * MS)
    assert buf.sample(S + 210 * MS, 0.05) is not None


# ----------------------------------------------------------------------------------------------
# Rejections
def test_rejections_name_the_reason_and_store_nothing():
    buf = buffer()
    cases = [
        (chunk(S, RAMP, names=("a", "c")), REJECT_JOINTS),
        (chunk(S, [[0.0, 1.0, 2.0]], names=("a", "b", "c")), REJECT_JOINTS),
        (cv.ActionChunk(JOINTS, S, np.zeros(0), np.zeros((0, 2))), REJECT_EMPTY),
        (cv.ActionChunk(JOINTS, S, np.zeros(2), np.zeros((2, 3))), REJECT_RAGGED),
        (chunk(S, [[0.0, np.nan], [1.0, 1.0]]), REJECT_NON_FINITE),
        (cv.ActionChunk(JOINTS, S, np.array([0.0, 0.1, 0.1]), np.zeros((3, 2))), REJECT_TIME_ORDER),
    ]
    for bad, reason in cases:
        with pytest.raises(ChunkRejectedError) as info:
            buf.add(bad, received_ns=S)
        assert info.value.reason == reason
    with pytest.raises(ChunkRejectedError) as info:
        buf.add(chunk(S, RAMP), received_ns=S, target_ns=S + 300 * MS)
    assert info.value.reason == REJECT_STALE and "100.0 ms late" in str(info.value)
    assert len(buf) == 0


def test_joint_order_is_normalized():
    buf = buffer(interpolation="linear", crossfade_s=0.0)
    buf.add(chunk(S, [[1.0, 2.0], [1.0, 2.0]], names=("b", "a")), received_ns=S)
    assert np.allclose(buf.sample_at(S, S).positions, [2.0, 1.0])


def test_message_errors_are_classified():
    def error_of(msg: JointTrajectory) -> str:
        with pytest.raises(cv.MessageError) as info:
            cv.trajectory_to_chunk(msg)
        return classify_message_error(str(info.value))

    good = cv.chunk_to_trajectory(chunk(S, RAMP))
    assert error_of(JointTrajectory()) == REJECT_EMPTY
    no_points = cv.chunk_to_trajectory(chunk(S, RAMP))
    no_points.points = []
    assert error_of(no_points) == REJECT_EMPTY
    nan = cv.chunk_to_trajectory(chunk(S, RAMP))
    nan.points[1].positions = [float("inf"), 0.0]
    assert error_of(nan) == REJECT_NON_FINITE
    backwards = cv.chunk_to_trajectory(chunk(S, RAMP))
    backwards.points[2].time_from_start = good.points[0].time_from_start
    assert error_of(backwards) == REJECT_TIME_ORDER
    ragged = cv.chunk_to_trajectory(chunk(S, RAMP))
    ragged.points[0].positions = [0.0]
    assert error_of(ragged) == REJECT_RAGGED


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(interpolation="quintic"), "interpolation"),
        (dict(blending="average"), "blending"),
        (dict(crossfade_s=-0.01), "crossfade_s"),
        (dict(ensemble_decay=float("nan")), "ensemble_decay"),
        (dict(max_chunks=0), "max_chunks"),
    ],
)
def test_bad_config_names_field_and_value(kwargs, field):
    with pytest.raises(ConfigError) as info:
        ChunkBufferConfig(**kwargs)
    assert info.value.field == field and repr(next(iter(kwargs.values()))) in str(info.value)
