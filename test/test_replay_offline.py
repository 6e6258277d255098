"""Offline replay of a bag recorded from the sim graph (sim_node, camera_preprocessor, policy_node,
actuator_node, supervisor with auto_arm, and the recorder), with an untrained checkpoint.

The robot commands in the bag were produced by that checkpoint, so replaying it must give near-zero
error; another checkpoint (other seed, larger outputs) and a perturbed copy of the command topic
must not. The bag is recorded once per test session and shared with test_replay_graph.py.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64MultiArray
from support import TALKER_BAGS, RosProbe, node_decl, running_nodes, wait_until
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros.bags import BagReader
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.conversions import stamp_to_ns
from sim2real_ros.core.checkpoint import init_checkpoint, read_checkpoint, save_checkpoint
from sim2real_ros.core.policy_model import build_model
from sim2real_ros.core.preprocess_config import PreprocessConfig
from sim2real_ros.core.urdf import RobotModel
from sim2real_ros.episodes.topics import MissingTopicsError
from sim2real_ros.evaluation import ReplayOptions, evaluate_bag
from sim2real_ros.graph import GraphArgs, declare_graph
from sim2real_ros.paths import config_path, urdf_path

JOINTS = tuple(RobotModel.from_description(str(urdf_path())).joint_names)
SIM_SECONDS_OF_POLICY = 4.0  # [s] sim time recorded after the policy's first chunk
RECORDED = ["camera/image_raw", "camera/camera_info", "joint_states", "forward_position_controller/commands",
            "command/policy", "policy/action_chunk", "supervisor/state"]
PERTURBED_JOINT, PERTURBATION = 2, 0.05  # [rad] added to joint3 in the perturbed copy
NAMESPACE = "/arm1"
KEEP_ALL = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
ALL_COMMANDS = ReplayOptions(human_modes=(), progress=False, plots=False)
# An untrained checkpoint moves targets by about a milliradian at most [rad].
NEAR_ZERO_MAE = 5e-4


@dataclass(frozen=True)
class SimRecording:
    bag: Path  # recorded from the sim graph driven by `checkpoint`
    checkpoint: Path
    other_checkpoint: Path  # another seed, outputs ~50 mrad from the current position
    perturbed_bag: Path  # the bag under NAMESPACE with joint3 commands + PERTURBATION


def make_checkpoints(directory: Path) -> tuple[Path, Path]:
    preprocess = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    same, other = directory / "policy_seed0.pt", directory / "policy_seed1_large.pt"
    init_checkpoint(same, JOINTS, preprocess, seed=0)
    init_checkpoint(other, JOINTS, preprocess, seed=1)
    spec, state, _ = read_checkpoint(other)
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(state)
    n = len(JOINTS)
    model.set_normalization(model.joint_mean.numpy(), model.joint_std.numpy(), np.full(n, 0.03), np.full(n, 0.05))
    save_checkpoint(other, model, spec)
    return same, other


def record_sim_bag(directory: Path, checkpoint: Path) -> Path:
    """Run the sim graph plus the recorder until the policy has driven the robot for a few sim seconds."""
    bag = directory / "sim_bag"
    # A 10 Hz camera and a 100 Hz clock keep the sim near real time on a busy 2-core machine.
    decls = declare_graph("sim", GraphArgs(checkpoint=str(checkpoint), extra_parameters={
        "sim_node": {"camera_rate_hz": 10.0, "clock_rate_hz": 100.0}}))
    decls.append(node_decl("recorder", {"output": str(bag), "use_sim_time": True, "topics": RECORDED,
                                        "flush_period_s": 0.5, "discovery_period_s": 0.2}))
    probe = RosProbe("replay_bag_probe")
    try:
        chunks = probe.collect(JointTrajectory, "policy/action_chunk", KEEP_ALL)
        clock = probe.collect(Clock, "clock", 10)

        def policy_ran_long_enough() -> bool:
            if not chunks or not clock:
                return False
            first = stamp_to_ns(chunks[0].header.stamp)
            return stamp_to_ns(clock[-1].clock) >= first + int(SIM_SECONDS_OF_POLICY * 1e9)

        with running_nodes(decls, directory):
            assert wait_until(policy_ran_long_enough, 240.0, poll_s=0.2), (
                f"{len(chunks)} chunks, sim time {stamp_to_ns(clock[-1].clock) / 1e9 if clock else None} s")
    finally:
        probe.close()
    return bag


def perturbed_copy(bag: Path, out: Path) -> Path:
    """The bag's replay topics under NAMESPACE, joint3 of every robot command + PERTURBATION."""
    writer = BagWriter(out)
    with BagReader(bag) as reader:
        types = reader.topic_types()
        topics = ["/" + t for t in RECORDED if not t.startswith(("policy/", "command/"))]
        for topic in topics:
            writer.add_topic(NAMESPACE + topic, types[topic])
        for log_ns, topic, data in reader.raw_messages(topics):
            if topic == "/forward_position_controller/commands":
                msg = deserialize_message(bytes(data), Float64MultiArray)
                values = list(msg.data)
                values[PERTURBED_JOINT] += PERTURBATION
                msg.data = values
                data = serialize_message(msg)
            writer.write(NAMESPACE + topic, log_ns, data)
    writer.close()
    return out


