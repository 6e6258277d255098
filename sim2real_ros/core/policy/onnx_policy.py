"""Policies as ONNX models run by ONNX Runtime, without torch (docs/onnx.md).

`sim2real policy export CKPT --onnx OUT.onnx` (core/onnx_export.py) writes the whole observation-
to-chunk computation of a checkpoint as one ONNX graph:

    inputs:  image            uint8 (1, H, W, 3) RGB at the policy resolution
             joint_positions  float32 (1, n) [rad], in the spec's joint order
             joint_history    float32 (1, H, n) [rad] at the spec's joint_history_s lags (only
                              for a policy with history; core/control/joint_history.py)
    outputs: targets          float32 (1, K, n) absolute joint targets [rad] (row k: stamp + k * dt)
             deltas           float32 (1, K, n) targets minus joint_positions [rad]

with input normalization and output de-normalization inside the graph. The checkpoint's spec travels
in the model's metadata_props, one JSON value per PolicySpec field under "sim2real.<field>"
(`joint_history_s` only when the policy has a history), plus "sim2real.format_version" and
"sim2real.parent_hash" (the hash of the checkpoint it was exported from), so the file is as self-
describing as a checkpoint.

An ONNX file is untrusted input, as a checkpoint is: its size is bounded before it is read, it is
parsed from the bytes read (never from the path: a model naming external data files beside it
cannot make the runtime read them) with the `onnx` package after its wire format is walked, every
metadata field must be present and valid (PolicySpec.from_dict, with its caps), the graph's inputs
and outputs must have the names, dtypes and shapes the metadata implies, and the graph must be one
the exporter could have written (core/onnx_graph_check.py: operator allowlist, no subgraphs, no
sparse or external initializers, every size static and capped, the cost of one inference capped),
all before ONNX Runtime sees it. The session is created with constant folding off (nothing of the
graph runs at load) and fixed thread counts; the warm-up runs under a time limit after which it is
abandoned (RunOptions.terminate). Any failure is a CheckpointError naming the file and the field.
OnnxPolicy.select_action keeps LoadedPolicy's contract; the current positions are added to
`deltas` in float64, as LoadedPolicy does, so a zero delta holds exactly.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError, ConfigError
from ..perception.camera_model import CameraModel
from ..perception.preprocess_config import PreprocessConfig
from .onnx_graph_check import GraphPlan, check_graph, parse_model, plan_graph
from .spec import PolicySpec, abbreviate, check_compatible, checked_observation

ONNX_FORMAT_VERSION = 1
METADATA_PREFIX = "sim2real."
SPEC_FIELDS = ("architecture", "hparams", "joint_names", "image_width", "image_height", "policy_camera",
               "chunk_length", "dt_s", "preprocess", "preprocess_hash", "sim_params_version", "provenance")
INPUT_NAMES = ("image", "joint_positions")
HISTORY_INPUT = "joint_history"  # the third input of a policy with joint history
OUTPUT_NAMES = ("targets", "deltas")
# The largest ONNX policy file read: the checkpoint cap of 64 Mi float32 parameters (256 MiB,
# policy_model.MAX_PARAMETERS) plus 64 MiB of graph and metadata. The models here are 0.5 MB.
MAX_ONNX_BYTES = 320 * 1024 * 1024
# All metadata values together, like a checkpoint header (4 MiB of JSON).
MAX_METADATA_BYTES = 4 * 1024 * 1024
# The warm-up inference is abandoned after this long [s]: the checks bound one inference to a few
# seconds on a slow core (onnx_graph_check.MAX_INFERENCE_MACS); the shipped policy takes 1 ms.
WARMUP_TIMEOUT_S = 20.0


def _hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def spec_metadata(spec: PolicySpec, parent_hash: str) -> dict[str, str]:
    """The metadata_props of an exported model: every spec field as JSON, the format version and
    the hash of the checkpoint it came from."""
    data = spec.to_dict()
    props = {f"{METADATA_PREFIX}{key}": json.dumps(data[key], sort_keys=True, allow_nan=False) for key in SPEC_FIELDS}
    if spec.joint_history_s:
        props[f"{METADATA_PREFIX}joint_history_s"] = json.dumps(list(spec.joint_history_s), allow_nan=False)
    props[f"{METADATA_PREFIX}format_version"] = str(ONNX_FORMAT_VERSION)
    props[f"{METADATA_PREFIX}parent_hash"] = str(parent_hash)
    return props


def input_names(spec: PolicySpec) -> tuple[str, ...]:
    """The graph inputs of an ONNX policy of `spec`, in order."""
    return (*INPUT_NAMES, HISTORY_INPUT) if spec.joint_history_s else INPUT_NAMES


def _refuse_constant(literal: str) -> Any:
    raise ValueError(f"{literal} is not allowed")


def spec_from_metadata(props: Mapping[str, str], source: str) -> tuple[PolicySpec, str]:
    """(spec, parent checkpoint hash) from an ONNX model's metadata_props; CheckpointError naming
    `source` and the field when one is missing, not JSON, or out of the spec's bounds."""
    total = sum(len(str(k)) + len(str(v)) for k, v in props.items())
    if total > MAX_METADATA_BYTES:
        raise CheckpointError(f"{source}: metadata is {total} bytes, more than the {MAX_METADATA_BYTES} an ONNX "
                              f"policy may have")
    version_key = f"{METADATA_PREFIX}format_version"
    if version_key not in props:
        raise CheckpointError(f"{source}: metadata field '{version_key}' is missing: not a policy written by "
                              f"`sim2real policy export` (fields found: {abbreviate(sorted(props))})")
    if props[version_key] != str(ONNX_FORMAT_VERSION):
        raise CheckpointError(f"{source}: metadata field '{version_key}' = {abbreviate(props[version_key])}, "
                              f"this code reads {ONNX_FORMAT_VERSION}")
    data: dict[str, Any] = {}
    optional = ("joint_history_s",)  # absent: a policy of the present only
    for key in (*SPEC_FIELDS, *optional, "parent_hash"):
        name = f"{METADATA_PREFIX}{key}"
        if name not in props and key in optional:
            continue
        if name not in props:
            raise CheckpointError(f"{source}: metadata field '{name}' is missing")
        if key == "parent_hash":
            continue
        try:
            data[key] = json.loads(props[name], parse_constant=_refuse_constant)
        except RecursionError as err:
            raise CheckpointError(f"{source}: metadata field '{name}' is nested too deeply") from err
        except ValueError as err:
            raise CheckpointError(f"{source}: metadata field '{name}' = {abbreviate(props[name])}: not valid JSON "
                                  f"({err})") from err
        if isinstance(data[key], float) and not math.isfinite(data[key]):
            raise CheckpointError(f"{source}: metadata field '{name}' = {props[name]}: not a finite number")
    parent = props[f"{METADATA_PREFIX}parent_hash"]
    if not (isinstance(parent, str) and 0 < len(parent) <= 64):
        raise CheckpointError(f"{source}: metadata field '{METADATA_PREFIX}parent_hash' = {abbreviate(parent)}: "
                              f"must be a checkpoint hash")
    try:
        spec = PolicySpec.from_dict(data, source=f"{source} metadata")
        CameraModel.from_dict(spec.policy_camera, source=f"{source} metadata policy_camera")
    except ConfigError as err:
        field = err.field if err.field.startswith("<") else f"{METADATA_PREFIX}{err.field}"
        raise CheckpointError(str(ConfigError(err.source, field, err.value, err.problem))) from err
    return spec, parent


