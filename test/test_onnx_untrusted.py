"""Hostile ONNX policy files (issue 34, part 2): each crafted here with the `onnx` helpers, each must
end in one clear error naming the file and the field or operator, before ONNX Runtime sees it:
`sim2real policy info` exits 2 with no traceback under 600 MB (and no hang), the policy node exits 2
at start-up, and the warm-up of a graph that passes the checks but runs long is abandoned."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import REPO_ROOT, run_measured

from sim2real_ros.core.errors import CheckpointError
from sim2real_ros.core.policy.backend import load_policy
from sim2real_ros.core.policy.onnx_export import export_onnx
from sim2real_ros.core.policy.onnx_graph_check import MAX_PROTO_ITEMS
from sim2real_ros.core.policy.onnx_policy import load_onnx_policy
from sim2real_ros.paths import default_policy_path

PEAK_RSS_LIMIT = 600 * 2**20  # [bytes] the acceptance
ADDRESS_SPACE_LIMIT = 3 << 30  # [bytes] a safety net: a bomb fails instead of taking the machine
K, N = 10, 6  # the shipped policy's chunk length and joints


@pytest.fixture(scope="module")
def metadata(tmp_path_factory) -> dict[str, str]:
    """Valid project metadata: the shipped policy's export's."""
    out = tmp_path_factory.mktemp("onnx") / "shipped.onnx"
    export_onnx(default_policy_path(), out)
    return {p.key: p.value for p in onnx.load(out).metadata_props}


def io_values() -> tuple[list, list]:
    inputs = [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 96, 96, 3]),
              helper.make_tensor_value_info("joint_positions", TensorProto.FLOAT, [1, N])]
    outputs = [helper.make_tensor_value_info("targets", TensorProto.FLOAT, [1, K, N]),
               helper.make_tensor_value_info("deltas", TensorProto.FLOAT, [1, K, N])]
    return inputs, outputs


def targets_from(deltas: str) -> list:
    """Nodes that turn `deltas` (1, K, n) into targets = joint_positions + deltas, as the exporter does."""
    return [helper.make_node("Unsqueeze", ["joint_positions", "axis1"], ["q3"]),
            helper.make_node("Add", ["q3", deltas], ["targets"])]


def write_model(path: Path, nodes: list, initializers: list, metadata: dict[str, str] | None,
                opset: int = 18) -> Path:
    inputs, outputs = io_values()
    initializers = [*initializers, numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1")]
    model = helper.make_model(helper.make_graph(nodes, "hostile", inputs, outputs, initializer=initializers),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    path.write_bytes(model.SerializeToString())
    return path


def constant_of_shape(path: Path, metadata: dict[str, str] | None) -> Path:
    """ConstantOfShape of 1e8 float32 (400 MB) folded into the deltas: 1 KB on disk."""
    shape = numpy_helper.from_array(np.array([100_000_000], dtype=np.int64), "big_shape")
    nodes = [helper.make_node("ConstantOfShape", ["big_shape"], ["big"]),
             helper.make_node("ReduceSum", ["big"], ["total"], keepdims=1),
             helper.make_node("Add", ["zeros", "total"], ["deltas"]), *targets_from("deltas")]
    zeros = numpy_helper.from_array(np.zeros((1, K, N), dtype=np.float32), "zeros")
    return write_model(path, nodes, [shape, zeros], metadata)


def expand(path: Path, metadata: dict[str, str] | None) -> Path:
    """Expand of a scalar to 2.5e8 elements (1 GB)."""
    shape = numpy_helper.from_array(np.array([250_000_000], dtype=np.int64), "big_shape")
    one = numpy_helper.from_array(np.ones(1, dtype=np.float32), "one")
    nodes = [helper.make_node("Expand", ["one", "big_shape"], ["big"]),
             helper.make_node("ReduceSum", ["big"], ["total"], keepdims=1),
             helper.make_node("Mul", ["zeros", "total"], ["deltas"]), *targets_from("deltas")]
    zeros = numpy_helper.from_array(np.zeros((1, K, N), dtype=np.float32), "zeros")
    return write_model(path, nodes, [shape, one, zeros], metadata)


def loop(path: Path, metadata: dict[str, str] | None) -> Path:
    """A Loop of 1e15 iterations carrying the (zero) deltas through: the right inputs and outputs."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["carried"], ["next"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried", TensorProto.FLOAT, [1, K, N])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("next", TensorProto.FLOAT, [1, K, N])])
    trips = numpy_helper.from_array(np.array(10**15, dtype=np.int64), "trips")
    true = numpy_helper.from_array(np.array(True), "true")
    zeros = numpy_helper.from_array(np.zeros((1, K, N), dtype=np.float32), "zeros")
    nodes = [helper.make_node("Loop", ["trips", "true", "zeros"], ["deltas"], body=body), *targets_from("deltas")]
    return write_model(path, nodes, [trips, true, zeros], metadata)