def sim_recording(tmp_path_factory: pytest.TempPathFactory) -> SimRecording:
    """The session's sim recording (recorded by whichever replay test module needs it first)."""
    base = tmp_path_factory.getbasetemp() / "replay_sim_recording"
    paths = SimRecording(base / "sim_bag", base / "policy_seed0.pt", base / "policy_seed1_large.pt",
                         base / "perturbed_bag")
    if (base / "done").exists():
        return paths
    base.mkdir(exist_ok=True)
    same, _ = make_checkpoints(base)
    record_sim_bag(base, same)
    perturbed_copy(paths.bag, paths.perturbed_bag)
    (base / "done").write_text("ok")
    return paths


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> SimRecording:
    return sim_recording(tmp_path_factory)


def images_without_joint_state(bag: Path, topics: dict, tolerance_s: float) -> int:
    """Images in `bag` with no joint state stamped within `tolerance_s` [s] of their stamp."""
    image_ns, joint_ns = [], []
    with BagReader(bag) as reader:
        for message in reader.messages([topics["image"], topics["joint_states"]]):
            stamp = stamp_to_ns(message.msg.header.stamp)
            (image_ns if message.topic == topics["image"] else joint_ns).append(stamp)
    joints = np.sort(np.array(joint_ns, dtype=np.int64))
    tolerance_ns = int(round(tolerance_s * 1e9))
    missing = 0
    for stamp in image_ns:
        i = int(np.searchsorted(joints, stamp))
        nearest = min((abs(int(joints[j]) - stamp) for j in (i - 1, i) if 0 <= j < len(joints)), default=None)
        missing += nearest is None or nearest > tolerance_ns
    return missing


def test_same_policy_replays_with_near_zero_error_and_writes_the_report(sim, tmp_path):
    report_dir = tmp_path / "report"
    options = ReplayOptions(human_modes=(), progress=False)
    report = evaluate_bag(sim.bag, sim.checkpoint, "offline", report_dir, options)
    frames = report["frames"]
    assert frames["evaluated"] >= 10, frames
    # Exactly the images the bag holds no joint state for within the pairing tolerance are skipped
    # (counted here independently; how many there are depends on how loaded the recording machine was).
    assert frames["skipped"]["no_joint_state_within_tolerance"] == images_without_joint_state(
        sim.bag, report["topics"], options.pairing_tolerance_s), frames
    overall = report["metrics"]["overall"]
    assert overall["mae"] < NEAR_ZERO_MAE and overall["max_abs"] < 5e-3, overall
    assert len(report["metrics"]["by_chunk_index"]) == 10
    assert report["metrics"]["chunk_boundary_jumps"]["max"] < 5e-3
    assert report["topics"]["action"] == "/forward_position_controller/commands"
    assert json.loads((report_dir / "report.json").read_text()) == report
    text = (report_dir / "report.md").read_text()
    assert "| joint1 |" in text and "Error by chunk index" in text
    for name in report["plots"]:
        assert (report_dir / name).stat().st_size > 1000
    assert set(report["plots"]) >= {"predicted_vs_recorded.png", "error_histogram.png"}

    # The actuator's own output (command/policy, stamped with its tick) agrees just as well.
    policy_commands = ReplayOptions(action_topic="command/policy", human_modes=(), progress=False, plots=False)
    report = evaluate_bag(sim.bag, sim.checkpoint, "offline", None, policy_commands)
    assert report["frames"]["evaluated"] >= 10
    assert report["metrics"]["overall"]["mae"] < NEAR_ZERO_MAE


