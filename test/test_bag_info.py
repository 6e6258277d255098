"""Bag reading and `sim2real bag info` on the real bags in ../shared/data/bags and on damaged copies."""
from __future__ import annotations

import json
import shutil

import pytest
from support import SERVO_BAG, TALKER_BAGS, needs_servo_bag

from sim2real_ros.bags import BagReader, iter_messages, topic_types
from sim2real_ros.bags.info import bag_info, format_info
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.core.errors import BagError

TALKERS = ["rosbag2_talker_sqlite3", "rosbag2_talker_mcap"]
SERVO = SERVO_BAG
SERVO_COUNTS = {
    "/controller/out/error": 1348, "/controller/out/forward_kinematics": 1348, "/servo/out/state": 1280,
    "/rosout": 30, "/parameter_events": 12, "/md/input": 1, "/events/write_split": 0, "/md/state": 1354,
    "/controller/out/trajectory_setpoint": 1348, "/fmu/in/trajectory_setpoint": 0,
    "/controller/out/servo_positions": 1348, "/controller/out/corrected_sensor_pose": 1348,
    "/fmu/in/vehicle_command": 0, "/servo/in/state": 893, "/fmu/in/offboard_control_mode": 461,
    "/controller/out/ik_check": 1348,
}


@pytest.mark.parametrize("name", TALKERS)
def test_talker_bags_hold_20_messages_and_all_decode(name, capsys):
    assert cli_main(["bag", "info", str(TALKER_BAGS / name), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["storage"] == ("sqlite3" if "sqlite" in name else "mcap")
    assert info["message_count"] == 20
    assert info["metadata_version"] == 4
    assert info["duration_s"] == pytest.approx(4.531096768, abs=1e-9)
    topics = {t["name"]: t for t in info["topics"]}
    assert {n: (t["type"], t["count"], t["decodable"]) for n, t in topics.items()} == {
        "/topic": ("std_msgs/msg/String", 10, True),
        "/rosout": ("rcl_interfaces/msg/Log", 10, True),
        "/parameter_events": ("rcl_interfaces/msg/ParameterEvent", 0, True),
    }

    messages = list(iter_messages(TALKER_BAGS / name))
    assert len(messages) == 20
    times = [m.log_time_ns for m in messages]
    assert times == sorted(times)
    chatter = [m.msg.data for m in messages if m.topic == "/topic"]
    assert chatter == [f"Hello, world! {i}" for i in range(10)]
    logs = [m.msg for m in messages if m.topic == "/rosout"]
    assert logs[0].name == "minimal_publisher" and logs[0].msg == "Publishing: 'Hello, world! 0'"


def test_stored_stub_definitions_fall_back_to_the_standard_ones():
    # rosbag2's sqlite3 test bag stores stub definitions ("uint8 level" for Log): the data must win.
    info = bag_info(TALKER_BAGS / "rosbag2_talker_sqlite3")
    rosout = next(t for t in info.topics if t.name == "/rosout")
    assert rosout.decodable and "does not match" in rosout.note


@needs_servo_bag
def test_real_servo_arm_bag_counts_types_and_unknown_types():
    info = bag_info(SERVO)
    assert info.storage == "sqlite3" and info.metadata_version == 5
    assert info.message_count == 12119
    assert {t.name: t.count for t in info.topics} == SERVO_COUNTS
    decodable = {t.name: t.decodable for t in info.topics}
    assert not any(decodable[n] for n in SERVO_COUNTS if n.startswith(("/fmu/", "/controller/out/trajectory")))
    assert all(decodable[n] for n in SERVO_COUNTS if not n.startswith(("/fmu/", "/controller/out/trajectory")))
    assert info.duration_s == pytest.approx(54.248683936, abs=1e-6)
    assert not info.problems and not info.needs_repair
    text = format_info(info)
    assert "px4_msgs/msg/TrajectorySetpoint" in text and "NOT decodable" in text and "12119" in text

    assert topic_types(SERVO)["/servo/out/state"] == "sensor_msgs/msg/JointState"
    measured = list(iter_messages(SERVO, ["/servo/out/state"]))
    assert len(measured) == 1280
    assert all(len(m.msg.position) == 3 and list(m.msg.name) == [] for m in measured)
    commanded = list(iter_messages(SERVO, ["/servo/in/state"]))
    assert len(commanded) == 893


@needs_servo_bag
def test_undecodable_types_are_skipped_or_yielded_raw_never_fatal():
    with BagReader(SERVO) as reader:
        decoded = list(reader.messages(["/fmu/in/offboard_control_mode", "/md/state"]))
        assert {m.topic for m in decoded} == {"/md/state"} and len(decoded) == 1354
        assert reader.skipped_undecodable["/fmu/in/offboard_control_mode"] == 461
        raw = [m for m in reader.messages(["/fmu/in/offboard_control_mode"], skip_undecodable=False)]
        assert len(raw) == 461 and all(m.msg is None and len(m.data) > 4 for m in raw)
    everything = list(iter_messages(SERVO))
    assert len(everything) == 12119 - 461 - 1348


def test_single_storage_file_is_a_bag_too():
    info = bag_info(TALKER_BAGS / "rosbag2_talker_mcap" / "talker.mcap")
    assert info.message_count == 20 and info.metadata_version is None


def test_damaged_bags_name_the_file_and_the_problem(tmp_path, capsys):
    missing = tmp_path / "missing_file"
    shutil.copytree(TALKER_BAGS / "rosbag2_talker_sqlite3", missing)
    (missing / "talker.db3").unlink()
    with pytest.raises(BagError, match=r"talker\.db3: listed in .*metadata\.yaml but missing"):
        bag_info(missing)

    garbage_db = tmp_path / "garbage_db"
    shutil.copytree(TALKER_BAGS / "rosbag2_talker_sqlite3", garbage_db)
    (garbage_db / "talker.db3").chmod(0o644)
    (garbage_db / "talker.db3").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(BagError, match=r"talker\.db3: not a readable rosbag2 sqlite3 file"):
        bag_info(garbage_db)

    bad_magic = tmp_path / "bad_magic"
    shutil.copytree(TALKER_BAGS / "rosbag2_talker_mcap", bad_magic)
    (bad_magic / "talker.mcap").chmod(0o644)
    (bad_magic / "talker.mcap").write_bytes(b"NOTMCAP!" + b"\0" * 64)
    with pytest.raises(BagError, match=r"talker\.mcap: not an MCAP file"):
        bag_info(bad_magic)

    bad_yaml = tmp_path / "bad_yaml"
    shutil.copytree(TALKER_BAGS / "rosbag2_talker_mcap", bad_yaml)
    (bad_yaml / "metadata.yaml").chmod(0o644)
    (bad_yaml / "metadata.yaml").write_text("rosbag2_bagfile_information: [unclosed")
    with pytest.raises(BagError, match=r"metadata\.yaml: unreadable metadata"):
        bag_info(bad_yaml)
    assert cli_main(["bag", "info", str(bad_yaml)]) == 1
    assert "metadata.yaml: unreadable metadata" in capsys.readouterr().err

    with pytest.raises(BagError, match="no such bag"):
        bag_info(tmp_path / "nowhere")


@pytest.mark.parametrize("name", ["rosbag2_talker_mcap/talker.mcap", "rosbag2_talker_sqlite3/talker.db3"])
def test_corrupted_bytes_give_a_bag_error_or_a_partial_read_never_a_crash(tmp_path, name):
    import random

    rng = random.Random(7)
    original = (TALKER_BAGS / name).read_bytes()
    outcomes = {"read": 0, "bag_error": 0}
    for trial in range(40):
        damaged = bytearray(original)
        for _ in range(rng.randint(1, 5)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        path = tmp_path / f"{trial}_{name.split('/')[1]}"
        path.write_bytes(bytes(damaged))
        try:
            info = bag_info(path)
            with BagReader(path) as reader:
                assert sum(1 for _ in reader.messages()) <= info.message_count <= 20
            outcomes["read"] += 1
        except BagError as err:
            assert str(path) in str(err)  # names the file
            outcomes["bag_error"] += 1
    assert outcomes["read"] > 0
