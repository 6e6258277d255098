"""`sim2real view BAG`: a bag served over a real Foxglove WebSocket at the requested speed, with
the robot model and transforms; the replay clock and seeking; bad input."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import foxglove
import pytest
from foxglove_client import FoxgloveClient, free_port
from support import REPO_ROOT
from viz_bags import MS, N_JOINTS, T0, write_bag

from sim2real_ros.viz import channels as ch
from sim2real_ros.viz.channels import VizPublisher
from sim2real_ros.viz.replay import BagReplayer, Control, ReplayClock
from sim2real_ros.viz.router import VizRouter
from sim2real_ros.viz.server import start_viz_server
from sim2real_ros.viz.source import open_bag_view


def test_view_replay_clock_pacing_pause_speed_seek():
    clock = ReplayClock(1_000, 11_000, speed=2.0, wall_ns=0)
    assert clock.position(1_000) == 3_000
    clock.pause(2_000)
    assert clock.position(9_000) == 5_000 and clock.wall_until(6_000, 9_000) == float("inf")
    clock.play(9_000)
    clock.set_speed(4.0, 9_000)
    assert clock.position(10_000) == 9_000
    clock.seek(2_000, 10_000)
    assert clock.position(10_000) == 2_000 and clock.position(100_000) == 11_000 and clock.at_end(100_000)
    clock.seek(3_000, 0)
    clock.restart(50_000)  # time spent getting ready is not skipped
    assert clock.position(50_000) == 3_000 and clock.position(51_000) == 7_000
    with pytest.raises(ValueError, match="speed"):
        ReplayClock(0, 1, speed=0.0)


def _replay(tmp_path, speed, seek_ns=None):
    bag = tmp_path / f"bag_{speed}"
    write_bag(bag)
    view = open_bag_view(bag)
    context = foxglove.Context()
    router = VizRouter(VizPublisher(context), view.kinematics(), view.urdf_xml)
    server = start_viz_server(context, port=0)
    client = FoxgloveClient(f"ws://127.0.0.1:{server.port}")
    try:
        assert _wait(lambda: ch.TF in client.topics())
        client.subscribe([ch.TF, ch.ROBOT_MODEL])
        time.sleep(0.3)  # the subscription reaches the server
        clock = ReplayClock(view.start_ns, view.end_ns, speed, wall_ns=time.monotonic_ns())
        replayer = BagReplayer(view, router, clock, time.monotonic_ns)
        if seek_ns is not None:
            replayer.request(Control(seek_ns=seek_ns))
        stop = threading.Event()
        started = time.monotonic()
        replayer.run(stop, exit_at_end=True)
        elapsed = time.monotonic() - started
        time.sleep(0.3)  # the last messages reach the client
        return client, elapsed
    finally:
        client.close()
        server.stop()


def _wait(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_view_paces_at_speed_and_seeks(tmp_path):
    """Every joint state in order, and after a seek the newest one before it first. The replay waits
    for its clock, so it cannot end before the bag's duration / speed: a lower bound that load cannot
    break (the upper bound needs an idle machine: test_view_ends_on_time, `make test-timing`)."""
    duration_s = (N_JOINTS - 1) * 10 * MS / 1e9  # ~2 s of joint states
    client, elapsed = _replay(tmp_path, 4.0)
    stamps = [t for t, _, _ in client.messages[ch.TF]]
    assert len(stamps) == N_JOINTS and stamps == sorted(stamps)  # every joint state, in order, with bag log times
    assert stamps[0] == T0 + 1 and client.messages.get(ch.ROBOT_MODEL)
    assert elapsed > duration_s / 4 * 0.8, elapsed
    client, elapsed = _replay(tmp_path, 1.0, seek_ns=T0 + 1_500 * MS)
    stamps = [t for t, _, _ in client.messages[ch.TF]]
    # after the seek: the newest joint state before the seek point, then 1x from there
    assert stamps[0] < T0 + 1_500 * MS <= stamps[1] and len(stamps) == N_JOINTS - 150 + 1
    assert elapsed > 0.4, elapsed


@pytest.mark.timing
def test_view_ends_on_time(tmp_path):
    duration_s = (N_JOINTS - 1) * 10 * MS / 1e9
    _, elapsed = _replay(tmp_path, 4.0)
    assert elapsed < duration_s / 4 + 1.0, elapsed
    _, elapsed = _replay(tmp_path, 1.0, seek_ns=T0 + 1_500 * MS)
    assert elapsed < 1.5, elapsed


def test_view_cli_serves_a_bag_and_names_bad_input(tmp_path):
    bag = tmp_path / "run"
    write_bag(bag)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "view", str(bag), "--port", str(port),
                             "--speed", "8", "--exit-at-end", "--duration", "60"], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = FoxgloveClient(f"ws://127.0.0.1:{port}")
        assert _wait(lambda: {ch.TF, ch.ROBOT_MODEL} <= set(client.topics()), 20.0)
        assert "playbackControl" in client.server_info["capabilities"], client.server_info
        client.subscribe([ch.TF, ch.ROBOT_MODEL, ch.ROBOT_DESCRIPTION])  # playback starts at the first subscription
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err

        def seen() -> set[int]:  # log times are distinct; a late subscription may repeat the latest one
            return {t for t, _, _ in client.messages[ch.TF]}

        # every joint state (the client's reader thread may still be taking the last frames off its socket)
        _wait(lambda: len(seen()) == N_JOINTS, 5.0)
        assert len(seen()) == N_JOINTS and client.messages[ch.ROBOT_MODEL], \
            (out, sorted({T0 + 1 + k * 10 * MS for k in range(N_JOINTS)} - seen()))
        client.close()
    finally:
        proc.kill()
    no_joints = tmp_path / "no_joints"
    write_bag(no_joints, joints=False)
    busy = start_viz_server(foxglove.Context(), port=0)
    try:
        for argv, expected in (([str(no_joints)], "no joint_states topic"),
                               ([str(bag), "--port", str(busy.port)], f"127.0.0.1:{busy.port} (in use"),
                               ([str(bag), "--speed", "0"], "--speed 0.0: must be > 0")):
            result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "view", *argv], cwd=REPO_ROOT,
                                    capture_output=True, text=True, timeout=60)
            assert result.returncode == 2 and expected in result.stderr, result.stderr
    finally:
        busy.stop()