def test_another_checkpoint_is_clearly_off(sim):
    same = evaluate_bag(sim.bag, sim.checkpoint, "offline", None, ALL_COMMANDS)["metrics"]
    other = evaluate_bag(sim.bag, sim.other_checkpoint, "offline", None, ALL_COMMANDS)["metrics"]
    assert other["overall"]["mae"] > 0.02
    assert other["overall"]["mae"] > 20 * same["overall"]["mae"]
    magnitude = other["action_magnitude"]
    assert magnitude["predicted"]["mean"] > 10 * magnitude["human"]["mean"]


def test_perturbed_namespaced_commands_show_on_that_joint_only(sim):
    report = evaluate_bag(sim.perturbed_bag, sim.checkpoint, "offline", None, ALL_COMMANDS)
    assert report["topics"]["image"] == NAMESPACE + "/camera/image_raw"
    per_joint = report["metrics"]["per_joint"]
    for j, name in enumerate(JOINTS):
        if j == PERTURBED_JOINT:
            assert per_joint[name]["mae"] == pytest.approx(PERTURBATION, abs=5e-3)
            assert per_joint[name]["bias"] == pytest.approx(-PERTURBATION, abs=5e-3)  # predicted - recorded
        else:
            assert per_joint[name]["mae"] < NEAR_ZERO_MAE, (name, per_joint[name])


def test_default_compares_only_human_commands_and_the_cli_says_none_were(sim, tmp_path, capsys):
    """The sim graph ran AUTONOMOUS (auto_arm) after HOLD: no command was a person's."""
    code = cli_main(["replay", "--bag", str(sim.bag), "--checkpoint", str(sim.checkpoint), "--report",
                     str(tmp_path), "--no-plots"])
    assert code == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["frames"]["evaluated"] == 0
    skipped = report["frames"]["skipped"]
    # Frames before the supervisor's first command, or past the last one, had no command at all.
    assert skipped["not_in_human_mode"] + skipped["no_human_action"] == report["frames"]["predicted"] > 0
    assert skipped["not_in_human_mode"] > 0.5 * report["frames"]["predicted"]
    assert report["recorded"]["human_actions"] == 0
    assert report["recorded"]["mode_time_s"]["AUTONOMOUS"] > 1.0
    assert "0 of" in capsys.readouterr().out


def test_a_bag_without_the_needed_topics_fails_fast_naming_both_sides(tmp_path, capsys):
    bag = TALKER_BAGS / "rosbag2_talker_mcap"
    checkpoint = tmp_path / "p.pt"
    init_checkpoint(checkpoint, JOINTS, PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    with pytest.raises(MissingTopicsError) as err:
        evaluate_bag(bag, checkpoint, "offline", tmp_path / "report")
    text = str(err.value)
    for needed in ("camera/image_raw", "camera/camera_info", "joint_states", "forward_position_controller/commands",
                   "supervisor/state"):
        assert needed in err.value.missing and needed in text
    assert "/topic (std_msgs/msg/String)" in text and "/rosout" in text
    assert not (tmp_path / "report").exists()
    code = cli_main(["replay", "--bag", str(bag), "--checkpoint", str(checkpoint), "--report", str(tmp_path / "r"),
                     "--all-actions"])
    assert code == 2
    err_text = capsys.readouterr().err
    assert "missing topic(s)" in err_text and "supervisor/state" not in err_text.split("the bag has")[0]