def outer_product(path: Path, metadata: dict[str, str] | None) -> Path:
    """Only allowed operators, but the outer product of the image with itself: 7.6e8 elements."""
    pixels = 96 * 96 * 3
    column = numpy_helper.from_array(np.array([1, pixels, 1], dtype=np.int64), "column")
    row = numpy_helper.from_array(np.array([1, 1, pixels], dtype=np.int64), "row")
    chunk = numpy_helper.from_array(np.array([1, K, N], dtype=np.int64), "chunk")
    pool = numpy_helper.from_array(np.zeros((K * N, pixels), dtype=np.float32), "pool")
    flat = numpy_helper.from_array(np.array([1, pixels], dtype=np.int64), "flat")
    nodes = [helper.make_node("Cast", ["image"], ["x"], to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["x", "column"], ["xc"]), helper.make_node("Reshape", ["x", "row"], ["xr"]),
             helper.make_node("MatMul", ["xc", "xr"], ["outer"]),
             helper.make_node("Reshape", ["x", "flat"], ["features"]),
             helper.make_node("Gemm", ["features", "pool"], ["g"], transB=1),
             helper.make_node("Reshape", ["g", "chunk"], ["deltas"]), *targets_from("deltas")]
    return write_model(path, nodes, [column, row, chunk, pool, flat], metadata)


