"""The grasp's frames weighted in the student's refit (training/trainer.grasp_frame_weights,
`grasp_frame_weight` in a training YAML): which frames count, what the weighted loss does to a real
model's fit, and the config's checks."""
import types

import numpy as np
import pytest
import torch
import yaml

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import make_policy_spec
from sim2real_ros.core.policy.model import build_model
from sim2real_ros.paths import config_path
from sim2real_ros.robots import get_robot
from sim2real_ros.training.config import load_train_config
from sim2real_ros.training.trainer import Trainer, grasp_frame_weights, normalized_delta_loss, regress

SO101 = get_robot("so101")
GRIPPER = SO101.joints.index("gripper")
SMALL = {"channels": [8, 16], "pool_size": 2, "image_features": 32, "hidden": [64]}


def test_a_frame_is_in_the_grasp_when_the_jaw_or_any_label_point_is_below_the_line():
    joints = np.zeros((4, 6))
    labels = np.zeros((4, 10, 6))
    joints[:, GRIPPER] = [1.2, 0.3, 1.2, 0.61]   # open, closed on a cube, open, just above the line
    labels[:, :, GRIPPER] = 1.2
    labels[1, :, GRIPPER] = 0.3
    labels[2, 7:, GRIPPER] = 0.4                  # the teacher closes within this chunk
    labels[3, :, GRIPPER] = 0.61
    weights = grasp_frame_weights(joints, labels, GRIPPER, below_rad=0.6, weight=3.0)
    assert weights.dtype == np.float32
    assert weights.tolist() == [1.0, 3.0, 3.0, 1.0]


def _model_and_data():
    preprocess = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    spec = make_policy_spec(list(SO101.joints), preprocess, hparams=SMALL, sim_params_version="abc",
                            provenance={"method": "test", "parent": None})
    torch.manual_seed(0)
    model = build_model("cnn_mlp", spec, **SMALL)
    n = spec.joint_count
    model.set_normalization(np.zeros(n), np.ones(n), np.zeros((10, n)), np.full((10, n), 0.1))
    # One observation, two teachers that disagree on it: half the frames ask for the jaw at +0.1 rad,
    # half (the "grasp" frames) at -0.1 rad. The weighted regression must side with the weighted half.
    count = 64
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (spec.image_height, spec.image_width, 3), dtype=np.uint8)
    images = np.repeat(image[None], count, axis=0)
    joints = np.zeros((count, n), dtype=np.float32)
    labels = np.zeros((count, 10, n), dtype=np.float32)
    labels[: count // 2, :, GRIPPER] = 0.1
    labels[count // 2:, :, GRIPPER] = -0.1
    weights = np.where(np.arange(count) >= count // 2, 9.0, 1.0).astype(np.float32)
    return model, images, joints, labels, weights


def _jaw_after_fit(frame_weights):
    model, images, joints, labels, weights = _model_and_data()
    regress(model, images, joints, labels, normalized_delta_loss, epochs=60, batch_size=64, lr=3e-3,
            weight_decay=0.0, seed=0, log=lambda _: None, label="test",
            frame_weights=None if frame_weights is None else weights * frame_weights)
    with torch.no_grad():
        chunk = model.forward_normalized(torch.from_numpy(images[:1]), torch.from_numpy(joints[:1]), None)
    return float(chunk[0, :, GRIPPER].mean()) * 0.1  # back to [rad] (std 0.1, mean 0)


def test_weighted_frames_pull_the_fit_toward_their_labels():
    unweighted = _jaw_after_fit(None)
    weighted = _jaw_after_fit(1.0)
    assert abs(unweighted) < 0.03          # the mean of +-0.1 rad
    assert weighted == pytest.approx(-0.08, abs=0.02)  # (9 x -0.1 + 1 x 0.1) / 10


def test_all_ones_weights_are_the_plain_loss_and_a_wrong_shape_is_refused():
    model, images, joints, labels, _ = _model_and_data()
    images_t, joints_t = torch.from_numpy(images[:8]), torch.from_numpy(joints[:8])
    labels_t = torch.from_numpy(labels[:8])
    plain = normalized_delta_loss(model, images_t, joints_t, labels_t)
    ones = normalized_delta_loss(model, images_t, joints_t, labels_t, None, torch.ones(8))
    assert ones.item() == pytest.approx(plain.item(), rel=1e-6)
    with pytest.raises(ValueError, match=r"frame_weights must be \(64,\)"):
        regress(model, images, joints, labels, normalized_delta_loss, 1, 64, 1e-3, 0.0, 0, lambda _: None, "t",
                frame_weights=np.ones(3, dtype=np.float32))


def _config(tmp_path, **fields):
    data = {"robot": "so101", "preprocess": str(config_path("preprocess.yaml")), **fields}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_config_names_a_bad_weight_and_keeps_unweighted_hashes(tmp_path):
    plain = load_train_config(_config(tmp_path))
    same = load_train_config(_config(tmp_path, grasp_frame_weight=1.0, grasp_jaw_below_rad=0.3))
    weighted = load_train_config(_config(tmp_path, grasp_frame_weight=3.0))
    assert "grasp_frame_weight" not in plain.to_dict() and plain.to_dict() == same.to_dict()
    assert weighted.to_dict()["grasp_frame_weight"] == 3.0 and weighted.to_dict()["grasp_jaw_below_rad"] == 0.6
    # the BC student depends on it: a work directory is not resumed across a change of weight
    assert Trainer._bc_hash(types.SimpleNamespace(config=plain)) != Trainer._bc_hash(
        types.SimpleNamespace(config=weighted))
    for value in (0.5, 21, "heavy", True):
        with pytest.raises(ConfigError, match=r"train.yaml: field 'grasp_frame_weight'"):
            load_train_config(_config(tmp_path, grasp_frame_weight=value))
    with pytest.raises(ConfigError, match=r"field 'grasp_jaw_below_rad' = 'low'"):
        load_train_config(_config(tmp_path, grasp_frame_weight=2.0, grasp_jaw_below_rad="low"))
    with pytest.raises(ConfigError, match=r"field 'grasp_frame_weight' = 2.0.*no gripper"):
        load_train_config(_config(tmp_path, robot="arm6", grasp_frame_weight=2.0))
