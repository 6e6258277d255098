"""camera_node: a camera (USB webcam, V4L2 device, video file, or a network stream when asked)
through OpenCV VideoCapture onto the graph's camera topics (docs/nodes.md).

Publishes   camera/image_raw (sensor_msgs/Image bgr8, stamped when the frame was read: the node
            clock right after VideoCapture.grab() returns, before decoding) and
            camera/camera_info (sensor_msgs/CameraInfo from the calibration YAML, same stamp),
            both sensor-data QoS (best effort, depth 5).
            ~/diagnostics (diagnostic_msgs/DiagnosticArray, every diagnostics_period_s): captured,
            published, failed reads, reopens, drops by reason, measured rate, last capture age.

Parameters: docs/parameters.md (source, allow_url, camera_calibration, fps, loop, frame_id,
reopen_after_failures, diagnostics_period_s). A bad parameter, a source that does not open or
whose first frame is not the calibration's size fails at start (exit 2) naming it.

Capture runs on its own thread (a read blocks until the device has a frame); pacing and counting
are core.camera_capture (FramePacer, CaptureLedger), tested without ROS.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any

import cv2
import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from .. import conversions as msgconv
from .. import topics
from ..core.errors import ConfigError
from ..core.perception.camera_capture import (
    CameraCalibration,
    CameraNodeConfig,
    CameraSource,
    CaptureLedger,
    DropReason,
    FramePacer,
    load_camera_calibration,
    parse_source,
)
from ..core.report import Level
from ..core.timebase import NS_PER_S
from .background import BackgroundLoop
from .common import RELIABLE_LATEST_QOS, SENSOR_QOS, now_ns, run_node
from .parameters import CAMERA_NODE, declare_table

NODE_NAME = "camera_node"
OPEN_TIMEOUT_S = 10.0  # a source that gives no first frame within this fails at start [s]
FAILED_READ_BACKOFF_S = 0.01  # after a failed read, wait this before the next [s]: no busy loop on a dead device
STALE_PERIODS = 5  # no frame for this many periods (and at least 1 s): diagnostics ERROR


def open_capture(source: CameraSource, width: int, height: int, fps: float) -> cv2.VideoCapture:
    """A VideoCapture of `source`; a live one is asked for width x height at fps (it may refuse:
    the first frame is checked). Returns it even when not opened (the caller checks)."""
    if source.kind in ("index", "device"):
        capture = cv2.VideoCapture(source.value, cv2.CAP_V4L2)
        capture.set(cv2.CAP_PROP_FRAME_WIDTH, width)
        capture.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        capture.set(cv2.CAP_PROP_FPS, fps)
        capture.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the newest frame, not one queued seconds ago
        return capture
    return cv2.VideoCapture(str(source.value), cv2.CAP_FFMPEG)


class CameraNode(Node):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(NODE_NAME, **node_kwargs)
        origin = f"node '{self.get_name()}' parameter"
        v = declare_table(self, CAMERA_NODE)  # parameters.CAMERA_NODE, docs/parameters.md
        self.config = CameraNodeConfig(fps=float(v["fps"]), diagnostics_period_s=float(v["diagnostics_period_s"]),
                                       reopen_after_failures=int(v["reopen_after_failures"]), loop=bool(v["loop"]),
                                       frame_id=str(v["frame_id"]), source=origin)
        self.source = parse_source(str(v["source"]), allow_url=bool(v["allow_url"]), source=origin)
        if not v["camera_calibration"]:
            raise ConfigError(origin, "camera_calibration", "", "must name the camera's calibration YAML "
                                                                "(ROS camera_calibration format)")
        self.calibration: CameraCalibration = load_camera_calibration(str(v["camera_calibration"]))
        self.ledger = CaptureLedger(self.config.period_ns, live=self.source.live)
        self._lock = threading.Lock()  # the ledger is written by the capture thread, read by diagnostics
        self._capture = self._open_checked(origin)
        self._image_pub = self.create_publisher(Image, topics.CAMERA_IMAGE.name, SENSOR_QOS)
        self._info_pub = self.create_publisher(CameraInfo, topics.CAMERA_INFO.name, SENSOR_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, "~/diagnostics", RELIABLE_LATEST_QOS)
        self._info = self._camera_info()
        self._drops_reported = 0
        self.create_timer(self.config.diagnostics_period_s, self._publish_diagnostics)
        self._loop = BackgroundLoop(self, "camera_capture", self._capture_loop, join_timeout_s=2.0)
        self._stop = self._loop.stop_event
        self._loop.start()
        model = self.calibration.model
        self.get_logger().info(f"camera {self.source.describe()} {model.width}x{model.height} at {self.config.fps:g} "
                               f"Hz{' (looping)' if self.config.loop and not self.source.live else ''}, calibration "
                               f"{self.calibration.path}")

    # ------------------------------------------------------------------------------------------
    def _open_checked(self, origin: str) -> cv2.VideoCapture:
        """Open the source and read its first frame: a source that does not open, gives no frame
        or a frame of another size than the calibration fails here, naming the parameter."""
        model = self.calibration.model
        capture = open_capture(self.source, model.width, model.height, self.config.fps)
        if not capture.isOpened():
            capture.release()
            raise ConfigError(origin, "source", self.source.value, "OpenCV could not open it")
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        ok, frame = capture.read()
        while not ok and time.monotonic() < deadline:
            time.sleep(0.05)
            ok, frame = capture.read()
        if not ok or frame is None:
            capture.release()
            raise ConfigError(origin, "source", self.source.value, f"gave no frame within {OPEN_TIMEOUT_S:g} s")
        height, width = frame.shape[:2]
        if (width, height) != (model.width, model.height):
            capture.release()
            raise ConfigError(origin, "camera_calibration", self.calibration.path,
                              f"is for {model.width}x{model.height} but source {self.source.value} gives "
                              f"{width}x{height} frames")
        if not self.source.live:
            capture.set(cv2.CAP_PROP_POS_FRAMES, 0)  # the check read the first frame: publish it too
        return capture

    def _camera_info(self) -> CameraInfo:
        info = msgconv.camera_model_to_info(self.calibration.model, 0, self.config.frame_id)
        info.r, info.p = list(self.calibration.r), list(self.calibration.p)
        return info

    def _publish_frame(self, frame: np.ndarray, stamp_ns: int) -> None:
        model = self.calibration.model
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.shape[:2] != (model.height, model.width):
            with self._lock:
                self.ledger.on_dropped(DropReason.SIZE)
            self.get_logger().error(f"frame of shape {frame.shape} dropped: the calibration is for "
                                    f"{model.width}x{model.height} bgr", throttle_duration_sec=5.0)
            return
        image = msgconv.array_to_image(frame, "bgr8", stamp_ns, self.config.frame_id)
        self._info.header.stamp = image.header.stamp
        self._image_pub.publish(image)
        self._info_pub.publish(self._info)
        with self._lock:
            self.ledger.on_published(stamp_ns)

    # ------------------------------------------------------------------------------------------
    def _capture_loop(self, _stop: threading.Event) -> None:
        """(BackgroundLoop logs an error that ends it, unless the node is shutting down.)"""
        if self.source.live:
            self._live_loop()
        else:
            self._file_loop()

    def _read(self) -> tuple[np.ndarray | None, int]:
        """grab, stamp, decode: (frame or None on a failed read, stamp [ns] at grab)."""
        if not self._capture.grab():
            return None, 0
        stamp = now_ns(self)
        ok, frame = self._capture.retrieve()
        return (frame if ok else None), stamp

    def _live_loop(self) -> None:
        while not self._stop.is_set():
            frame, stamp = self._read()
            if frame is None:
                with self._lock:
                    self.ledger.on_failed_read()
                    reopen = 0 < self.config.reopen_after_failures <= self.ledger.consecutive_failures
                if reopen:
                    self._reopen()
                self._stop.wait(FAILED_READ_BACKOFF_S)
                continue
            with self._lock:
                self.ledger.on_capture(stamp)
            self._publish_frame(frame, stamp)

    def _reopen(self) -> None:
        model = self.calibration.model
        self.get_logger().warning(f"{self.ledger.consecutive_failures} failed reads in a row: reopening "
                                  f"{self.source.describe()}", throttle_duration_sec=5.0)
        self._capture.release()
        self._capture = open_capture(self.source, model.width, model.height, self.config.fps)
        with self._lock:
            self.ledger.on_reopen()
            self.ledger.consecutive_failures = 0

    def _file_loop(self) -> None:
        # Steady clock for pacing (a sim clock or a clock step must not stall playback); stamps on the node clock.
        pacer = FramePacer(self.config.fps, time.monotonic_ns())
        while not self._stop.is_set():
            wait_s = (pacer.next_due_ns() - time.monotonic_ns()) / NS_PER_S
            if wait_s > 0 and self._stop.wait(wait_s):
                return
            skip = pacer.take(time.monotonic_ns())
            skipped = 0
            while skipped < skip and self._capture.grab():  # late: pass over those frames, decoded but not converted
                skipped += 1
            with self._lock:
                self.ledger.on_skipped(skipped)
            frame, stamp = self._read() if skipped == skip else (None, 0)
            if frame is None:  # the end of the file
                if not self.config.loop:
                    with self._lock:
                        self.ledger.ended = True
                    self.get_logger().info(f"end of {self.source.value}: {self.ledger.published} frames published")
                    return
                self._capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
                pacer.restart(time.monotonic_ns())
                with self._lock:
                    self.ledger.loops += 1
                continue
            with self._lock:
                self.ledger.on_capture(stamp)
            self._publish_frame(frame, stamp)

    # ------------------------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        t = now_ns(self)
        with self._lock:
            values = {"source": self.source.describe(), "fps_target": self.config.fps, **self.ledger.values(t)}
            age = self.ledger.last_capture_age_s(t)
            ended, failures = self.ledger.ended, self.ledger.consecutive_failures
        stale_s = max(1.0, STALE_PERIODS / self.config.fps)
        if ended:
            level, message = Level.WARN, "end of the video file (loop:=false)"
        elif age > stale_s:
            level, message = Level.ERROR, f"no frame for {age:.1f} s ({failures} failed reads in a row)"
        elif int(values["dropped_total"]) > self._drops_reported:
            level, message = Level.WARN, f"{int(values['dropped_total']) - self._drops_reported} frames dropped " \
                                         "since the last report"
        else:
            level, message = Level.OK, "capturing"
        self._drops_reported = int(values["dropped_total"])
        self._diag_pub.publish(msgconv.diagnostic_array(self.get_name(), values, t, level=level, message=message,
                                                        hardware_id=str(self.source.value)))

    def destroy_node(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None:
            loop.stop()
        capture = getattr(self, "_capture", None)
        if capture is not None:
            capture.release()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(lambda: CameraNode(), args, num_threads=1))
