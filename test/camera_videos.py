"""Video files for the camera node tests, written with PyAV: lossless (FFV1 in Matroska, BGR), frame
k a uniform image of level k mod 256, so a received image says which frame it is."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import yaml

from sim2real_ros.core.perception.camera_model import CameraModel, calibration_dict


def write_video(path: Path, frames: int, width: int, height: int, fps: int) -> Path:
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "bgr0"
        for k in range(frames):
            image = np.full((height, width, 3), frame_level(k), np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def frame_level(k: int) -> int:
    return k % 256


def write_calibration(path: Path, width: int, height: int) -> Path:
    model = CameraModel(width, height, 0.7 * width, 0.7 * width, width / 2 - 0.5, height / 2 + 0.5, "plumb_bob",
                        (-0.1, 0.02, 0.0, 0.0, 0.0))
    path.write_text(yaml.safe_dump(calibration_dict(model, "test_camera")))
    return path
