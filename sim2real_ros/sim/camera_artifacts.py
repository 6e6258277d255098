"""Sim camera artifacts: make an ideal pinhole render look like the real camera's image.

PyBullet renders an ideal pinhole image with the real camera's K. A real camera adds lens
distortion (D), motion blur, sensor noise and JPEG compression; a policy trained without them sees
a different distribution on the robot. These artifacts are also domain randomization knobs: the sim
draws noise_std, blur and JPEG quality per episode.

Order of application follows the physics of image formation: lens (distortion), exposure (motion
blur), sensor (noise), then the driver's compression (JPEG).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields
from typing import Any

import cv2
import numpy as np

from ..core.errors import ConfigError
from ..core.perception.camera_model import CameraModel
from ..core.perception.image_geometry import undistort_pixels

_MAP_CACHE_SIZE = 8


@dataclass(frozen=True)
class ArtifactConfig:
    """What the sim camera adds to the ideal render.

    distortion: apply the camera model's lens distortion (D) to the ideal pinhole render.
    noise_std: Gaussian noise standard deviation [0-255 intensity units], 0 = off.
    motion_blur_px: motion blur kernel length [px] (direction drawn from the rng), 0 = off.
    jpeg_quality: JPEG re-compression quality 1..100, 0 = off.
    """

    distortion: bool = True
    noise_std: float = 0.0
    motion_blur_px: float = 0.0
    jpeg_quality: int = 0

    def __post_init__(self) -> None:
        if not np.isfinite(self.noise_std) or self.noise_std < 0.0:
            raise ConfigError("ArtifactConfig", "noise_std", self.noise_std, "must be a finite number >= 0")
        if not np.isfinite(self.motion_blur_px) or self.motion_blur_px < 0.0:
            raise ConfigError("ArtifactConfig", "motion_blur_px", self.motion_blur_px, "must be a finite number >= 0")
        if not 0 <= self.jpeg_quality <= 100:
            raise ConfigError("ArtifactConfig", "jpeg_quality", self.jpeg_quality, "must be 0 (off) or 1..100")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, source: str) -> ArtifactConfig:
        """Build from a mapping (e.g. a YAML section); ConfigError names source, field and value."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(source, "<artifacts>", data, "expected a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(source, unknown[0], data[unknown[0]], f"unknown field (known: {sorted(known)})")
        values: dict[str, Any] = {}
        for name, kind in (("distortion", bool), ("noise_std", float), ("motion_blur_px", float),
                           ("jpeg_quality", int)):
            if name not in data:
                continue
            raw = data[name]
            # Only real YAML types: bool("false") is True and int(True) is 1, so no coercion.
            if kind is bool:
                if not isinstance(raw, bool):
                    raise ConfigError(source, name, raw, "must be true or false")
                values[name] = raw
                continue
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise ConfigError(source, name, raw, f"must be a number ({kind.__name__})")
            if kind is int and not float(raw).is_integer():
                raise ConfigError(source, name, raw, "must be an integer")
            values[name] = kind(raw)
        try:
            return cls(**values)
        except ConfigError as err:
            raise ConfigError(source, err.field, err.value, err.problem) from err

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _DistortionMapCache:
    """Remap tables per camera model, computed once (the sim calls apply_artifacts at 30 Hz)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._maps: OrderedDict[CameraModel, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, camera: CameraModel) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if camera in self._maps:
                self._maps.move_to_end(camera)
                return self._maps[camera]
        maps = _distortion_maps(camera)
        with self._lock:
            self._maps[camera] = maps
            while len(self._maps) > self._size:
                self._maps.popitem(last=False)
        return maps


def _distortion_maps(camera: CameraModel) -> tuple[np.ndarray, np.ndarray]:
    """For each pixel of the real (distorted) image, where the ideal pinhole render saw its ray.

    Pixels no ray reaches (beyond a polynomial model's fold) point far outside: they come out black.
    Returns fixed-point maps (cv2.convertMaps CV_16SC2 + interpolation table) for a fast remap.
    """
    v, u = np.mgrid[0: camera.height, 0: camera.width].astype(float)
    x, y, valid = undistort_pixels(camera, u, v)
    map_x = np.where(valid, camera.fx * x + camera.cx, -1e4).astype(np.float32)
    map_y = np.where(valid, camera.fy * y + camera.cy, -1e4).astype(np.float32)
    return cv2.convertMaps(map_x, map_y, cv2.CV_16SC2)


_DISTORTION_MAPS = _DistortionMapCache(_MAP_CACHE_SIZE)


def distortion_maps(camera: CameraModel) -> tuple[np.ndarray, np.ndarray]:
    """Cached fixed-point remap tables that turn an ideal render with camera.K into the distorted image."""
    return _DISTORTION_MAPS.get(camera)


def motion_blur_kernel(length_px: float, angle_rad: float) -> np.ndarray:
    """Normalized line kernel of `length_px` [px] at `angle_rad`, with fractional ends (so blur
    grows continuously with length, which matters when it is randomized)."""
    half = length_px / 2.0
    radius = int(np.ceil(half)) + 1
    size = 2 * radius + 1
    # Sample the segment densely and splat bilinearly into the kernel.
    samples = max(8, int(np.ceil(length_px * 8)))
    t = np.linspace(-half, half, samples)
    xs = radius + t * np.cos(angle_rad)
    ys = radius + t * np.sin(angle_rad)
    kernel = np.zeros((size, size), dtype=np.float64)
    x0, y0 = np.floor(xs).astype(int), np.floor(ys).astype(int)
    fx, fy = xs - x0, ys - y0
    for dx, dy, w in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)), (0, 1, (1 - fx) * fy), (1, 1, fx * fy)):
        np.add.at(kernel, (y0 + dy, x0 + dx), w)
    return (kernel / kernel.sum()).astype(np.float32)


def apply_artifacts(image_rgb: np.ndarray, camera: CameraModel, config: ArtifactConfig,
                    rng: np.random.Generator) -> np.ndarray:
    """What the real camera with camera.K and camera.D would deliver for an ideal render.

    image_rgb: (H, W, 3) uint8 rendered by an ideal pinhole with camera.K, H x W = camera size.
    Returns a new (H, W, 3) uint8 array. rng drives noise and the blur direction (reproducible per
    episode seed).
    """
    if image_rgb.dtype != np.uint8 or image_rgb.ndim != 3 or image_rgb.shape[2] != 3:
        raise ValueError(f"image_rgb must be (H, W, 3) uint8, got {image_rgb.shape} {image_rgb.dtype}")
    if image_rgb.shape[:2] != (camera.height, camera.width):
        raise ValueError(f"image is {image_rgb.shape[1]}x{image_rgb.shape[0]} but the camera model is "
                         f"{camera.width}x{camera.height}")
    out = image_rgb
    if config.distortion and camera.has_distortion:
        map1, map2 = distortion_maps(camera)
        out = cv2.remap(out, map1, map2, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
    if config.motion_blur_px > 0.0:
        kernel = motion_blur_kernel(config.motion_blur_px, float(rng.uniform(0.0, np.pi)))
        out = cv2.filter2D(out, -1, kernel, borderType=cv2.BORDER_REFLECT)
    if config.noise_std > 0.0:
        noisy = rng.standard_normal(size=out.shape, dtype=np.float32)
        noisy *= np.float32(config.noise_std)
        noisy += out
        out = np.clip(np.rint(noisy, out=noisy), 0.0, 255.0, out=noisy).astype(np.uint8)
    if config.jpeg_quality > 0:
        bgr = cv2.cvtColor(out, cv2.COLOR_RGB2BGR)
        ok, encoded = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(config.jpeg_quality)])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        out = cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return out if out is not image_rgb else image_rgb.copy()
