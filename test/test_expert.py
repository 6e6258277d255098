"""The scripted IK teacher reaches targets and labels chunks that follow docs/design.md §3 timing."""
import numpy as np
import pybullet_data

from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.sim.expert import ReachExpert

PANDA = f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf"
HOME = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.7])


def make_expert() -> ReachExpert:
    model = RobotModel.from_file(PANDA)
    return ReachExpert(model, model.joint_names[:7], "panda_hand", HOME)


def test_ik_goal_reaches_target_within_limits():
    expert = make_expert()
    for target in ([0.5, 0.1, 0.2], [0.4, -0.2, 0.1], [0.6, 0.25, 0.3]):
        goal = expert.solve_ik(np.array(target))
        aim = np.array(target) + [0, 0, expert.config.approach_offset_m]
        assert np.linalg.norm(expert.ee_position(goal) - aim) < 0.005
        assert np.all(goal >= expert.lower) and np.all(goal <= expert.upper)


def test_chunk_moves_toward_goal_at_bounded_speed_and_ends_there():
    expert = make_expert()
    target = np.array([0.5, 0.1, 0.2])
    chunk = expert.chunk(HOME, target, chunk_length=10, dt_s=0.05)
    assert chunk.shape == (10, 7)
    steps = np.abs(np.diff(np.vstack([HOME, chunk]), axis=0))
    assert np.all(steps <= expert.config.speed_rad_s * 0.05 + 1e-9)
    # From the goal itself, the labels hold still.
    goal = expert.solve_ik(target)
    assert np.allclose(expert.chunk(goal, target, 10, 0.05), goal)
