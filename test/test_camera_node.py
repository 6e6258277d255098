"""camera_node over real DDS, the node running as a process, its source a video file written here
with PyAV (test/camera_videos.py): images stamped at capture, in order and on the file's schedule,
camera_info as the calibration YAML says, late frames skipped and counted, bad parameters named."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
from camera_videos import frame_level, write_calibration, write_video
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image
from support import REPO_ROOT, node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.perception.camera_capture import load_camera_calibration
from sim2real_ros.paths import config_path

SENSOR = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)
RELIABLE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)
TIMEOUT_S = 40.0


def _collect_with_wall_time(ros, msg_type, topic):
    """(wall clock [ns] at receipt, msg) pairs: the node stamps with its (wall) clock at capture."""
    received: list = []
    ros.node.create_subscription(msg_type, topic, lambda m: received.append((time.time_ns(), m)), SENSOR)
    return received


def _last_diagnostics(received: list) -> dict[str, str]:
    return cv.diagnostic_values(received[-1]) if received else {}


def test_video_file_stamps_schedule_and_camera_info(ros, tmp_path):
    fps, frames = 30, 240  # an 8 s file (camera_real_a.yaml is 320x240); frame k has level k
    video = write_video(tmp_path / "clip.mkv", frames, 320, 240, fps)
    calibration_path = config_path("camera_real_a.yaml")
    images = _collect_with_wall_time(ros, Image, "camera/image_raw")
    infos = _collect_with_wall_time(ros, CameraInfo, "camera/camera_info")
    diagnostics = ros.collect(DiagnosticArray, "camera_node/diagnostics", RELIABLE)
    params = {"source": str(video), "camera_calibration": str(calibration_path), "fps": float(fps),
              "frame_id": "camera_optical", "diagnostics_period_s": 0.2}
    with running_nodes([node_decl("camera_node", params)], tmp_path):
        assert wait_until(lambda: _last_diagnostics(diagnostics).get("ended") == "True", TIMEOUT_S), \
            _last_diagnostics(diagnostics)
        time.sleep(0.3)  # the last images reach us
    counts = _last_diagnostics(diagnostics)
    published, late = int(counts["published"]), int(counts["dropped_late"])
    # Every frame of the file is published or counted as skipped (the machine was too busy for it).
    assert published + late == frames and int(counts["captured"]) == frames, counts
    assert int(counts["failed_reads"]) == 0 and counts["source"] == f"file {video.resolve()}"
    assert len(images) >= 60, len(images)  # the first frames may be published before discovery ends

    stamps = [cv.stamp_to_ns(m.header.stamp) for _, m in images]
    index = [int(cv.image_to_array(m)[0, 0, 0]) for _, m in images]
    assert all(int(cv.image_to_array(m)[5, 7, 1]) == frame_level(k) for k, (_, m) in zip(index, images, strict=True))
    assert stamps == sorted(set(stamps)) and index == sorted(set(index)), "frames out of order or repeated"
    assert all(m.encoding == "bgr8" and (m.width, m.height) == (320, 240) and m.header.frame_id == "camera_optical"
               for _, m in images)
    # Stamped at capture: received after the stamp, soon after (the node's clock is the wall clock here).
    delays_s = np.array([(recv - stamp) / 1e9 for (recv, _), stamp in zip(images, stamps, strict=True)])
    assert delays_s.min() >= 0.0 and np.median(delays_s) < 0.1, (delays_s.min(), np.median(delays_s))
    # On the file's schedule: frame k at start + k / fps. The rate is the slope of stamp vs frame index
    # (robust to a frame the busy machine published late) and must be the file's rate.
    slope_s, _ = np.polyfit(np.array(index, dtype=float), (np.array(stamps) - stamps[0]) / 1e9, 1)
    assert abs(1.0 / slope_s - fps) < 0.03 * fps, 1.0 / slope_s

    expected = load_camera_calibration(calibration_path)
    _, info = infos[-1]
    assert (info.width, info.height, info.distortion_model) == (320, 240, "plumb_bob")
    assert list(info.k) == [226.5, 0.0, 157.8, 0.0, 225.9, 122.6, 0.0, 0.0, 1.0]
    assert list(info.d) == [-0.11, 0.025, 0.0006, -0.0004, 0.0]
    assert tuple(info.r) == expected.r and tuple(info.p) == expected.p and info.header.frame_id == "camera_optical"
    image_stamps = set(stamps)
    assert sum(cv.stamp_to_ns(i.header.stamp) in image_stamps for _, i in infos) >= 0.5 * len(infos)


def test_frames_the_node_is_late_for_are_skipped_and_counted_and_the_file_loops(ros, tmp_path):
    # 1280x720 frames asked for at 1000 Hz: 2.7 GB/s of images, more than any machine converts and
    # publishes, so the node must skip frames to stay on the schedule and count each one.
    video = write_video(tmp_path / "big.mkv", 20, 1280, 720, 30)
    calibration = write_calibration(tmp_path / "big.yaml", 1280, 720)
    diagnostics = ros.collect(DiagnosticArray, "camera_node/diagnostics", RELIABLE)
    params = {"source": str(video), "camera_calibration": str(calibration), "fps": 1000.0, "loop": True,
              "diagnostics_period_s": 0.2}
    warned = lambda: any(d.status[0].level == b"\x01" for d in list(diagnostics))  # noqa: E731 (DiagnosticStatus.WARN)
    with running_nodes([node_decl("camera_node", params)], tmp_path):
        # A WARN for drops comes with the first report after them; on a loaded machine the first
        # reports can go out before this probe's subscription is matched, so wait for one, too.
        assert wait_until(lambda: int(_last_diagnostics(diagnostics).get("loops", "0")) >= 3 and warned(),
                          TIMEOUT_S), ("no WARN for the drops", _last_diagnostics(diagnostics))
    counts = _last_diagnostics(diagnostics)
    late, published, captured = int(counts["dropped_late"]), int(counts["published"]), int(counts["captured"])
    assert late > 0 and published > 0 and counts["ended"] == "False", counts
    # Each frame read is published or counted; a loop reads the whole file (up to the one in progress).
    assert captured == published + late, counts
    assert int(counts["loops"]) * 20 <= captured < (int(counts["loops"]) + 1) * 20, counts


def _start(tmp_path, *params: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "sim2real_ros.cli.main", "node", "camera_node", "--ros-args"]
    for param in params:
        args += ["-p", param]
    return subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def test_bad_parameters_fail_at_start_naming_them(tmp_path):
    video = write_video(tmp_path / "clip.mkv", 5, 320, 240, 30)
    other_size = write_calibration(tmp_path / "vga.yaml", 640, 480)
    good = f"camera_calibration:={config_path('camera_real_a.yaml')}"
    for params, expected in (((f"source:={video}",), "'camera_calibration' = ''"),
                             ((f"source:={video}", f"camera_calibration:={other_size}"), "is for 640x480 but source"),
                             (("source:=rtsp://10.0.0.9/cam", good), "set allow_url:=true"),
                             ((f"source:={tmp_path / 'missing.mp4'}", good), "no such video file"),
                             ((f"source:={video}", good, "fps:=0.0"), "fps")):
        result = _start(tmp_path, *params)
        assert result.returncode == 2 and expected in result.stderr, (params, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, result.stderr


def test_live_source_failed_reads_counted_and_reopened(ros, tmp_path):
    """A network stream (allowed) that ends: each failed read is counted, and after
    reopen_after_failures in a row the source is opened again and frames flow again. The stream is
    the video file served by a real HTTP server on loopback, read by OpenCV's FFmpeg backend."""
    import functools
    import http.server
    import threading

    write_video(tmp_path / "clip.mkv", 30, 320, 240, 30)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    diagnostics = ros.collect(DiagnosticArray, "camera_node/diagnostics", RELIABLE)
    params = {"source": f"http://127.0.0.1:{server.server_address[1]}/clip.mkv", "allow_url": True,
              "camera_calibration": str(config_path("camera_real_a.yaml")), "reopen_after_failures": 5,
              "diagnostics_period_s": 0.2}
    try:
        with running_nodes([node_decl("camera_node", params)], tmp_path):
            assert wait_until(lambda: int(_last_diagnostics(diagnostics).get("reopens", "0")) >= 2, TIMEOUT_S), \
                _last_diagnostics(diagnostics)
    finally:
        server.shutdown()
    counts = _last_diagnostics(diagnostics)
    reopens, failed, published = int(counts["reopens"]), int(counts["failed_reads"]), int(counts["published"])
    assert failed >= 5 * reopens and counts["source"].startswith("url http://127.0.0.1"), counts
    # Frames flowed again after the first reopen: more than one pass of the 30-frame stream was published
    # (the node's own first read at start-up is not published).
    assert published > 30, counts
