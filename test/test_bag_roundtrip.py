"""Write bags (sqlite3 and MCAP, several files, real ROS message types), read them back with our
reader and with rosbags' own reader; damage an MCAP recording the way a crash does and repair it."""
from __future__ import annotations

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.serialization import serialize_message
from rosbags.rosbag2 import Reader as RosbagsReader
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray

from sim2real_ros.bags import BagReader, iter_messages
from sim2real_ros.bags.info import bag_info
from sim2real_ros.bags.reader import publish_times
from sim2real_ros.bags.repair import repair_bag
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.conversions import array_to_image, ns_to_stamp
from sim2real_ros.core.errors import BagError

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _joint_state(i: int) -> JointState:
    msg = JointState()
    msg.header.stamp = ns_to_stamp(T0 + i * 10 * MS)
    msg.name = [f"joint{k}" for k in range(6)]
    msg.position = [0.01 * i + k for k in range(6)]
    return msg


def _image(i: int) -> Image:
    pixels = np.full((24, 32, 3), i % 256, dtype=np.uint8)
    msg = array_to_image(pixels, "rgb8", T0 + i * 33 * MS, "camera")
    return msg


def _write_bag(path, storage: str, max_file_bytes: int = 20_000):
    """100 joint states at 100 Hz, 30 images at 30 Hz, one latched diagnostic, one command."""
    with BagWriter(path, storage=storage, max_file_bytes=max_file_bytes) as writer:
        writer.add_topic("/joint_states", "sensor_msgs/msg/JointState")
        writer.add_topic("/camera/image_raw", "sensor_msgs/msg/Image")
        writer.add_topic("/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray")
        writer.add_topic("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray")
        events = [(T0 + i * 10 * MS, "/joint_states", serialize_message(_joint_state(i))) for i in range(100)]
        events += [(T0 + i * 33 * MS + 1, "/camera/image_raw", serialize_message(_image(i))) for i in range(30)]
        state = DiagnosticArray()
        hold = KeyValue(key="mode", value="HOLD")
        state.status = [DiagnosticStatus(name="supervisor", message="HOLD", values=[hold])]
        events.append((T0 + 5, "/supervisor/state", serialize_message(state)))
        events.append((T0 + 500 * MS, "/forward_position_controller/commands",
                       serialize_message(Float64MultiArray(data=[0.1, 0.2, 0.3]))))
        for log_time, topic, data in sorted(events):
            writer.write(topic, log_time, data)
    return events


def test_messages_of_one_log_time_keep_file_order_across_a_clock_step_back(tmp_path):
    """A frozen sim clock gives many messages one log time, and a clock stepped back makes a later
    chunk start earlier than the one before it. The messages keep the order they were written in,
    and the k-th publish time still belongs to the k-th message (a soak once read a supervisor's
    steady ramp 0.33, 0.30, 0.27, 0.25 rad as 0.27, 0.25, 0.33, 0.30 and reported step violations)."""
    topic = "/forward_position_controller/commands"
    bag = tmp_path / "bag"
    # (log time, publish time, value): chunk 1 at one frozen time; chunk 2 starts 50 ms earlier
    chunks = [[(T0 + 100 * MS, T0 + 1, 0.33), (T0 + 100 * MS, T0 + 2, 0.30)],
              [(T0 + 50 * MS, T0 + 3, 9.0), (T0 + 100 * MS, T0 + 4, 0.27), (T0 + 100 * MS, T0 + 5, 0.25)]]
    with BagWriter(bag, storage="mcap", flush_period_ns=10**18) as writer:
        writer.add_topic(topic, "std_msgs/msg/Float64MultiArray")
        for chunk in chunks:
            for log_time, publish_time, value in chunk:
                writer.write(topic, log_time, serialize_message(Float64MultiArray(data=[value])),
                             publish_time_ns=publish_time)
            writer.flush()  # one MCAP chunk each
    messages = list(iter_messages(bag, [topic]))
    assert [m.msg.data[0] for m in messages] == [9.0, 0.33, 0.30, 0.27, 0.25]
    pairs = publish_times(bag, [topic])[topic]
    assert [int(log) for log, _ in pairs] == [m.log_time_ns for m in messages]
    assert [int(published) - T0 for _, published in pairs] == [3, 1, 2, 4, 5]


