"""The recorder node over DDS, as a process: records what the test publishes with the publishers'
QoS, keeps discovering topics, survives SIGKILL up to its last flush, and the bag gets repaired."""
from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from support import REPO_ROOT, node_decl, running_nodes, wait_until

from sim2real_ros.bags import BagReader, iter_messages
from sim2real_ros.bags.info import bag_info
from sim2real_ros.bags.reader import publish_records, publish_times
from sim2real_ros.bags.topic_selection import DURABILITY_TRANSIENT_LOCAL, adapt_qos, select_topics
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.conversions import ns_to_stamp
from sim2real_ros.nodes.common import JOINT_STATE_QOS, LATCHED_QOS, SENSOR_QOS
from sim2real_ros.paths import urdf_path


def _count_in_bag(bag, topic: str) -> int:
    """Messages of `topic` readable now (the bag is still being written)."""
    try:
        with BagReader(bag) as reader:
            return next((t.count for t in reader.topics() if t.name == topic), 0)
    except Exception:  # noqa: BLE001 - the first chunk may not be on disk yet
        return 0


def _joint_state(i: int, stamp_ns: int) -> JointState:
    return JointState(name=["j1", "j2"], position=[float(i), -float(i)], header=_header(stamp_ns))


def _header(stamp_ns: int):
    msg = JointState().header
    msg.stamp = ns_to_stamp(stamp_ns)
    return msg


def _publish_until_recorded(ros, pub, make, topic, bag, count, timeout_s=30.0):
    for i in range(count):
        pub.publish(make(i))
        time.sleep(0.005)  # pace like a sensor; delivery is checked below, not assumed
    assert wait_until(lambda: _count_in_bag(bag, topic) >= count, timeout_s), (
        f"{topic}: {_count_in_bag(bag, topic)} of {count} in the bag")


def test_pure_topic_selection_and_qos_adaptation():
    found = [("/a", ["std_msgs/msg/String"]), ("/_hidden/x", ["std_msgs/msg/String"]), ("/b", ["x/msg/Y", "z/msg/W"])]
    assert select_topics(found, None, set()) == [("/a", "std_msgs/msg/String"), ("/b", "x/msg/Y")]
    assert select_topics(found, {"/b"}, set()) == [("/b", "x/msg/Y")]
    assert select_topics(found, None, {"/a"}) == [("/b", "x/msg/Y")]
    assert adapt_qos([(1, 1), (1, 1)]).durability == DURABILITY_TRANSIENT_LOCAL
    assert adapt_qos([(1, 1), (2, 2)]) == adapt_qos([(2, 2)])  # any best effort / volatile publisher wins


