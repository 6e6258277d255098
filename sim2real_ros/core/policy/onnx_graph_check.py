"""Checks of an untrusted ONNX policy graph with the `onnx` package, before ONNX Runtime sees it
(docs/onnx.md, "What is checked").

ONNX Runtime builds a session from whatever graph it is given, and its graph optimizers run
constant subgraphs while the session is created: a 1 KB file whose ConstantOfShape asks for 1e8
elements takes a gigabyte before a single check of ours, and a Loop of 1e15 iterations runs for
ever in the first inference. So a file is only handed to ONNX Runtime once it is known to be the
kind of graph `sim2real policy export` (core/onnx_export.py) writes:

1. the protobuf's wire format is walked before it is parsed (`check_wire_format`): the parser
   turns a 2-byte empty message into ~150 bytes of memory (20 MB of empty nodes took 1.5 GB and
   7 s), so the number of messages and repeated elements and the nesting depth are capped;
2. the parsed model (`check_graph`): only the default ONNX domain at the exporter's opsets, only
   the operators the exporter emits (EXPORTER_OPERATORS: no Loop/If/Scan, no ConstantOfShape,
   Expand or Tile, no Constant), no attribute holding a graph, tensor or type, no model-local
   functions or training info, no sparse or external initializers, initializer sizes and payloads
   consistent and within MAX_PARAMETERS, every declared shape static and within MAX_ACTIVATIONS,
   the shape input of every Reshape a small int64 initializer;
3. onnx's shape inference on a copy without the weights (`plan_graph`): every intermediate value
   must get a static shape, each and all together within MAX_ACTIVATIONS elements, and the
   multiply-accumulates of one inference within MAX_INFERENCE_MACS. With no loops, these bound
   the memory and the time of any inference (and of anything the runtime evaluates at load).

Every refusal is a CheckpointError naming the file and the field, node or operator.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CheckpointError
from .spec import MAX_ACTIVATIONS, MAX_PARAMETERS, abbreviate

# What core/onnx_export.py emits for the registered architectures (cnn_mlp, cnn_spatial_softmax[_pooled]:
# torch.onnx dynamo exporter, opset 18); a new architecture needing another operator adds it here
# (the export reads its file back through these checks, so it cannot write one they refuse).
EXPORTER_OPERATORS = frozenset({
    "Add", "AveragePool", "Cast", "Concat", "Conv", "Div", "Gemm", "MatMul", "Mul", "Relu", "Reshape", "Softmax",
    "Sub", "Transpose", "Unsqueeze",
})
EXPORTER_OPSETS = frozenset({17, 18})
# Operators whose run time or output size comes from data rather than from the graph's shapes.
_UNBOUNDED_OPERATORS = {"Loop": "a loop", "If": "a subgraph", "Scan": "a loop", "ConstantOfShape": "a data-given size",
                        "Expand": "a data-given size", "Tile": "data-given repeats", "Range": "a data-given size",
                        "SequenceMap": "a loop"}
# Tensor element types the exported graphs hold: float32, uint8 (the image), int64 (shapes, axes).
_ELEMENT_BYTES = {1: 4, 2: 1, 7: 8}
_ELEMENT_NAMES = {1: "float32", 2: "uint8", 7: "int64"}
# Attribute types the exporter's operators use: FLOAT, INT, STRING, FLOATS, INTS, STRINGS.
_PLAIN_ATTRIBUTE_TYPES = frozenset({1, 2, 3, 6, 7, 8})
_GRAPH_ATTRIBUTE_TYPES = frozenset({5, 10})  # GRAPH, GRAPHS: a subgraph
MAX_TENSOR_RANK = 8
MAX_NODES = 10_000  # the exported policies have about 30
# Messages and repeated elements in the file (each costs the protobuf parser ~150 bytes whatever
# its size on disk); the exported policies have about 2,000.
MAX_PROTO_ITEMS = 200_000
MAX_PROTO_DEPTH = 16  # model > graph > value_info > type > tensor > shape > dim is 7
MAX_SHAPE_ENTRIES = 8  # entries of a Reshape's shape input
# Multiply-accumulates of one inference: 1e10 is a few seconds on one slow core (the shipped policy
# needs 4.5e6; ResNet-18 at 224x224 needs 1.8e9).
MAX_INFERENCE_MACS = 10_000_000_000


@dataclass(frozen=True)
class GraphPlan:
    """What one batch-1 inference of a checked graph needs: activations (elements of every node
    output), macs (multiply-accumulates), parameters (initializer elements)."""

    activations: int
    macs: int
    parameters: int


# ----------------------------------------------------------------------------------------------
# 1. The wire format, before parsing
class _WireError(ValueError):
    pass


_HIGH_BYTES = bytes(range(0x80, 0x100))


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _WireError(f"a truncated or overlong varint at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def check_wire_format(data: bytes, source: str) -> int:
    """Walk the protobuf encoding of an onnx.ModelProto without building it; returns the number of
    messages and repeated elements. CheckpointError when it is not well-formed protobuf, nests
    deeper than MAX_PROTO_DEPTH or holds more than MAX_PROTO_ITEMS items."""
    from google.protobuf.descriptor import FieldDescriptor
    from onnx import ModelProto

    varint_types = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
                    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
                    FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM}
    count = 0

    def walk(start: int, end: int, descriptor: Any, depth: int, where: str) -> None:
        nonlocal count
        if depth > MAX_PROTO_DEPTH:
            raise CheckpointError(f"{source}: {where} nests more than {MAX_PROTO_DEPTH} messages deep; an ONNX policy "
                                  f"has 7")
        fields = descriptor.fields_by_number
        pos = start
        while pos < end:
            tag, pos = _varint(data, pos, end)
            number, wire = tag >> 3, tag & 7
            field = fields.get(number)
            if wire == 0:
                _, pos = _varint(data, pos, end)
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                length, pos = _varint(data, pos, end)
                if pos + length > end:
                    raise _WireError(f"field {number} of {descriptor.name} runs past its end")
                if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                    walk(pos, pos + length, field.message_type, depth + 1, f"{where}.{field.name}")
                elif field is not None and field.type in varint_types:
                    # Packed varints: one element per final byte, 8 bytes each once parsed.
                    count += len(data[pos:pos + length].translate(None, _HIGH_BYTES))
                pos += length
            else:
                raise _WireError(f"wire type {wire} (groups or invalid) in {descriptor.name}")
            if pos > end:
                raise _WireError(f"field {number} of {descriptor.name} runs past its end")
            count += 1
            if count > MAX_PROTO_ITEMS:
                raise CheckpointError(f"{source}: more than {MAX_PROTO_ITEMS} protobuf messages and elements (at "
                                      f"{where}); an exported ONNX policy has a few thousand")

    try:
        walk(0, len(data), ModelProto.DESCRIPTOR, 0, "model")
    except _WireError as err:
        raise CheckpointError(f"{source}: not a loadable ONNX model: not valid protobuf ({err})") from err
    return count


def parse_model(data: bytes, source: str) -> Any:
    """The onnx.ModelProto in `data`, after check_wire_format; CheckpointError if it does not parse."""
    import onnx
    from google.protobuf.message import DecodeError

    check_wire_format(data, source)
    try:
        return onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{source}: not a loadable ONNX model: {abbreviate(str(err), 300)}") from err


# ----------------------------------------------------------------------------------------------
# 2. The parsed model
def _elements(dims: Iterable[int]) -> int:
    return math.prod(int(d) for d in dims)


def _check_tensor(tensor: Any, source: str) -> int:
    """An initializer: element type, rank, dims, payload in the file. Returns its element count."""
    name = abbreviate(tensor.name, 80)
    where = f"{source}: initializer {name}"
    if tensor.data_location != 0 or len(tensor.external_data):
        raise CheckpointError(f"{where}: external data (field 'data_location'/'external_data'): an ONNX policy keeps "
                              f"its weights in the file")
    if tensor.data_type not in _ELEMENT_BYTES:
        raise CheckpointError(f"{where}: element type {tensor.data_type} (field 'data_type'); an ONNX policy has "
                              f"{sorted(_ELEMENT_NAMES.values())}")
    dims = list(tensor.dims)
    if len(dims) > MAX_TENSOR_RANK or any(d < 0 or d > MAX_PARAMETERS for d in dims):
        raise CheckpointError(f"{where}: field 'dims' = {abbreviate(dims)}: at most {MAX_TENSOR_RANK} sizes from 0 to "
                              f"MAX_PARAMETERS = {MAX_PARAMETERS}")
    elements = _elements(dims)
    if elements > MAX_PARAMETERS:
        raise CheckpointError(f"{where}: field 'dims' = {abbreviate(dims)} is {elements} elements, more than "
                              f"MAX_PARAMETERS = {MAX_PARAMETERS}")
    if tensor.HasField("raw_data"):
        stored = len(tensor.raw_data) // _ELEMENT_BYTES[tensor.data_type]
        exact = len(tensor.raw_data) == elements * _ELEMENT_BYTES[tensor.data_type]
    else:
        typed = {1: tensor.float_data, 2: tensor.int32_data, 7: tensor.int64_data}[tensor.data_type]
        stored, exact = len(typed), len(typed) == elements
    if not exact:
        raise CheckpointError(f"{where}: field 'dims' = {abbreviate(dims)} declares {elements} elements, the file "
                              f"holds {stored}")
    return elements


def _check_declared_shape(value: Any, source: str, kind: str) -> None:
    """A graph input, output or value_info: a tensor of a known type, every dim a fixed size."""
    where = f"{source}: {kind} {abbreviate(value.name, 80)}"
    if value.type.WhichOneof("value") != "tensor_type":
        raise CheckpointError(f"{where}: field 'type' is {value.type.WhichOneof('value')}, an ONNX policy has tensors")
    tensor_type = value.type.tensor_type
    if tensor_type.elem_type not in _ELEMENT_BYTES:
        raise CheckpointError(f"{where}: element type {tensor_type.elem_type} (field 'elem_type'); an ONNX policy has "
                              f"{sorted(_ELEMENT_NAMES.values())}")
    if not tensor_type.HasField("shape"):
        return  # no claim made; shape inference gives it (plan_graph)
    dims = tensor_type.shape.dim
    if len(dims) > MAX_TENSOR_RANK or any(d.WhichOneof("value") != "dim_value" for d in dims):
        raise CheckpointError(f"{where}: field 'shape' has {len(dims)} dims, not all fixed sizes: an ONNX policy runs "
                              f"on batch 1 with fixed sizes (at most {MAX_TENSOR_RANK} dims)")
    sizes = [d.dim_value for d in dims]
    if any(s < 0 for s in sizes) or _elements(sizes) > MAX_ACTIVATIONS:
        raise CheckpointError(f"{where}: field 'shape' = {abbreviate(sizes)}: more than MAX_ACTIVATIONS = "
                              f"{MAX_ACTIVATIONS} elements, or a negative size")


def _check_reshape_targets(graph: Any, initializers: Mapping[str, Any], source: str) -> None:
    """The shape input of every Reshape: an int64 initializer of at most MAX_SHAPE_ENTRIES entries
    from -1 up (a shape the graph computes would be a size the checks cannot see)."""
    from onnx import numpy_helper

    for node in graph.node:
        if node.op_type != "Reshape":
            continue
        where = f"{source}: node {abbreviate(node.name or node.output[0], 80)} (Reshape)"
        target = node.input[1] if len(node.input) > 1 else ""
        tensor = initializers.get(target)
        if tensor is None:
            raise CheckpointError(f"{where}: its shape input {abbreviate(target, 80)} is computed, not a constant "
                                  f"initializer as the exporter writes it")
        if tensor.data_type != 7 or len(tensor.dims) != 1 or tensor.dims[0] > MAX_SHAPE_ENTRIES:
            raise CheckpointError(f"{where}: shape input {abbreviate(target, 80)} must be int64 with at most "
                                  f"{MAX_SHAPE_ENTRIES} entries")
        values = numpy_helper.to_array(tensor).tolist()
        if any(v < -1 or v > MAX_ACTIVATIONS for v in values):
            raise CheckpointError(f"{where}: shape input {abbreviate(target, 80)} = {abbreviate(values)}: sizes "
                                  f"from -1 to MAX_ACTIVATIONS = {MAX_ACTIVATIONS}")


def check_graph(model: Any, source: str) -> int:
    """The structure of a parsed onnx.ModelProto against what the exporter writes (module
    docstring, point 2). Returns the initializers' element count."""
    opsets = {(entry.domain or "ai.onnx"): entry.version for entry in model.opset_import}
    if set(opsets) != {"ai.onnx"} or opsets["ai.onnx"] not in EXPORTER_OPSETS:
        raise CheckpointError(f"{source}: field 'opset_import' = {abbreviate(opsets)}; an ONNX policy uses the "
                              f"default domain at opset {sorted(EXPORTER_OPSETS)} only")
    if len(model.functions):
        raise CheckpointError(f"{source}: field 'functions' holds {len(model.functions)} model-local functions "
                              f"(subgraphs); an ONNX policy has none")
    if len(model.training_info):
        raise CheckpointError(f"{source}: field 'training_info' is set (training graphs); an ONNX policy has none")
    graph = model.graph
    if len(graph.sparse_initializer):
        raise CheckpointError(f"{source}: field 'sparse_initializer' holds {len(graph.sparse_initializer)} "
                              f"tensors; an ONNX policy has none")
    if len(graph.node) > MAX_NODES:
        raise CheckpointError(f"{source}: {len(graph.node)} nodes, more than MAX_NODES = {MAX_NODES}")
    for node in graph.node:
        label = f"node {abbreviate(node.name or (node.output[0] if node.output else '?'), 80)}"
        if node.domain not in ("", "ai.onnx") or node.op_type not in EXPORTER_OPERATORS:
            op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
            why = f" ({_UNBOUNDED_OPERATORS[node.op_type]}: its run time or memory is not bounded by the graph)" \
                if node.op_type in _UNBOUNDED_OPERATORS else ""
            raise CheckpointError(f"{source}: {label}: operator {abbreviate(op, 80)}{why} is not one "
                                  f"`sim2real policy export` writes (allowed: {sorted(EXPORTER_OPERATORS)})")
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i not in _ELEMENT_BYTES:
                raise CheckpointError(f"{source}: {label} (Cast): attribute 'to' = {attribute.i}; an ONNX policy "
                                      f"casts to {sorted(_ELEMENT_NAMES.values())} only")
            if attribute.type in _GRAPH_ATTRIBUTE_TYPES or len(attribute.graphs) or attribute.HasField("g"):
                raise CheckpointError(f"{source}: {label} ({node.op_type}): attribute "
                                      f"{abbreviate(attribute.name, 80)} holds a subgraph; an ONNX policy has none")
            if attribute.type not in _PLAIN_ATTRIBUTE_TYPES or attribute.ref_attr_name:
                raise CheckpointError(f"{source}: {label} ({node.op_type}): attribute {abbreviate(attribute.name, 80)} "
                                      f"has type {attribute.type}; an ONNX policy's attributes are numbers and "
                                      f"strings")
    total = 0
    initializers: dict[str, Any] = {}
    for tensor in graph.initializer:
        total += _check_tensor(tensor, source)
        initializers[tensor.name] = tensor
    if total > MAX_PARAMETERS:
        raise CheckpointError(f"{source}: field 'initializer' holds {total} elements, more than MAX_PARAMETERS = "
                              f"{MAX_PARAMETERS}")
    for kind, values in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for value in values:
            _check_declared_shape(value, source, kind)
    _check_reshape_targets(graph, initializers, source)
    return total


