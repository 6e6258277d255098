"""ONNX policies (docs/onnx.md): export, equality with torch, metadata checks, `policy info`, the
policy node on onnxruntime with torch hidden. Real torch, real onnxruntime, real nodes over DDS."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from sensor_msgs.msg import Image, JointState
from support import REPO_ROOT, node_decl, wait_until
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros.conversions import array_to_image, make_joint_state, stamp_to_ns
from sim2real_ros.core.errors import CheckpointError
from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.backend import Policy, file_backend, load_policy, resolve_backend
from sim2real_ros.core.policy.checkpoint import load_checkpoint, make_policy_spec, save_checkpoint
from sim2real_ros.core.policy.model import build_model
from sim2real_ros.core.policy.onnx_export import export_onnx
from sim2real_ros.core.policy.onnx_policy import MAX_ONNX_BYTES, load_onnx_policy
from sim2real_ros.nodes.common import JOINT_STATE_QOS, RELIABLE_LATEST_QOS
from sim2real_ros.paths import config_path, default_policy_path, urdf_path
from sim2real_ros.runtime.launcher import GraphLauncher
from sim2real_ros.sim.params import load_sim_params
from sim2real_ros.sim.world import SimWorld

SHIPPED = default_policy_path()
TOLERANCE_RAD = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "reach_default.onnx"
    result = export_onnx(SHIPPED, out)
    assert result["max_abs_difference_rad"] <= TOLERANCE_RAD and out.is_file()
    return out


def graph_inputs():
    joints = list(load_checkpoint(SHIPPED, warmup=False).spec.joint_names)
    return joints, PreprocessConfig.from_yaml(config_path("preprocess.yaml"))


def sim_observations(count: int = 12, seed: int = 3):
    """Policy images and joint positions as the graph sees them: rendered by the sim through the
    preprocessing pipeline, the arm moved to random poses around home."""
    params = load_sim_params(config_path("sim_params.yaml"))
    pipeline = ImagePipeline(PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    world = SimWorld(params, str(urdf_path()), seed=seed, render=True)
    rng = np.random.default_rng(seed)
    out = []
    try:
        for i in range(count):
            if i % 3 == 0:
                world.reset(seed=seed + i)
            world.set_command(world.joint_positions() + rng.uniform(-0.3, 0.3, len(world.joint_names)))
            world.step(20)
            out.append((pipeline.process(world.render(), "rgb8", world.camera), world.joint_positions()))
    finally:
        world.close()
    return out


def test_onnxruntime_equals_torch_on_sim_observations(exported):
    torch_policy = load_policy(SHIPPED)
    onnx_policy = load_policy(exported)
    assert (torch_policy.backend, onnx_policy.backend) == ("torch", "onnxruntime")
    assert isinstance(torch_policy, Policy) and isinstance(onnx_policy, Policy)  # one protocol, two runtimes
    assert onnx_policy.spec == torch_policy.spec and onnx_policy.parent_hash == torch_policy.checkpoint_hash
    worst = 0.0
    moved = 0.0
    for image, q in sim_observations():
        expected = torch_policy.select_action(image, q)
        got = onnx_policy.select_action(image, q)
        assert got.shape == expected.shape == (10, 6) and got.dtype == np.float64
        worst = max(worst, float(np.max(np.abs(got - expected))))
        moved = max(moved, float(np.max(np.abs(expected - q))))
    assert worst <= TOLERANCE_RAD, worst
    assert moved > 0.01  # the observations make the policy move: equality is not of two holds
    # A zero delta holds exactly: positions are added in float64 after the graph, as torch does.
    image, q = sim_observations(1)[0]
    assert np.array_equal(onnx_policy.select_action(image, q)[0] - onnx_policy.select_action(image, q)[0],
                          np.zeros(6))
    with pytest.raises(ValueError, match="NaN"):
        onnx_policy.select_action(image, np.full(6, np.nan))
    with pytest.raises(ValueError, match="uint8"):
        onnx_policy.select_action(image.astype(np.float32), q)


def test_the_graph_holds_the_whole_computation_and_the_spec(exported):
    model = onnx.load(exported)
    assert [i.name for i in model.graph.input] == ["image", "joint_positions"]
    assert [o.name for o in model.graph.output] == ["targets", "deltas"]
    assert {op.domain or "ai.onnx": op.version for op in model.opset_import}["ai.onnx"] in (17, 18)
    props = {p.key: p.value for p in model.metadata_props}
    spec = load_checkpoint(SHIPPED, warmup=False).spec
    assert json.loads(props["sim2real.joint_names"]) == list(spec.joint_names)
    assert json.loads(props["sim2real.preprocess_hash"]) == spec.preprocess_hash
    assert json.loads(props["sim2real.preprocess"]) == spec.preprocess
    assert json.loads(props["sim2real.policy_camera"]) == spec.policy_camera
    assert json.loads(props["sim2real.sim_params_version"]) == spec.sim_params_version
    assert json.loads(props["sim2real.chunk_length"]) == 10 and json.loads(props["sim2real.dt_s"]) == 0.05
    assert json.loads(props["sim2real.architecture"]) == spec.architecture
    assert props["sim2real.parent_hash"] == load_checkpoint(SHIPPED, warmup=False).checkpoint_hash
    # "targets" (absolute) is the whole computation, normalization included: targets = q + deltas.
    import onnxruntime as ort

    session = ort.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    image, q = sim_observations(1)[0]
    targets, deltas = session.run(None, {"image": image[None], "joint_positions": q.astype(np.float32)[None]})
    assert np.allclose(targets[0], q.astype(np.float32) + deltas[0], atol=1e-6)
    assert np.max(np.abs(targets[0] - load_policy(SHIPPED).select_action(image, q))) <= TOLERANCE_RAD


def test_mismatching_metadata_is_refused_like_checkpoints(exported, tmp_path):
    joints, preprocess = graph_inputs()
    load_onnx_policy(exported, joint_names=joints, preprocess=preprocess)  # matches: loads
    other_joints = [*joints[:-1], "wrist_roll"]
    with pytest.raises(CheckpointError) as onnx_err:
        load_policy(exported, joint_names=other_joints, preprocess=preprocess)
    with pytest.raises(CheckpointError) as ckpt_err:
        load_policy(SHIPPED, joint_names=other_joints, preprocess=preprocess)
    assert str(exported) in str(onnx_err.value) and "joints: checkpoint expects" in str(onnx_err.value)
    assert str(onnx_err.value).replace(str(exported), "F") == str(ckpt_err.value).replace(str(SHIPPED), "F")
    with pytest.raises(CheckpointError, match="joint order"):
        load_policy(exported, joint_names=list(reversed(joints)), preprocess=preprocess)
    other = tmp_path / "preprocess_other.yaml"
    other.write_text(config_path("preprocess.yaml").read_text().replace("interpolation: linear",
                                                                        "interpolation: area"))
    other_pre = PreprocessConfig.from_yaml(other)
    assert other_pre.content_hash != preprocess.content_hash
    with pytest.raises(CheckpointError, match=f"graph has {other_pre.content_hash}") as pre_err:
        load_policy(exported, joint_names=joints, preprocess=other_pre)
    assert str(exported) in str(pre_err.value)


def rewrite(source: Path, out: Path, edit) -> Path:
    model = onnx.load(source)
    props = {p.key: p.value for p in model.metadata_props}
    edit(props)
    del model.metadata_props[:]
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, out)
    return out


@pytest.mark.parametrize(("edit", "message"), [
    (lambda p: p.pop("sim2real.joint_names"), "metadata field 'sim2real.joint_names' is missing"),
    (lambda p: p.pop("sim2real.format_version"), "metadata field 'sim2real.format_version' is missing"),
    (lambda p: p.update({"sim2real.format_version": "7"}), "'sim2real.format_version' = '7'"),
    (lambda p: p.update({"sim2real.joint_names": "[joint1"}), "'sim2real.joint_names' = '[joint1': not valid JSON"),
    (lambda p: p.update({"sim2real.dt_s": "NaN"}), "'sim2real.dt_s' = 'NaN': not valid JSON"),
    (lambda p: p.update({"sim2real.chunk_length": "100000"}), "sim2real.chunk_length"),
    (lambda p: p.update({"sim2real.joint_names": json.dumps([f"j{i}" for i in 6 * [1]])}), "duplicate"),
    # Metadata that does not fit the graph it describes: 7 joints on a 6-joint graph.
    (lambda p: p.update({"sim2real.joint_names": json.dumps([f"j{i}" for i in range(7)])}),
     "graph input 'joint_positions' has shape [1, 6], the metadata"),
    (lambda p: p.update({"sim2real.image_width": "64"}), "graph input 'image' has shape [1, 96, 96, 3]"),
])
def test_malformed_metadata_is_refused_naming_the_file_and_field(exported, tmp_path, edit, message):
    bad = rewrite(exported, tmp_path / "bad.onnx", edit)
    with pytest.raises(CheckpointError, match=None) as err:
        load_policy(bad)
    assert message in str(err.value) and str(bad) in str(err.value), str(err.value)
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "policy", "info", str(bad)],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and message in proc.stderr, proc.stderr


def test_hostile_files_are_refused_before_parsing(exported, tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07" + os.urandom(2000))
    with pytest.raises(CheckpointError, match=f"{garbage}: not a loadable ONNX model"):
        load_policy(garbage)
    huge = tmp_path / "huge.onnx"
    with open(huge, "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_ONNX_BYTES + 1)
    with pytest.raises(CheckpointError, match="more than an ONNX policy may have"):
        load_policy(huge)
    plain = tmp_path / "plain.onnx"  # a valid ONNX model that is not a policy written by export
    model = onnx.load(exported)
    del model.metadata_props[:]
    onnx.save(model, plain)
    with pytest.raises(CheckpointError, match="'sim2real.format_version' is missing: not a policy written by"):
        load_policy(plain)


def test_backend_choice_by_file_and_refusal_of_the_other_kind(exported, tmp_path):
    assert file_backend(SHIPPED) == "torch" and file_backend(exported) == "onnxruntime"
    renamed = tmp_path / "policy.bin"  # detected by content, not only the name
    renamed.write_bytes(exported.read_bytes())
    assert resolve_backend(renamed) == "onnxruntime" and load_policy(renamed).backend == "onnxruntime"
    with pytest.raises(CheckpointError, match="is an ONNX model, not a file for backend 'torch'"):
        load_policy(exported, backend="torch")
    with pytest.raises(CheckpointError, match="is a sim2real checkpoint, not a file for backend 'onnxruntime'"):
        load_policy(SHIPPED, backend="onnxruntime")
    with pytest.raises(CheckpointError, match="unknown policy backend 'tensorrt'"):
        load_policy(exported, backend="tensorrt")
    # A safetensors header length whose first byte is ONNX's first byte (0x08) is still a checkpoint.
    header = b'{"__metadata__":{"sim2real":"{}"}}'.ljust(0x108, b" ")
    ambiguous = tmp_path / "ambiguous.bin"
    ambiguous.write_bytes(len(header).to_bytes(8, "little") + header)
    assert ambiguous.read_bytes()[:1] == b"\x08" and file_backend(ambiguous) == "torch"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT)


def test_policy_export_and_info_commands(exported, tmp_path):
    out = tmp_path / "cli.onnx"
    proc = run_cli("policy", "export", str(SHIPPED), "--onnx", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)
    assert written["onnx"] == str(out) and written["opset"] == 18 and written["max_abs_difference_rad"] <= 1e-4
    info = run_cli("policy", "info", str(out), "--json")
    assert info.returncode == 0, info.stderr
    described = json.loads(info.stdout)
    ckpt = json.loads(run_cli("policy", "info", str(SHIPPED), "--json").stdout)
    assert described["format"] == "onnx" and described["parent_hash"] == ckpt["hash"] == written["parent_hash"]
    assert described["spec"] == ckpt["spec"] and described["hash"] == written["hash"]
    text = run_cli("policy", "info", str(out))
    assert text.returncode == 0 and f"ONNX, exported from checkpoint {ckpt['hash']}" in text.stdout
    assert "joints (6):      joint1" in text.stdout
    assert "preprocess hash: " + ckpt["spec"]["preprocess_hash"] in text.stdout
    missing = run_cli("policy", "export", str(tmp_path / "nope.pt"), "--onnx", str(tmp_path / "x.onnx"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


HIDE_TORCH = '''
import os, sys

class _HideTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch is hidden in this process (import of {name})")
        return None

sys.meta_path.insert(0, _HideTorch())
open(os.environ["SIM2REAL_TORCH_HIDDEN_MARK"], "a").write(f"{os.getpid()}\\n")
'''


def test_policy_node_runs_an_onnx_policy_with_torch_hidden(ros, tmp_path, exported):
    """The node process cannot import torch (a sitecustomize makes `import torch` raise, and marks
    that it ran in the node's process); it loads the ONNX file and publishes the chunks onnxruntime
    computes, equal to torch's."""
    hider = tmp_path / "hide_torch"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text(HIDE_TORCH)
    mark = tmp_path / "hidden.pids"
    env = {"PYTHONPATH": os.pathsep.join([str(hider), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "SIM2REAL_TORCH_HIDDEN_MARK": str(mark)}
    check = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **env, "SIM2REAL_TORCH_HIDDEN_MARK": str(tmp_path / "check.pids")})
    assert check.returncode != 0 and "torch is hidden" in check.stderr  # the hider works
    joints, _ = graph_inputs()
    reference = load_policy(SHIPPED)
    params = {"checkpoint": str(exported), "backend": "auto", "observation_period_s": 0.0,
              "max_observation_age_s": 5.0, "pairing_tolerance_s": 0.005}
    chunks = ros.collect(JointTrajectory, "policy/action_chunk", RELIABLE_LATEST_QOS)
    image_pub = ros.publisher(Image, "policy/image", RELIABLE_LATEST_QOS)
    joint_pub = ros.publisher(JointState, "joint_states", JOINT_STATE_QOS)
    log = tmp_path / "graph.log"
    launcher = GraphLauncher([node_decl("policy_node", params)], env=env, echo=False, log_file=log)
    launcher.start()
    try:
        ros.wait_for_subscribers(image_pub, timeout_s=60.0)
        ros.wait_for_subscribers(joint_pub, timeout_s=60.0)
        clock = ros.node.get_clock()
        sent = []
        for image, q in sim_observations(3, seed=11):
            stamp = clock.now().nanoseconds
            joint_pub.publish(make_joint_state(joints, q, stamp))
            image_pub.publish(array_to_image(image, "rgb8", stamp))
            sent.append((stamp, image, q))
            ros.wait_for_messages(chunks, len(sent), timeout_s=30.0)
        by_stamp = {stamp_to_ns(c.header.stamp): np.array([p.positions for p in c.points]) for c in chunks}
        for stamp, image, q in sent:
            assert np.max(np.abs(by_stamp[stamp] - reference.select_action(image, q))) <= TOLERANCE_RAD
        assert wait_until(lambda: "on onnxruntime cpu" in log.read_text(), 10.0)
        assert mark.is_file() and mark.read_text().split()  # the hider ran in the node's process
    except BaseException:
        print(log.read_text() if log.exists() else "(no node output)")
        raise
    finally:
        launcher.shutdown()
    assert "torch is hidden" not in log.read_text()


def test_the_pooled_keypoint_architecture_exports_and_matches_torch(tmp_path):
    """cnn_spatial_softmax_pooled (keypoints and the channels' means) goes through the exporter and
    the graph checks (its pool is an AveragePool over the whole keypoint map) and onnxruntime
    gives torch's targets, with an action scale large enough for a difference to show."""
    preprocess = PreprocessConfig.from_yaml(config_path("preprocess_wrist.yaml"))
    spec = make_policy_spec([f"j{i}" for i in range(6)], preprocess, architecture="cnn_spatial_softmax_pooled",
                            chunk_length=10, dt_s=0.05)
    torch.manual_seed(1)
    model = build_model("cnn_spatial_softmax_pooled", spec)
    model.set_normalization(np.zeros(6), np.full(6, 0.5), np.zeros(6), np.full(6, 0.3))
    checkpoint = tmp_path / "pooled.safetensors"
    save_checkpoint(checkpoint, model, spec)
    out = tmp_path / "pooled.onnx"
    result = export_onnx(checkpoint, out)
    assert result["max_abs_difference_rad"] <= TOLERANCE_RAD
    pools = [node for node in onnx.load(str(out)).graph.node if node.op_type == "AveragePool"]
    assert len(pools) == 1
    policy = load_onnx_policy(out)
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (spec.image_height, spec.image_width, 3), dtype=np.uint8)
    q = rng.uniform(-1.0, 1.0, 6).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(image)[None], torch.from_numpy(q)[None])[0].numpy()
    got = policy.select_action(image, q)
    assert np.abs(expected - q).max() > 0.01  # the targets move: a wrong graph would show
    assert np.abs(got - expected).max() <= TOLERANCE_RAD


