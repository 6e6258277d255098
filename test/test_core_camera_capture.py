"""core.camera_capture at fixed times, no ROS: sources, calibration, file pacing, drop bookkeeping."""
from __future__ import annotations

import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.perception.camera_capture import (
    CameraNodeConfig,
    CaptureLedger,
    FramePacer,
    load_camera_calibration,
    parse_source,
)
from sim2real_ros.paths import config_path

MS = 1_000_000


def test_sources_parsed_and_refused_by_name(tmp_path):
    video = tmp_path / "clip.mkv"
    video.write_bytes(b"x")
    assert parse_source("0", allow_url=False).kind == "index" and parse_source(" 2 ", allow_url=False).value == 2
    assert parse_source(str(video), allow_url=False).kind == "file"
    assert parse_source("rtsp://cam.local/stream", allow_url=True).kind == "url"
    playlist = tmp_path / "list.m3u8"
    playlist.write_text("/etc/passwd\n")
    for text, allow, problem in (("", False, "must name"), ("rtsp://cam.local/s", False, "allow_url"),
                                 ("file:///tmp/x.mp4", True, "plain path"), ("gopher://x", True, "scheme"),
                                 ("/dev/video_missing_99", False, "no such device"),
                                 (str(tmp_path / "none.mp4"), False, "no such video file"),
                                 (str(playlist), False, "playlists")):
        with pytest.raises(ConfigError, match=problem) as info:
            parse_source(text, allow_url=allow, source="node 'camera_node' parameter")
        assert info.value.field == "source" and "camera_node" in str(info.value)


def test_calibration_carries_the_yaml_r_and_p_and_names_a_bad_file(tmp_path):
    calibration = load_camera_calibration(config_path("camera_real_a.yaml"))
    assert (calibration.model.width, calibration.model.height, calibration.camera_name) == (320, 240, "real_camera_a")
    assert calibration.model.fx == 226.5 and calibration.model.distortion[0] == -0.11
    assert calibration.p == (226.5, 0.0, 157.8, 0.0, 0.0, 225.9, 122.6, 0.0, 0.0, 0.0, 1.0, 0.0)
    bad = tmp_path / "bad.yaml"
    bad.write_text(config_path("camera_real_a.yaml").read_text().replace(
        "data: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]", "data: [1.0, 0.0]"))
    with pytest.raises(ConfigError, match="rectification_matrix") as info:
        load_camera_calibration(bad)
    assert str(bad) in str(info.value)
    with pytest.raises(ConfigError, match="fps"):
        CameraNodeConfig(fps=0.0)


def test_file_pacer_skips_the_frames_it_is_late_for():
    pacer = FramePacer(fps=10.0, start_ns=1_000 * MS)  # frame k due at 1000 + 100 k ms
    assert pacer.next_due_ns() == 1_000 * MS and pacer.take(1_000 * MS) == 0
    assert pacer.next_due_ns() == 1_100 * MS and pacer.take(1_150 * MS) == 0  # late by less than a period
    assert pacer.take(1_530 * MS) == 3  # frames 2, 3, 4 passed: skip them, publish frame 5
    assert pacer.next_due_ns() == 1_600 * MS
    pacer.restart(5_000 * MS)
    assert pacer.next_due_ns() == 5_000 * MS and pacer.take(5_000 * MS) == 0


def test_ledger_counts_gaps_of_live_sources_failures_and_rate():
    ledger = CaptureLedger(period_ns=100 * MS, live=True)
    for t in (0, 100, 200, 500, 600):  # 300 and 400 never came
        ledger.on_capture(t * MS)
        ledger.on_published(t * MS)
    ledger.on_failed_read()
    ledger.on_failed_read()
    assert ledger.consecutive_failures == 2
    ledger.on_reopen()
    ledger.on_capture(2_000 * MS)  # after a reopen the gap is not counted as lost frames
    values = ledger.values(600 * MS)
    assert values["dropped_gap"] == 2 and values["failed_reads"] == 2 and values["reopens"] == 1
    assert values["captured"] == 6 and values["published"] == 5 and ledger.consecutive_failures == 0
    assert values["rate_hz"] == pytest.approx(4 / 0.6, rel=1e-3) and values["dropped_late"] == 0
    file_ledger = CaptureLedger(period_ns=100 * MS, live=False)
    file_ledger.on_capture(0)
    file_ledger.on_capture(900 * MS)  # a file's gaps are the pacer's business, not lost frames
    file_ledger.on_skipped(3)
    assert file_ledger.values(0)["dropped_gap"] == 0 and file_ledger.values(0)["dropped_late"] == 3
    assert file_ledger.captured == 5
