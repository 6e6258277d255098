"""camera_preprocessor: any camera (sim or real) -> the policy camera's image (docs/design.md §1 stage 2).

Subscribes  camera/image_raw (sensor_msgs/Image, any encoding of conversions.ENCODING_CHANNELS),
            camera/camera_info (sensor_msgs/CameraInfo): sensor-data QoS (best effort, which also
            matches reliable publishers, so every driver connects).
Publishes   policy/image (sensor_msgs/Image rgb8 at the policy resolution) and policy/camera_info
            (the policy camera's model), both with the source image's stamp and frame_id,
            reliable depth 1.
            ~/diagnostics (diagnostic_msgs/DiagnosticArray, every `diagnostics_period_s`): counters
            of received / published / dropped images by reason, coverage of the policy view.

The work is core.preprocess.ImagePipeline (one cached remap per camera_info), the same code bag
replay and training use, through nodes.camera_front_end (shared with policy_node's in-process
preprocessing, `image_input: camera`). Bad input (no camera_info yet, unknown encoding, wrong step or data size,
an image that does not match its camera_info, an uncalibrated camera_info) is counted, logged
(throttled) and dropped; the node keeps running.
"""
from __future__ import annotations

import sys
import time
from collections import Counter, deque
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from .. import conversions as msgconv
from .. import topics
from ..core.errors import ConfigError
from ..core.perception.image_drops import DropLedger, ImageDropReason
from ..core.perception.preprocess_config import PreprocessConfig
from ..core.report import Level
from .camera_front_end import CameraFrontEnd, ImageRefusedError
from .common import RELIABLE_LATEST_QOS, SENSOR_QOS, now_ns, run_node
from .parameters import config_class_of, declare_config

NODE_NAME = "camera_preprocessor"
# Why an image was dropped: core.image_drops.ImageDropReason (every reason is always reported).
DROP_REASONS = tuple(reason.value for reason in ImageDropReason)
TIMING_HISTORY = 300  # processing times kept for the diagnostics' percentiles


# The node's parameters as a frozen dataclass generated from config/parameters/camera_preprocessor.yaml
# (fields preprocess_config, diagnostics_period_s [s], log_throttle_s [s]; the file's rules checked).
CameraPreprocessorConfig = config_class_of(NODE_NAME)


