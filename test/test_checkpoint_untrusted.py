"""Untrusted checkpoints (issue 18, item 10; safetensors files since issue 35): a hostile or
damaged file fails with one CheckpointError line naming the file and the field, in bounded memory:
never another exception, a hang or gigabytes.

Every crafted file is loaded the way the policy node loads one (load_checkpoint with warm-up) in
one separate process whose address space is limited to 2 GiB (torch imports in well under 1 GiB):
without the checks several of these files ask for tens of GB, which the limit turns into a
MemoryError instead of taking the machine. Each case also measures how much that process's peak
resident memory grew while loading it (ru_maxrss, before and after).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from checkpoint_craft import (
    join_checkpoint,
    legacy_checkpoint,
    run_measured,
    spec_document,
    split_checkpoint,
    zero_weights_checkpoint,
)
from support import REPO_ROOT

from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import (
    _MAX_FILE_BYTES,
    KIND_TEACHER,
    METADATA_KEY,
    encode_artifact,
    make_policy_spec,
)
from sim2real_ros.paths import config_path

JOINTS = ["j1", "j2", "j3"]
SMALL = {"channels": [8, 16], "pool_size": 2, "image_features": 32, "hidden": [64]}
ADDRESS_SPACE_LIMIT = 2 << 30  # [bytes]
# Largest growth of the loading process's peak RSS any refused file may cause [bytes]: the header
# parse and the checks take a few MB; the warm-up of the costly model below takes ~300 MB.
GROWTH_LIMIT = 64 << 20

RUNNER = r"""
import json, resource, sys, traceback
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2)
from sim2real_ros.core.policy.checkpoint import load_checkpoint
from sim2real_ros.core.errors import CheckpointError
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

cases = json.load(sys.stdin)
load_checkpoint(cases.pop("<good>")["path"])  # first a good one: torch's one-time allocations are no case's
results = {}
for name, case in cases.items():
    graph = {}
    if case["graph"]:
        graph = {"joint_names": case["graph"][0], "preprocess": PreprocessConfig.from_yaml(case["graph"][1])}
    before = peak()
    try:
        load_checkpoint(case["path"], **graph)
        outcome = {"error": None, "message": ""}
    except CheckpointError as err:
        outcome = {"error": "CheckpointError", "message": str(err)}
    except Exception as err:
        outcome = {"error": type(err).__name__, "message": traceback.format_exc()}
    outcome["growth_bytes"] = peak() - before
    results[name] = outcome