def test_recorder_records_every_topic_with_publisher_qos(ros, tmp_path):
    bag = tmp_path / "run"
    # Latched before the recorder exists: only a transient-local subscription gets it.
    state_pub = ros.publisher(DiagnosticArray, "supervisor/state", LATCHED_QOS)
    state = DiagnosticArray()
    state.status = [DiagnosticStatus(name="supervisor", message="ESTOP")]
    state_pub.publish(state)
    joints = ros.publisher(JointState, "joint_states", JOINT_STATE_QOS)
    images = ros.publisher(Image, "camera/image_raw", SENSOR_QOS)
    decl = node_decl("recorder", {"output": str(bag), "flush_period_s": 0.3, "discovery_period_s": 0.2})
    with running_nodes([decl], tmp_path) as launcher:
        ros.wait_for_subscribers(joints, timeout_s=30.0)
        ros.wait_for_subscribers(state_pub, timeout_s=30.0)
        t0 = time.time_ns()
        _publish_until_recorded(ros, joints, lambda i: _joint_state(i, t0 + i), "/joint_states", bag, 50)

        ros.wait_for_subscribers(images, timeout_s=30.0)

        def make_image(i):
            return Image(height=2, width=3, encoding="rgb8", step=9, data=bytes([i] * 18), header=_header(t0 + i))
        # Best effort over localhost loses nothing in practice, but allow it: check what arrived, below.
        for i in range(10):
            images.publish(make_image(i))
        assert wait_until(lambda: _count_in_bag(bag, "/camera/image_raw") >= 8, 30.0)

        # A topic that appears after the recorder started is discovered and recorded too.
        late = ros.publisher(String, "sim/episode", QoSProfile(depth=10))
        ros.wait_for_subscribers(late, timeout_s=30.0)
        _publish_until_recorded(ros, late, lambda i: String(data=f"episode {i}"), "/sim/episode", bag, 3)
        codes = launcher.shutdown()
    assert codes == {"recorder": 0}

    info = bag_info(bag)
    assert info.storage == "mcap" and info.metadata_version == 8 and not info.needs_repair, info.problems
    topics = {t.name: t for t in info.topics}
    assert topics["/joint_states"].count == 50 and topics["/joint_states"].msgtype == "sensor_msgs/msg/JointState"
    assert topics["/supervisor/state"].count == 1
    assert "durability: 1" in topics["/supervisor/state"].offered_qos_profiles  # transient local, as offered
    assert "reliability: 2" in topics["/camera/image_raw"].offered_qos_profiles  # best effort, as offered
    assert topics["/sim/episode"].count == 3
    assert all(t.decodable for t in info.topics)
    # The URDF, once, transient local, at the first message's time (the viewers draw the arm from it).
    assert topics["/robot_description"].count == 1
    assert "durability: 1" in topics["/robot_description"].offered_qos_profiles
    description = next(iter_messages(bag, ["/robot_description"]))
    assert description.msg.data == urdf_path().read_text()
    assert description.log_time_ns == min(m.log_time_ns for m in iter_messages(bag))  # the bag's first

    recorded = list(iter_messages(bag, ["/joint_states", "/supervisor/state", "/camera/image_raw", "/sim/episode"]))
    joint_msgs = [m for m in recorded if m.topic == "/joint_states"]
    assert [m.msg.position[0] for m in joint_msgs] == [float(i) for i in range(50)]
    assert [m.msg.header.stamp.sec * 10**9 + m.msg.header.stamp.nanosec for m in joint_msgs] == [
        t0 + i for i in range(50)]
    assert all(m.log_time_ns >= t0 for m in joint_msgs)  # receive time, not the publisher's stamp
    # The DDS source timestamp (publisher's send time, same machine clock) is the MCAP publish time:
    # before the receive time, by less than a second, and not a copy of it.
    pairs = publish_times(bag, ["/joint_states"])["/joint_states"]
    assert len(pairs) == 50
    age = pairs[:, 0] - pairs[:, 1]
    assert np.all(age >= 0) and np.all(age < 10**9) and np.any(age > 0)
    # The MCAP sequence is the publisher's count (DDS publication sequence number): all 50 were
    # published after the recorder matched, so 1..50 in order (a lost one would leave a gap).
    assert publish_records(bag, ["/joint_states"])["/joint_states"][:, 2].tolist() == list(range(1, 51))
    assert next(m for m in recorded if m.topic == "/supervisor/state").msg.status[0].message == "ESTOP"
    image = next(m for m in recorded if m.topic == "/camera/image_raw").msg
    assert (image.height, image.width, image.encoding, len(image.data)) == (2, 3, "rgb8", 18)
    assert [m.msg.data for m in recorded if m.topic == "/sim/episode"] == [f"episode {i}" for i in range(3)]


