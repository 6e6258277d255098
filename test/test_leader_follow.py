"""core.leader_follow at fixed times: validation, alignment before following, stale and released leaders hold."""
from __future__ import annotations

import numpy as np
import pytest
from feetech_support import SO101_MOTORS, SO101_URDF

from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.limits import limits_from_urdf
from sim2real_ros.core.safety.supervision.leader_follow import LeaderFollow

JOINTS = list(SO101_MOTORS)
LIMITS = limits_from_urdf(RobotModel.from_file(SO101_URDF), JOINTS)
ARM = np.zeros(6)
MS = 1_000_000


def follow() -> LeaderFollow:
    return LeaderFollow(LIMITS, max_gap_rad=0.1, timeout_s=0.2)


def test_following_starts_only_once_the_leader_is_aligned_with_the_arm():
    f = follow()
    far = ARM.copy()
    far[2] = 0.5
    assert f.on_teleop(JOINTS, far, 0) == ""
    q, why = f.target(ARM, 1 * MS)
    assert q is None and "align the leader" in why and "elbow_flex" in why and not f.following
    near = ARM.copy()
    near[2] = 0.08
    assert f.on_teleop(JOINTS, near, 10 * MS) == ""
    q, why = f.target(ARM, 11 * MS)
    assert why == "" and np.array_equal(q, near) and f.following
    # Once following, the leader leads: a large move is followed (the step limiter paces it).
    assert f.on_teleop(JOINTS, far, 20 * MS) == ""
    q, _ = f.target(ARM, 21 * MS)
    assert np.array_equal(q, far)


def test_a_stale_or_released_leader_holds_and_must_be_aligned_again():
    f = follow()
    f.on_teleop(JOINTS, ARM, 0)
    assert f.target(ARM, 1 * MS)[1] == ""
    far = ARM + 0.5
    f.on_teleop(JOINTS, far, 10 * MS)
    q, why = f.target(ARM, 300 * MS)  # 0.29 s > timeout 0.2 s
    assert q is None and "command/teleop silent for 0.290 s" in why and not f.following
    f.on_teleop(JOINTS, far, 310 * MS)
    assert f.target(ARM, 311 * MS)[0] is None  # fresh again but 0.5 rad away: aligning first
    f.on_teleop(JOINTS, ARM, 320 * MS)
    assert f.target(ARM, 321 * MS)[1] == ""
    f.release()
    f.on_teleop(JOINTS, far, 330 * MS)
    q, why = f.target(ARM, 331 * MS)
    assert q is None and "align" in why
    assert f.target(ARM, 332 * MS)[0] is None and f.target(ARM, 0)[0] is None  # nothing received yet counts too
    assert follow().target(ARM, 0)[1].startswith("command/teleop silent for ever")


def test_bad_leader_commands_are_rejected_and_near_ones_clamped():
    f = follow()
    assert "shoulder_pan" in f.on_teleop(JOINTS[1:], ARM[1:], 0)  # a joint missing
    assert "not a position" in f.on_teleop(JOINTS, [1e308, 0, 0, 0, 0, 0], 0)
    assert f.on_teleop(JOINTS, [float("nan")] + [0.0] * 5, 0) != ""
    assert f.target(ARM, 0)[0] is None  # nothing accepted yet
    beyond = ARM.copy()
    beyond[0] = LIMITS.upper[0] + 0.05
    assert f.on_teleop(JOINTS, beyond, 0) == ""
    q, _ = f.target(np.array([LIMITS.upper[0], 0, 0, 0, 0, 0]), 0)
    assert q[0] == LIMITS.upper[0]
    with pytest.raises(ValueError):
        LeaderFollow(LIMITS, 0.0, 0.2)
