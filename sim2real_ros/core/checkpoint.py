"""Policy checkpoints: one self-contained file that never executes code when loaded (DESIGN.md §5).

File layout (a safetensors-like format, written and read without pickle):

    MAGIC (16 bytes: b"SIM2REAL-POLICY\\n")
    header length (uint64, little endian)
    header (UTF-8 JSON): {"format_version": 1, "spec": PolicySpec.to_dict(),
                          "tensors": [{"name", "dtype", "shape", "offset", "nbytes"}, ...]}
    tensor data (raw little-endian bytes; offsets relative to the start of this block)

The spec carries architecture + hparams, joint names, image size and intrinsics, chunk length and
dt, the preprocessing config and its hash, the sim params version and the training provenance;
the tensors are the model's state_dict, which includes the normalization statistics (buffers).
The checkpoint hash is the sha256 of the file bytes (16 hex digits), what "parent hash" refers to.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from .errors import CheckpointError, ConfigError
from .hashing import content_hash
from .policy_model import (
    DEFAULT_ARCHITECTURE,
    DEFAULT_CHUNK_LENGTH,
    DEFAULT_DT_S,
    PolicyModel,
    PolicySpec,
    build_model,
)
from .preprocess_config import PreprocessConfig

MAGIC = b"SIM2REAL-POLICY\n"
FORMAT_VERSION = 1
_LENGTH = struct.Struct("<Q")
_MAX_HEADER_BYTES = 64 * 1024 * 1024
# Tensor dtypes the format stores (numpy has no bfloat16, so it is not among them).
_DTYPES: dict[str, tuple[torch.dtype, np.dtype]] = {
    "float32": (torch.float32, np.dtype("<f4")),
    "float64": (torch.float64, np.dtype("<f8")),
    "float16": (torch.float16, np.dtype("<f2")),
    "int64": (torch.int64, np.dtype("<i8")),
    "int32": (torch.int32, np.dtype("<i4")),
    "uint8": (torch.uint8, np.dtype("u1")),
    "bool": (torch.bool, np.dtype("?")),
}
_DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _) in _DTYPES.items()}


# ----------------------------------------------------------------------------------------------
# Spec helpers
def sim_params_version(path: str | Path | None) -> str:
    """Content hash of the raw sim params YAML mapping (config/sim_params.yaml), or "unknown" when
    the file does not exist. An unreadable or non-mapping file is a ConfigError naming it."""
    if path is None or not Path(path).is_file():
        return "unknown"
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(str(path), "<file>", None, f"cannot read sim params YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(str(path), "<file>", type(data).__name__, "sim params must be a YAML mapping")
    return content_hash(data)


def git_commit(directory: str | Path | None = None) -> str | None:
    """The git commit of the source tree (for provenance), or None outside a git checkout."""
    where = Path(directory) if directory else Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def make_policy_spec(
    joint_names: Sequence[str],
    preprocess: PreprocessConfig,
    *,
    architecture: str = DEFAULT_ARCHITECTURE,
    hparams: dict[str, Any] | None = None,
    chunk_length: int = DEFAULT_CHUNK_LENGTH,
    dt_s: float = DEFAULT_DT_S,
    sim_params_version: str = "unknown",
    provenance: dict[str, Any] | None = None,
) -> PolicySpec:
    """A spec whose image size and intrinsics come from the preprocessing config's policy camera."""
    camera = preprocess.policy_camera
    return PolicySpec(
        architecture=architecture, hparams=dict(hparams or {}), joint_names=tuple(joint_names),
        image_width=camera.width, image_height=camera.height, policy_camera=camera.to_dict(),
        chunk_length=int(chunk_length), dt_s=float(dt_s), preprocess=preprocess.to_dict(),
        preprocess_hash=preprocess.content_hash, sim_params_version=sim_params_version,
        provenance=dict(provenance or {}),
    )


# ----------------------------------------------------------------------------------------------
# Writing
def _tensor_bytes(name: str, tensor: torch.Tensor) -> tuple[str, bytes]:
    dtype_name = _DTYPE_NAMES.get(tensor.dtype)
    if dtype_name is None:
        raise CheckpointError(f"tensor '{name}' has dtype {tensor.dtype}, which the checkpoint format does not "
                              f"store (supported: {sorted(_DTYPES)})")
    array = tensor.detach().to("cpu").contiguous().numpy()
    return dtype_name, array.astype(_DTYPES[dtype_name][1], copy=False).tobytes()