def _read_bounded(path: Path) -> bytes:
    if not path.is_file():
        raise CheckpointError(f"ONNX policy file {path} does not exist; write one with "
                              f"`sim2real policy export CKPT --onnx {path}`")
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_ONNX_BYTES:
                raise CheckpointError(f"{path}: file size {size} bytes is more than an ONNX policy may have "
                                      f"({MAX_ONNX_BYTES} bytes)")
            data = handle.read(MAX_ONNX_BYTES + 1)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ONNX policy: {err}") from err
    if len(data) > MAX_ONNX_BYTES:  # it grew since its size was taken
        raise CheckpointError(f"{path}: more than {MAX_ONNX_BYTES} bytes; refusing to read it")
    return data


def _providers(device: str) -> list[str]:
    import onnxruntime as ort

    if device == "cpu":
        return ["CPUExecutionProvider"]
    if device.startswith("cuda"):
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise CheckpointError(f"device {device!r} requested but this onnxruntime has no CUDAExecutionProvider "
                                  f"(available: {ort.get_available_providers()}); use device 'cpu'")
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    raise CheckpointError(f"device {device!r}: only 'cpu' and 'cuda' are supported")


def _session(data: bytes, source: str, device: str, num_threads: int | None) -> Any:
    import onnxruntime as ort

    if num_threads is not None and int(num_threads) <= 0:
        raise CheckpointError(f"num_threads must be positive, got {num_threads}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(num_threads or 0)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: warnings would go to stderr on every start
    # Idle pool threads sleep rather than spin: on a 2-core robot computer a spinning thread takes
    # the executor's core.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    providers = _providers(device)
    try:
        # Constant folding would run the graph's constant parts while the session is created, outside
        # any time limit; the exported graphs have none worth folding (no speed difference measured).
        return ort.InferenceSession(data, sess_options=options, providers=providers,
                                    disabled_optimizers=["ConstantFolding"])
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own types (Fail, InvalidProtobuf, ...)
        text = str(err).strip().splitlines()
        raise CheckpointError(f"{source}: not a loadable ONNX model: {abbreviate(text[0] if text else err, 300)}") \
            from err


def _shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _declared(value: Any) -> tuple[int, list[Any]]:
    tensor_type = value.type.tensor_type
    dims = [d.dim_value if d.WhichOneof("value") == "dim_value" else (d.dim_param or "?")
            for d in tensor_type.shape.dim] if tensor_type.HasField("shape") else ["?"]
    return tensor_type.elem_type, dims


def _check_io(model: Any, spec: PolicySpec, source: str) -> None:
    """The graph's inputs and outputs against what the metadata's spec implies."""
    n, k = spec.joint_count, spec.chunk_length
    float32, uint8 = 1, 2  # onnx.TensorProto element types
    wanted = {
        "image": (uint8, [1, spec.image_height, spec.image_width, 3]),
        "joint_positions": (float32, [1, n]),
        HISTORY_INPUT: (float32, [1, len(spec.joint_history_s), n]),
        "targets": (float32, [1, k, n]),
        "deltas": (float32, [1, k, n]),
    }
    type_names = {float32: "tensor(float)", uint8: "tensor(uint8)"}
    initializers = {tensor.name for tensor in model.graph.initializer}
    # Inputs that are initializers are weights (old exporters list them), not feeds.
    inputs = [value for value in model.graph.input if value.name not in initializers]
    for kind, items, names in (("input", inputs, input_names(spec)),
                               ("output", list(model.graph.output), OUTPUT_NAMES)):
        found = {item.name: item for item in items}
        if sorted(found) != sorted(names) or len(found) != len(items):
            raise CheckpointError(f"{source}: graph {kind}s are {abbreviate([i.name for i in items])}, an ONNX "
                                  f"policy has {list(names)}")
        for name in names:
            dtype, shape = wanted[name]
            elem_type, dims = _declared(found[name])
            if elem_type != dtype:
                raise CheckpointError(f"{source}: graph {kind} '{name}' has type "
                                      f"{type_names.get(elem_type, f'element type {elem_type}')}, the metadata "
                                      f"implies {type_names[dtype]}")
            if dims != shape:
                raise CheckpointError(f"{source}: graph {kind} '{name}' has shape {_shape_text(dims)}, the "
                                      f"metadata (joints, image size, chunk length) implies {_shape_text(shape)}")


def check_onnx_policy(data: bytes, source: str) -> tuple[PolicySpec, str, GraphPlan]:
    """(spec, parent checkpoint hash, what one inference needs) of the ONNX policy in `data`, every
    check of the module docstring made with the `onnx` package, none with ONNX Runtime; in the
    order: wire format, metadata, operators and structure, inputs and outputs, shape inference."""
    model = parse_model(data, source)
    props = {entry.key: entry.value for entry in model.metadata_props}
    if len(props) != len(model.metadata_props):
        raise CheckpointError(f"{source}: field 'metadata_props' names a key twice")
    spec, parent = spec_from_metadata(props, source)
    check_graph(model, source)
    _check_io(model, spec, source)
    plan = plan_graph(model, source)
    return spec, parent, plan


def onnx_parent_hash(path: str | Path) -> str:
    """The hash of the checkpoint the ONNX policy file at `path` was exported from, after every check
    of check_onnx_policy (no ONNX Runtime session); CheckpointError naming the file otherwise."""
    path = Path(path)
    _spec, parent, _plan = check_onnx_policy(_read_bounded(path), str(path))
    return parent


def read_onnx_policy(path: str | Path, device: str = "cpu",
                     num_threads: int | None = None) -> tuple[PolicySpec, str, str, Any]:
    """(spec, file hash, parent checkpoint hash, onnxruntime session) of an ONNX policy file, all
    checked (see the module docstring) before the session is created; CheckpointError naming the
    file and field otherwise."""
    path = Path(path)
    data = _read_bounded(path)
    source = str(path)
    spec, parent, _plan = check_onnx_policy(data, source)
    session = _session(data, source, device, num_threads)
    return spec, _hash_bytes(data), parent, session


class OnnxPolicy:
    """An ONNX policy ready to run: spec, ONNX Runtime session and file hash (checkpoint_hash, as
    LoadedPolicy names it; parent_hash is the checkpoint it was exported from)."""

    backend = "onnxruntime"

    def __init__(self, spec: PolicySpec, session: Any, checkpoint_hash: str, parent_hash: str, source: str,
                 device: str) -> None:
        self.spec = spec
        self.session = session
        self.checkpoint_hash = checkpoint_hash
        self.parent_hash = parent_hash
        self.source = source
        self.device = device

    def select_action(self, image: np.ndarray, joint_positions: np.ndarray,
                      joint_history: np.ndarray | None = None) -> np.ndarray:
        """One inference; the contract of LoadedPolicy.select_action: image (H, W, 3) uint8 RGB,
        joint_positions (n,) [rad] in spec.joint_names order, joint_history (H, n) [rad] (policies
        with history) -> (K, n) float64 absolute targets [rad], row k for stamp + k * dt.
        ValueError for wrong shapes, dtype or non-finite joints."""
        return self._run(image, joint_positions, joint_history, None)

    def _run(self, image: np.ndarray, joint_positions: np.ndarray, joint_history: np.ndarray | None,
             run_options: Any) -> np.ndarray:
        image, q, history = checked_observation(self.spec, image, joint_positions, joint_history)
        feeds = {"image": np.ascontiguousarray(image)[None], "joint_positions": q.astype(np.float32)[None]}
        if self.spec.joint_history_s:
            feeds[HISTORY_INPUT] = history.astype(np.float32)[None]
        try:
            (deltas,) = self.session.run(["deltas"], feeds, run_options)
        except Exception as err:  # noqa: BLE001 - onnxruntime's own error types
            raise RuntimeError(f"{self.source}: onnxruntime inference failed: {err}") from err
        return q[None, :] + np.asarray(deltas, dtype=np.float64)[0]

    def select_actions(self, images: np.ndarray, joint_positions: np.ndarray,
                       joint_histories: np.ndarray | None = None) -> np.ndarray:
        """LoadedPolicy.select_actions' contract, (B, K, n). The exported graph has a batch of 1
        (what the node runs), so this runs one inference per observation."""
        histories = [None] * len(joint_positions) if joint_histories is None else list(joint_histories)
        if len(histories) != len(joint_positions):
            raise ValueError(f"joint_histories must have B = {len(joint_positions)} rows, got {len(histories)}")
        return np.stack([self.select_action(image, q, h)
                         for image, q, h in zip(images, joint_positions, histories, strict=True)])

    def check_compatible(self, joint_names: Sequence[str], preprocess: PreprocessConfig) -> None:
        """Refuse (CheckpointError) a graph that differs from the one the policy was trained for."""
        check_compatible(self.spec, joint_names, preprocess, self.source)

    def warm_up(self, timeout_s: float = WARMUP_TIMEOUT_S) -> None:
        """One inference on a black image at zero positions, abandoned after timeout_s [s]: a timer
        sets the run's terminate flag, which ONNX Runtime reads between nodes (the checks bound a
        single node's cost). CheckpointError when it fails or is abandoned."""
        import onnxruntime as ort

        options = ort.RunOptions()
        abandoned = threading.Event()

        def abandon() -> None:
            abandoned.set()
            options.terminate = True

        timer = threading.Timer(timeout_s, abandon)
        timer.daemon = True
        image = np.zeros((self.spec.image_height, self.spec.image_width, 3), dtype=np.uint8)
        timer.start()
        try:
            history = np.zeros((len(self.spec.joint_history_s), self.spec.joint_count)) \
                if self.spec.joint_history_s else None
            self._run(image, np.zeros(self.spec.joint_count), history, options)
        except (ValueError, RuntimeError) as err:
            if abandoned.is_set():
                raise CheckpointError(f"{self.source}: the warm-up inference ran longer than {timeout_s:g} s; "
                                      f"abandoned") from err
            raise CheckpointError(f"{self.source}: the warm-up inference failed: {err}") from err
        finally:
            timer.cancel()


def load_onnx_policy(path: str | Path, device: str = "cpu", num_threads: int | None = None, warmup: bool = True,
                     joint_names: Sequence[str] | None = None, preprocess: PreprocessConfig | None = None,
                     warmup_timeout_s: float = WARMUP_TIMEOUT_S) -> OnnxPolicy:
    """load_checkpoint's counterpart for an ONNX policy file (same arguments and checks; the graph
    check runs on the metadata before the warm-up inference, which is abandoned after
    warmup_timeout_s [s])."""
    if (joint_names is None) != (preprocess is None):
        raise ValueError("load_onnx_policy: give both joint_names and preprocess, or neither")
    spec, digest, parent, session = read_onnx_policy(path, device, num_threads)
    if joint_names is not None and preprocess is not None:
        check_compatible(spec, joint_names, preprocess, str(path))
    policy = OnnxPolicy(spec, session, digest, parent, str(path), device)
    if warmup:
        policy.warm_up(warmup_timeout_s)
    return policy
