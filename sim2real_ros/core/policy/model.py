"""The vision policy: image + joint positions -> a chunk of K future absolute joint targets.

Pure torch (no rclpy). What a checkpoint needs to rebuild a model is a `PolicySpec` (architecture
name, hyperparameters, observation and action spec); the weights and the normalization statistics
live in the model's state_dict, so a checkpoint is self-contained (see core/checkpoint.py).

Action parameterization (why the network predicts deltas): the network outputs, for each chunk
point k and joint j, a normalized *delta* from the current joint position,

    target[k, j] = q[j] + action_mean[k, j] + action_std[k, j] * network_output[k, j]

so an untrained network (output near 0, action_mean = 0, small action_std) holds the robot where it
is, which is the safe behaviour, and training regresses a well-scaled, zero-mean quantity. Joint
positions are normalized as (q - joint_mean) / joint_std before entering the network. Images enter
as uint8 RGB (B, H, W, 3) and are scaled to [-1, 1] inside the model.

Joint history (core/control/joint_history.py): a spec with `joint_history_s` (H lags) builds a
model that also takes the joint positions at those lags before the observation, (B, H, n) [rad].
They enter as deltas from the current positions, (history - q) / history_std, flattened after the
normalized current positions; history_std (H, n) [rad] is a buffer fitted from data like the
others. A model without history has no such buffer and the state it always had.

Time convention (docs/design.md §3): chunk point k is the target for time `stamp + k * dt`, where stamp
is the observation's capture time; point 0 is therefore the target at the observation time.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from .spec import (  # noqa: F401 - re-exported: policy_model has always offered them
    MAX_ACTIVATIONS,
    MAX_CHUNK_LENGTH,
    MAX_DT_S,
    MAX_IMAGE_SIDE,
    MAX_JOINTS,
    MAX_NAME_LENGTH,
    MAX_PARAMETERS,
    PolicySpec,
    _Shown,
    abbreviate,
)

DEFAULT_ARCHITECTURE = "cnn_mlp"
DEFAULT_CHUNK_LENGTH = 10
DEFAULT_DT_S = 0.05
# Smallest standard deviation used to normalize: keeps a joint that never moved in the data (or a
# constant chunk offset) from dividing by zero. [rad]
MIN_STD = 1e-4
MIN_JOINT_STD = 0.05  # [rad] floor of the joint-position std learned from data
# action_std of an untrained model [rad]: its outputs stay within ~a milliradian of the current
# position, i.e. it holds still.
UNTRAINED_ACTION_STD = 1e-3
# Floor of the history deltas' std [rad]: a joint that never moved over a lag in the data (a
# gripper held open) must not turn a small later motion into a huge input.
MIN_HISTORY_STD = 0.01

# Caps on every size a spec gives (docs/design.md §5: a checkpoint is untrusted input, and each of these
# sizes becomes an allocation when the model is built or warmed up). Generous: each is 10x or more
# what this stack uses, and far below what would take a machine's memory.
MAX_LAYER_WIDTH = 4096  # any integer hyperparameter (conv channels, MLP widths, keypoints, pool size)
MAX_LAYERS = 16  # entries of a list hyperparameter (convs, MLP layers): 2-4 here
# MAX_PARAMETERS (elements of the model's state) and MAX_ACTIVATIONS (intermediate elements of one
# batch-1 inference) are in policy_spec.py, shared with ONNX graphs.


# ----------------------------------------------------------------------------------------------
# Models
class PolicyModel(nn.Module):
    """Base class of every architecture: normalization buffers and the (de)normalization maths.

    Subclasses implement `encode(images_float (B, 3, H, W) in [-1, 1], joints_normalized (B,
    joint_input_width)) -> (B, K * n)` normalized deltas, and list their hyperparameters with
    defaults in DEFAULT_HPARAMS. joints_normalized holds the current positions (n), then the
    history's deltas (H * n) when the model has a history.
    """

    DEFAULT_HPARAMS: dict[str, Any] = {}

    def __init__(self, joint_count: int, chunk_length: int, image_height: int, image_width: int,
                 history_length: int = 0) -> None:
        super().__init__()
        self.joint_count = int(joint_count)
        self.chunk_length = int(chunk_length)
        self.image_height = int(image_height)
        self.image_width = int(image_width)
        self.history_length = int(history_length)
        if self.history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length}")
        self.hparams: dict[str, Any] = {}
        n, k = self.joint_count, self.chunk_length
        if self.history_length:
            # (q(t - lag) - q(t)) / history_std: its own scale, the deltas are far smaller than q's spread.
            self.register_buffer("history_std", torch.ones(self.history_length, n))  # [rad]
        # Buffers, not parameters: saved with the weights, never touched by the optimizer.
        self.register_buffer("joint_mean", torch.zeros(n))  # [rad]
        self.register_buffer("joint_std", torch.ones(n))  # [rad]
        self.register_buffer("action_mean", torch.zeros(k, n))  # delta from current q [rad]
        self.register_buffer("action_std", torch.full((k, n), UNTRAINED_ACTION_STD))  # [rad]

    @property
    def joint_input_width(self) -> int:
        """Numbers of joint input the encoder sees: n current positions, then H * n history deltas."""
        return self.joint_count * (1 + self.history_length)

    # -- to implement ---------------------------------------------------------------------------
    def encode(self, images: torch.Tensor, joints_normalized: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- normalization --------------------------------------------------------------------------
    def set_normalization(
        self,
        joint_mean: Sequence[float] | np.ndarray | torch.Tensor,
        joint_std: Sequence[float] | np.ndarray | torch.Tensor,
        action_mean: Sequence[float] | np.ndarray | torch.Tensor,
        action_std: Sequence[float] | np.ndarray | torch.Tensor,
    ) -> None:
        """Set the statistics from a dataset. joint_mean/std (n,) [rad] of observed joint positions;
        action_mean/std (K, n) or (n,) [rad] of the *deltas* target[k] - q (see module docstring).
        Standard deviations are floored at MIN_STD."""
        n, k = self.joint_count, self.chunk_length

        def as_tensor(value: Any, shape: tuple[int, ...], name: str) -> torch.Tensor:
            tensor = torch.as_tensor(np.asarray(value, dtype=np.float32))
            if tensor.shape == (n,) and shape == (k, n):
                tensor = tensor.expand(k, n)
            if tuple(tensor.shape) != shape:
                raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")
            if not torch.all(torch.isfinite(tensor)):
                raise ValueError(f"{name} contains NaN/Inf")
            return tensor.clone()

        self.joint_mean.copy_(as_tensor(joint_mean, (n,), "joint_mean"))
        self.joint_std.copy_(as_tensor(joint_std, (n,), "joint_std").clamp_min(MIN_STD))
        self.action_mean.copy_(as_tensor(action_mean, (k, n), "action_mean"))
        self.action_std.copy_(as_tensor(action_std, (k, n), "action_std").clamp_min(MIN_STD))

    def set_history_normalization(self, history_std: Sequence[float] | np.ndarray | torch.Tensor) -> None:
        """history_std (H, n) [rad] of the history deltas q(t - lag) - q(t), floored at MIN_HISTORY_STD."""
        shape = (self.history_length, self.joint_count)
        tensor = torch.as_tensor(np.asarray(history_std, dtype=np.float32))
        if tuple(tensor.shape) != shape or not torch.all(torch.isfinite(tensor)):
            raise ValueError(f"history_std must be finite with shape {shape}, got {tuple(tensor.shape)}")
        if self.history_length:
            self.history_std.copy_(tensor.clamp_min(MIN_HISTORY_STD))

    def set_normalization_from_data(self, joint_positions: np.ndarray, target_chunks: np.ndarray,
                                    joint_histories: np.ndarray | None = None) -> None:
        """Compute and set the statistics from a dataset: joint_positions (N, n) [rad] observed,
        target_chunks (N, K, n) absolute targets [rad] for the same samples, joint_histories
        (N, H, n) [rad] their histories (a model with history needs them)."""
        if self.history_length:
            if joint_histories is None:
                raise ValueError(f"a model with a joint history of {self.history_length} needs joint_histories")
            histories = np.asarray(joint_histories, dtype=np.float64)
            q_all = np.asarray(joint_positions, dtype=np.float64)
            if histories.shape != (q_all.shape[0], self.history_length, self.joint_count):
                raise ValueError(f"need joint_histories (N, {self.history_length}, {self.joint_count}), "
                                 f"got {histories.shape}")
            self.set_history_normalization((histories - q_all[:, None, :]).std(0))
        q = np.asarray(joint_positions, dtype=np.float64)
        targets = np.asarray(target_chunks, dtype=np.float64)
        expected = (q.shape[0], self.chunk_length, self.joint_count)
        if q.ndim != 2 or q.shape[1] != self.joint_count or targets.shape != expected:
            raise ValueError(f"need joint_positions (N, {self.joint_count}) and target_chunks {expected}, "
                             f"got {q.shape} and {targets.shape}")
        deltas = targets - q[:, None, :]
        # A joint the data never moved (e.g. a wrist roll the reach teacher leaves alone) would get a
        # ~0 std and turn any later deviation (a human jogging it) into a huge input: floor it.
        joint_std = np.maximum(q.std(0), MIN_JOINT_STD)
        self.set_normalization(q.mean(0), joint_std, deltas.mean(0), deltas.std(0))

    def normalize_targets(self, target_chunks: torch.Tensor, joint_positions: torch.Tensor) -> torch.Tensor:
        """Absolute targets (B, K, n) [rad] -> the normalized deltas the network regresses (B, K, n).
        Training computes its loss between this and `forward_normalized`."""
        deltas = target_chunks - joint_positions.unsqueeze(1)
        return (deltas - self.action_mean) / self.action_std

    # -- inference ------------------------------------------------------------------------------
    def _check_inputs(self, images: torch.Tensor, joint_positions: torch.Tensor,
                      joint_history: torch.Tensor | None = None) -> None:
        expected = (self.image_height, self.image_width, 3)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"images must be (B, {expected[0]}, {expected[1]}, 3), got {tuple(images.shape)}")
        if images.dtype != torch.uint8:
            raise ValueError(f"images must be uint8 RGB, got {images.dtype}")
        if joint_positions.dim() != 2 or joint_positions.shape != (images.shape[0], self.joint_count):
            raise ValueError(
                f"joint_positions must be (B={images.shape[0]}, {self.joint_count}), got {tuple(joint_positions.shape)}"
            )
        if self.history_length:
            expected_history = (images.shape[0], self.history_length, self.joint_count)
            if joint_history is None or tuple(joint_history.shape) != expected_history:
                got = None if joint_history is None else tuple(joint_history.shape)
                raise ValueError(f"joint_history must be {expected_history} [rad] for this model, got {got}")

    def forward_normalized(self, images: torch.Tensor, joint_positions: torch.Tensor,
                           joint_history: torch.Tensor | None = None) -> torch.Tensor:
        """images uint8 (B, H, W, 3) RGB, joint_positions (B, n) [rad], joint_history (B, H, n)
        [rad] (models with history only) -> normalized deltas (B, K, n)."""
        self._check_inputs(images, joint_positions, joint_history)
        x = images.permute(0, 3, 1, 2).to(self.joint_mean.dtype) * (2.0 / 255.0) - 1.0
        q = joint_positions.to(self.joint_mean.dtype)
        q_normalized = (q - self.joint_mean) / self.joint_std
        if self.history_length and joint_history is not None:
            past = (joint_history.to(q.dtype) - q.unsqueeze(1)) / self.history_std
            q_normalized = torch.cat([q_normalized, past.flatten(1)], dim=1)
        out = self.encode(x, q_normalized)
        return out.reshape(-1, self.chunk_length, self.joint_count)

    def predict_deltas(self, images: torch.Tensor, joint_positions: torch.Tensor,
                       joint_history: torch.Tensor | None = None) -> torch.Tensor:
        """Targets minus current positions (B, K, n) [rad]."""
        return self.forward_normalized(images, joint_positions, joint_history) * self.action_std + self.action_mean

    def forward(self, images: torch.Tensor, joint_positions: torch.Tensor,
                joint_history: torch.Tensor | None = None) -> torch.Tensor:
        """images uint8 (B, H, W, 3) RGB, joint_positions (B, n) [rad], joint_history (B, H, n) [rad]
        (models with history only) -> absolute targets (B, K, n) [rad]; point k is the target for
        time stamp + k * dt."""
        q = joint_positions.to(self.joint_mean.dtype)
        return q.unsqueeze(1) + self.predict_deltas(images, q, joint_history)


ARCHITECTURES: dict[str, type[PolicyModel]] = {}


def register_architecture(name: str) -> Callable[[type[PolicyModel]], type[PolicyModel]]:
    """Class decorator: make an architecture buildable by name from a checkpoint."""

    def decorate(cls: type[PolicyModel]) -> type[PolicyModel]:
        if name in ARCHITECTURES and ARCHITECTURES[name] is not cls:
            raise ValueError(f"architecture {name!r} is already registered to {ARCHITECTURES[name].__name__}")
        ARCHITECTURES[name] = cls
        return cls

    return decorate


def _conv_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


@register_architecture("cnn_mlp")
class CnnMlpPolicy(PolicyModel):
    """Small CNN image encoder (strided convs + spatial pooling) concatenated with the normalized
    joint positions, then an MLP to K * n normalized deltas. A few ms per image on one CPU core.

    hparams: channels (conv widths, each conv halves the resolution), pool_size (pooled grid side),
    image_features (image embedding size), hidden (MLP widths).
    """

    DEFAULT_HPARAMS: dict[str, Any] = {
        "channels": [16, 32, 32, 32],
        "pool_size": 3,
        "image_features": 128,
        "hidden": [256, 256],
    }

    def __init__(self, joint_count: int, chunk_length: int, image_height: int, image_width: int,
                 channels: Sequence[int] = (16, 32, 32, 32), pool_size: int = 3, image_features: int = 128,
                 hidden: Sequence[int] = (256, 256), history_length: int = 0) -> None:
        super().__init__(joint_count, chunk_length, image_height, image_width, history_length)
        channels = [int(c) for c in channels]
        hidden = [int(h) for h in hidden]
        if not channels or min(channels) <= 0 or not hidden or min(hidden) <= 0:
            raise ValueError(f"channels and hidden must be non-empty positive widths, got {channels}, {hidden}")
        if int(pool_size) <= 0 or int(image_features) <= 0:
            raise ValueError(f"pool_size and image_features must be positive, got {pool_size}, {image_features}")
        self.hparams = {"channels": channels, "pool_size": int(pool_size), "image_features": int(image_features),
                        "hidden": hidden}
        layers: list[nn.Module] = []
        in_channels, h, w = 3, image_height, image_width
        for i, out_channels in enumerate(channels):
            kernel = 5 if i == 0 else 3
            layers += [nn.Conv2d(in_channels, out_channels, kernel, stride=2, padding=kernel // 2), nn.ReLU()]
            in_channels = out_channels
            h, w = _conv_output_size(h, kernel, 2, kernel // 2), _conv_output_size(w, kernel, 2, kernel // 2)
            if h <= 0 or w <= 0:
                raise ValueError(f"image {image_width}x{image_height} is too small for {len(channels)} convs")
        layers += [nn.AdaptiveAvgPool2d(int(pool_size)), nn.Flatten(),
                   nn.Linear(in_channels * int(pool_size) ** 2, int(image_features)), nn.ReLU()]
        self.image_encoder = nn.Sequential(*layers)
        mlp: list[nn.Module] = []
        width = int(image_features) + self.joint_input_width
        for size in hidden:
            mlp += [nn.Linear(width, size), nn.ReLU()]
            width = size
        mlp.append(nn.Linear(width, chunk_length * joint_count))
        self.head = nn.Sequential(*mlp)

    def encode(self, images: torch.Tensor, joints_normalized: torch.Tensor) -> torch.Tensor:
        features = self.image_encoder(images)
        return self.head(torch.cat([features, joints_normalized], dim=1))


class SpatialSoftmax(nn.Module):
    """Feature maps (B, C, H, W) -> expected image coordinates (B, 2C) in [-1, 1] of each channel's
    softmax over pixels (one keypoint per channel, sub-pixel precise; Levine et al. 2016)."""

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1.0, 1.0, height), torch.linspace(-1.0, 1.0, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1), persistent=False)
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        b, c, h, w = features.shape
        weights = torch.softmax(features.reshape(b, c, h * w) / self.log_temperature.exp(), dim=-1)
        return (weights @ self.grid).reshape(b, 2 * c)


@register_architecture("cnn_spatial_softmax")
class SpatialSoftmaxPolicy(PolicyModel):
    """Small CNN whose last layer's channels become keypoints (spatial softmax), concatenated with
    the normalized joint positions, then an MLP to K * n normalized deltas. Keypoints keep where
    things are in the image (the target), which pooled features blur; about 1 ms per image on one
    CPU core at 96x96.

    hparams: channels (conv widths; the first two convs halve the resolution), keypoints (channels
    of the last conv = number of keypoints), hidden (MLP widths).
    """

    DEFAULT_HPARAMS: dict[str, Any] = {"channels": [16, 32], "keypoints": 32, "hidden": [256, 256]}
    FEATURES_PER_KEYPOINT = 2  # its image coordinates (x, y)

    def __init__(self, joint_count: int, chunk_length: int, image_height: int, image_width: int,
                 channels: Sequence[int] = (16, 32), keypoints: int = 32, hidden: Sequence[int] = (256, 256),
                 history_length: int = 0) -> None:
        super().__init__(joint_count, chunk_length, image_height, image_width, history_length)
        channels = [int(c) for c in channels]
        hidden = [int(h) for h in hidden]
        if not channels or min(channels) <= 0 or int(keypoints) <= 0 or not hidden or min(hidden) <= 0:
            raise ValueError(f"channels, keypoints and hidden must be positive, got {channels}, {keypoints}, {hidden}")
        self.hparams = {"channels": channels, "keypoints": int(keypoints), "hidden": hidden}
        layers: list[nn.Module] = []
        in_channels, h, w = 3, image_height, image_width
        for i, out_channels in enumerate(channels):
            kernel, stride = (5, 2) if i == 0 else (3, 2 if i == 1 else 1)
            layers += [nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2), nn.ReLU()]
            h, w = _conv_output_size(h, kernel, stride, kernel // 2), _conv_output_size(w, kernel, stride, kernel // 2)
            in_channels = out_channels
        if h <= 1 or w <= 1:
            raise ValueError(f"image {image_width}x{image_height} is too small for {len(channels)} convs")
        layers.append(nn.Conv2d(in_channels, int(keypoints), 3, padding=1))
        self.image_encoder = nn.Sequential(*layers)
        self.keypoints = SpatialSoftmax(h, w)
        self.feature_map_size = (h, w)  # [px] of the keypoint maps
        mlp: list[nn.Module] = []
        width = self.FEATURES_PER_KEYPOINT * int(keypoints) + self.joint_input_width
        for size in hidden:
            mlp += [nn.Linear(width, size), nn.ReLU()]
            width = size
        mlp.append(nn.Linear(width, chunk_length * joint_count))
        self.head = nn.Sequential(*mlp)

    def encode(self, images: torch.Tensor, joints_normalized: torch.Tensor) -> torch.Tensor:
        points = self.keypoints(self.image_encoder(images))
        return self.head(torch.cat([points, joints_normalized], dim=1))


@register_architecture("cnn_spatial_softmax_pooled")
class PooledSpatialSoftmaxPolicy(SpatialSoftmaxPolicy):
    """cnn_spatial_softmax whose head also gets each keypoint channel's mean activation over the
    image. The softmax keeps where a feature is and normalizes away how much of it there is; the
    mean keeps that (e.g. how strongly the edges at one angle respond: a cube's yaw, which the
    grasp must match and a keypoint's position alone does not give). Same hparams, same cost but
    one average pool.
    """

    FEATURES_PER_KEYPOINT = 3  # x, y and the channel's mean

    def __init__(self, joint_count: int, chunk_length: int, image_height: int, image_width: int,
                 channels: Sequence[int] = (16, 32), keypoints: int = 32, hidden: Sequence[int] = (256, 256),
                 history_length: int = 0) -> None:
        super().__init__(joint_count, chunk_length, image_height, image_width, channels, keypoints, hidden,
                         history_length)
        # A pool over the whole map (ONNX AveragePool: an operator the exporter already emits).
        self.channel_mean = nn.Sequential(nn.AvgPool2d(self.feature_map_size), nn.Flatten())

    def encode(self, images: torch.Tensor, joints_normalized: torch.Tensor) -> torch.Tensor:
        features = self.image_encoder(images)
        return self.head(torch.cat([self.keypoints(features), self.channel_mean(features), joints_normalized], dim=1))


def _architecture_class(architecture: str) -> type[PolicyModel]:
    cls = ARCHITECTURES.get(architecture)
    if cls is None:
        raise ConfigError("policy", "architecture", abbreviate(architecture),
                          f"unknown; registered: {sorted(ARCHITECTURES)}")
    return cls


def _check_size(key: str, value: Any) -> None:
    """One integer hyperparameter: a real int (not a bool, not 3.0) in 1..MAX_LAYER_WIDTH."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 1 <= value <= MAX_LAYER_WIDTH:
        raise ConfigError("policy", f"hparams.{key}", abbreviate(value),
                          f"must be an integer from 1 to MAX_LAYER_WIDTH = {MAX_LAYER_WIDTH}")


def resolve_hparams(architecture: str, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """`hparams` over the architecture's DEFAULT_HPARAMS, with every size bounded: an integer
    default takes an int in 1..MAX_LAYER_WIDTH, a list default a list of 1..MAX_LAYERS such ints.
    Raises ConfigError naming the hyperparameter for an unknown architecture or hyperparameter,
    a wrong type or a size out of bounds."""
    cls = _architecture_class(architecture)
    unknown = sorted(str(k) for k in set(hparams) - set(cls.DEFAULT_HPARAMS))
    if unknown:
        raise ConfigError("policy", "hparams", abbreviate(unknown),
                          f"unknown for {architecture}: {abbreviate(unknown)}; known: {sorted(cls.DEFAULT_HPARAMS)}")
    merged = {**cls.DEFAULT_HPARAMS, **hparams}
    for key, default in cls.DEFAULT_HPARAMS.items():
        value = merged[key]
        if isinstance(default, (list, tuple)):
            if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_LAYERS:
                shown = _Shown(f"<{len(value)} entries>") if isinstance(value, (list, tuple)) else abbreviate(value)
                raise ConfigError("policy", f"hparams.{key}", shown,
                                  f"must be a list of 1 to MAX_LAYERS = {MAX_LAYERS} sizes")
            for item in value:
                _check_size(key, item)
        elif isinstance(default, int) and not isinstance(default, bool):
            _check_size(key, value)
    return merged


@dataclass(frozen=True)
class ModelPlan:
    """What building a model for a spec would allocate, found without allocating it (the model is
    built on torch's "meta" device, which records shapes only).

    state: name -> (shape, dtype) of every state_dict entry (what a checkpoint must hold).
    parameters: elements in the state. activations: elements of the intermediate results of one
    batch-1 inference (every module's output plus the image as uint8 and float: the measure of
    what the warm-up needs; it holds fewer at once, but convolutions add some workspace)."""

    state: dict[str, tuple[tuple[int, ...], torch.dtype]]
    parameters: int
    activations: int


def plan_model(architecture: str, spec: PolicySpec, **hparams: Any) -> ModelPlan:
    """The ModelPlan of build_model(architecture, spec, **hparams); raises ConfigError when the
    hyperparameters are bad or the model would exceed MAX_PARAMETERS or MAX_ACTIVATIONS."""
    cls = _architecture_class(architecture)
    merged = resolve_hparams(architecture, hparams)
    try:
        with torch.device("meta"):
            model = cls(spec.joint_count, spec.chunk_length, spec.image_height, spec.image_width, **merged,
                        history_length=len(spec.joint_history_s))
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError("policy", "hparams", merged, str(err)) from err
    state = {name: (tuple(t.shape), t.dtype) for name, t in model.state_dict().items()}
    parameters = sum(t.numel() for t in model.state_dict().values())
    if parameters > MAX_PARAMETERS:
        raise ConfigError("policy", "hparams", merged,
                          f"the model for a {spec.image_width}x{spec.image_height} image, {spec.joint_count} joints "
                          f"and {spec.chunk_length} points would have {parameters} parameters, more than "
                          f"MAX_PARAMETERS = {MAX_PARAMETERS}")
    activations = _meta_activations(model, spec)
    if activations > MAX_ACTIVATIONS:
        raise ConfigError("policy", "hparams", merged,
                          f"one inference on a {spec.image_width}x{spec.image_height} image would hold {activations} "
                          f"intermediate values, more than MAX_ACTIVATIONS = {MAX_ACTIVATIONS}")
    return ModelPlan(state, parameters, activations)


def _meta_activations(model: PolicyModel, spec: PolicySpec) -> int:
    """Elements of every leaf module's output in one batch-1 inference of a meta-device model."""
    total = 2 * spec.image_height * spec.image_width * 3  # the image, as uint8 and as float

    def count(_module: nn.Module, _inputs: Any, output: Any) -> None:
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel()

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    try:
        images = torch.zeros((1, spec.image_height, spec.image_width, 3), dtype=torch.uint8, device="meta")
        joints = torch.zeros((1, spec.joint_count), device="meta")
        history = torch.zeros((1, len(spec.joint_history_s), spec.joint_count), device="meta") \
            if spec.joint_history_s else None
        with torch.no_grad():
            model.forward_normalized(images, joints, history)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError("policy", "hparams", model.hparams, f"the model cannot run: {err}") from err
    finally:
        for handle in handles:
            handle.remove()
    return total


def build_model(architecture: str, spec: PolicySpec, **hparams: Any) -> PolicyModel:
    """Build an (untrained) model for `spec`'s joints, image size and chunk length.

    hparams override the architecture's DEFAULT_HPARAMS; the resolved values are in model.hparams
    (save_checkpoint records them). Raises ConfigError for an unknown architecture, bad hparams or
    a model over the size caps (plan_model), before allocating anything.
    """
    plan_model(architecture, spec, **resolve_hparams(architecture, hparams))
    return build_planned_model(architecture, spec, **hparams)


def build_planned_model(architecture: str, spec: PolicySpec, **hparams: Any) -> PolicyModel:
    """build_model without planning it again: only for a spec and hparams that plan_model has
    already passed (core.policy.checkpoint.read_checkpoint plans every checkpoint it reads; the
    meta-device plan costs as much as building the model)."""
    cls = _architecture_class(architecture)
    merged = resolve_hparams(architecture, hparams)
    try:
        return cls(spec.joint_count, spec.chunk_length, spec.image_height, spec.image_width, **merged,
                   history_length=len(spec.joint_history_s))
    except (TypeError, ValueError) as err:
        raise ConfigError("policy", "hparams", merged, str(err)) from err