def conv_graph(path: Path, metadata: dict[str, str] | None, channels: int, kernel: int) -> Path:
    """image -> float NCHW -> Conv(3 -> channels, 9x9) -> Conv(channels -> channels, kernel) ->
    global AveragePool -> Gemm -> (1, K, n): only allowed operators, its cost set by the sizes."""
    rng = np.random.default_rng(0)
    tensors = [
        numpy_helper.from_array((0.01 * rng.standard_normal((channels, 3, 9, 9))).astype(np.float32), "w1"),
        numpy_helper.from_array((0.01 * rng.standard_normal((channels, channels, kernel, kernel))).astype(np.float32),
                                "w2"),
        numpy_helper.from_array(np.zeros((K * N, channels), dtype=np.float32), "head"),
        numpy_helper.from_array(np.array([1, channels], dtype=np.int64), "flat"),
        numpy_helper.from_array(np.array([1, K, N], dtype=np.int64), "chunk"),
    ]
    nodes = [helper.make_node("Cast", ["image"], ["x"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["x"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nchw", "w1"], ["c1"], kernel_shape=[9, 9], pads=[4, 4, 4, 4]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], kernel_shape=[kernel, kernel],
                              pads=[kernel // 2] * 4),
             helper.make_node("AveragePool", ["c2"], ["pooled"], kernel_shape=[96, 96]),
             helper.make_node("Reshape", ["pooled", "flat"], ["features"]),
             helper.make_node("Gemm", ["features", "head"], ["g"], transB=1),
             helper.make_node("Reshape", ["g", "chunk"], ["deltas"]), *targets_from("deltas")]
    return write_model(path, nodes, tensors, metadata)


def cast_to_string(path: Path, metadata: dict[str, str] | None) -> Path:
    """The image cast to strings (ONNX Runtime's string tensors are objects of their own)."""
    zeros = numpy_helper.from_array(np.zeros((1, K, N), dtype=np.float32), "zeros")
    nodes = [helper.make_node("Cast", ["image"], ["text"], to=TensorProto.STRING),
             helper.make_node("Add", ["zeros", "zeros"], ["deltas"]), *targets_from("deltas")]
    return write_model(path, nodes, [zeros], metadata)


def edited(path: Path, metadata: dict[str, str] | None, edit) -> Path:
    """A minimal valid-looking policy graph (deltas = zeros + zeros) with `edit(model)` applied."""
    zeros = numpy_helper.from_array(np.zeros((1, K, N), dtype=np.float32), "zeros")
    write_model(path, [helper.make_node("Add", ["zeros", "zeros"], ["deltas"]), *targets_from("deltas")], [zeros],
                metadata)
    model = onnx.load_model_from_string(path.read_bytes())
    edit(model)
    path.write_bytes(model.SerializeToString())
    return path


def external_data(model) -> None:
    """The weights 'in' a file outside the policy's folder."""
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../../../etc/passwd"), ("offset", "0"), ("length", "240")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def sparse_initializer(model) -> None:
    values = numpy_helper.from_array(np.ones(1, dtype=np.float32), "big")
    indices = numpy_helper.from_array(np.zeros(1, dtype=np.int64), "big_indices")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [10**9]))


def declared_huge(model) -> None:
    model.graph.value_info.append(helper.make_tensor_value_info("q3", TensorProto.FLOAT, [1, 10**12]))


def reshape_to_huge(path: Path, metadata: dict[str, str] | None) -> Path:
    """A Reshape whose target asks for 2**40 elements (the element count check comes later in ORT)."""
    huge = numpy_helper.from_array(np.array([1, 2**40], dtype=np.int64), "huge")
    zeros = numpy_helper.from_array(np.zeros((1, K, N), dtype=np.float32), "zeros")
    nodes = [helper.make_node("Reshape", ["zeros", "huge"], ["flat"]),
             helper.make_node("Add", ["zeros", "zeros"], ["deltas"]), *targets_from("deltas")]
    return write_model(path, nodes, [huge, zeros], metadata)


def empty_nodes(path: Path, _metadata: dict[str, str] | None) -> Path:
    """20 MB of empty nodes: 1.5 GB and 7 s in the protobuf parser."""
    inner = b"\x0a\x00" * 10_000_000
    length = len(inner)
    varint = bytearray()
    while True:
        varint.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
        length >>= 7
        if not length:
            break
    path.write_bytes(b"\x08\x0a\x3a" + bytes(varint) + inner)
    return path


# (builder, with valid metadata, what the one error line must say)
CASES = {
    "constant_of_shape_no_metadata": (constant_of_shape, False, "metadata field 'sim2real.format_version' is missing"),
    "constant_of_shape": (constant_of_shape, True, "operator 'ConstantOfShape' (a data-given size"),
    "expand": (expand, True, "operator 'Expand' (a data-given size"),
    "loop": (loop, True, "operator 'Loop' (a loop"),
    "outer_product": (outer_product, True, "(MatMul): output 'outer' [1, 27648, 27648]"),
    "too_many_macs": (lambda p, m: conv_graph(p, m, 256, 13), True, "MAX_INFERENCE_MACS"),
    "cast_to_string": (cast_to_string, True, "(Cast): attribute 'to' = 8"),
    "external_data": (lambda p, m: edited(p, m, external_data), True, "initializer 'zeros': external data"),
    "sparse_initializer": (lambda p, m: edited(p, m, sparse_initializer), True, "field 'sparse_initializer' holds 1"),
    "declared_huge": (lambda p, m: edited(p, m, declared_huge), True,
                      "value_info 'q3': field 'shape' = [1, 1000000000000]"),
    "reshape_to_huge": (reshape_to_huge, True, "(Reshape): shape input 'huge' = [1, 1099511627776]"),
    "empty_nodes": (empty_nodes, False, f"more than {MAX_PROTO_ITEMS} protobuf messages"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_onnx_files_end_in_one_clear_error(case, metadata, tmp_path):
    build, with_metadata, message = CASES[case]
    bad = build(tmp_path / f"{case}.onnx", metadata if with_metadata else None)
    with pytest.raises(CheckpointError) as err:
        load_policy(bad)
    assert str(bad) in str(err.value) and message in str(err.value), str(err.value)
    out, errors = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    args = [sys.executable, "-m", "sim2real_ros.cli.main", "policy", "info", str(bad)]
    # A hang ends in TimeoutError at 120 s; the time each takes (well under the 20 s on an idle
    # machine) is not asserted here, as the machine's load decides it (docs/onnx.md gives the figures).
    code, peak = run_measured(args, ADDRESS_SPACE_LIMIT, timeout_s=120.0, cwd=REPO_ROOT, stdout=out, stderr=errors)
    stderr = errors.read_text()
    assert code == 2 and "Traceback" not in stderr and message in stderr and str(bad) in stderr, stderr
    assert len([line for line in stderr.splitlines() if line.strip()]) == 1, stderr
    assert peak < PEAK_RSS_LIMIT, f"{case}: peak RSS {peak / 2**20:.0f} MiB"


def test_allowed_graphs_load_and_a_long_warm_up_is_abandoned(metadata, tmp_path):
    """A graph of allowed operators within the caps loads (the checks are not a list of the
    shipped files); its warm-up, 3e9 multiply-accumulates, is abandoned at the time limit."""
    slow = conv_graph(tmp_path / "slow.onnx", metadata, 64, 9)
    policy = load_onnx_policy(slow, warmup=False)
    assert policy.select_action(np.zeros((96, 96, 3), np.uint8), np.zeros(N)).shape == (K, N)
    with pytest.raises(CheckpointError, match=f"{slow}: the warm-up inference ran longer than 0.01 s; abandoned"):
        policy.warm_up(timeout_s=0.01)
    policy.warm_up(timeout_s=60.0)  # the same run, not abandoned, succeeds


def test_policy_node_refuses_a_loop_at_start_up(metadata, tmp_path):
    """The Loop file passed `policy info` and hung the node's warm-up before the checks."""
    bad = loop(tmp_path / "loop.onnx", metadata)
    args = [sys.executable, "-m", "sim2real_ros.cli.main", "node", "policy_node", "--ros-args",
            "-p", f"checkpoint:={bad}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and f"{bad}: node" in proc.stderr and "operator 'Loop'" in proc.stderr