def encode_checkpoint(spec: PolicySpec, state: dict[str, torch.Tensor]) -> bytes:
    """The checkpoint file's bytes for `spec` and tensors `state` (deterministic: sorted names)."""
    entries = []
    blobs = []
    offset = 0
    for name in sorted(state):
        dtype_name, data = _tensor_bytes(name, state[name])
        entries.append({"name": name, "dtype": dtype_name, "shape": list(state[name].shape), "offset": offset,
                        "nbytes": len(data)})
        blobs.append(data)
        offset += len(data)
    header = {"format_version": FORMAT_VERSION, "spec": spec.to_dict(), "tensors": entries}
    try:
        header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"spec is not plain JSON (hparams/provenance must be JSON values): {err}") from err
    return MAGIC + _LENGTH.pack(len(header_bytes)) + header_bytes + b"".join(blobs)


def save_checkpoint(path: str | Path, model: PolicyModel, spec: PolicySpec) -> str:
    """Write `model` (weights + normalization buffers) and `spec` to `path`, atomically.

    The spec's architecture, hparams, joint count, image size and chunk length are made to agree
    with the model (architecture and hparams are taken from the model). Returns the checkpoint hash.
    """
    architecture = _architecture_name(model)
    spec = dataclasses.replace(spec, architecture=architecture, hparams=dict(model.hparams))
    shape_checks = {
        "joint_names": (spec.joint_count, model.joint_count),
        "chunk_length": (spec.chunk_length, model.chunk_length),
        "image_height": (spec.image_height, model.image_height),
        "image_width": (spec.image_width, model.image_width),
    }
    for field, (in_spec, in_model) in shape_checks.items():
        if in_spec != in_model:
            raise CheckpointError(f"cannot save: spec {field} gives {in_spec}, the model was built for {in_model}")
    data = encode_checkpoint(spec, dict(model.state_dict()))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a crash never leaves a half-written checkpoint under the real name.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return _hash_bytes(data)


def _architecture_name(model: PolicyModel) -> str:
    from .policy_model import ARCHITECTURES

    for name, cls in ARCHITECTURES.items():
        if type(model) is cls:
            return name
    raise CheckpointError(f"model class {type(model).__name__} is not a registered architecture "
                          f"(register it with @register_architecture); registered: {sorted(ARCHITECTURES)}")


# ----------------------------------------------------------------------------------------------
# Reading
def _hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def checkpoint_hash(path: str | Path) -> str:
    """Content hash of a checkpoint file (sha256 of its bytes, 16 hex digits)."""
    try:
        return _hash_bytes(Path(path).read_bytes())
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint: {err}") from err


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist; create an untrained one with "
                              f"`sim2real policy init --robot URDF --out {path}` or train one")
    try:
        return path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint: {err}") from err


