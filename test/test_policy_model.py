"""The policy model (pure torch): shapes, normalization maths, registry, trainability, PolicySpec."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import make_policy_spec
from sim2real_ros.core.policy.model import (
    ARCHITECTURES,
    MAX_ACTIVATIONS,
    MAX_CHUNK_LENGTH,
    MAX_IMAGE_SIDE,
    MAX_JOINTS,
    MAX_LAYER_WIDTH,
    MAX_LAYERS,
    MAX_PARAMETERS,
    UNTRAINED_ACTION_STD,
    CnnMlpPolicy,
    PolicySpec,
    build_model,
    plan_model,
)
from sim2real_ros.paths import config_path

JOINTS = ("j1", "j2", "j3")
SMALL = {"channels": [4, 8], "pool_size": 2, "image_features": 16, "hidden": [32]}


@pytest.fixture
def spec() -> PolicySpec:
    preprocess = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    return make_policy_spec(JOINTS, preprocess, chunk_length=4, dt_s=0.1)


def random_batch(spec: PolicySpec, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch, spec.image_height, spec.image_width, 3), dtype=torch.uint8, generator=gen)
    joints = torch.rand((batch, spec.joint_count), generator=gen) * 2 - 1
    return images, joints


def test_default_model_is_registered_and_resolves_hparams(spec):
    model = build_model("cnn_mlp", spec)
    assert isinstance(model, CnnMlpPolicy) and ARCHITECTURES["cnn_mlp"] is CnnMlpPolicy
    assert model.hparams == CnnMlpPolicy.DEFAULT_HPARAMS
    small = build_model("cnn_mlp", spec, **SMALL)
    assert small.hparams == SMALL
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in model.parameters())


def test_batched_forward_shapes_and_untrained_model_holds_still(spec):
    model = build_model("cnn_mlp", spec).eval()
    images, joints = random_batch(spec, batch=5)
    with torch.no_grad():
        targets = model(images, joints)
    assert targets.shape == (5, spec.chunk_length, spec.joint_count)
    # Untrained: deltas are network outputs of order 1 times UNTRAINED_ACTION_STD.
    deltas = targets - joints.unsqueeze(1)
    assert deltas.abs().max() < 20 * UNTRAINED_ACTION_STD
    assert deltas.abs().max() > 0  # ...but the image does flow through the network


def test_normalization_from_data_makes_targets_zero_mean_unit_std(spec):
    model = build_model("cnn_mlp", spec, **SMALL)
    rng = np.random.default_rng(1)
    q = rng.normal([0.5, -1.0, 2.0], [0.1, 0.3, 0.05], size=(400, 3))
    steps = np.linspace(0.0, 0.3, spec.chunk_length)[None, :, None] * np.array([1.0, -2.0, 0.5])
    targets = q[:, None, :] + steps + rng.normal(0, 0.01, size=(400, spec.chunk_length, 3))
    model.set_normalization_from_data(q, targets)
    assert np.allclose(model.joint_mean.numpy(), q.mean(0), atol=1e-6)
    normalized = model.normalize_targets(torch.tensor(targets, dtype=torch.float32),
                                         torch.tensor(q, dtype=torch.float32)).numpy()
    assert np.allclose(normalized.mean(0), 0.0, atol=1e-3)
    assert np.allclose(normalized.std(0), 1.0, atol=1e-2)
    # forward() is exactly the inverse of normalize_targets applied to the network output.
    images, joints = random_batch(spec, batch=3)
    with torch.no_grad():
        absolute = model(images, joints)
        assert torch.allclose(model.normalize_targets(absolute, joints), model.forward_normalized(images, joints),
                              atol=1e-4)


def test_set_normalization_validates_shapes_and_floors_std(spec):
    model = build_model("cnn_mlp", spec, **SMALL)
    model.set_normalization([0, 0, 0], [1, 0, 1], [0.1, 0.2, 0.3], [0, 0, 0])  # (n,) actions broadcast over K
    assert model.joint_std[1] > 0 and torch.all(model.action_std > 0)
    assert torch.allclose(model.action_mean[-1], torch.tensor([0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match="joint_mean must have shape"):
        model.set_normalization([0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1])
    with pytest.raises(ValueError, match="NaN"):
        model.set_normalization([0, float("nan"), 0], [1, 1, 1], [0, 0, 0], [1, 1, 1])


def test_forward_rejects_wrong_inputs(spec):
    model = build_model("cnn_mlp", spec, **SMALL)
    images, joints = random_batch(spec, batch=2)
    with pytest.raises(ValueError, match="uint8"):
        model(images.float(), joints)
    with pytest.raises(ValueError, match="images must be"):
        model(images[:, :50], joints)
    with pytest.raises(ValueError, match="joint_positions must be"):
        model(images, joints[:, :2])


def test_a_few_training_steps_reduce_the_loss(spec):
    torch.manual_seed(0)
    model = build_model("cnn_mlp", spec, **SMALL)
    _, joints = random_batch(spec, batch=16)
    # Targets depend on the image brightness, so the encoder has to learn something.
    brightness = torch.linspace(0.0, 1.0, 16)
    images = (brightness[:, None, None, None] * 255).expand(16, spec.image_height, spec.image_width, 3)
    images = images.to(torch.uint8).contiguous()
    targets = joints.unsqueeze(1) + brightness[:, None, None] * torch.linspace(0, 0.2, spec.chunk_length)[None, :, None]
    model.set_normalization_from_data(joints.numpy(), targets.numpy())
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = torch.nn.functional.mse_loss(model.forward_normalized(images, joints),
                                            model.normalize_targets(targets, joints))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    # Normalization buffers are not trained.
    assert {name for name, _ in model.named_parameters()}.isdisjoint({"joint_mean", "joint_std", "action_mean"})


def test_build_model_refuses_unknown_architecture_and_hparams(spec):
    with pytest.raises(ConfigError, match="architecture.*'transformer9'.*cnn_mlp"):
        build_model("transformer9", spec)
    with pytest.raises(ConfigError, match="unknown for cnn_mlp.*depth"):
        build_model("cnn_mlp", spec, depth=3)
    with pytest.raises(ConfigError, match="hparams"):
        build_model("cnn_mlp", spec, channels=[])


def test_policy_spec_validates_fields_and_round_trips(spec):
    assert PolicySpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="'chunk_length' = 0"):
        dataclasses.replace(spec, chunk_length=0)
    with pytest.raises(ConfigError, match="'dt_s' = -0.1"):
        dataclasses.replace(spec, dt_s=-0.1)
    with pytest.raises(ConfigError, match="joint_names.*duplicate"):
        dataclasses.replace(spec, joint_names=("a", "a"))
    data = spec.to_dict()
    del data["preprocess_hash"]
    with pytest.raises(ConfigError, match="my.ckpt: field 'preprocess_hash'.*missing"):
        PolicySpec.from_dict(data, source="my.ckpt")


# ----------------------------------------------------------------------------------------------
# Size caps (a checkpoint's spec is untrusted: each size becomes an allocation)
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_the_plan_is_what_building_allocates(architecture, spec):
    """plan_model (meta device, nothing allocated) gives the real model's state shapes and dtypes."""
    plan = plan_model(architecture, spec)
    state = build_model(architecture, spec).state_dict()
    assert plan.state == {name: (tuple(t.shape), t.dtype) for name, t in state.items()}
    assert plan.parameters == sum(t.numel() for t in state.values())
    assert 0 < plan.activations < MAX_ACTIVATIONS


