"""The typed ROS edge (sim2real_ros/topics.py): names, QoS, payloads encoded and decoded once.

No running node: payloads go through real messages (rclpy's message classes, and rosbags' CDR as a
bag holds them), QoS descriptions through rclpy's QoSProfile. Also the sim's post-reset command
gate (core/control/reset_gate.py) at fixed commands, and the operator label an imported LeRobot bag
carries, read the same as the supervisor state older imports wrote.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from rosbags.typesys import Stores, get_typestore

from sim2real_ros import conversions as msgconv
from sim2real_ros import topics
from sim2real_ros.bags import BagReader
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.core.control.reset_gate import RESYNC_TOLERANCE_RAD, gate_command, reset_moved_arm
from sim2real_ros.core.report import Level
from sim2real_ros.episodes.bag_source import feed, find_topics, make_collector
from sim2real_ros.episodes.options import ReplayOptions
from sim2real_ros.topics import (
    DatasetEpisodeEvent,
    EpisodeOutcome,
    Intervention,
    SimStatus,
    SupervisorState,
)

STORE = get_typestore(Stores.ROS2_HUMBLE)


def _through_bag_cdr(payload: topics.StatusPayload, stamp_ns: int = 5):
    """The payload as rosbags serializes and deserializes it (what a bag reader hands over)."""
    t = STORE.types
    status = t["diagnostic_msgs/msg/DiagnosticStatus"](
        level=topics.LEVEL_NAMES.index(payload.level), name=payload.name, message=payload.message,
        hardware_id=payload.hardware_id,
        values=[t["diagnostic_msgs/msg/KeyValue"](key=k, value=v) for k, v in payload.values.items()])
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=0, nanosec=stamp_ns), frame_id="")
    msg = t["diagnostic_msgs/msg/DiagnosticArray"](header=header, status=[status])
    data = STORE.serialize_cdr(msg, topics.DIAGNOSTIC_ARRAY_TYPE)
    return STORE.deserialize_cdr(data, topics.DIAGNOSTIC_ARRAY_TYPE)


def test_names_are_relative_and_unique():
    names = [t.name for t in topics.TOPICS]
    assert len(names) == len(set(names))
    assert all(not n.startswith("/") for n in names)
    assert topics.ROBOT_COMMAND.name == "forward_position_controller/commands"
    assert topics.ROBOT_COMMAND.absolute == "/forward_position_controller/commands"
    assert topics.node_diagnostics("policy_node") == "policy_node/diagnostics"


def test_qos_descriptions_become_the_profiles_nodes_use():
    from sim2real_ros.nodes import common

    latched = common.LATCHED_QOS
    assert latched.depth == 1 and latched.reliability == ReliabilityPolicy.RELIABLE
    assert latched.durability == DurabilityPolicy.TRANSIENT_LOCAL
    sensor = common.SENSOR_QOS
    assert sensor.depth == 5 and sensor.reliability == ReliabilityPolicy.BEST_EFFORT
    assert sensor.durability == DurabilityPolicy.VOLATILE
    assert common.EVENTS_QOS.depth == 50 and common.EVENTS_QOS.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert common.SERVO_DIAGNOSTICS_QOS.depth == 10 and common.CLOCK_QOS.depth == 1
    with pytest.raises(ValueError, match="depth"):
        topics.QosSpec(depth=0)


def test_supervisor_state_round_trip_through_an_rclpy_message():
    state = SupervisorState(mode="ESTOP", reason="estop pressed", estop_sources=("estop topic", "joystick"),
                            intervention_active=True, intervention_start_ns=123, jog_mode="joint",
                            foreign_publishers=1, last_rejection="joint_states: NaN", estop_vanished="",
                            counters={"estops": 2, "rejected_policy": 0})
    msg = msgconv.payload_to_diagnostics(state.to_status(), 7)
    assert msgconv.diagnostic_level(msg) == Level.ERROR
    assert msg.status[0].message == "ESTOP: estop pressed" == state.summary
    assert SupervisorState.from_msg(msg) == state
    # HOLD reports a warning, the others OK
    assert msgconv.diagnostic_level(msgconv.payload_to_diagnostics(
        SupervisorState(mode="HOLD").to_status(), 0)) == Level.WARN


def test_a_status_without_mode_is_no_supervisor_state():
    msg = msgconv.diagnostic_array("supervisor", {"reason": "?"}, 0)
    assert SupervisorState.from_msg(msg) is None
    assert SupervisorState.from_msg(None) is None


def test_episode_outcome_round_trip_in_bag_cdr_and_defaults():
    outcome = EpisodeOutcome(episode=3, success=False, reason="timeout", duration_s=4.25, final_distance_m=0.0312,
                             seed=9, pushes_applied=2)
    status = outcome.to_status()
    assert status.level == "warn" and status.message == "timeout" and status.hardware_id == "sim_node"
    assert EpisodeOutcome.from_msg(_through_bag_cdr(status)) == outcome
    assert "pushes_applied" not in EpisodeOutcome(0, True, "success", 1.0, 0.01, 0).to_status().values
    empty = EpisodeOutcome.from_msg(msgconv.diagnostic_array("episode", {}, 0))
    assert (empty.episode, empty.success, empty.seed, empty.pushes_applied) == (-1, False, -1, -1)
    assert math.isnan(empty.duration_s) and math.isnan(empty.final_distance_m)


def test_sim_status_and_interventions_round_trip():
    status = SimStatus(real_time_factor=0.998, sim_time_s=12.5, pacing="realtime", episode=4,
                       sim_params_version="abc123", actuation_latency_s=0.02, last_command_sim_ns=-1,
                       last_rejection="", counters={"commands_accepted": 10, "commands_rejected": 1})
    payload = status.to_status()
    assert payload.level == "warn" and payload.message == "rtf 1.00"
    assert SimStatus.from_msg(msgconv.payload_to_diagnostics(payload, 0)) == status
    events = [Intervention("start", 5, 0, "TELEOP", "deadman"), Intervention("end", 5, 9, "HOLD", "released")]
    msg = msgconv.payload_to_diagnostics(events[0].to_status(), 5)
    assert Intervention.all_from_msg(msg) == events[:1]
    assert Intervention.all_from_msg(_through_bag_cdr(events[1].to_status())) == events[1:]
    assert events[1].as_dict() == {"event": "end", "start_ns": 5, "end_ns": 9, "mode": "HOLD", "reason": "released"}


def test_dataset_episode_event_and_its_operator():
    start = DatasetEpisodeEvent(episode=2, event="start", task="pick", task_index=0, frames=45, fps=30.0,
                                source="ds", operator="human")
    decoded = DatasetEpisodeEvent.from_msg(_through_bag_cdr(start.to_status()))
    assert decoded.episode == 2 and decoded.operator == "human" and math.isnan(decoded.duration_s)
    assert decoded.operator_mode == "TELEOP"
    end = DatasetEpisodeEvent(2, "end", "pick", 0, 45, 30.0, "ds", "human", duration_s=1.5)
    assert DatasetEpisodeEvent.from_msg(_through_bag_cdr(end.to_status())).duration_s == 1.5
    assert end.operator_mode == "HOLD"
    unlabelled = DatasetEpisodeEvent(2, "start", "pick", 0, 45, 30.0, "ds")
    assert "operator" not in unlabelled.to_status().values and unlabelled.operator_mode is None


def test_status_reports_of_any_node_with_their_level():
    msg = msgconv.diagnostic_array("feetech_driver", {"overload": "shoulder_lift"}, 0, level=Level.ERROR,
                                   message="overload", hardware_id="/dev/ttyACM0")
    (report,) = topics.StatusReport.all_from_msg(msg)
    assert report.is_error and report.hardware_id == "/dev/ttyACM0" and report.values == {"overload": "shoulder_lift"}
    from_bag = topics.StatusReport.all_from_msg(_through_bag_cdr(topics.StatusPayload("x", {}, "warn")))
    assert [r.level for r in from_bag] == ["warn"]
    assert topics.level_name(b"\x01") == "warn" and topics.level_name(3) == "stale" and topics.level_name(9) == "stale"


# ----------------------------------------------------------------------------------------------
# sim_node's post-reset gate: commands at fixed values after a reset that moved the arm


def test_reset_gate_waits_for_a_command_near_the_arm():
    home = np.zeros(3)
    before = np.array([0.8, -0.4, 0.2])
    assert reset_moved_arm(before, home)
    assert not reset_moved_arm(home + 0.05, home)
    awaiting = True
    # the stale command aims where the arm was: ignored, the gate stays closed
    decision = gate_command(awaiting, before, home)
    assert (decision.follow, decision.awaiting) == (False, True)
    # still too far on one joint
    decision = gate_command(decision.awaiting, np.array([0.0, 0.0, RESYNC_TOLERANCE_RAD + 0.01]), home)
    assert (decision.follow, decision.awaiting) == (False, True)
    # within the tolerance: followed, and the gate opens for good
    decision = gate_command(decision.awaiting, np.array([0.05, -0.05, RESYNC_TOLERANCE_RAD]), home)
    assert (decision.follow, decision.awaiting) == (True, False)
    decision = gate_command(decision.awaiting, before, home)
    assert (decision.follow, decision.awaiting) == (True, False)


# ----------------------------------------------------------------------------------------------
# An imported LeRobot bag: the operator label reads as the supervisor state older imports wrote


def _js(stamp_ns: int, q: float) -> bytes:
    t = STORE.types
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9,
                                                                             nanosec=stamp_ns % 10**9), frame_id="")
    msg = t["sensor_msgs/msg/JointState"](header=header, name=["j1"], position=np.array([q]),
                                          velocity=np.zeros(0), effort=np.zeros(0))
    return bytes(STORE.serialize_cdr(msg, topics.JOINT_STATE_TYPE))


def _diag(stamp_ns: int, payload: topics.StatusPayload) -> bytes:
    t = STORE.types
    status = t["diagnostic_msgs/msg/DiagnosticStatus"](
        level=0, name=payload.name, message=payload.message, hardware_id="lerobot import",
        values=[t["diagnostic_msgs/msg/KeyValue"](key=k, value=v) for k, v in payload.values.items()])
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9,
                                                                             nanosec=stamp_ns % 10**9), frame_id="")
    return bytes(STORE.serialize_cdr(t["diagnostic_msgs/msg/DiagnosticArray"](header=header, status=[status]),
                                     topics.DIAGNOSTIC_ARRAY_TYPE))


def _imported_bag(path, labelled: bool):
    """Two 1 s episodes, as `dataset import` writes them: with the label (now), or without it and
    with the TELEOP/HOLD supervisor states the importer wrote before."""
    s = 10**9
    writer = BagWriter(path)
    writer.add_topic("/joint_states", topics.JOINT_STATE_TYPE)
    writer.add_topic("/command/teleop", topics.JOINT_STATE_TYPE)
    writer.add_topic("/camera/image_raw", topics.IMAGE_TYPE)
    writer.add_topic("/camera/camera_info", topics.CAMERA_INFO_TYPE)
    writer.add_topic("/dataset/episode", topics.DIAGNOSTIC_ARRAY_TYPE)
    if not labelled:
        writer.add_topic("/supervisor/state", topics.DIAGNOSTIC_ARRAY_TYPE)
    for index, first in enumerate((10 * s, 13 * s)):
        last = first + s
        start = DatasetEpisodeEvent(index, "start", "pick", 0, 11, 10.0, "ds", "human" if labelled else "")
        if not labelled:
            writer.write("/supervisor/state", first, _diag(first, SupervisorState("TELEOP", "lerobot episode")
                                                           .to_status()))
        writer.write("/dataset/episode", first, _diag(first, start.to_status()))
        for k in range(11):
            t = first + k * s // 10
            writer.write("/joint_states", t, _js(t, 0.1 * k))
            writer.write("/command/teleop", t, _js(t, 0.1 * k + 0.01))
        end = DatasetEpisodeEvent(index, "end", "pick", 0, 11, 10.0, "ds", start.operator, duration_s=1.0)
        writer.write("/dataset/episode", last, _diag(last, end.to_status()))
        if not labelled:
            writer.write("/supervisor/state", last, _diag(last, SupervisorState("HOLD", "lerobot episode end")
                                                          .to_status()))
    writer.close()


def _recording(bag):
    options = ReplayOptions(action_topic="command/teleop", plots=False, progress=False)
    with BagReader(bag) as reader:
        found = find_topics(reader, options)
        collector = make_collector(found, ("j1",), options)
        for message in reader.messages(sorted({found.joint_states, found.action, *found.mode_topics})):
            feed(collector, found, message.topic, message.msg, message.log_time_ns)
    return found, collector.finish()


def test_operator_label_reads_as_the_old_supervisor_state(tmp_path):
    _imported_bag(tmp_path / "labelled", labelled=True)
    _imported_bag(tmp_path / "old", labelled=False)
    found_new, new = _recording(tmp_path / "labelled")
    found_old, old = _recording(tmp_path / "old")
    assert found_new.supervisor_state is None and found_new.operator_labels == "/dataset/episode"
    assert found_old.supervisor_state == "/supervisor/state" and found_old.operator_labels is None
    assert new.modes == old.modes == ("TELEOP", "HOLD", "TELEOP", "HOLD")
    np.testing.assert_array_equal(new.mode_times_ns, old.mode_times_ns)
    np.testing.assert_array_equal(new.action_human, old.action_human)
    # each episode's last command shares its stamp with the end (HOLD from then): 10 of 11 are human
    assert new.action_human.sum() == 20 and new.mode_durations_s(14 * 10**9) == old.mode_durations_s(14 * 10**9)
