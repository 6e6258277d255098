"""Limits, the command clamp, input validation and the joystick mapping (pure core, no ROS)."""
from __future__ import annotations

import numpy as np
import pybullet_data
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.core.safety.joystick import (
    JoyMessageError,
    decode_joy,
    load_joystick_mapping,
    mapping_from_dict,
)
from sim2real_ros.core.safety.limits import (
    InvalidInputError,
    SafetyLimits,
    clamp_command,
    limits_from_urdf,
    order_positions,
)
from sim2real_ros.core.safety.teleop import Jogger, default_ee_link
from sim2real_ros.paths import config_path

PANDA = f"{pybullet_data.getDataPath()}/franka_panda/panda.urdf"
ARM7 = [f"panda_joint{i}" for i in range(1, 8)]


@pytest.fixture(scope="module")
def panda() -> RobotModel:
    return RobotModel.from_file(PANDA)


def simple_limits() -> SafetyLimits:
    return SafetyLimits(("a", "b", "c"), np.array([-1.0, -2.0, 0.0]), np.array([1.0, 2.0, 0.5]),
                        np.array([1.0, 2.0, 0.5]))


# ----------------------------------------------------------------------------------------------
# clamp_command
def test_clamp_limits_the_step_then_the_position():
    limits = simple_limits()
    prev = np.array([0.0, 0.0, 0.25])
    sent = clamp_command(np.array([5.0, -5.0, 0.25]), prev, limits, dt=0.1)
    assert np.allclose(sent, [0.1, -0.2, 0.25])
    # Near the upper limit the position clip wins over the step.
    sent = clamp_command(np.array([5.0, 0.0, 0.25]), np.array([0.95, 0.0, 0.25]), limits, dt=0.1)
    assert np.allclose(sent, [1.0, 0.0, 0.25])
    # Nothing sent yet: only the position limits apply.
    assert np.allclose(clamp_command(np.array([3.0, -3.0, -1.0]), None, limits, 0.1), [1.0, -2.0, 0.0])


def test_clamp_refuses_nan_and_wrong_length():
    limits = simple_limits()
    with pytest.raises(ValueError, match="NaN"):
        clamp_command(np.array([np.nan, 0.0, 0.0]), None, limits, 0.01)
    with pytest.raises(ValueError, match="shape"):
        clamp_command(np.zeros(2), None, limits, 0.01)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(wish=st.lists(finite, min_size=3, max_size=3), prev_frac=st.lists(st.floats(0, 1), min_size=3, max_size=3),
       dt=st.floats(1e-4, 0.1))
def test_clamp_property_always_within_limits(wish, prev_frac, dt):
    limits = simple_limits()
    prev = limits.lower + np.array(prev_frac) * (limits.upper - limits.lower)
    sent = clamp_command(np.array(wish), prev, limits, dt)
    assert np.all(sent >= limits.lower) and np.all(sent <= limits.upper)
    assert np.all(np.abs(sent - prev) <= limits.velocity * dt + 1e-12)
    # A wish that is already reachable is sent unchanged.
    again = clamp_command(sent, prev, limits, dt)
    assert np.allclose(again, sent)


# ----------------------------------------------------------------------------------------------
# Limits from the URDF: tighten yes, loosen never
def test_limits_come_from_the_urdf_and_may_be_tightened(panda):
    limits = limits_from_urdf(panda, ARM7)
    assert limits.joint_names == tuple(ARM7)
    assert limits.upper[3] == 0.0 and limits.velocity[0] == pytest.approx(2.175)
    lower = [-1.0, -1.0, -1.0, -1.0, -1.0, 0.0, -1.0]
    tight = limits_from_urdf(panda, ARM7, lower=lower, upper=[-0.1, 1, 1, -0.1, 1, 1, 1], velocity=[1.0] * 7,
                             velocity_scale=0.5)
    assert np.allclose(tight.velocity, 0.5) and np.allclose(tight.lower, lower)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lower": [-5.0] * 7}, "position_lower_limits"),
        ({"upper": [0.5] * 7}, "position_upper_limits"),  # joint4's URDF upper limit is 0.0
        ({"velocity": [3.0] * 7}, "velocity_limits"),
        ({"velocity_scale": 1.5}, "velocity_scale"),
        ({"velocity": [1.0] * 6}, "velocity_limits"),
    ],
)
def test_a_config_that_loosens_a_limit_is_refused(panda, kwargs, field):
    with pytest.raises(ConfigError) as info:
        limits_from_urdf(panda, ARM7, source="supervisor parameters", **kwargs)
    assert info.value.field == field
    assert "supervisor parameters" in str(info.value)


