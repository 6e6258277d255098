"""Scripted teleoperation recorded through the sim graph ("real" sim variant), one bag per episode.

The recording (3 short episodes: demonstration, intervention, demonstration, with an untrained
policy and a 10 Hz camera) is made once per test session and shared with test_finetune.py and
test_validation.py (`teleop_recording(tmp_path_factory)`).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from teleop_data import EPISODES, JOINTS, S

from sim2real_ros.bags import BagReader
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.conversions import ns_to_stamp, stamp_to_ns
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.episodes.episode_split import split_by_episode
from sim2real_ros.paths import config_path
from sim2real_ros.runtime.scripted_operator import TeleopPlan, operator_joystick_config
from sim2real_ros.runtime.teleop_recording import MANIFEST, record_teleop_episodes


def _modes(bag: Path) -> list[tuple[int, str]]:
    with BagReader(bag) as reader:
        return [(stamp_to_ns(m.msg.header.stamp), kv.value) for m in reader.messages(["/supervisor/state"])
                for kv in m.msg.status[0].values if kv.key == "mode"]


def test_one_bag_per_episode_with_its_outcome_and_the_graph_topics(teleop_recording):
    assert [b.name for b in teleop_recording.bags] == [f"episode_{i:03d}" for i in range(EPISODES)]
    manifest = json.loads((teleop_recording.out / MANIFEST).read_text())
    assert [e["planned"] for e in manifest["episodes"]] == ["demonstration", "intervention", "demonstration"]
    # The scripted operator (the IK teacher on the joystick) reaches the target.
    assert sum(e["success"] for e in manifest["episodes"]) >= 2, manifest["episodes"]
    for bag, entry in zip(teleop_recording.bags, manifest["episodes"], strict=True):
        with BagReader(bag) as reader:
            topics = reader.topic_types()
            for needed in ("/camera/image_raw", "/camera/camera_info", "/joint_states", "/supervisor/state",
                           "/forward_position_controller/commands", "/sim/episode"):
                assert needed in topics, (bag, sorted(topics))
            outcomes = list(reader.messages(["/sim/episode"]))
            images = [stamp_to_ns(m.msg.header.stamp) for m in reader.messages(["/camera/image_raw"])]
        # Exactly this episode's outcome, and every image lies inside the episode.
        assert len(outcomes) == 1
        values = {kv.key: kv.value for kv in outcomes[0].msg.status[0].values}
        end = stamp_to_ns(outcomes[0].msg.header.stamp)
        start = end - int(float(values["duration_s"]) * S)
        assert values["success"] == ("true" if entry["success"] else "false")
        assert len(images) >= 5 and min(images) >= start - S // 10 and max(images) <= end + S // 10


def test_the_person_acts_through_the_supervisor(teleop_recording):
    # Demonstration: TELEOP is in force from early in the episode; intervention: the policy
    # (AUTONOMOUS) drives first, then a takeover (TELEOP).
    demo_modes = [m for _, m in _modes(teleop_recording.bags[0])]
    assert "TELEOP" in demo_modes
    intervention = [m for _, m in _modes(teleop_recording.bags[1])]
    assert "AUTONOMOUS" in intervention and "TELEOP" in intervention[intervention.index("AUTONOMOUS"):]
    with BagReader(teleop_recording.bags[1]) as reader:
        events = [{kv.key: kv.value for kv in m.msg.status[0].values}
                  for m in reader.messages(["/supervisor/interventions"])]
    assert any(e["event"] == "takeover" and e["mode"] == "TELEOP" for e in events), events


def _diag(stamp_ns: int, **values: str) -> bytes:
    msg = DiagnosticArray()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.status = [DiagnosticStatus(name="x", values=[KeyValue(key=k, value=v) for k, v in values.items()])]
    return serialize_message(msg)


def test_split_by_episode_cuts_at_outcomes_and_carries_the_latched_state(tmp_path):
    session = tmp_path / "session"
    writer = BagWriter(session)
    writer.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    writer.add_topic("/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray")
    writer.add_topic("/sim/episode", "diagnostic_msgs/msg/DiagnosticArray")
    writer.write("/supervisor/state", 1 * S, _diag(1 * S, mode="AUTONOMOUS"))
    for t in range(0, 60):  # joint states every 0.1 s from 0 to 5.9 s
        msg = JointState(name=["a"], position=[float(t)])
        msg.header.stamp = ns_to_stamp(t * S // 10)
        writer.write("/joint_states", t * S // 10, serialize_message(msg))
    # Outcomes at 3 s and 5 s, logged a little late (as a recorder does).
    writer.write("/sim/episode", 3 * S + S // 20, _diag(3 * S, episode="1"))
    writer.write("/sim/episode", 5 * S + S // 20, _diag(5 * S, episode="2"))
    writer.close()
    bags = split_by_episode(session, tmp_path, 2 * S, [3 * S, 5 * S])
    assert [b.name for b in bags] == ["episode_000", "episode_001"]
    for bag, (start, end, episode) in zip(bags, [(2, 3, "1"), (3, 5, "2")], strict=True):
        with BagReader(bag) as reader:
            joints = [m.log_time_ns for m in reader.messages(["/joint_states"])]
            outcomes = [m.msg.status[0].values[0].value for m in reader.messages(["/sim/episode"])]
            states = list(reader.messages(["/supervisor/state"]))
        assert min(joints) > start * S and max(joints) <= end * S
        assert outcomes == [episode]
        # The supervisor state from before the episode is carried in, logged at its start.
        assert states and states[0].log_time_ns == start * S


def test_bad_plans_and_outputs_are_refused_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match="intervention_every"):
        TeleopPlan(intervention_every=-1)
    with pytest.raises(ConfigError, match="'policy_s' = 0.8.*takeover grace"):
        TeleopPlan(intervention_every=2, policy_s=0.8)
    assert TeleopPlan(intervention_every=0, policy_s=0.0).policy_s == 0.0  # no interventions: no policy phase
    with pytest.raises(ConfigError, match="jog_speed_fraction"):
        TeleopPlan(jog_speed_fraction=1.5)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(ConfigError, match="not empty"):
        record_teleop_episodes(tmp_path / "taken", 1)
    with pytest.raises(ConfigError, match="episodes"):
        record_teleop_episodes(tmp_path / "new", 0)
    # The operator's joystick jogs every joint at once, within the URDF velocity limits.
    path = operator_joystick_config(tmp_path, TeleopPlan(jog_speed_fraction=0.5), len(JOINTS))
    from sim2real_ros.core.safety.joystick import load_joystick_mapping

    mapping = load_joystick_mapping(path)
    assert mapping.groups_for(len(JOINTS)) == (tuple(range(len(JOINTS))),)
    assert mapping.joint_speed_fraction == 0.5 and len(set(mapping.joint_axes)) == len(JOINTS)


def test_teleop_record_command_refuses_bad_input(tmp_path, capsys):
    from sim2real_ros.cli.main import main as sim2real

    out = str(tmp_path / "out")
    assert sim2real(["teleop-record", "--sim-config", str(tmp_path / "none.yaml"), "--out", out]) == 2
    assert "--sim-config" in capsys.readouterr().err
    variant = str(config_path("sim_params_real_b.yaml"))
    missing = str(tmp_path / "x.pt")
    assert sim2real(["teleop-record", "--sim-config", variant, "--out", out, "--checkpoint", missing]) == 2
    assert "--checkpoint" in capsys.readouterr().err
    assert sim2real(["teleop-record", "--sim-config", variant, "--out", out, "--episodes", "0"]) == 2
    assert "episodes" in capsys.readouterr().err
    assert sim2real(["teleop-record", "--sim-config", variant, "--out", out, "--intervention-every", "-1"]) == 2
    assert "intervention_every" in capsys.readouterr().err
    assert sim2real(["teleop-record", "--sim-config", variant, "--out", out, "--real-time-factor", "nan"]) == 2
    assert "real_time_factor" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
