"""Checkpoints: round trip, safety (no pickle), spec mismatch refusals, `sim2real policy`."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pybullet_data
import pytest
import torch
from checkpoint_craft import join_checkpoint, legacy_checkpoint, spec_document, split_checkpoint

from sim2real_ros.cli.main import main as sim2real_main
from sim2real_ros.core.errors import CheckpointError
from sim2real_ros.core.hashing import content_hash
from sim2real_ros.core.perception.camera_model import CameraModel
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.backend import Policy
from sim2real_ros.core.policy.checkpoint import (
    METADATA_KEY,
    checkpoint_hash,
    encode_checkpoint,
    load_checkpoint,
    make_policy_spec,
    read_checkpoint,
    save_checkpoint,
)
from sim2real_ros.core.policy.model import build_model
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.paths import config_path
from sim2real_ros.provenance import sim_params_version
from sim2real_ros.training.untrained import init_checkpoint

PANDA_URDF = Path(pybullet_data.getDataPath()) / "franka_panda" / "panda.urdf"
SMALL = {"channels": [8, 16], "pool_size": 2, "image_features": 32, "hidden": [64]}


@pytest.fixture(scope="module")
def panda_joints() -> list[str]:
    return RobotModel.from_file(PANDA_URDF).joint_names


@pytest.fixture(scope="module")
def preprocess() -> PreprocessConfig:
    return PreprocessConfig.from_yaml(config_path("preprocess.yaml"))


@pytest.fixture
def trained_like(tmp_path, panda_joints, preprocess):
    """A small model with non-trivial normalization, saved to tmp_path."""
    torch.manual_seed(3)
    spec = make_policy_spec(panda_joints, preprocess, hparams=SMALL, sim_params_version="abc",
                            provenance={"method": "test", "parent": None})
    model = build_model("cnn_mlp", spec, **SMALL)
    n = len(panda_joints)
    model.set_normalization(np.linspace(-1, 1, n), np.full(n, 0.4), np.full((10, n), 0.02), np.full((10, n), 0.1))
    path = tmp_path / "policy.pt"
    digest = save_checkpoint(path, model.eval(), spec)
    return model, spec, path, digest


def observations(spec, count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        image = rng.integers(0, 256, (spec.image_height, spec.image_width, 3), dtype=np.uint8)
        yield image, rng.uniform(-1.0, 1.0, spec.joint_count)


def test_round_trip_gives_bit_identical_actions(trained_like):
    model, spec, path, digest = trained_like
    loaded = load_checkpoint(path)
    assert isinstance(loaded, Policy) and loaded.backend == "torch"
    assert loaded.spec == dataclasses.replace(spec, hparams=SMALL)
    assert loaded.checkpoint_hash == digest == checkpoint_hash(path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    with torch.inference_mode():
        for image, q in observations(spec, 5):
            expected = q[None, :] + model.predict_deltas(torch.from_numpy(image)[None],
                                                         torch.tensor(q, dtype=torch.float32)[None])[0].numpy()
            actions = loaded.select_action(image, q)
            assert actions.dtype == np.float64 and actions.shape == (10, len(spec.joint_names))
            assert np.array_equal(actions, expected)
            assert np.array_equal(actions, loaded.select_action(image, q))  # deterministic


def test_saving_is_deterministic_and_the_hash_follows_content(trained_like, tmp_path):
    model, spec, path, digest = trained_like
    assert save_checkpoint(tmp_path / "again.pt", model, spec) == digest
    with torch.no_grad():
        model.action_mean.add_(1e-3)
    assert save_checkpoint(tmp_path / "changed.pt", model, spec) != digest


def test_select_action_rejects_bad_observations(trained_like):
    _, spec, path, _ = trained_like
    loaded = load_checkpoint(path, warmup=False)
    image, q = next(observations(spec, 1))
    with pytest.raises(ValueError, match="image must be uint8"):
        loaded.select_action(image[:48], q)
    with pytest.raises(ValueError, match="image must be uint8"):
        loaded.select_action(image.astype(np.float32), q)
    with pytest.raises(ValueError, match="joint_positions must have shape"):
        loaded.select_action(image, q[:3])
    q[2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        loaded.select_action(image, q)


# ----------------------------------------------------------------------------------------------
# Spec mismatches
def test_matching_graph_is_accepted(trained_like, panda_joints, preprocess):
    load_checkpoint(trained_like[2], warmup=False).check_compatible(panda_joints, preprocess)


def _camera(preprocess: PreprocessConfig, **changes) -> PreprocessConfig:
    camera = dataclasses.replace(preprocess.policy_camera, **changes)
    return dataclasses.replace(preprocess, policy_camera=camera)


@pytest.mark.parametrize("kind", ["names", "order", "image size", "intrinsics", "preprocessing"])
def test_each_kind_of_mismatch_is_refused_naming_both_sides(kind, trained_like, panda_joints, preprocess):
    loaded = load_checkpoint(trained_like[2], warmup=False)
    joints = list(panda_joints)
    graph_preprocess = preprocess
    if kind == "names":
        joints = [f"arm_joint_{i}" for i in range(len(joints))]
        expected = [r"joints: checkpoint expects joints \['panda_joint1'.*graph has \['arm_joint_0'"]
    elif kind == "order":
        joints[0], joints[1] = joints[1], joints[0]
        expected = [r"joint order: checkpoint expects joints \['panda_joint1', 'panda_joint2'.*"
                    r"graph has \['panda_joint2', 'panda_joint1'"]
    elif kind == "image size":
        graph_preprocess = _camera(preprocess, width=128, height=64, cx=64.0, cy=32.0)
        expected = [r"image size: checkpoint expects 96x96, graph has 128x64"]
    elif kind == "intrinsics":
        graph_preprocess = _camera(preprocess, fx=120.0)
        expected = [r"intrinsics: checkpoint expects \{'fx': 96.0.*graph has \{'fx': 120.0"]
    else:
        graph_preprocess = dataclasses.replace(preprocess, interpolation="nearest")
        expected = [rf"preprocessing: checkpoint was trained with preprocess hash {preprocess.content_hash}.*"
                    rf"graph has {graph_preprocess.content_hash}"]
    with pytest.raises(CheckpointError) as info:
        loaded.check_compatible(joints, graph_preprocess)
    message = str(info.value)
    assert str(trained_like[2]) in message
    for pattern in expected:
        assert re.search(pattern, message), message
    if kind in ("names", "order"):
        assert "preprocess" not in message  # only what differs is reported


# ----------------------------------------------------------------------------------------------
# Safety and damaged files
class _CreatesFileWhenUnpickled:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_a_checkpoint_that_would_run_code_is_refused(writer, tmp_path):
    # First prove the payload is live: unpickling it really creates a file.
    probe = tmp_path / "probe_marker"
    pickle.loads(pickle.dumps(_CreatesFileWhenUnpickled(probe)))
    assert probe.exists()

    marker = tmp_path / "pwned_marker"
    path = tmp_path / "evil.pt"
    payload = {"state": {"w": torch.zeros(2)}, "evil": _CreatesFileWhenUnpickled(marker)}
    if writer == "pickle":
        path.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, path)
    with pytest.raises(CheckpointError, match="not a sim2real policy checkpoint.*pickle.*refusing"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    assert not marker.exists()


def test_damaged_checkpoints_are_refused_with_the_reason(trained_like, tmp_path):
    model, spec, path, _ = trained_like
    data = path.read_bytes()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="outside the file"):
        load_checkpoint(truncated)

    def rewrite(name: str, mutate) -> Path:
        header, blob = split_checkpoint(data)
        mutate(header)
        out = tmp_path / name
        out.write_bytes(join_checkpoint(header, blob))
        return out

    with pytest.raises(CheckpointError, match="format version 99"):
        load_checkpoint(rewrite("version.safetensors", lambda h: h["__metadata__"][METADATA_KEY].update(
            format_version=99)))
    with pytest.raises(CheckpointError, match="field 'joint_names'"):
        load_checkpoint(rewrite("nojoints.safetensors", lambda h: spec_document(h).pop("joint_names")))
    with pytest.raises(CheckpointError, match="weights do not fit"):
        load_checkpoint(rewrite("arch.safetensors", lambda h: spec_document(h)["hparams"].update(hidden=[65])))
    missing = tmp_path / "missing.safetensors"
    missing.write_bytes(encode_checkpoint(spec, {k: v for k, v in model.state_dict().items() if k != "action_mean"}))
    with pytest.raises(CheckpointError, match=r"weights do not fit.*missing tensors \['action_mean'\]"):
        load_checkpoint(missing)


def test_the_file_is_a_standard_safetensors_file_with_the_spec_in_its_metadata(trained_like):
    """Any safetensors reader gets the weights; the spec is one JSON document under one key."""
    from safetensors import safe_open

    model, spec, path, _ = trained_like
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
        assert set(handle.keys()) == set(model.state_dict())
        assert torch.equal(handle.get_tensor("joint_std"), model.joint_std)
    assert list(metadata) == [METADATA_KEY]
    document = json.loads(metadata[METADATA_KEY])
    assert (document["format_version"], document["kind"]) == (2, "policy")
    assert document["spec"] == dataclasses.replace(spec, hparams=SMALL).to_dict()


def test_an_old_format_checkpoint_is_refused_then_converted_bit_identically(trained_like, tmp_path, capsys):
    model, spec, _, _ = trained_like
    state = {k: v.clone() for k, v in model.state_dict().items()}
    spec_dict = dataclasses.replace(spec, hparams=SMALL).to_dict()
    old = tmp_path / "old.pt"
    old.write_bytes(legacy_checkpoint(spec_dict, state))
    with pytest.raises(CheckpointError, match=r"old.pt: old format .*run `sim2real policy convert .*old.pt NEW"):
        load_checkpoint(old)
    assert sim2real_main(["policy", "info", str(old)]) == 2
    assert "sim2real policy convert" in capsys.readouterr().err
    new = tmp_path / "new.safetensors"
    assert sim2real_main(["policy", "convert", str(old), str(new)]) == 0
    assert "tensors bit-identical" in capsys.readouterr().out
    loaded = load_checkpoint(new)
    for name, tensor in state.items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    provenance = dict(loaded.spec.provenance)
    assert provenance.pop("converted") == {"from_format": provenance_format(), "previous_hash": checkpoint_hash(old)}
    assert provenance == spec.provenance
    # Converting is deterministic: the same old file gives the same bytes (the same hash).
    again = tmp_path / "again.safetensors"
    assert sim2real_main(["policy", "convert", str(old), str(again)]) == 0
    assert again.read_bytes() == new.read_bytes()


def provenance_format() -> str:
    from sim2real_ros.training.checkpoint_convert import FROM_FORMAT

    return FROM_FORMAT


def test_a_damaged_old_format_file_is_not_converted(trained_like, tmp_path, capsys):
    model, spec, _, _ = trained_like
    data = legacy_checkpoint(dataclasses.replace(spec, hparams=SMALL).to_dict(), dict(model.state_dict()))
    old = tmp_path / "cut.pt"
    old.write_bytes(data[:-10])
    new = tmp_path / "new.safetensors"
    assert sim2real_main(["policy", "convert", str(old), str(new)]) == 2
    assert "cut.pt" in capsys.readouterr().err and not new.exists()
    # A spec that the loader refuses: converted, read back, refused, nothing left behind.
    bad = legacy_checkpoint({**dataclasses.replace(spec, hparams=SMALL).to_dict(), "chunk_length": 10**7},
                            dict(model.state_dict()))
    old.write_bytes(bad)
    assert sim2real_main(["policy", "convert", str(old), str(new)]) == 2
    err = capsys.readouterr().err
    assert "converted file would not load" in err and "MAX_CHUNK_LENGTH" in err
    assert sorted(p.name for p in tmp_path.iterdir() if "new" in p.name) == []


def test_nan_weights_are_refused(trained_like, tmp_path):
    model, spec, _, _ = trained_like
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    path = tmp_path / "nan.pt"
    with pytest.raises(CheckpointError, match="NaN/Inf; nothing written"):  # never written by us
        save_checkpoint(path, model, spec)
    assert not path.exists()
    # ... and refused when a file holds them anyway (written by another tool, or damaged)
    path.write_bytes(encode_checkpoint(spec, model.state_dict()))
    with pytest.raises(CheckpointError, match="NaN/Inf"):
        load_checkpoint(path)


def test_missing_checkpoint_suggests_policy_init(tmp_path):
    with pytest.raises(CheckpointError, match=r"nope.pt does not exist.*sim2real policy init"):
        load_checkpoint(tmp_path / "nope.pt")


def test_unavailable_device_is_refused(trained_like):
    if torch.cuda.is_available():
        pytest.fail("this test expects a machine without CUDA")
    with pytest.raises(CheckpointError, match="CUDA is not available"):
        load_checkpoint(trained_like[2], device="cuda")


# ----------------------------------------------------------------------------------------------
# Sim params version, untrained checkpoints, CLI
def test_sim_params_version_hashes_content_not_spelling(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("gains: {kp: 100, kd: 2.0}\nlatency_s: 0.02\n")
    b.write_text("# comment\nlatency_s: 2.0e-2\ngains:\n  kd: 2\n  kp: 100.0\n")
    assert sim_params_version(a) == sim_params_version(b) == content_hash({"gains": {"kp": 100, "kd": 2},
                                                                          "latency_s": 0.02})
    assert sim_params_version(tmp_path / "missing.yaml") == "unknown"


def test_untrained_checkpoint_holds_still(tmp_path, panda_joints, preprocess):
    path = tmp_path / "init.pt"
    digest = init_checkpoint(path, panda_joints, preprocess, chunk_length=6, dt_s=0.1, seed=1)
    loaded = load_checkpoint(path)
    assert loaded.checkpoint_hash == digest
    assert loaded.spec.chunk_length == 6 and loaded.spec.dt_s == 0.1
    assert loaded.spec.provenance["method"].startswith("untrained") and loaded.spec.provenance["seed"] == 1
    for image, q in observations(loaded.spec, 3):
        actions = loaded.select_action(image, q)
        assert actions.shape == (6, len(panda_joints))
        assert np.max(np.abs(actions - q)) < 0.02  # [rad]


def test_policy_cli_init_then_info(tmp_path, capsys, preprocess, panda_joints):
    out = tmp_path / "cli.pt"
    sim_params = tmp_path / "sim_params.yaml"
    sim_params.write_text("latency_s: 0.03\n")
    code = sim2real_main(["policy", "init", "--robot", str(PANDA_URDF), "--out", str(out),
                          "--sim-params", str(sim_params), "--chunk-length", "8", "--dt", "0.04", "--seed", "2"])
    assert code == 0 and out.is_file()
    capsys.readouterr()
    assert sim2real_main(["policy", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["hash"] == checkpoint_hash(out)
    spec = info["spec"]
    assert spec["joint_names"] == panda_joints
    assert (spec["chunk_length"], spec["dt_s"]) == (8, 0.04)
    assert spec["preprocess_hash"] == preprocess.content_hash
    assert spec["policy_camera"] == preprocess.policy_camera.to_dict()
    assert spec["sim_params_version"] == content_hash({"latency_s": 0.03})
    # A URDF outside the repository is named by file name and content hash, never by this machine's path.
    assert spec["provenance"]["robot"] == {"name": "panda.urdf",
                                           "sha256": hashlib.sha256(PANDA_URDF.read_bytes()).hexdigest()[:16]}
    assert sim2real_main(["policy", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "panda_joint7" in text and "8 points every 0.04 s" in text and info["hash"] in text


def test_policy_cli_reports_errors(tmp_path, capsys):
    assert sim2real_main(["policy", "info", str(tmp_path / "none.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad_preprocess.yaml"
    bad.write_text("policy_camera: {width: 96, height: 96, fx: -1, fy: 96, cx: 48, cy: 48}\n")
    assert sim2real_main(["policy", "init", "--robot", str(PANDA_URDF), "--out", str(tmp_path / "x.pt"),
                          "--preprocess", str(bad)]) == 2
    assert "bad_preprocess.yaml" in capsys.readouterr().err


def test_camera_model_dict_is_what_the_spec_records(preprocess):
    # The intrinsics check reads fx/fy/cx/cy from the recorded CameraModel dict.
    recorded = make_policy_spec(["a"], preprocess).policy_camera
    assert CameraModel.from_dict(recorded) == preprocess.policy_camera


def test_the_old_format_reader_refuses_hostile_files_before_allocating(trained_like, tmp_path):
    """`policy convert` reads untrusted old files too: sizes checked first, tensors bounded by the file."""
    from sim2real_ros.core.policy.legacy_checkpoint import read_legacy_checkpoint

    model, spec, path, _ = trained_like
    good = legacy_checkpoint(dataclasses.replace(spec, hparams=SMALL).to_dict(), {"w": torch.zeros(1000)})
    length = int.from_bytes(good[16:24], "little")
    header = json.loads(good[24:24 + length])

    def craft(name: str, mutate) -> Path:
        h = json.loads(json.dumps(header))
        mutate(h)
        raw = json.dumps(h).encode()
        out = tmp_path / name
        out.write_bytes(good[:16] + len(raw).to_bytes(8, "little") + raw + good[24 + length:])
        return out

    row = {"name": "w", "dtype": "float32", "shape": [1000], "offset": 0, "nbytes": 4000}
    cases = {
        "same bytes twice": (lambda h: h.update(tensors=[row, {**row, "name": "v"}]), "claim more bytes"),
        "huge shape": (lambda h: h["tensors"][0].update(shape=[2**40], nbytes=2**42), "field 'shape'"),
        "object dtype": (lambda h: h["tensors"][0].update(dtype="object"), "field 'dtype'"),
        "NaN offset": (lambda h: h["tensors"][0].update(offset=float("nan")), "NaN"),
    }
    for name, (mutate, expected) in cases.items():
        with pytest.raises(CheckpointError, match=expected):
            read_legacy_checkpoint(craft(name.replace(" ", "_") + ".pt", mutate))
    huge_header = tmp_path / "huge_header.pt"
    huge_header.write_bytes(good[:16] + (2**63).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="field 'header length' = 9223372036854775808"):
        read_legacy_checkpoint(huge_header)
    with pytest.raises(CheckpointError, match="not an old-format sim2real checkpoint"):
        read_legacy_checkpoint(path)  # already safetensors