# ----------------------------------------------------------------------------------------------
# 3. Shape inference: what one inference needs
def _static_shapes(values: Iterable[Any]) -> dict[str, tuple[int, ...] | None]:
    shapes: dict[str, tuple[int, ...] | None] = {}
    for value in values:
        tensor_type = value.type.tensor_type
        dims = tensor_type.shape.dim if tensor_type.HasField("shape") else None
        if dims is None or any(d.WhichOneof("value") != "dim_value" for d in dims):
            shapes[value.name] = None
        else:
            shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def _node_macs(node: Any, shapes: Mapping[str, tuple[int, ...] | None], out_elements: int) -> int:
    """Multiply-accumulates of one node (elementwise operators: one per output element)."""
    def shape(index: int) -> tuple[int, ...]:
        found = shapes.get(node.input[index]) if len(node.input) > index else None
        return found or (1,)

    if node.op_type == "Conv":
        return out_elements * _elements(shape(1)[1:])  # C_in / group * kernel area per output
    if node.op_type == "Gemm":
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        a = shape(0)
        return out_elements * (a[0] if trans_a else a[-1])
    if node.op_type == "MatMul":
        return out_elements * shape(0)[-1]
    if node.op_type == "AveragePool":
        kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [1])
        return out_elements * _elements(kernel)
    return max(out_elements, sum(_elements(shapes.get(name) or ()) for name in node.input if name))


