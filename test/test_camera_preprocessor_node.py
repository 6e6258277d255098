"""camera_preprocessor over real DDS, the node running as a process (support.running_nodes)."""
from __future__ import annotations

import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image
from support import node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.perception.camera_model import CameraModel
from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.paths import config_path

BEST_EFFORT = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
RELIABLE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)
CAMERA = CameraModel(160, 120, 110.0, 111.0, 81.0, 58.5, "plumb_bob", (-0.2, 0.05, 0.001, 0.0, 0.0))
NODE = "camera_preprocessor"
TIMEOUT_S = 30.0


def decl(**overrides):
    params = {"diagnostics_period_s": 0.2, "log_throttle_s": 0.0, **overrides}
    return node_decl(NODE, params)


def make_image(stamp_ns: int, encoding: str = "bgr8", camera: CameraModel = CAMERA) -> tuple[Image, np.ndarray]:
    rng = np.random.default_rng(stamp_ns % 1000)
    channels = cv.ENCODING_CHANNELS[encoding]
    array = rng.integers(0, 256, (camera.height, camera.width, channels), dtype=np.uint8)
    return cv.array_to_image(array, encoding, stamp_ns, "camera_optical_frame"), array


def publish_until(publishers_msgs, predicate, timeout_s: float = TIMEOUT_S, period_s: float = 0.25) -> None:
    """Publish (publisher, message) pairs, again every period_s, until predicate() holds: best effort
    delivery may lose a message, so a single publish-then-wait could hang on a lost sample."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for publisher, msg in publishers_msgs:
            publisher.publish(msg)
        if wait_until(predicate, period_s):
            return
    raise AssertionError(f"condition not met within {timeout_s} s")


def diagnostics(received: list) -> dict[str, str]:
    if not received:
        return {}
    return cv.diagnostic_values(received[-1])


def counter(received: list, key: str) -> int:
    return int(diagnostics(received).get(key, "0"))


def test_best_effort_and_reliable_drivers_get_through_with_stamps(ros, tmp_path):
    images = ros.collect(Image, "policy/image", RELIABLE)
    infos = ros.collect(CameraInfo, "policy/camera_info", RELIABLE)
    pipeline = ImagePipeline(PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    with running_nodes([decl()], tmp_path) as launcher:
        for qos_name, qos in (("best_effort", BEST_EFFORT), ("reliable", RELIABLE)):
            image_pub = ros.publisher(Image, "camera/image_raw", qos)
            info_pub = ros.publisher(CameraInfo, "camera/camera_info", qos)
            ros.wait_for_subscribers(image_pub, timeout_s=TIMEOUT_S)
            ros.wait_for_subscribers(info_pub, timeout_s=TIMEOUT_S)
            stamp = 1_700_000_000_123_456_789 if qos_name == "best_effort" else 1_700_000_001_987_654_321
            msg, array = make_image(stamp)
            info = cv.camera_model_to_info(CAMERA, stamp, "camera_optical_frame")
            publish_until([(info_pub, info), (image_pub, msg)],
                          lambda s=stamp: any(cv.stamp_to_ns(m.header.stamp) == s for m in images))
            out = next(m for m in images if cv.stamp_to_ns(m.header.stamp) == stamp)
            assert (out.encoding, out.width, out.height, out.step) == ("rgb8", 96, 96, 288), qos_name
            assert out.header.frame_id == "camera_optical_frame"
            # Exactly what the offline pipeline (bag replay, training) produces for the same frame.
            expected = pipeline.process(array, "bgr8", CAMERA)
            assert np.array_equal(cv.image_to_array(out), expected), qos_name
            assert wait_until(lambda s=stamp: any(cv.stamp_to_ns(m.header.stamp) == s for m in infos), TIMEOUT_S)
            policy_info = next(m for m in infos if cv.stamp_to_ns(m.header.stamp) == stamp)
            assert cv.camera_info_to_model(policy_info) == CameraModel(
                96, 96, 96.0, 96.0, 48.0, 48.0, "plumb_bob", (0.0,) * 5)
            ros.node.destroy_publisher(image_pub)
            ros.node.destroy_publisher(info_pub)
        assert launcher.check() == []


def test_bad_inputs_are_counted_dropped_and_the_node_keeps_working(ros, tmp_path):
    diag = ros.collect(DiagnosticArray, f"{NODE}/diagnostics", RELIABLE)
    images = ros.collect(Image, "policy/image", RELIABLE)
    image_pub = ros.publisher(Image, "camera/image_raw", RELIABLE)
    info_pub = ros.publisher(CameraInfo, "camera/camera_info", RELIABLE)
    with running_nodes([decl()], tmp_path) as launcher:
        ros.wait_for_subscribers(image_pub, timeout_s=TIMEOUT_S)
        ros.wait_for_subscribers(info_pub, timeout_s=TIMEOUT_S)
        assert wait_until(lambda: bool(diag), TIMEOUT_S), "no diagnostics"
        assert diag[-1].status[0].level == diag[-1].status[0].WARN  # no camera_info yet

        good, _ = make_image(1)
        publish_until([(image_pub, good)], lambda: counter(diag, "dropped_no_camera_info") >= 1)
        info = cv.camera_model_to_info(CAMERA, 2)
        publish_until([(info_pub, info)], lambda: "source_camera" in diagnostics(diag))
        assert diagnostics(diag)["source_camera"] == "160x120 plumb_bob"

        unknown, _ = make_image(3)
        unknown.encoding = "16UC1"
        publish_until([(image_pub, unknown)], lambda: counter(diag, "dropped_unknown_encoding") >= 1)

        short_step, _ = make_image(4)
        short_step.step = 160 * 3 - 1
        short_step.data = bytes(short_step.step * 120)
        publish_until([(image_pub, short_step)], lambda: counter(diag, "dropped_bad_step") >= 1)

        truncated, _ = make_image(5)
        truncated.data = truncated.data[:-7]
        publish_until([(image_pub, truncated)], lambda: counter(diag, "dropped_bad_data_size") >= 1)

        big, _ = make_image(6, camera=CameraModel(320, 240, 220.0, 220.0, 160.0, 120.0, "none", ()))
        publish_until([(image_pub, big)], lambda: counter(diag, "dropped_size_mismatch") >= 1)

        uncalibrated = cv.camera_model_to_info(CAMERA, 7)
        uncalibrated.k = [0.0] * 9
        publish_until([(info_pub, uncalibrated)], lambda: counter(diag, "bad_camera_info") >= 1)

        assert counter(diag, "published") == 0
        assert launcher.check() == [], "node died on bad input"

        # Still alive and still processing good images (with the last valid camera_info).
        stamp = 42_000_000_007
        good, array = make_image(stamp, "rgba8")
        publish_until([(image_pub, good)], lambda: any(cv.stamp_to_ns(m.header.stamp) == stamp for m in images))
        assert wait_until(lambda: counter(diag, "published") >= 1, TIMEOUT_S)
        values = diagnostics(diag)
        assert int(values["dropped"]) == sum(int(v) for k, v in values.items() if k.startswith("dropped_"))
        assert int(values["received"]) >= int(values["dropped"]) + int(values["published"])
        assert launcher.check() == []
    log = (tmp_path / "graph.log").read_text()
    assert "unknown image encoding '16UC1'" in log
    assert "it is 320x240 but camera_info says 160x120" in log


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        ({"preprocess_config": "MISSING"}, ("preprocess_config", "MISSING", "does not exist")),
        ({"diagnostics_period_s": -1.0}, ("diagnostics_period_s", "-1.0", "must be a finite number in [0.01, 3600.0]")),
        ({"diagnostics_period_s": 1}, ("diagnostics_period_s", "must be a float")),
    ],
    ids=["missing_config", "negative_period", "int_for_float"],
)
def test_bad_parameters_stop_the_node_with_a_message(tmp_path, overrides, needles):
    overrides = {k: (str(tmp_path / "nope.yaml") if v == "MISSING" else v) for k, v in overrides.items()}
    needles = [str(tmp_path / "nope.yaml") if n == "MISSING" else n for n in needles]
    with running_nodes([decl(**overrides)], tmp_path) as launcher:
        assert wait_until(lambda: launcher.check() != [], TIMEOUT_S), "node kept running with a bad parameter"
        assert launcher.check() == [(NODE, 2)]
    log = (tmp_path / "graph.log").read_text()
    for needle in needles:
        assert needle in log, log
