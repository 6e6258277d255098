"""The policy spec (what a policy needs besides its weights) and the check of a spec against the
running graph: plain Python + numpy, no torch, so that a policy run by ONNX Runtime
(core/onnx_policy.py) shares them with checkpoints (core/checkpoint.py, core/policy_model.py)
without importing torch.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..control.joint_history import check_history_lags, checked_history
from ..errors import CheckpointError, ConfigError
from ..perception.preprocess_config import PreprocessConfig

# The first 16 bytes of a checkpoint file of the format before safetensors (core/policy/
# legacy_checkpoint.py), by kind: recognised to say "run sim2real policy convert".
LEGACY_MAGICS = {b"SIM2REAL-POLICY\n": "policy", b"SIM2REAL-TEACHR\n": "teacher"}


def looks_like_safetensors(head: bytes) -> bool:
    """Whether a file's first bytes (at least 9) can start a safetensors file (core/policy/
    checkpoint.py): an 8-byte little-endian header length below 2**32, then the header's '{'."""
    return len(head) > 8 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 2**32


# Caps on the sizes a spec gives (docs/design.md §5: a policy file is untrusted input); the caps on
# layer sizes are in policy_model.py.
MAX_JOINTS = 64  # joints per policy: the arms here have 6-9, a humanoid about 40
MAX_NAME_LENGTH = 256  # characters of a joint or architecture name (URDF names are short)
MAX_IMAGE_SIDE = 1024  # [px] policy image width and height: policy images are downscaled (96x96 here)
MAX_CHUNK_LENGTH = 1000  # points per action chunk: 10 here, action-chunking policies use about 100
MAX_DT_S = 10.0  # [s] between chunk points: 0.05 here; a chunk point 10 s away is no control any more
# Elements of a model's state (parameters + buffers): 64 Mi = 256 MiB float32; the models here
# have about 0.1 Mi. Shared by checkpoints (policy_model.plan_model) and ONNX graphs (onnx_graph_check).
MAX_PARAMETERS = 64 * 1024 * 1024
# Elements of the intermediate results of one batch-1 inference (the warm-up): 64 Mi = 256 MiB
# float32; 0.2 Mi here at 96x96.
MAX_ACTIVATIONS = 64 * 1024 * 1024


@dataclass(frozen=True)
class PolicySpec:
    """Everything needed to rebuild and safely run a policy, besides its weights.

    architecture: registry name (see ARCHITECTURES); hparams: its hyperparameters (JSON values).
    joint_names: observation and action joint order. image_width, image_height [px]: policy image
    size. policy_camera: the policy camera model as CameraModel.to_dict() (intrinsics [px]).
    chunk_length: K points per chunk; dt_s [s]: time between points. preprocess: the
    PreprocessConfig.to_dict() the policy was trained with, preprocess_hash its content hash.
    sim_params_version: content hash of the sim parameters YAML trained on ("unknown" if none).
    provenance: how it was trained (method, parent checkpoint hash, data, date, git commit, ...).
    joint_history_s: lags [s] at which the policy also sees the measured joint positions before
    the observation (core/control/joint_history.py); () for a policy that sees the present only.
    """

    architecture: str
    hparams: dict[str, Any]
    joint_names: tuple[str, ...]
    image_width: int
    image_height: int
    policy_camera: dict[str, Any]
    chunk_length: int
    dt_s: float
    preprocess: dict[str, Any]
    preprocess_hash: str
    sim_params_version: str = "unknown"
    provenance: dict[str, Any] = field(default_factory=dict)
    joint_history_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        source = "PolicySpec"
        object.__setattr__(self, "joint_names", tuple(str(n) for n in self.joint_names))
        object.__setattr__(self, "joint_history_s", check_history_lags(self.joint_history_s, source))
        if not self.architecture:
            raise ConfigError(source, "architecture", self.architecture, "must be a non-empty name")
        if not self.joint_names:
            raise ConfigError(source, "joint_names", list(self.joint_names), "needs at least one joint")
        if len(self.joint_names) > MAX_JOINTS:
            raise ConfigError(source, "joint_names", _Shown(f"<{len(self.joint_names)} names>"),
                              f"more than MAX_JOINTS = {MAX_JOINTS} joints")
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ConfigError(source, "joint_names", list(self.joint_names), "contains duplicate names")
        if len(self.architecture) > MAX_NAME_LENGTH:
            raise ConfigError(source, "architecture", abbreviate(self.architecture),
                              f"longer than {MAX_NAME_LENGTH} characters")
        for joint in self.joint_names:
            if not joint or len(joint) > MAX_NAME_LENGTH:
                raise ConfigError(source, "joint_names", abbreviate(joint),
                                  f"a joint name must have 1 to {MAX_NAME_LENGTH} characters")
        caps = {"image_width": (MAX_IMAGE_SIDE, "MAX_IMAGE_SIDE", " [px]"),
                "image_height": (MAX_IMAGE_SIDE, "MAX_IMAGE_SIDE", " [px]"),
                "chunk_length": (MAX_CHUNK_LENGTH, "MAX_CHUNK_LENGTH", " points")}
        for name, (cap, cap_name, unit) in caps.items():
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(source, name, value, "must be a positive integer")
            if value > cap:
                raise ConfigError(source, name, value, f"more than {cap_name} = {cap}{unit}")
        if not (isinstance(self.dt_s, (int, float)) and np.isfinite(self.dt_s) and 0 < self.dt_s <= MAX_DT_S):
            raise ConfigError(source, "dt_s", self.dt_s, f"must be a positive number of seconds <= {MAX_DT_S}")
        for name in ("hparams", "policy_camera", "preprocess", "provenance"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(source, name, getattr(self, name), "must be a mapping")

    @property
    def joint_count(self) -> int:
        return len(self.joint_names)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        data = asdict(self)
        data["joint_names"] = list(self.joint_names)
        # Left out when empty: a policy of the present only writes the spec it always wrote.
        if self.joint_history_s:
            data["joint_history_s"] = list(self.joint_history_s)
        else:
            del data["joint_history_s"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "PolicySpec") -> PolicySpec:
        """Inverse of to_dict; ConfigError names the source and the missing or bad field."""
        if not isinstance(data, Mapping):
            raise ConfigError(source, "<spec>", data, "must be a mapping")
        required = ("architecture", "hparams", "joint_names", "image_width", "image_height", "policy_camera",
                    "chunk_length", "dt_s", "preprocess", "preprocess_hash")
        for key in required:
            if key not in data:
                raise ConfigError(source, key, None, "missing")
        # A spec read from a file is untrusted: every field must already have its type (str() or
        # dict() of a wrong type would turn garbage into something plausible).
        types = {"architecture": (str,), "hparams": (Mapping,), "joint_names": (list, tuple),
                 "policy_camera": (Mapping,), "dt_s": (int, float), "preprocess": (Mapping,),
                 "preprocess_hash": (str,), "sim_params_version": (str,), "provenance": (Mapping,)}
        for key, allowed in types.items():
            if key in data and (not isinstance(data[key], allowed) or isinstance(data[key], bool)):
                raise ConfigError(source, key, abbreviate(data[key]),
                                  f"must be of type {' or '.join(t.__name__ for t in allowed)}")
        names = data["joint_names"]
        if len(names) > MAX_JOINTS:  # before looking at each one: the list may be huge
            raise ConfigError(source, "joint_names", _Shown(f"<{len(names)} names>"),
                              f"more than MAX_JOINTS = {MAX_JOINTS} joints")
        if not all(isinstance(n, str) for n in names):
            raise ConfigError(source, "joint_names", abbreviate(names), "must be a list of strings")
        try:
            return cls(
                architecture=str(data["architecture"]),
                hparams=dict(data["hparams"]),
                joint_names=tuple(data["joint_names"]),
                image_width=data["image_width"],
                image_height=data["image_height"],
                policy_camera=dict(data["policy_camera"]),
                chunk_length=data["chunk_length"],
                dt_s=float(data["dt_s"]),
                preprocess=dict(data["preprocess"]),
                preprocess_hash=str(data["preprocess_hash"]),
                sim_params_version=str(data.get("sim_params_version", "unknown")),
                provenance=dict(data.get("provenance", {})),
                # Absent in checkpoints from before the history input: a policy of the present only.
                joint_history_s=check_history_lags(data.get("joint_history_s", []), source),
            )
        except ConfigError as err:
            raise ConfigError(source, err.field, err.value, err.problem) from err
        except (TypeError, ValueError, OverflowError) as err:
            raise ConfigError(source, "<spec>", sorted(str(k) for k in data), str(err)) from err



def check_compatible(spec: PolicySpec, joint_names: Sequence[str], preprocess: PreprocessConfig,
                     source: str) -> None:
    """Refuse (CheckpointError naming `source`) a spec whose joints, image size, intrinsics or
    preprocessing differ from the running graph's; the message names both sides of every
    mismatch. Needs only the spec: run it before building (and warming up) the model."""
    problems = []
    graph_joints = list(joint_names)
    if list(spec.joint_names) != graph_joints:
        same_set = sorted(spec.joint_names) == sorted(graph_joints)
        what = "joint order" if same_set else "joints"
        problems.append(f"{what}: checkpoint expects joints {list(spec.joint_names)}, graph has {graph_joints}")
    camera = preprocess.policy_camera
    if (spec.image_width, spec.image_height) != (camera.width, camera.height):
        problems.append(f"image size: checkpoint expects {spec.image_width}x{spec.image_height}, "
                        f"graph has {camera.width}x{camera.height}")
    intrinsics_keys = ("fx", "fy", "cx", "cy")
    trained = {k: _number(spec.policy_camera.get(k)) for k in intrinsics_keys}
    running = {k: float(getattr(camera, k)) for k in intrinsics_keys}
    if not all(math.isclose(trained[k], running[k], rel_tol=1e-9, abs_tol=1e-9) for k in intrinsics_keys):
        problems.append(f"intrinsics: checkpoint expects {trained}, graph has {running}")
    if spec.preprocess_hash != preprocess.content_hash:
        problems.append(f"preprocessing: checkpoint was trained with preprocess hash {spec.preprocess_hash} "
                        f"({abbreviate(spec.preprocess, 2000)}), graph has {preprocess.content_hash} "
                        f"({preprocess.to_dict()})")
    if problems:
        raise CheckpointError(f"{source} does not match the running graph: " + "; ".join(problems))


def check_against_data(spec: PolicySpec, data_joints: Sequence[str], source: str, data_source: str,
                       preprocess: PreprocessConfig | None = None, ordered: bool = False) -> None:
    """Refuse (CheckpointError naming `source` and `data_source`) a policy applied offline to data
    (a bag, a dataset, a sim robot) that lacks one of its joints (ordered: whose joint order differs
    too), or whose preprocessing (the config the tool will run) is not the one it was trained with.
    data_joints: the data's joint names, in its order."""
    problems = []
    data = list(data_joints)
    missing = [name for name in spec.joint_names if name not in data]
    if missing:
        problems.append(f"joints: checkpoint expects {list(spec.joint_names)}, {data_source} has {abbreviate(data)} "
                        f"(missing {missing})")
    elif ordered and data != list(spec.joint_names):
        problems.append(f"joint order: checkpoint expects {list(spec.joint_names)}, {data_source} has {data}")
    if preprocess is not None and preprocess.content_hash != spec.preprocess_hash:
        problems.append(f"preprocessing: checkpoint was trained with preprocess hash {spec.preprocess_hash}, "
                        f"{data_source} would be preprocessed with {preprocess.content_hash} "
                        f"({abbreviate(preprocess.to_dict(), 2000)})")
    if problems:
        raise CheckpointError(f"{source} does not match {data_source}: " + "; ".join(problems))


def _number(value: Any) -> float:
    """A recorded intrinsic as a float; NaN (never equal) if it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


class _Shown(str):
    """A value's text as an error message shows it (its repr is itself: no added quotes)."""

    def __repr__(self) -> str:
        return str(self)


def abbreviate(value: Any, limit: int = 120) -> _Shown:
    """repr(value), cut to about `limit` characters: a hostile file's value may be megabytes long
    and must not become a megabyte error line."""
    text = repr(value)
    return _Shown(text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")


def checked_observation(spec: PolicySpec, image: Any, joint_positions: Any,
                        joint_history: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image, q, history) ready for inference, whatever the backend: image (H, W, 3) uint8 RGB at
    the policy resolution, q (n,) float64 [rad] in spec.joint_names order, history (len(spec.
    joint_history_s), n) float64 [rad] (None for a policy without history). Raises ValueError for
    a wrong shape or dtype, non-finite joints, or a missing history the policy needs."""
    image = np.asarray(image)
    if image.shape != (spec.image_height, spec.image_width, 3) or image.dtype != np.uint8:
        raise ValueError(f"image must be uint8 ({spec.image_height}, {spec.image_width}, 3), "
                         f"got {image.dtype} {image.shape}")
    q = np.asarray(joint_positions, dtype=np.float64)
    if q.shape != (spec.joint_count,):
        raise ValueError(f"joint_positions must have shape ({spec.joint_count},), got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError(f"joint_positions contain NaN/Inf: {q.tolist()}")
    return image, q, checked_history(joint_history, spec.joint_history_s, spec.joint_count)
