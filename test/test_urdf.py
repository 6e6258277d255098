"""URDF parsing, forward kinematics and the Jacobian, on pybullet_data's Franka Panda."""
import numpy as np
import pybullet_data
import pytest

from sim2real_ros.core.errors import UrdfError
from sim2real_ros.core.robot.urdf import RobotModel, damped_least_squares

PANDA = f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf"


def test_panda_joints_and_limits():
    model = RobotModel.from_file(PANDA)
    assert model.joint_names[:7] == [f"panda_joint{i}" for i in range(1, 8)]
    limits = model.limits_arrays(model.joint_names[:7])
    assert np.all(limits["lower"] < limits["upper"]) and np.all(limits["velocity"] > 0)


def test_jacobian_matches_finite_differences():
    model = RobotModel.from_file(PANDA)
    names = model.joint_names[:7]
    q = np.array([0.1, -0.4, 0.2, -2.0, 0.3, 1.6, 0.5])
    jac = model.jacobian(q, "panda_hand", names)
    eps = 1e-6
    p0 = model.forward_kinematics(q, "panda_hand", names)[0][:3, 3]
    for i in range(7):
        dq = np.zeros(7)
        dq[i] = eps
        p1 = model.forward_kinematics(q + dq, "panda_hand", names)[0][:3, 3]
        assert np.allclose((p1 - p0) / eps, jac[:3, i], atol=1e-4)


def test_damped_least_squares_tracks_a_reachable_twist():
    model = RobotModel.from_file(PANDA)
    names = model.joint_names[:7]
    q = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.7])
    jac = model.jacobian(q, "panda_hand", names)[:3]
    twist = np.array([0.05, 0.0, -0.02])
    dq = damped_least_squares(jac, twist, damping=1e-3)
    assert np.allclose(jac @ dq, twist, atol=1e-4)


def test_bad_urdf_names_the_problem(tmp_path):
    path = tmp_path / "bad.urdf"
    path.write_text('<robot name="r"><joint name="j" type="revolute"><parent link="a"/>'
                    '<child link="b"/></joint></robot>')
    with pytest.raises(UrdfError, match=r"bad.urdf: joint 'j': a revolute joint needs a <limit>"):
        RobotModel.from_file(path)
    with pytest.raises(UrdfError, match="cannot read"):
        RobotModel.from_file(tmp_path / "missing.urdf")
