"""Message <-> numpy conversion, without rclpy.init()."""
import numpy as np
import pytest
from sensor_msgs.msg import Image
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros import conversions as cv


def test_stamp_round_trip():
    for ns in (0, 1, 999_999_999, 1_700_000_000_123_456_789):
        assert cv.stamp_to_ns(cv.ns_to_stamp(ns)) == ns


def test_image_round_trip_and_padded_step():
    array = np.random.default_rng(0).integers(0, 255, (4, 5, 3), dtype=np.uint8)
    msg = cv.array_to_image(array, "rgb8", 123)
    assert np.array_equal(cv.image_to_array(msg), array)
    # Row padding as some drivers send it: step larger than width * channels.
    padded = Image(height=4, width=5, encoding="bgr8", step=16)
    rows = np.zeros((4, 16), np.uint8)
    rows[:, :15] = array.reshape(4, 15)
    padded.data = rows.tobytes()
    assert np.array_equal(cv.image_to_array(padded), array)


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        (dict(encoding="weird16", step=15), "unknown image encoding"),
        (dict(encoding="rgb8", step=10), "step 10"),
        (dict(encoding="rgb8", step=15, data=b"\x00" * 10), "data has 10 bytes"),
    ],
)
def test_bad_images_are_named(kwargs, problem):
    msg = Image(height=4, width=5, **{k: v for k, v in kwargs.items() if k != "data"})
    msg.data = kwargs.get("data", b"\x00" * (msg.step * 4))
    with pytest.raises(cv.MessageError, match=problem):
        cv.image_to_array(msg)


def test_chunk_round_trip_and_validation():
    chunk = cv.ActionChunk(("a", "b"), 5_000_000_000, np.arange(3) * 0.05, np.arange(6.0).reshape(3, 2))
    back = cv.trajectory_to_chunk(cv.chunk_to_trajectory(chunk))
    assert back.joint_names == ("a", "b") and back.stamp_ns == chunk.stamp_ns
    assert np.allclose(back.times_s, chunk.times_s) and np.array_equal(back.positions, chunk.positions)
    assert back.end_ns == 5_100_000_000
    bad = cv.chunk_to_trajectory(chunk)
    bad.points[1].positions = [float("nan"), 0.0]
    with pytest.raises(cv.MessageError, match="NaN"):
        cv.trajectory_to_chunk(bad)
    bad = cv.chunk_to_trajectory(chunk)
    bad.points[2].time_from_start = bad.points[1].time_from_start
    with pytest.raises(cv.MessageError, match="strictly increase"):
        cv.trajectory_to_chunk(bad)
    with pytest.raises(cv.MessageError, match="no points"):
        cv.trajectory_to_chunk(JointTrajectory(joint_names=["a"]))


def test_joint_state_reorder_and_rejects():
    msg = cv.make_joint_state(["b", "a"], np.array([2.0, 1.0]), 7)
    sample = cv.joint_state_to_sample(msg)
    assert np.array_equal(cv.reorder(sample, ["a", "b"]), [1.0, 2.0])
    with pytest.raises(cv.MessageError, match=r"lacks joints \['c'\]"):
        cv.reorder(sample, ["a", "c"])
    msg.position = [float("inf"), 0.0]
    with pytest.raises(cv.MessageError, match="NaN/Inf"):
        cv.joint_state_to_sample(msg)


def test_position_command_checks_length_and_finiteness():
    msg = cv.make_position_command(np.array([0.1, 0.2]))
    assert np.array_equal(cv.position_command_to_array(msg, 2), [0.1, 0.2])
    with pytest.raises(cv.MessageError, match="expected 3"):
        cv.position_command_to_array(msg, 3)
    msg.data = [0.0, float("nan")]
    with pytest.raises(cv.MessageError, match="NaN"):
        cv.position_command_to_array(msg, 2)
