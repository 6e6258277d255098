"""The sim recording the replay tests share: a bag recorded from the sim graph (sim_node,
camera_preprocessor, policy_node, actuator_node, supervisor with auto_arm, and the recorder) driven
by an untrained checkpoint, a second checkpoint, and a perturbed, namespaced copy of the bag.

Built once per test session by the `sim_recording` fixture (conftest.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64MultiArray
from support import RosProbe, node_decl, running_nodes, wait_until
from trajectory_msgs.msg import JointTrajectory

from sim2real_ros.bags import BagReader
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.conversions import diagnostic_values, stamp_to_ns
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import read_checkpoint, save_checkpoint
from sim2real_ros.core.policy.model import build_model
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.graph import GraphArgs, declare_graph
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.training.untrained import init_checkpoint

JOINTS = tuple(RobotModel.from_description(str(urdf_path())).joint_names)
SIM_SECONDS_OF_POLICY = 4.0  # [s] sim time recorded after the policy's first chunk
RECORDED = ["camera/image_raw", "camera/camera_info", "joint_states", "forward_position_controller/commands",
            "command/policy", "policy/action_chunk", "supervisor/state"]
PERTURBED_JOINT, PERTURBATION = 2, 0.05  # [rad] added to joint3 in the perturbed copy
NAMESPACE = "/arm1"
KEEP_ALL = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
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
        commands = probe.collect(Float64MultiArray, "forward_position_controller/commands", KEEP_ALL)
        # What the policy and the preprocessor say they received: a failed recording names its stage.
        policy_diag = probe.collect(DiagnosticArray, "policy_node/diagnostics", 5)
        preprocessor_diag = probe.collect(DiagnosticArray, "camera_preprocessor/diagnostics", 5)
        first_command_sim_ns: list[int] = []  # sim time when the first robot command was seen
        all_recorded_sim_ns: list[int] = []  # sim time when the recorder had subscribed to every topic
        log = directory / "graph.log"

        def recorder_has_every_topic() -> bool:
            text = log.read_text() if log.exists() else ""
            return all(f"recording /{topic} (" in text for topic in RECORDED)

        def policy_ran_long_enough() -> bool:
            # Counted from the latest of the first chunk, the first robot command (on a loaded
            # machine the supervisor, their publisher, can start seconds after the policy) and the
            # recorder's subscription to the last topic (a CI run under load recorded 23 s without
            # ever subscribing to command/policy; the replay then had no actions to compare).
            if not chunks or not clock or not commands:
                return False
            if not first_command_sim_ns:
                first_command_sim_ns.append(stamp_to_ns(clock[-1].clock))
            if not all_recorded_sim_ns:
                if not recorder_has_every_topic():
                    return False
                all_recorded_sim_ns.append(stamp_to_ns(clock[-1].clock))
            first = max(stamp_to_ns(chunks[0].header.stamp), first_command_sim_ns[0], all_recorded_sim_ns[0])
            return stamp_to_ns(clock[-1].clock) >= first + int(SIM_SECONDS_OF_POLICY * 1e9)

        with running_nodes(decls, directory):
            assert wait_until(policy_ran_long_enough, 240.0, poll_s=0.2), (
                f"{len(chunks)} chunks, {len(commands)} robot commands, recorder on every topic: "
                f"{recorder_has_every_topic()}, "
                f"sim time {stamp_to_ns(clock[-1].clock) / 1e9 if clock else None} s; policy_node says "
                f"{diagnostic_values(policy_diag[-1]) if policy_diag else 'nothing'}; camera_preprocessor says "
                f"{diagnostic_values(preprocessor_diag[-1]) if preprocessor_diag else 'nothing'}")
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


def build_sim_recording(base: Path) -> SimRecording:
    """Record the sim bag, make both checkpoints and the perturbed copy under `base`."""
    paths = SimRecording(base / "sim_bag", base / "policy_seed0.pt", base / "policy_seed1_large.pt",
                         base / "perturbed_bag")
    base.mkdir(parents=True, exist_ok=True)
    same, _ = make_checkpoints(base)
    record_sim_bag(base, same)
    perturbed_copy(paths.bag, paths.perturbed_bag)
    return paths
