"""Checkpoints checked against the data they are applied to offline (issue 34 leftover): replay,
validation's real-bag stage, fine-tuning and the sim evaluation refuse a checkpoint whose joints the bag or the
sim robot lacks, or whose stored preprocessing is not the one it was trained with, with one error
naming both sides (before: replay ran and reported 0 frames, the sim fed the policy whatever its
stored config said)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.serialization import serialize_message

from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.cli.main import main as sim2real
from sim2real_ros.conversions import (
    array_to_image,
    camera_model_to_info,
    make_joint_state,
    make_position_command,
    ns_to_stamp,
)
from sim2real_ros.core.errors import CheckpointError
from sim2real_ros.core.perception.camera_model import load_calibration_yaml
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import encode_checkpoint, read_checkpoint, write_atomically
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.episodes.options import ReplayOptions
from sim2real_ros.evaluation import evaluate_bag
from sim2real_ros.finetune.finetune import FinetuneConfig, finetune
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.training.evaluation import evaluate_in_sim
from sim2real_ros.training.untrained import init_checkpoint
from sim2real_ros.validation.gates import RealGate
from sim2real_ros.validation.validate import evaluate_real_bags

S, MS = 1_000_000_000, 1_000_000
JOINTS = tuple(RobotModel.from_description(str(urdf_path())).joint_names)
OPTIONS = ReplayOptions(human_modes=(), progress=False, plots=False)


def small_bag(path: Path, joint_names: tuple[str, ...]) -> Path:
    """2 s: 100 Hz joint states named `joint_names`, commands, 10 Hz images with camera_info."""
    camera = load_calibration_yaml(config_path("camera_sim.yaml"))
    writer = BagWriter(path)
    for topic, msgtype in (("/camera/image_raw", "sensor_msgs/msg/Image"),
                           ("/camera/camera_info", "sensor_msgs/msg/CameraInfo"),
                           ("/joint_states", "sensor_msgs/msg/JointState"),
                           ("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
                           ("/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray")):
        writer.add_topic(topic, msgtype)
    state = DiagnosticArray()
    state.status = [DiagnosticStatus(name="supervisor", values=[KeyValue(key="mode", value="TELEOP")])]
    state.header.stamp = ns_to_stamp(1)
    writer.write("/supervisor/state", 1, serialize_message(state))
    image = np.full((camera.height, camera.width, 3), 90, np.uint8)
    n = len(joint_names)
    for tick in range(1, 200):
        t = tick * 10 * MS
        writer.write("/joint_states", t, serialize_message(make_joint_state(list(joint_names), np.zeros(n), t)))
        writer.write("/forward_position_controller/commands", t, serialize_message(make_position_command(np.zeros(n))))
        if tick % 10 == 5:
            writer.write("/camera/camera_info", t, serialize_message(camera_model_to_info(camera, t)))
            writer.write("/camera/image_raw", t + 2 * MS, serialize_message(array_to_image(image, "rgb8", t)))
    writer.close()
    return path


def checkpoint(path: Path, joints: tuple[str, ...] = JOINTS) -> Path:
    init_checkpoint(path, joints, PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    return path


def with_other_stored_preprocessing(source: Path, out: Path) -> Path:
    """The checkpoint with its stored preprocess config changed but its trained-with hash kept."""
    spec, state, _ = read_checkpoint(source)
    preprocess = dict(spec.preprocess, interpolation="area")
    write_atomically(out, encode_checkpoint(dataclasses.replace(spec, preprocess=preprocess), state))
    return out


def test_offline_replay_refuses_a_bag_without_the_checkpoints_joints(tmp_path, capsys):
    good = checkpoint(tmp_path / "so101.pt")
    matching = small_bag(tmp_path / "matching", JOINTS)
    assert evaluate_bag(matching, good, "offline", None, OPTIONS)["frames"]["predicted"] > 0  # the bag replays
    other_robot = small_bag(tmp_path / "other_robot", tuple(f"arm_joint_{i}" for i in range(len(JOINTS))))
    with pytest.raises(CheckpointError) as err:
        evaluate_bag(other_robot, good, "offline", tmp_path / "report", OPTIONS)
    text = str(err.value)
    assert text.startswith(f"{good} does not match bag {other_robot}") and "(/joint_states)" in text
    assert f"missing {list(JOINTS)}" in text and "arm_joint_0" in text
    assert not (tmp_path / "report").exists()
    code = sim2real(["replay", "--bag", str(other_robot), "--checkpoint", str(good), "--report",
                     str(tmp_path / "cli"), "--all-actions", "--no-plots"])
    captured = capsys.readouterr()
    assert code == 2 and "does not match bag" in captured.err and "Traceback" not in captured.err
    # Validation's real-bag stage: the bag is a named problem, not 0 frames.
    result = evaluate_real_bags(good, [other_robot], OPTIONS, RealGate(), None, log=lambda _line: None)
    assert result["frames"] == 0 and "does not match bag" in result["problems"][str(other_robot)]


def test_offline_replay_refuses_a_checkpoint_whose_stored_preprocessing_is_not_the_trained_one(tmp_path):
    bag = small_bag(tmp_path / "bag", JOINTS)
    tampered = with_other_stored_preprocessing(checkpoint(tmp_path / "so101.pt"), tmp_path / "tampered.pt")
    with pytest.raises(CheckpointError) as err:
        evaluate_bag(bag, tampered, "offline", None, OPTIONS)
    text = str(err.value)
    trained = PreprocessConfig.from_yaml(config_path("preprocess.yaml")).content_hash
    assert text.startswith(f"{tampered} does not match bag {bag}")
    assert f"preprocessing: checkpoint was trained with preprocess hash {trained}" in text and "'area'" in text


def test_eval_sim_refuses_joints_the_robot_lacks_and_other_preprocessing(tmp_path):
    renamed = (*JOINTS[:-1], "gripper_roll")
    foreign = checkpoint(tmp_path / "foreign.pt", renamed)
    with pytest.raises(CheckpointError) as err:
        evaluate_in_sim(foreign, episodes=1, num_threads=1)
    text = str(err.value)
    assert text.startswith(f"{foreign} does not match sim robot {urdf_path()}")
    assert "missing ['gripper_roll']" in text
    tampered = with_other_stored_preprocessing(checkpoint(tmp_path / "so101.pt"), tmp_path / "tampered.pt")
    with pytest.raises(CheckpointError, match="preprocessing: checkpoint was trained with preprocess hash"):
        evaluate_in_sim(tampered, episodes=1, num_threads=1)


def test_finetune_refuses_bags_of_another_robot_and_other_preprocessing(tmp_path):
    good = checkpoint(tmp_path / "so101.pt")
    other_robot = small_bag(tmp_path / "other_robot", tuple(f"arm_joint_{i}" for i in range(len(JOINTS))))
    out = tmp_path / "out.pt"
    with pytest.raises(CheckpointError) as err:
        finetune(good, [other_robot], out, FinetuneConfig(epochs=1, real_fraction=1.0))
    assert str(err.value).startswith(f"{good} does not match bag {other_robot}") and "missing" in str(err.value)
    tampered = with_other_stored_preprocessing(good, tmp_path / "tampered.pt")
    with pytest.raises(CheckpointError, match="preprocessing: checkpoint was trained with preprocess hash"):
        finetune(tampered, [small_bag(tmp_path / "bag", JOINTS)], out, FinetuneConfig(epochs=1, real_fraction=1.0))
    assert not out.exists()