def test_an_export_beside_the_checkpoint_is_what_the_robot_graph_runs(tmp_path):
    """`sim2real policy export CKPT` without --onnx writes CKPT.onnx beside it, which a lean robot graph
    (`sim2real launch robot --checkpoint CKPT`) then runs on onnxruntime; an .onnx given as the
    checkpoint is refused rather than overwritten."""
    import shutil

    from sim2real_ros.evaluation.checkpoint_graph import lean_policy
    from sim2real_ros.graph import GraphArgs

    mine = tmp_path / "mine.safetensors"
    shutil.copy(SHIPPED, mine)
    proc = run_cli("policy", "export", str(mine))
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {tmp_path / 'mine.onnx'}" in proc.stdout
    args, line = lean_policy("robot", GraphArgs(checkpoint=str(mine)))
    assert args.checkpoint == str(tmp_path / "mine.onnx") and "its ONNX export" in line
    again = run_cli("policy", "export", str(tmp_path / "mine.onnx"))
    assert again.returncode == 2 and "would be overwritten by its own export" in again.stderr


def test_a_trained_checkpoint_whose_export_fails_is_kept_and_named(tmp_path, capsys):
    """cli/onnx_beside.export_beside (after `sim2real train` / `finetune`): a checkpoint it cannot
    export, or one named .onnx, is said on stderr and left as it is; no export is written."""
    from pathlib import Path

    from sim2real_ros.cli.onnx_beside import export_beside

    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a checkpoint")
    assert export_beside("train", broken) is None
    err = capsys.readouterr().err
    assert f"sim2real train: {broken} is written, but its ONNX export failed" in err and "runs it on torch" in err
    assert "Traceback" not in err and not (tmp_path / "broken.onnx").exists()
    assert broken.read_bytes() == b"not a checkpoint"
    named_onnx = Path(tmp_path / "odd.onnx")
    named_onnx.write_bytes(b"x")
    assert export_beside("finetune", named_onnx) is None
    assert "is named .onnx: no export beside it" in capsys.readouterr().err and named_onnx.read_bytes() == b"x"
