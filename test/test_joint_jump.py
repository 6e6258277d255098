"""core/safety/joint_jump: a teleport is a jump however long its confirmation takes; a glitch is an outlier."""
import numpy as np
import pytest

from sim2real_ros.core.safety.joint_jump import JointJumpConfig, JointJumpDetector

MS = 1_000_000
NAMES = tuple(f"j{i}" for i in range(6))
SO101_VELOCITY = np.full(6, 10.0)  # [rad/s] the SO-101 URDF's limits
HOME = np.zeros(6)


def detector() -> JointJumpDetector:
    jumps = JointJumpDetector(JointJumpConfig(NAMES, SO101_VELOCITY, slack_rad=0.2, confirm_samples=3))
    for k in range(5):
        assert jumps.update(HOME, k * 10 * MS) == ""
    return jumps


@pytest.mark.parametrize("step_rad", [0.45, 0.55, 0.7, 2.0])
def test_a_teleport_at_100_hz_is_confirmed_as_a_jump_not_dropped_as_outliers(step_rad):
    """A sim episode's restart puts the arm home: every sample after it sits at the new pose. From the
    last accepted sample the allowance grows by 0.2 rad a sample (2 x 10 rad/s x 10 ms), so a 0.55 rad
    teleport 'fit' after two samples held back: the run was rejected as outliers ('the position came
    back', seen at most sim restarts) and the teleport was taken for motion."""
    jumps = detector()
    new = HOME + np.array([0.0, step_rad, 0.0, 0.0, 0.0, 0.0])
    answers = [jumps.update(new, (5 + k) * 10 * MS) for k in range(3)]
    assert answers[:2] == ["", ""] and "confirmed by 3 samples" in answers[2], answers
    assert jumps.jumps == 1 and jumps.outliers == 0, jumps.last_outlier


@pytest.mark.parametrize("glitch_rad", [0.45, 2.0])
def test_a_glitch_that_comes_back_is_an_outlier(glitch_rad):
    jumps = detector()
    assert jumps.update(HOME + glitch_rad, 50 * MS) == "" and jumps.pending
    assert jumps.update(HOME + 0.01, 60 * MS) == "" and not jumps.pending
    assert jumps.jumps == 0 and jumps.outliers == 1 and "came back" in jumps.last_outlier


def test_two_glitches_that_disagree_are_outliers_and_motion_within_the_limits_is_accepted():
    jumps = detector()
    jumps.update(HOME + 1.0, 50 * MS)
    jumps.update(HOME - 1.0, 60 * MS)  # disagrees with the first: the first is dropped
    assert jumps.outliers == 1 and "disagreed" in jumps.last_outlier
    jumps.update(HOME, 70 * MS)  # back: the second is dropped too
    assert jumps.outliers == 2 and jumps.jumps == 0
    q = HOME.copy()
    for k in range(8, 30):
        q = q + 0.09  # 9 rad/s: fast, within the limits
        assert jumps.update(q, k * 10 * MS) == "" and not jumps.pending
    assert jumps.jumps == 0 and jumps.outliers == 2