def test_a_joint_without_velocity_limit_needs_one():
    urdf = ('<robot name="r"><link name="a"/><link name="b"/><joint name="j" type="revolute">'
            '<parent link="a"/><child link="b"/><limit lower="-1" upper="1"/></joint></robot>')
    model = RobotModel.from_string(urdf)
    with pytest.raises(ConfigError, match="no finite velocity limit"):
        limits_from_urdf(model, ["j"])
    assert limits_from_urdf(model, ["j"], velocity=[0.5]).velocity[0] == 0.5


# ----------------------------------------------------------------------------------------------
# Input validation
def test_order_positions_reorders_and_rejects():
    expected = ["a", "b", "c"]
    assert np.allclose(order_positions(["c", "a", "b"], [3, 1, 2], expected, allow_extra=False), [1, 2, 3])
    assert np.allclose(order_positions(["x", "c", "a", "b"], [9, 3, 1, 2], expected, allow_extra=True), [1, 2, 3])
    with pytest.raises(InvalidInputError, match="unknown joints"):
        order_positions(["x", "c", "a", "b"], [9, 3, 1, 2], expected, allow_extra=False)
    with pytest.raises(InvalidInputError, match="missing joints"):
        order_positions(["a", "b", "z"], [1, 2, 3], expected, allow_extra=False)
    with pytest.raises(InvalidInputError, match="NaN"):
        order_positions(expected, [1, float("nan"), 3], expected, allow_extra=False)
    with pytest.raises(InvalidInputError, match="names but"):
        order_positions(expected, [1, 2], expected, allow_extra=False)
    with pytest.raises(InvalidInputError, match="duplicate"):
        order_positions(["a", "a", "b", "c"], [1, 1, 2, 3], expected, allow_extra=True)


# ----------------------------------------------------------------------------------------------
# Joystick mapping
def test_default_joystick_yaml_loads():
    mapping = load_joystick_mapping(config_path("joystick.yaml"))
    assert mapping.button("deadman") == 9 and mapping.button("estop") == 1
    assert mapping.groups_for(7) == ((0, 1, 2), (3, 4, 5), (6,))


def test_bad_joystick_yaml_names_file_field_and_value(tmp_path):
    bad = tmp_path / "joy.yaml"
    bad.write_text("buttons: {deadman: 9, estop: [1]}\n")
    with pytest.raises(ConfigError) as info:
        load_joystick_mapping(bad)
    assert info.value.source == str(bad) and info.value.field == "buttons.estop" and info.value.value == [1]
    bad.write_text("buttons: {deadman: 9}\ndeadzone: 2.0\n")
    with pytest.raises(ConfigError, match=r"joy.yaml: field 'deadzone' = 2.0"):
        load_joystick_mapping(bad)
    bad.write_text("buttons: {deadman: 9, estop: 9}\n")
    with pytest.raises(ConfigError, match="share one button"):
        load_joystick_mapping(bad)
    bad.write_text("buttons: {deadman: 9\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_joystick_mapping(bad)
    bad.write_text("buttons: {deadman: 9, jump: 3}\n")
    with pytest.raises(ConfigError, match="unknown button role"):
        load_joystick_mapping(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_joystick_mapping(tmp_path / "missing.yaml")


def test_decode_joy_deadzone_and_short_messages():
    mapping = mapping_from_dict({"buttons": {"deadman": 9, "estop": 1}, "deadzone": 0.2})
    sample = decode_joy(mapping, [0.1, -0.6, 0.0, 1.0], [0, 1] + [0] * 7 + [1])
    assert sample.pressed == {"estop", "deadman"}
    assert np.allclose(sample.axes, [0.0, -0.5, 0.0, 1.0])
    with pytest.raises(JoyMessageError, match="buttons"):
        decode_joy(mapping, [0.0] * 4, [0] * 5)
    with pytest.raises(JoyMessageError, match="axes"):
        decode_joy(mapping, [0.0] * 2, [0] * 11)
    with pytest.raises(JoyMessageError, match="NaN"):
        decode_joy(mapping, [0.0, float("nan"), 0.0, 0.0], [0] * 11)


def test_cartesian_jog_moves_the_end_effector_as_asked(panda):
    limits = limits_from_urdf(panda, ARM7)
    mapping = load_joystick_mapping(config_path("joystick.yaml"))
    jogger = Jogger(mapping, limits, panda)
    assert jogger.ee_link == default_ee_link(panda) == "panda_hand"
    jogger.toggle_cartesian()
    q = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.7])
    axes = np.zeros(6)
    axes[mapping.cartesian_axes["vz"]] = 1.0  # right stick up: +z in the base frame
    dq = jogger.joint_velocity(decode_joy(mapping, axes, [0] * 11), q)
    assert np.all(np.abs(dq) <= jogger.jog_speed + 1e-12)
    p0 = panda.forward_kinematics(q, "panda_hand", ARM7)[0][:3, 3]
    p1 = panda.forward_kinematics(q + dq * 1e-3, "panda_hand", ARM7)[0][:3, 3]
    motion = (p1 - p0) / np.linalg.norm(p1 - p0)
    assert motion[2] > 0.99