class CameraPreprocessor(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.config = self._read_parameters()
        self.preprocess = PreprocessConfig.from_yaml(self.config.preprocess_config)
        self.front_end = CameraFrontEnd(self.preprocess, on_warning=self._coverage_warning)
        self._counts: Counter[str] = Counter()
        self._drops = DropLedger()
        self._bad_infos_reported = 0
        self._last_log_s: dict[str, float] = {}
        self._process_ms: deque[float] = deque(maxlen=TIMING_HISTORY)
        self._policy_info = msgconv.camera_model_to_info(self.preprocess.policy_camera, 0)

        self._image_pub = self.create_publisher(Image, topics.POLICY_IMAGE.name, RELIABLE_LATEST_QOS)
        self._info_pub = self.create_publisher(CameraInfo, topics.POLICY_CAMERA_INFO.name, RELIABLE_LATEST_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, "~/diagnostics", RELIABLE_LATEST_QOS)
        self.create_subscription(CameraInfo, topics.CAMERA_INFO.name, self._on_camera_info, SENSOR_QOS)
        self.create_subscription(Image, topics.CAMERA_IMAGE.name, self._on_image, SENSOR_QOS)
        self.create_timer(self.config.diagnostics_period_s, self._publish_diagnostics)
        policy = self.preprocess.policy_camera
        self.get_logger().info(
            f"policy camera {policy.width}x{policy.height} fx={policy.fx} fy={policy.fy} cx={policy.cx} "
            f"cy={policy.cy}, config {self.config.preprocess_config} (hash {self.preprocess.content_hash[:12]})"
        )

    def _read_parameters(self) -> CameraPreprocessorConfig:
        """Declare config/parameters/camera_preprocessor.yaml (docs/parameters.md) and validate them."""
        config = declare_config(self, NODE_NAME)
        if not Path(config.preprocess_config).is_file():
            raise ConfigError(config.config_source, "preprocess_config", config.preprocess_config,
                              "file does not exist")
        return config

    # ------------------------------------------------------------------------------------------
    def _on_camera_info(self, msg: CameraInfo) -> None:
        try:
            camera = self.front_end.on_camera_info(msg)
        except msgconv.MessageError as err:
            self._counts["bad_camera_info"] += 1
            self._warn_throttled("bad_camera_info", f"camera_info dropped: {err}")
            return
        if camera is not None and self.front_end.coverage is not None:
            fov = self.front_end.coverage.source_fov_deg
            self.get_logger().info(f"source camera {camera.width}x{camera.height} {camera.distortion_model} "
                                   f"({fov[0]:.1f} x {fov[1]:.1f} deg)")

    def _on_image(self, msg: Image) -> None:
        start = time.perf_counter()
        self._counts["received"] += 1
        try:
            rgb = self.front_end.to_policy_image(msg)
        except ImageRefusedError as refused:
            self._drop(refused.reason, str(refused))
            return
        out = msgconv.array_to_image(rgb, "rgb8", 0, msg.header.frame_id)
        out.header.stamp = msg.header.stamp  # the capture time travels with the observation
        self._policy_info.header = out.header
        self._image_pub.publish(out)
        self._info_pub.publish(self._policy_info)
        self._counts["published"] += 1
        self._process_ms.append((time.perf_counter() - start) * 1e3)

    # ------------------------------------------------------------------------------------------
    def _coverage_warning(self, text: str) -> None:
        self.get_logger().warning(f"POLICY VIEW NOT COVERED: {text}")

    def _drop(self, reason: ImageDropReason, text: str) -> None:
        count = self._drops.add(reason)
        self._warn_throttled(reason.value, f"{text} ({count} dropped for {reason.value} so far)")

    def _warn_throttled(self, reason: str, text: str) -> None:
        now = time.monotonic()
        last = self._last_log_s.get(reason)
        if last is None or now - last >= self.config.log_throttle_s:
            self._last_log_s[reason] = now
            self.get_logger().warning(text)

    def _publish_diagnostics(self) -> None:
        new_drops = self._drops.since_report()
        new_bad_infos = self._counts["bad_camera_info"] - self._bad_infos_reported
        self._bad_infos_reported = self._counts["bad_camera_info"]
        coverage = self.front_end.coverage
        problems = []
        if new_drops:
            problems.append(f"{new_drops} images dropped since last report")
        if new_bad_infos:
            problems.append(f"{new_bad_infos} camera_info messages rejected since last report")
        if coverage is not None and not coverage.covers_policy:
            problems.append(f"source covers only {100 * (1 - coverage.uncovered_fraction):.1f}% of the policy view")
        if self.front_end.camera is None:
            problems.append("no camera_info yet")
        values = {
            "received": self._counts["received"],
            "published": self._counts["published"],
            **self._drops.values(),
            "bad_camera_info": self._counts["bad_camera_info"],
            "preprocess_config_hash": self.preprocess.content_hash,
        }
        if self._process_ms:
            times = np.asarray(self._process_ms)
            values["process_ms_p50"] = f"{np.percentile(times, 50):.3f}"
            values["process_ms_p99"] = f"{np.percentile(times, 99):.3f}"
        values.update(self.front_end.coverage_values())
        self._diag_pub.publish(msgconv.diagnostic_array(
            f"{self.get_name()}: preprocessing", values, now_ns(self), level=Level.WARN if problems else Level.OK,
            message="; ".join(problems) if problems else "ok", hardware_id="camera"))


def main(args: list[str] | None = None) -> None:
    # Every callback is in the node's default (mutually exclusive) group: a thread pool would add
    # dispatch overhead and no parallelism.
    sys.exit(run_node(lambda: CameraPreprocessor(), args, num_threads=1))


if __name__ == "__main__":
    main()