# The SIGKILL test's bound. FLUSH_PERIOD_S is the recorder's declared flush_period_s: nothing it
# received waits longer to be handed to the OS. KILL_MARGIN_S is for what the recorder does not
# control, on a loaded 2-core machine shared with other test runs: DDS delivery and the recorder
# getting the CPU for its callback and its flush check (stalls of several hundred ms happen: the
# earlier version of this test allowed 0.5 s for delivery and scheduling and needed a rerun in CI):
# three times that.
FLUSH_PERIOD_S = 1.0
KILL_MARGIN_S = 1.5
# The kill comes this long (3 s) after a flush was seen: a recorder whose flushes are further apart
# than that keeps nothing published after the seen flush, and fails the bound (seen: flushing at
# 5x the declared period misses 25 messages).
KILL_AFTER_FLUSH_S = FLUSH_PERIOD_S + KILL_MARGIN_S + 0.5


def test_flush_timing_keeps_every_message_within_one_flush_period(tmp_path):
    """The recorder's flush timing on a real BagWriter, driven with given times: checks every
    check period at any phase, irregular traffic (bursts, pauses longer than a period). No message
    waits longer than flush_period_s for the flush that puts it in the file, and flushes are no
    more frequent than the writer's period."""
    import random

    from sim2real_ros.bags.writer import BagWriter
    from sim2real_ros.nodes.recorder import flush_timing

    period_s = 1.0
    period = int(period_s * 1e9)
    writer_period, check_s = flush_timing(period_s)
    check = int(check_s * 1e9)
    rng = random.Random(18)
    for case in range(20):
        writer = BagWriter(tmp_path / f"bag{case}", flush_period_ns=writer_period)
        writer.add_topic("/t", "std_msgs/msg/String")
        arrivals, t = [], rng.randrange(period)
        while t < 15 * period:
            arrivals.append(t)
            t += rng.choice([rng.randrange(1, 30_000_000), rng.randrange(1, 30_000_000),
                             rng.randrange(period // 2, 3 * period)])
        checks = range(case * check // 20, 20 * period, check)  # the recorder's timer, at any phase
        events = sorted([(a, "write") for a in arrivals] + [(c, "check") for c in checks])
        size = writer.file_paths[0].stat().st_size
        waiting: list[int] = []
        worst, flushes = 0, []
        for now, kind in events:
            if kind == "write":
                waiting.append(now)
                writer.write("/t", now, b"\x00\x01\x00\x00\x02\x00\x00\x00x\x00", now_ns=now)
            else:
                writer.maybe_flush(now)
            if (grown := writer.file_paths[0].stat().st_size) > size:  # a flush reached the file
                size = grown
                worst = max(worst, now - waiting[0])
                flushes.append(now)
                waiting.clear()
        writer.close()
        assert not waiting and len(flushes) > 5, (case, len(flushes))
        assert worst <= period, f"case {case}: a message waited {worst / period:.2f} flush periods"
        assert all(b - a >= writer_period for a, b in itertools.pairwise(flushes)), case


def test_sigkill_loses_at_most_the_flush_period_and_repair_fixes_it(ros, tmp_path, capsys):
    """SIGKILL at a time T: everything published before T - flush_period_s - KILL_MARGIN_S is in
    the bag, in order and without gaps; `sim2real bag repair` then makes the bag whole."""
    bag = tmp_path / "killed"
    # Deep enough that a recorder stalled for a while loses nothing to the publisher's history.
    joints = ros.publisher(JointState, "joint_states", QoSProfile(depth=500, reliability=JOINT_STATE_QOS.reliability))
    decl = node_decl("recorder", {"output": str(bag), "topics": ["joint_states"], "flush_period_s": FLUSH_PERIOD_S})
    sent: list[float] = []  # publish time [s, monotonic] of message i
    with running_nodes([decl], tmp_path) as launcher:
        ros.wait_for_subscribers(joints, timeout_s=30.0)

        def publish() -> None:
            joints.publish(_joint_state(len(sent), 0))
            sent.append(time.monotonic())
            time.sleep(0.02)  # ~50 Hz; the times are measured, the rate need not be exact

        # 1. Publish until a flush is seen on disk (the file is never closed: it is read chunk by chunk).
        on_disk, seen_at = 0, None
        deadline = time.monotonic() + 30.0
        while seen_at is None and time.monotonic() < deadline:
            for _ in range(5):
                publish()
            count = _count_in_bag(bag, "/joint_states")
            if count > on_disk:  # a flush happened since the last look
                on_disk, seen_at = count, time.monotonic()
        assert seen_at is not None, f"no flush on disk after 30 s ({on_disk} of {len(sent)} messages)"
        # 2. Keep publishing, then SIGKILL at a known time with the last ones only in memory.
        while time.monotonic() < seen_at + KILL_AFTER_FLUSH_S:
            publish()
        killed_at = time.monotonic()
        launcher.nodes[0].process.send_signal(signal.SIGKILL)
        launcher.nodes[0].process.wait(timeout=10)
    assert not (bag / "metadata.yaml").exists()

    info = bag_info(bag)
    assert info.needs_repair and any("metadata.yaml is missing" in p for p in info.problems)
    got = [int(m.msg.position[0]) for m in iter_messages(bag, ["/joint_states"])]
    assert got == list(range(len(got)))  # in order, nothing missing in between
    must_have = sum(t < killed_at - FLUSH_PERIOD_S - KILL_MARGIN_S for t in sent)
    with capsys.disabled():
        print(f"{len(got)} of {len(sent)} messages survived the SIGKILL; {must_have} had to, {on_disk} were "
              f"seen on disk {killed_at - seen_at:.2f} s before it")
    assert must_have > on_disk  # the bound covers messages published after the flush that was seen
    assert len(got) >= must_have, (
        f"{must_have - len(got)} messages published more than {FLUSH_PERIOD_S} + {KILL_MARGIN_S} s before the "
        f"SIGKILL are missing")
    assert on_disk <= len(got) <= len(sent)  # what was on disk survived; at most the unflushed tail is lost

    assert cli_main(["bag", "info", str(bag)]) == 0
    assert f"sim2real bag repair {bag}" in capsys.readouterr().out
    assert cli_main(["bag", "repair", str(bag)]) == 0
    repaired = bag_info(bag)
    # every joint state that survived, and the robot_description the recorder stores
    assert not repaired.needs_repair and not repaired.problems and repaired.message_count == len(got) + 1
    from rosbags.rosbag2 import Reader as RosbagsReader

    with RosbagsReader(bag) as other:
        assert other.message_count == len(got) + 1


def test_record_command_and_bad_parameters(ros, tmp_path):
    bag = tmp_path / "cli_bag"
    chatter = ros.publisher(String, "chatter", QoSProfile(depth=10))
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "record", "--out", str(bag), "chatter",
                             "--duration", "60"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        ros.wait_for_subscribers(chatter, timeout_s=30.0)
        _publish_until_recorded(ros, chatter, lambda i: String(data=str(i)), "/chatter", bag, 5)
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends the recording cleanly
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert (bag / "metadata.yaml").exists()
    assert [m.msg.data for m in iter_messages(bag, ["/chatter"])] == [str(i) for i in range(5)]

    bad = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "node", "recorder", "--ros-args",
                          "-p", "storage:=floppy", "-p", f"output:={tmp_path / 'x'}"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "field 'storage' = 'floppy'" in bad.stderr
    assert not (tmp_path / "x").exists()


def test_sighup_ends_the_recording_cleanly(ros, tmp_path):
    """Issue 34 leftover: SIGHUP (the terminal closed) killed the recorder before its bag was finished."""
    bag = tmp_path / "hup_bag"
    chatter = ros.publisher(String, "chatter_hup", QoSProfile(depth=10))
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "record", "--out", str(bag), "chatter_hup",
                             "--duration", "60"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        ros.wait_for_subscribers(chatter, timeout_s=30.0)
        _publish_until_recorded(ros, chatter, lambda i: String(data=str(i)), "/chatter_hup", bag, 3)
        proc.send_signal(signal.SIGHUP)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert (bag / "metadata.yaml").exists()
    assert [m.msg.data for m in iter_messages(bag, ["/chatter_hup"])] == [str(i) for i in range(3)]


def test_stopping_takes_in_what_the_readers_already_hold(ros, tmp_path):
    """What DDS delivered but no callback took yet is written at the stop, not lost with the
    subscription (the last outcome of a recorded session arrives just before Ctrl-C)."""
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    from sim2real_ros.nodes.common import RELIABLE_LATEST_QOS, single_threaded_executor
    from sim2real_ros.nodes.recorder import RecorderNode

    reliable_50 = QoSProfile(depth=50, reliability=RELIABLE_LATEST_QOS.reliability)
    publisher = ros.publisher(String, "/drain_test", reliable_50)
    heard = ros.collect(String, "/drain_test", reliable_50)
    context = Context()
    rclpy.init(context=context)
    bag = tmp_path / "bag"
    node = RecorderNode(context=context, parameter_overrides=[
        Parameter("output", value=str(bag)), Parameter("topics", value=["/drain_test"])])
    try:
        executor = single_threaded_executor(node)
        executor.add_node(node)
        deadline = time.monotonic() + 20.0
        while "/drain_test" not in node._recorded_subs and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert "/drain_test" in node._recorded_subs
        ros.wait_for_subscribers(publisher, count=2)
        executor.shutdown()  # nobody takes messages from here on: they wait in the reader

        for i in range(20):
            publisher.publish(String(data=f"m{i}"))
        assert wait_until(lambda: len(heard) == 20, 10.0)  # delivered (the probe's reader has them all)
        assert wait_until(lambda: node.drain() >= 0 and node.received == 20, 10.0), node.received
        node.close()
        with BagReader(bag) as reader:
            assert [m.msg.data for m in reader.messages(["/drain_test"])] == [f"m{i}" for i in range(20)]
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def test_a_recorder_stalled_for_seconds_loses_nothing_of_a_reliable_stream(ros, tmp_path):
    """The soak's lost commands (CI stop 45): a recorder that gets no CPU for a while, or a reliable
    stream waiting for a lost sample's resend (Fast DDS heartbeats every 3 s by default), must hold
    what keeps arriving meanwhile. Its readers' depth (RECORD_DEPTH) covers 2.5 s of a 200 Hz topic
    with room to spare; at the old depth of 100 this run lost ~400 messages."""
    bag = tmp_path / "stalled"
    rate_hz, stall_s = 200.0, 2.5
    # The publisher keeps enough history to resend what a stalled reader asks for again.
    joints = ros.publisher(JointState, "stall_joint_states",
                           QoSProfile(depth=2000, reliability=JOINT_STATE_QOS.reliability))
    decl = node_decl("recorder", {"output": str(bag), "topics": ["stall_joint_states"], "flush_period_s": 0.2})
    sent = 0

    def publish_for(duration_s: float) -> None:
        nonlocal sent
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            joints.publish(_joint_state(sent, 0))
            sent += 1
            time.sleep(1.0 / rate_hz)

    with running_nodes([decl], tmp_path) as launcher:
        ros.wait_for_subscribers(joints, timeout_s=30.0)
        publish_for(0.5)
        recorder = launcher.nodes[0].process
        recorder.send_signal(signal.SIGSTOP)  # the recorder gets no CPU at all: DDS threads included
        try:
            publish_for(stall_s)
        finally:
            recorder.send_signal(signal.SIGCONT)
        publish_for(0.5)
        assert wait_until(lambda: _count_in_bag(bag, "/stall_joint_states") >= sent, 20.0), (
            f"{_count_in_bag(bag, '/stall_joint_states')} of {sent} in the bag")
    got = [int(m.msg.position[0]) for m in iter_messages(bag, ["/stall_joint_states"])]
    assert got == list(range(sent)), f"{sent - len(got)} of {sent} lost"