def test_a_first_look_then_a_full_read_inflates_each_chunk_once_and_reads_the_same(tmp_path, monkeypatch):
    from sim2real_ros.bags import mcap_storage

    _write_bag(tmp_path / "bag", "mcap", max_file_bytes=0)
    with BagReader(tmp_path / "bag") as reader:
        fresh = [(m.log_time_ns, m.topic, bytes(m.data)) for m in reader.messages()]
    inflated = []
    real_parse = mcap_storage._parse_chunk_body

    def counting_parse(body, path, offset):
        inflated.append(offset)
        return real_parse(body, path, offset)

    monkeypatch.setattr(mcap_storage, "_parse_chunk_body", counting_parse)
    with BagReader(tmp_path / "bag") as reader:
        first = next(iter(reader.messages(["/joint_states"])))  # a tool reading the joint names
        after = [(m.log_time_ns, m.topic, bytes(m.data)) for m in reader.messages()]
    assert first.topic == "/joint_states"
    assert after == fresh and len(fresh) == 132
    assert len(inflated) == len(set(inflated)) >= 1


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_round_trip_several_files(tmp_path, storage):
    bag = tmp_path / f"bag_{storage}"
    events = _write_bag(bag, storage)
    files = sorted(p.name for p in bag.iterdir() if p.suffix in (".db3", ".mcap"))
    assert len(files) >= 3, files

    info = bag_info(bag)
    assert info.storage == storage and info.message_count == 132 and len(info.files) == len(files)
    assert {t.name: (t.count, t.decodable) for t in info.topics} == {
        "/joint_states": (100, True), "/camera/image_raw": (30, True), "/supervisor/state": (1, True),
        "/forward_position_controller/commands": (1, True)}
    assert not info.problems and not info.needs_repair
    assert info.duration_s == pytest.approx((max(e[0] for e in events) - T0 - 5) * 1e-9)

    messages = list(iter_messages(bag))
    assert [m.log_time_ns for m in messages] == sorted(e[0] for e in events)
    joints = [m.msg for m in messages if m.topic == "/joint_states"]
    assert list(joints[42].name) == [f"joint{k}" for k in range(6)]
    np.testing.assert_allclose(joints[42].position, [0.42 + k for k in range(6)])
    images = [m.msg for m in messages if m.topic == "/camera/image_raw"]
    assert (images[7].height, images[7].width, images[7].encoding) == (24, 32, "rgb8")
    assert images[7].data.reshape(24, 32, 3)[5, 5, 0] == 7
    state = next(m.msg for m in messages if m.topic == "/supervisor/state")
    assert state.status[0].values[0].value == "HOLD"
    command = next(m.msg for m in messages if m.topic == "/forward_position_controller/commands")
    np.testing.assert_allclose(command.data, [0.1, 0.2, 0.3])

    only_images = list(iter_messages(bag, ["/camera/image_raw"]))
    assert len(only_images) == 30 and {m.topic for m in only_images} == {"/camera/image_raw"}

    # Another tool reads what we wrote: rosbags' own rosbag2 reader (metadata.yaml + storage plugin).
    with RosbagsReader(bag) as other:
        assert other.message_count == 132
        assert sum(1 for _ in other.messages()) == 132
        assert {c.topic: c.msgtype for c in other.connections}["/camera/image_raw"] == "sensor_msgs/msg/Image"


def _kill_during_write(bag, keep_bytes_of_last_chunk: int):
    """Write like a recorder, flush 3 times, then leave the file as a SIGKILL would: no summary,
    no metadata.yaml, and half of a chunk record at the end."""
    writer = BagWriter(bag, storage="mcap", flush_period_ns=1_000 * MS)
    writer.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    for i in range(400):  # 4 s at 100 Hz; flushes at 1, 2, 3 s of log time
        writer.write("/joint_states", T0 + i * 10 * MS, serialize_message(_joint_state(i)))
    flushed_bytes = writer.file_paths[0].stat().st_size
    writer.flush()  # the chunk the crash interrupts: keep only part of it
    data = writer.file_paths[0].read_bytes()
    writer.file_paths[0].write_bytes(data[:flushed_bytes + keep_bytes_of_last_chunk])
    return writer.file_paths[0]