print(json.dumps(results))
"""


@dataclasses.dataclass(frozen=True)
class Case:
    data: bytes | None  # None: the file is the good one, made `size` bytes long (sparse: no disk used)
    expected: tuple[str, ...]  # fragments the message must hold (the field and the bad value)
    graph: bool = False  # load it against the default graph (JOINTS, config/preprocess.yaml)
    size: int = 0  # with data: extend the file to this many bytes (sparse) when larger


def _spec(**changes):
    preprocess = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    return dataclasses.replace(make_policy_spec(JOINTS, preprocess, hparams=SMALL), **changes)


def _edit(data: bytes, mutate) -> bytes:
    header, blob = split_checkpoint(data)
    mutate(header)
    return join_checkpoint(header, blob)


def _cases() -> dict[str, Case]:
    good = zero_weights_checkpoint(_spec())
    header, blob = split_checkpoint(good)
    raw_header = good[8:8 + int.from_bytes(good[:8], "little")].decode()
    # action_mean (float32, first by name) lies at the start of the data block.
    assert header["action_mean"] == {"dtype": "F32", "shape": [10, 3], "data_offsets": [0, 120]}
    first_offsets = '"action_mean":{"dtype":"F32","shape":[10,3],"data_offsets":[0,'
    assert raw_header.count(first_offsets) == 1
    second = min(n for n in header if n != "__metadata__" and header[n]["data_offsets"][0] == 120)

    def tensor0(**changes):
        return lambda h: h["action_mean"].update(changes)

    def spec(**changes):
        return lambda h: spec_document(h).update(changes)

    def hparams(**changes):
        return lambda h: spec_document(h)["hparams"].update(changes)

    def metadata(value):
        return lambda h: h["__metadata__"].update({METADATA_KEY: value})

    spec_path = f"__metadata__.{METADATA_KEY}.spec"
    teacher = encode_artifact(KIND_TEACHER, {"joint_names": ["j1"]}, {"w": torch.zeros(2)})
    cases = {
        # Sizes given as NaN/Infinity or beyond a float: named by their place in the header.
        "infinity_offset": Case(_edit(good, tensor0(data_offsets=[float("inf"), 120])),
                                ("header.action_mean.data_offsets[0]", "Infinity")),
        "nan_image_width": Case(_edit(good, spec(image_width=float("nan"))), (f"{spec_path}.image_width", "NaN")),
        "infinity_pool_size": Case(_edit(good, hparams(pool_size=float("inf"))),
                                   (f"{spec_path}.hparams.pool_size", "Infinity")),
        "offset_1e999": Case(join_checkpoint(raw_header.replace(first_offsets, first_offsets[:-2] + "1e999,"), blob),
                             ("header.action_mean.data_offsets[0]", "inf")),
        # Shapes, dtypes and offsets that do not fit the file, the caps or each other.
        "shape_0_by_2_70": Case(_edit(good, tensor0(shape=[0, 2**70], data_offsets=[0, 0])),
                                ("tensor 'action_mean'", "field 'shape'", str(2**70))),
        "shape_2_20_by_2_20": Case(_edit(good, tensor0(shape=[2**20, 2**20], data_offsets=[0, 2**42])),
                                   ("tensor 'action_mean'", "field 'shape'", "MAX_PARAMETERS")),
        "offset_past_end": Case(_edit(good, tensor0(data_offsets=[10**12, 10**12 + 120])),
                                ("tensor 'action_mean'", "field 'data_offsets' = [1000000000000", "outside the file")),
        "float_offset": Case(_edit(good, tensor0(data_offsets=[0.0, 120])),
                             ("tensor 'action_mean'", "field 'data_offsets' = [0.0, 120]")),
        "offsets_unlike_shape": Case(_edit(good, tensor0(data_offsets=[0, 4])),
                                     ("tensor 'action_mean'", "field 'data_offsets' = [0, 4]", "takes 120 bytes")),
        "object_dtype": Case(_edit(good, tensor0(dtype="object")), ("tensor 'action_mean'", "field 'dtype'")),
        "bfloat16_dtype": Case(_edit(good, tensor0(dtype="BF16", data_offsets=[0, 60])),
                               ("tensor 'action_mean'", "field 'dtype' = 'BF16'", "not a stored dtype")),
        "overlapping_offsets": Case(_edit(good, lambda h: h[second].update(
            data_offsets=[h[second]["data_offsets"][0] - 4, h[second]["data_offsets"][1] - 4])),
            ("tensors 'action_mean' and", "overlap")),
        "bytes_after_the_last_tensor": Case(good + bytes(64), ("64 bytes after the last tensor",)),
        "shape_unlike_architecture": Case(_edit(good, tensor0(shape=[3, 10])),
                                          ("tensor 'action_mean' field 'shape' = [3, 10]", "needs [10, 3]")),
        # Spec sizes beyond the caps: refused before anything is built or warmed up.
        "image_100000_px": Case(_edit(good, spec(image_width=100_000, image_height=100_000)),
                                ("field 'image_width' = 100000", "MAX_IMAGE_SIDE")),
        "hidden_2_40": Case(_edit(good, hparams(hidden=[2**40])), ("hparams.hidden", str(2**40))),
        "hidden_list_100000_long": Case(_edit(good, hparams(hidden=[8] * 100_000)),
                                        ("hparams.hidden", "<100000 entries>", "MAX_LAYERS")),
        "chunk_10_million": Case(_edit(good, spec(chunk_length=10**7)), ("field 'chunk_length'", "MAX_CHUNK_LENGTH")),
        "joints_as_a_string": Case(_edit(good, spec(joint_names="j1j2j3")), ("field 'joint_names'",)),
        # Each size within its cap, the model not: its parameters (1 GiB; the file needs only its
        # header for that), its warm-up (4 GiB).
        "parameters_over_cap": Case(_edit(good, hparams(hidden=[4096] * 16)), ("field 'hparams'", "MAX_PARAMETERS")),
        "activations_over_cap": Case(zero_weights_checkpoint(_spec(image_width=1024, image_height=1024,
                                                                   hparams={**SMALL, "channels": [4096]})),
                                     ("field 'hparams'", "MAX_ACTIVATIONS")),
        # Intrinsics the graph check reads, as a string.
        "intrinsics_not_a_number": Case(_edit(good, lambda h: spec_document(h)["policy_camera"].update(fx="wide")),
                                        ("policy_camera", "field 'fx'"), graph=True),
        # Incompatible with the graph (image size) and costly to warm up (~300 MB), within every
        # cap: refused by the graph check before the model is built.
        "incompatible_costly_warmup": Case(
            zero_weights_checkpoint(_spec(image_width=1024, image_height=1024,
                                          hparams={**SMALL, "channels": [96, 16]})),
            ("does not match the running graph", "image size: checkpoint expects 1024x1024"), graph=True),
        # Truncated anywhere.
        "empty": Case(b"", ("truncated checkpoint (0 bytes",)),
        "cut_in_length": Case(good[:5], ("truncated checkpoint", "ends inside the 8-byte header length")),
        "cut_in_header": Case(good[:100], ("field 'header length'", "truncated file?")),
        "cut_in_data": Case(good[:-100], ("outside the file", "truncated file?")),
        # Garbage headers and metadata.
        "header_not_utf8": Case(join_checkpoint(b"{" + bytes(range(128, 256)), blob), ("header is not valid JSON",)),
        "header_not_json": Case(join_checkpoint("{spec: 1", blob), ("header is not valid JSON",)),
        "header_a_list": Case(join_checkpoint("[1, 2]", blob), ("not a safetensors checkpoint",)),
        "header_nested_100000_deep": Case(join_checkpoint('{"a":' + "[" * 100_000 + "]" * 100_000 + "}", blob),
                                          ("header is nested too deeply",)),
        "integer_of_5000_digits": Case(join_checkpoint(raw_header.replace(first_offsets,
                                                                          first_offsets[:-2] + "9" * 5000 + ","),
                                                       blob), ("header is not valid JSON", "digits")),
        "header_length_2_63": Case((2**63).to_bytes(8, "little") + b"{}",
                                   ("field 'header length' = 9223372036854775808",)),
        # A 100 MB header (safetensors' own cap): refused by ours before it is read.
        "header_100_mb": Case((100 * 10**6).to_bytes(8, "little") + b'{"__metadata__":{}}', (
            "field 'header length' = 100000000", f"more than the {4 * 1024 * 1024} bytes"), size=100 * 10**6 + 8),
        "metadata_not_json": Case(_edit(good, metadata("{spec: 1")),
                                  (f"__metadata__.{METADATA_KEY} is not valid JSON",)),
        "metadata_not_a_string": Case(_edit(good, metadata(5)), (f"field '__metadata__.{METADATA_KEY}' = 5",)),
        "no_metadata": Case(_edit(good, lambda h: h.pop("__metadata__")), ("without a sim2real spec",)),
        "format_version_99": Case(_edit(good, lambda h: h["__metadata__"][METADATA_KEY].update(format_version=99)),
                                  ("checkpoint format version 99",)),
        "a_teacher_file": Case(teacher, ("a PPO teacher checkpoint, not a policy checkpoint",)),
        "spec_a_string": Case(_edit(good, lambda h: h["__metadata__"][METADATA_KEY].update(spec="policy")),
                              ("field '<spec>'",)),
        "no_tensors": Case(join_checkpoint({"__metadata__": header["__metadata__"]}, b""),
                           ("weights do not fit", "missing tensors")),
        # The format before safetensors: refused naming the command that converts it.
        "old_format": Case(legacy_checkpoint(_spec().to_dict(), {"w": torch.zeros(2)}),
                           ("old format", "sim2real policy convert")),
        # Bigger than any checkpoint within the caps (sparse: no disk used).
        "file_over_size_cap": Case(None, ("file size", str(_MAX_FILE_BYTES + 1))),
    }
    cases["<good>"] = Case(good, ())
    return cases


CASES = _cases()
REFUSED = sorted(name for name in CASES if name != "<good>")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> tuple[dict[str, dict], dict[str, Path]]:
    """Write every case's file and load them all in one limited process (one torch import)."""
    folder = tmp_path_factory.mktemp("untrusted")
    paths: dict[str, Path] = {}
    for name, case in CASES.items():
        path = folder / f"{name.strip('<>')}.safetensors"
        if case.data is not None:
            path.write_bytes(case.data)
            if case.size > len(case.data):
                with open(path, "r+b") as handle:
                    handle.truncate(case.size)
        else:
            path.write_bytes(CASES["<good>"].data)
            with open(path, "r+b") as handle:
                handle.truncate(_MAX_FILE_BYTES + 1)
        paths[name] = path
    graph = [JOINTS, str(config_path("preprocess.yaml"))]
    request = {name: {"path": str(paths[name]), "graph": graph if case.graph else None}
               for name, case in CASES.items()}
    (folder / "cases.json").write_text(json.dumps(request))
    code, _ = run_measured([sys.executable, "-c", RUNNER, str(ADDRESS_SPACE_LIMIT)], ADDRESS_SPACE_LIMIT,
                           timeout_s=300.0, cwd=REPO_ROOT, stdout=folder / "out.json",
                           stderr=folder / "err.txt", stdin=folder / "cases.json")
    assert code == 0, (folder / "err.txt").read_text()
    return json.loads((folder / "out.json").read_text()), paths


@pytest.mark.parametrize("name", REFUSED)
def test_a_hostile_or_damaged_checkpoint_is_refused_naming_file_and_field(name, outcomes):
    results, paths = outcomes
    outcome = results[name]
    message = outcome["message"]
    assert outcome["error"] == "CheckpointError", message
    assert str(paths[name]) in message
    for fragment in CASES[name].expected:
        assert fragment in message, message
    assert "\n" not in message and len(message) < 4000  # one line, of a readable length
    assert outcome["growth_bytes"] < GROWTH_LIMIT, f"peak RSS grew by {outcome['growth_bytes'] / 2**20:.0f} MiB"


def test_the_good_file_the_cases_are_made_from_loads(tmp_path):
    """The cases differ from a loadable checkpoint only by what each one breaks."""
    from sim2real_ros.core.policy.checkpoint import load_checkpoint

    path = tmp_path / "good.safetensors"
    path.write_bytes(CASES["<good>"].data)
    policy = load_checkpoint(path, joint_names=JOINTS,
                             preprocess=PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    actions = policy.select_action(np.zeros((96, 96, 3), np.uint8), np.zeros(3))
    assert np.array_equal(actions, np.zeros((10, 3)))  # zero weights and action_mean: holds still