def plan_graph(model: Any, source: str) -> GraphPlan:
    """Shape inference (onnx, strict) on a copy of the checked model without its weights: every node
    output must get a static shape; CheckpointError when one does not, or when one inference would
    exceed MAX_ACTIVATIONS elements or MAX_INFERENCE_MACS multiply-accumulates."""
    from onnx import helper, shape_inference

    graph = model.graph
    kept, weights = [], []
    parameters = 0
    declared_inputs = {value.name for value in graph.input}
    for tensor in graph.initializer:
        parameters += _elements(tensor.dims)
        if _elements(tensor.dims) <= MAX_SHAPE_ENTRIES and tensor.data_type == 7:
            kept.append(tensor)  # shape-like constants: inference reads their values
        elif tensor.name not in declared_inputs:
            weights.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    # No value_info: the shapes come from inference, not from the file's claims.
    light = helper.make_model(helper.make_graph(list(graph.node), graph.name, [*graph.input, *weights],
                                                list(graph.output), initializer=kept),
                              opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        inferred = shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=False)
    except Exception as err:  # noqa: BLE001 - onnx raises InferenceError, ValidationError, RuntimeError
        text = str(err).strip().splitlines()
        raise CheckpointError(f"{source}: the graph's shapes do not check out: "
                              f"{abbreviate(text[0] if text else err, 300)}") from err
    shapes = _static_shapes([*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output])
    for tensor in kept:
        shapes[tensor.name] = tuple(tensor.dims)
    activations = macs = 0
    for node in inferred.graph.node:
        label = f"node {abbreviate(node.name or node.output[0], 80)} ({node.op_type})"
        for name in node.output:
            shape = shapes.get(name)
            if shape is None:
                raise CheckpointError(f"{source}: {label}: output {abbreviate(name, 80)} has no static shape; an ONNX "
                                      f"policy's sizes are all fixed")
            elements = _elements(shape)
            activations += elements
            if activations > MAX_ACTIVATIONS:
                raise CheckpointError(f"{source}: {label}: output {abbreviate(name, 80)} {list(shape)} takes one "
                                      f"inference over MAX_ACTIVATIONS = {MAX_ACTIVATIONS} intermediate elements")
            macs += _node_macs(node, shapes, elements)
        if macs > MAX_INFERENCE_MACS:
            raise CheckpointError(f"{source}: {label} takes one inference over MAX_INFERENCE_MACS = "
                                  f"{MAX_INFERENCE_MACS} multiply-accumulates")
    return GraphPlan(activations=activations, macs=macs, parameters=parameters)