def test_spec_sizes_over_their_caps_are_refused_naming_the_field(spec):
    for field, value, cap in (("image_width", MAX_IMAGE_SIDE + 1, "MAX_IMAGE_SIDE"),
                              ("image_height", 10**9, "MAX_IMAGE_SIDE"),
                              ("chunk_length", MAX_CHUNK_LENGTH + 1, "MAX_CHUNK_LENGTH")):
        with pytest.raises(ConfigError, match=f"field '{field}' = {value}: more than {cap}"):
            dataclasses.replace(spec, **{field: value})
    with pytest.raises(ConfigError, match="joint_names.*MAX_JOINTS"):
        dataclasses.replace(spec, joint_names=tuple(f"j{i}" for i in range(MAX_JOINTS + 1)))
    with pytest.raises(ConfigError, match="'dt_s' = 3600"):
        dataclasses.replace(spec, dt_s=3600)
    # At the caps: accepted.
    dataclasses.replace(spec, image_width=MAX_IMAGE_SIDE, chunk_length=MAX_CHUNK_LENGTH,
                        joint_names=tuple(f"j{i}" for i in range(MAX_JOINTS)))


def test_hparams_over_their_caps_are_refused_before_allocating(spec):
    """Each refused in milliseconds by the plan; built, the last two would take 1 GiB and 4 GiB."""
    cases = [({"hidden": [MAX_LAYER_WIDTH + 1]}, "hparams.hidden' = 4097"),
             ({"hidden": [64] * (MAX_LAYERS + 1)}, "hparams.hidden' = <17 entries>"),
             ({"pool_size": 2.0}, "hparams.pool_size' = 2.0"),
             ({"channels": [True]}, "hparams.channels' = True"),
             ({"hidden": [MAX_LAYER_WIDTH] * MAX_LAYERS}, "MAX_PARAMETERS"),
             ({"channels": [MAX_LAYER_WIDTH]}, "MAX_ACTIVATIONS")]
    big_image = dataclasses.replace(spec, image_width=MAX_IMAGE_SIDE, image_height=MAX_IMAGE_SIDE)
    for hparams, message in cases:
        with pytest.raises(ConfigError, match=message):
            build_model("cnn_mlp", big_image, **hparams)
    assert MAX_PARAMETERS < MAX_LAYER_WIDTH**2 * MAX_LAYERS  # the caps on each size alone do not bound the model


# ----------------------------------------------------------------------------------------------
# Keypoints with the channels' means (cnn_spatial_softmax_pooled)
class _FixedFeatures(torch.nn.Module):
    """An image encoder that returns the given feature maps whatever the image (one per sample)."""

    def __init__(self, features: torch.Tensor) -> None:
        super().__init__()
        self.features = features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features.expand(images.shape[0], -1, -1, -1)


@pytest.mark.parametrize(("architecture", "tells_them_apart"),
                         [("cnn_spatial_softmax", False), ("cnn_spatial_softmax_pooled", True)])
def test_only_the_pooled_keypoint_model_sees_how_strong_a_feature_is(spec, architecture, tells_them_apart):
    """Feature maps that differ by a constant have the same softmax keypoints: the plain model
    cannot tell them apart (a channel's strength, e.g. how much edge at one angle the cube shows),
    the pooled one gets each channel's mean as well."""
    torch.manual_seed(0)
    model = build_model(architecture, spec, channels=[4, 8], keypoints=6, hidden=[32]).eval()
    h, w = model.feature_map_size
    features = torch.randn(1, 6, h, w)
    images, joints = random_batch(spec, 1)
    outputs = []
    for shift in (0.0, 1.5):
        model.image_encoder = _FixedFeatures(features + shift)
        with torch.no_grad():
            outputs.append(model.forward_normalized(images, joints))
    different = not torch.allclose(outputs[0], outputs[1], atol=1e-6)
    assert different == tells_them_apart