def test_crashed_mcap_recording_is_readable_explained_and_repaired(tmp_path, capsys):
    bag = tmp_path / "crashed"
    _kill_during_write(bag, keep_bytes_of_last_chunk=100)
    assert not (bag / "metadata.yaml").exists()

    info = bag_info(bag)
    assert info.needs_repair and info.metadata_version is None
    # The three closed chunks: a chunk closes with the first message 1 s after the previous flush.
    assert info.message_count == 301
    assert any("metadata.yaml is missing" in p for p in info.problems)
    assert any("truncated" in p for p in info.problems)
    positions = [m.msg.position[0] for m in iter_messages(bag)]
    np.testing.assert_allclose(positions, [0.01 * i for i in range(301)])

    assert cli_main(["bag", "info", str(bag)]) == 0
    text = capsys.readouterr().out
    assert "metadata.yaml is missing" in text and f"sim2real bag repair {bag}" in text

    assert cli_main(["bag", "repair", str(bag)]) == 0
    out = capsys.readouterr().out
    assert "metadata.yaml rebuilt" in out and "rewrote 301 messages" in out
    assert (bag / "crashed_0.mcap.damaged").exists()  # nothing thrown away
    repaired = bag_info(bag)
    assert repaired.message_count == 301 and not repaired.problems and not repaired.needs_repair
    assert repaired.metadata_version == 8
    with RosbagsReader(bag) as other:
        assert other.message_count == 301 and sum(1 for _ in other.messages()) == 301

    report = repair_bag(bag)
    assert not report.changed  # idempotent


def test_mcap_without_summary_but_complete_records(tmp_path):
    bag = tmp_path / "no_summary"
    _kill_during_write(bag, keep_bytes_of_last_chunk=0)
    with BagReader(bag) as reader:
        assert reader.message_count == 301 and reader.needs_repair
        assert any("no summary section" in p for p in reader.problems)


def test_repair_rebuilds_wrong_metadata_and_keeps_the_old_one(tmp_path):
    bag = tmp_path / "wrong_meta"
    _write_bag(bag, "sqlite3", max_file_bytes=0)
    meta = bag / "metadata.yaml"
    meta.write_text(meta.read_text().replace("message_count: 132", "message_count: 7"))
    assert any("metadata.yaml says 7 messages" in p for p in bag_info(bag).problems)
    report = repair_bag(bag)
    assert report.changed and (bag / "metadata.yaml.bak").exists()
    assert not bag_info(bag).problems


def test_writer_refuses_to_overwrite_and_unknown_topics(tmp_path):
    bag = tmp_path / "exists"
    bag.mkdir()
    with pytest.raises(BagError, match="exists already"):
        BagWriter(bag)
    with BagWriter(tmp_path / "fresh") as writer, pytest.raises(BagError, match="was not added"):
        writer.write("/nope", T0, b"\0\1\0\0")


@pytest.mark.parametrize("msgtype", ["sensor_msgs/msg/JointState", "diagnostic_msgs/msg/DiagnosticArray",
                                     "trajectory_msgs/msg/JointTrajectory"])
def test_definitions_of_installed_packages_match_the_standard_ones(msgtype):
    """Custom robot messages get their definition from the installed .msg files: checked here on
    installed standard types, whose type hash must equal the standard store's."""
    from sim2real_ros.bags.storage import Connection
    from sim2real_ros.bags.typestores import BagTypes, installed_definition
    from sim2real_ros.bags.writer import message_definition

    text, type_hash = installed_definition(msgtype)
    assert type_hash and type_hash == message_definition(msgtype)[1]
    types = BagTypes([Connection("/t", msgtype, msgdef=text, msgdef_encoding="ros2msg")])
    assert types.decodable(msgtype)
    if msgtype.endswith("JointState"):
        msg = types.decoder(msgtype).decode(serialize_message(_joint_state(3)))
        np.testing.assert_allclose(msg.position, [0.03 + k for k in range(6)])
    assert installed_definition("no_such_msgs/msg/Thing") == ("", "")
