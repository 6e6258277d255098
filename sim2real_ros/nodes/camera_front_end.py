"""A source camera's messages -> the policy camera's image: the work of camera_preprocessor, shared
with policy_node when it preprocesses in its own process (`image_input: camera`).

The ROS side of core.perception.preprocess.ImagePipeline: camera_info messages become the source
camera model (parsed once per distinct camera_info: drivers repeat it with every frame), image
messages are decoded and checked against it, then remapped to the policy camera. Every refusal is an
ImageRefusedError naming its ImageDropReason, so each node counts it under the same diagnostics key.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sensor_msgs.msg import CameraInfo, Image

from .. import conversions as msgconv
from ..core.perception.camera_model import CameraModel
from ..core.perception.image_drops import ImageDropReason, classify_image_layout
from ..core.perception.preprocess import CoverageReport, ImageError, ImagePipeline
from ..core.perception.preprocess_config import PreprocessConfig


class ImageRefusedError(ValueError):
    """An image the front end cannot turn into a policy image: `reason` is its diagnostics key."""

    def __init__(self, reason: ImageDropReason, text: str) -> None:
        super().__init__(text)
        self.reason = reason


class CameraFrontEnd:
    """Source camera_info + image messages -> policy images (rgb8 arrays, policy resolution)."""

    def __init__(self, preprocess: PreprocessConfig, on_warning: Callable[[str], None] | None = None) -> None:
        self.preprocess = preprocess
        self.pipeline = ImagePipeline(preprocess, on_warning=on_warning)
        self.camera: CameraModel | None = None
        self.coverage: CoverageReport | None = None
        self._last_info: tuple | None = None  # the raw fields `camera` was built from

    def on_camera_info(self, msg: CameraInfo) -> CameraModel | None:
        """Take a camera_info: the new source camera when it changed (its remap tables built now,
        not on the first image), None when it repeats the current one. Raises
        conversions.MessageError for one that cannot describe a camera (the current one stays)."""
        key = (msg.width, msg.height, msg.distortion_model, tuple(msg.k), tuple(msg.d))
        if key == self._last_info:
            return None
        camera = msgconv.camera_info_to_model(msg)
        self.camera, self._last_info = camera, key
        self.coverage = self.pipeline.coverage(camera)
        return camera

    def to_policy_image(self, msg: Image) -> np.ndarray:
        """The policy camera's rgb8 image [H, W, 3] of an image message from the source camera;
        raises ImageRefusedError (no camera_info yet, malformed, size other than the camera_info's,
        refused by the pipeline)."""
        camera = self.camera
        if camera is None:
            raise ImageRefusedError(ImageDropReason.NO_CAMERA_INFO,
                               "image dropped: no valid camera_info received yet on camera/camera_info")
        try:
            array = msgconv.image_to_array(msg)
        except msgconv.MessageError as err:
            channels = msgconv.ENCODING_CHANNELS.get(msg.encoding.lower())
            reason = classify_image_layout(channels, msg.width, msg.height, msg.step, len(msg.data))
            raise ImageRefusedError(reason or ImageDropReason.BAD_IMAGE, f"image dropped: {err}") from None
        if (msg.width, msg.height) != (camera.width, camera.height):
            raise ImageRefusedError(ImageDropReason.SIZE_MISMATCH, f"image dropped: it is {msg.width}x{msg.height} but "
                                                              f"camera_info says {camera.width}x{camera.height}")
        try:
            return self.pipeline.process(array, msg.encoding, camera)
        except ImageError as err:
            raise ImageRefusedError(ImageDropReason.BAD_IMAGE, f"image dropped: {err}") from None

    def coverage_values(self) -> dict[str, str]:
        """The source camera and how much of the policy view it covers (diagnostics values; empty
        before the first camera_info)."""
        camera, coverage = self.camera, self.coverage
        if camera is None or coverage is None:
            return {}
        return {
            "source_camera": f"{camera.width}x{camera.height} {camera.distortion_model}",
            "source_fov_deg": f"{coverage.source_fov_deg[0]:.2f} x {coverage.source_fov_deg[1]:.2f}",
            "policy_fov_deg": f"{coverage.policy_fov_deg[0]:.2f} x {coverage.policy_fov_deg[1]:.2f}",
            "uncovered_fraction": f"{coverage.uncovered_fraction:.4f}",
        }