def decode_checkpoint(data: bytes, source: str) -> tuple[PolicySpec, dict[str, torch.Tensor]]:
    """Parse checkpoint bytes into (spec, state_dict). Nothing is unpickled or executed: a file
    that is not in this format (a torch.save pickle, say) is refused, never loaded."""
    if not data.startswith(MAGIC):
        hint = " (it looks like a pickle, which could run code when loaded)" if data[:1] in (b"\x80", b"PK") else ""
        raise CheckpointError(f"{source}: not a sim2real policy checkpoint (missing the {MAGIC!r} header){hint}; "
                              f"refusing to load it")
    start = len(MAGIC) + _LENGTH.size
    if len(data) < start:
        raise CheckpointError(f"{source}: truncated checkpoint ({len(data)} bytes)")
    (header_length,) = _LENGTH.unpack_from(data, len(MAGIC))
    if header_length > _MAX_HEADER_BYTES or start + header_length > len(data):
        raise CheckpointError(f"{source}: header length {header_length} does not fit the file ({len(data)} bytes)")
    try:
        header = json.loads(data[start:start + header_length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{source}: header is not valid JSON: {err}") from err
    if not isinstance(header, dict) or header.get("format_version") != FORMAT_VERSION:
        version = header.get("format_version") if isinstance(header, dict) else None
        raise CheckpointError(f"{source}: checkpoint format version {version!r}, this code reads {FORMAT_VERSION}")
    try:
        spec = PolicySpec.from_dict(header.get("spec"), source=f"{source} spec")
    except ConfigError as err:
        raise CheckpointError(str(err)) from err
    blob = memoryview(data)[start + header_length:]
    state: dict[str, torch.Tensor] = {}
    entries = header.get("tensors")
    if not isinstance(entries, list):
        raise CheckpointError(f"{source}: header has no tensor table")
    for entry in entries:
        try:
            name, dtype_name = str(entry["name"]), str(entry["dtype"])
            shape = [int(v) for v in entry["shape"]]
            offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{source}: malformed tensor entry {entry!r}") from err
        if dtype_name not in _DTYPES:
            raise CheckpointError(f"{source}: tensor '{name}' has unsupported dtype {dtype_name!r}")
        np_dtype = _DTYPES[dtype_name][1]
        if min(shape, default=0) < 0 or nbytes != math.prod(shape) * np_dtype.itemsize:
            raise CheckpointError(f"{source}: tensor '{name}' shape {shape} does not match its {nbytes} bytes")
        if offset < 0 or offset + nbytes > len(blob):
            raise CheckpointError(f"{source}: tensor '{name}' lies outside the file (truncated?)")
        array = np.frombuffer(blob[offset:offset + nbytes], dtype=np_dtype).reshape(shape).copy()
        state[name] = torch.from_numpy(array)
    return spec, state


def read_checkpoint(path: str | Path) -> tuple[PolicySpec, dict[str, torch.Tensor], str]:
    """(spec, state_dict, checkpoint hash) of a checkpoint file, without building a model."""
    path = Path(path)
    data = _read_bytes(path)
    spec, state = decode_checkpoint(data, str(path))
    return spec, state, _hash_bytes(data)


# ----------------------------------------------------------------------------------------------
# Running
class LoadedPolicy:
    """A checkpoint ready to run: spec, model (eval mode, on its device) and checkpoint hash."""

    def __init__(self, spec: PolicySpec, model: PolicyModel, checkpoint_hash: str, source: str,
                 device: torch.device) -> None:
        self.spec = spec
        self.model = model
        self.checkpoint_hash = checkpoint_hash
        self.source = source
        self.device = device

    def select_action(self, image: np.ndarray, joint_positions: np.ndarray) -> np.ndarray:
        """One deterministic inference.

        image: (H, W, 3) uint8 RGB at the policy resolution (spec.image_height, spec.image_width).
        joint_positions: (n,) [rad] in spec.joint_names order, at the image's capture time.
        Returns (K, n) float64 absolute targets [rad]: row k is the target for time stamp + k * dt
        (row 0 at the observation time). The current positions are added in float64 so that a
        zero delta holds exactly. Raises ValueError for wrong shapes, dtype or non-finite joints.
        """
        spec = self.spec
        image = np.asarray(image)
        if image.shape != (spec.image_height, spec.image_width, 3) or image.dtype != np.uint8:
            raise ValueError(f"image must be uint8 ({spec.image_height}, {spec.image_width}, 3), "
                             f"got {image.dtype} {image.shape}")
        q = np.asarray(joint_positions, dtype=np.float64)
        if q.shape != (spec.joint_count,):
            raise ValueError(f"joint_positions must have shape ({spec.joint_count},), got {q.shape}")
        if not np.all(np.isfinite(q)):
            raise ValueError(f"joint_positions contain NaN/Inf: {q.tolist()}")
        with torch.inference_mode():
            images = torch.from_numpy(np.ascontiguousarray(image)).unsqueeze(0).to(self.device)
            joints = torch.from_numpy(q.astype(np.float32)).unsqueeze(0).to(self.device)
            deltas = self.model.predict_deltas(images, joints)[0].to("cpu").numpy()
        return q[None, :] + deltas.astype(np.float64)

    def check_compatible(self, joint_names: Sequence[str], preprocess: PreprocessConfig) -> None:
        """Refuse (CheckpointError) to run in a graph whose joints, image size, intrinsics or
        preprocessing differ from what the policy was trained with; the message names both sides
        of every mismatch."""
        spec = self.spec
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
        trained = {k: float(spec.policy_camera.get(k, math.nan)) for k in intrinsics_keys}
        running = {k: float(getattr(camera, k)) for k in intrinsics_keys}
        if not all(math.isclose(trained[k], running[k], rel_tol=1e-9, abs_tol=1e-9) for k in intrinsics_keys):
            problems.append(f"intrinsics: checkpoint expects {trained}, graph has {running}")
        if spec.preprocess_hash != preprocess.content_hash:
            problems.append(f"preprocessing: checkpoint was trained with preprocess hash {spec.preprocess_hash} "
                            f"({spec.preprocess}), graph has {preprocess.content_hash} ({preprocess.to_dict()})")
        if problems:
            raise CheckpointError(f"{self.source} does not match the running graph: " + "; ".join(problems))


def _resolve_device(device: str) -> torch.device:
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise CheckpointError(f"unknown torch device {device!r}: {err}") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(f"device {device!r} requested but CUDA is not available; use device 'cpu'")
    if resolved.type not in ("cpu", "cuda"):
        raise CheckpointError(f"device {device!r}: only 'cpu' and 'cuda' are supported")
    return resolved


def load_checkpoint(path: str | Path, device: str = "cpu", num_threads: int | None = None,
                    warmup: bool = True) -> LoadedPolicy:
    """Read a checkpoint, rebuild its model and make it ready to run.

    device: "cpu" or "cuda[:i]". num_threads: torch intra-op threads (process-wide setting; None
    leaves torch's default). warmup: run one inference now so the first real observation does not
    pay the cold start. Raises CheckpointError for a missing, unsafe, damaged or inconsistent file.
    """
    path = Path(path)
    spec, state, digest = read_checkpoint(path)
    torch_device = _resolve_device(device)
    if num_threads is not None:
        if int(num_threads) <= 0:
            raise CheckpointError(f"num_threads must be positive, got {num_threads}")
        torch.set_num_threads(int(num_threads))
    try:
        model = build_model(spec.architecture, spec, **spec.hparams)
    except ConfigError as err:
        raise CheckpointError(f"{path}: cannot rebuild the model: {err}") from err
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not fit architecture {spec.architecture!r}: {err}") from err
    bad = [name for name, tensor in state.items()
           if tensor.is_floating_point() and not bool(torch.all(torch.isfinite(tensor)))]
    if bad:
        raise CheckpointError(f"{path}: tensors {bad} contain NaN/Inf; refusing to run them")
    model.eval().to(torch_device)
    policy = LoadedPolicy(spec, model, digest, str(path), torch_device)
    if warmup:
        image = np.zeros((spec.image_height, spec.image_width, 3), dtype=np.uint8)
        policy.select_action(image, model.joint_mean.to("cpu").numpy().astype(np.float64))
    return policy


# ----------------------------------------------------------------------------------------------
# Untrained checkpoints (`sim2real policy init`)
def init_checkpoint(
    out: str | Path,
    joint_names: Sequence[str],
    preprocess: PreprocessConfig,
    *,
    sim_params_path: str | Path | None = None,
    chunk_length: int = DEFAULT_CHUNK_LENGTH,
    dt_s: float = DEFAULT_DT_S,
    seed: int = 0,
    architecture: str = DEFAULT_ARCHITECTURE,
    hparams: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
) -> str:
    """Write a randomly initialized checkpoint with a correct spec, so the graph runs before any
    training: its normalization (action_std = UNTRAINED_ACTION_STD, action_mean = 0) keeps every
    target within about a milliradian of the current position, i.e. it holds still.
    Returns the checkpoint hash."""
    torch.manual_seed(int(seed))
    info = {"method": "untrained (random init)", "seed": int(seed), "parent": None, "data": None,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git_commit": git_commit(),
            "created_unix_s": time.time()}
    spec = make_policy_spec(
        joint_names, preprocess, architecture=architecture, hparams=hparams, chunk_length=chunk_length, dt_s=dt_s,
        sim_params_version=sim_params_version(sim_params_path), provenance={**info, **(provenance or {})},
    )
    model = build_model(architecture, spec, **(hparams or {}))
    return save_checkpoint(out, model, spec)
