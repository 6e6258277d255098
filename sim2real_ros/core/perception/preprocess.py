"""Observation matching: any camera image (sim or real) -> the policy camera's rgb8 image.

One remap undistorts the source image (its K and D) and reprojects it into the policy camera's
intrinsics and size; its tables are computed once per source camera model and cached. Color is
converted on the small output where the encoding allows (a 96x96 cvtColor instead of 640x480).
Normalization to floats is the policy model's business, not this one's: the output is uint8 rgb8.

The same ImagePipeline runs in the camera_preprocessor node, in bag replay and in training, so
what the policy saw while training is exactly what it sees on the robot.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from ..errors import Sim2RealError
from .camera_model import CameraModel
from .image_geometry import field_of_view_deg, fold_radius, project_normalized
from .preprocess_config import PreprocessConfig

_LOG = logging.getLogger(__name__)

# Channels of each encoding real drivers publish (the same names as conversions.ENCODING_CHANNELS).
ENCODING_CHANNELS = {
    "rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1,
    "yuv422": 2, "uyvy": 2, "yuv422_yuy2": 2, "yuyv": 2,
}
# Conversion to rgb8 applied after the remap (per-pixel conversions commute with resampling).
_AFTER_REMAP = {"rgb8": None, "bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB,
                "bgra8": cv2.COLOR_BGRA2RGB, "mono8": cv2.COLOR_GRAY2RGB}
# Packed 4:2:2 shares chroma between pixel pairs, so it is converted before the remap. (Resampling
# Y and the pair-shared U, V separately and converting on the output measured no faster: OpenCV's
# 2-channel remap has no fast path, and the full-frame conversion is a single vectorized pass.)
_BEFORE_REMAP = {"yuv422": cv2.COLOR_YUV2RGB_UYVY, "uyvy": cv2.COLOR_YUV2RGB_UYVY,
                 "yuv422_yuy2": cv2.COLOR_YUV2RGB_YUYV, "yuyv": cv2.COLOR_YUV2RGB_YUYV}
_INTERPOLATION = {"nearest": cv2.INTER_NEAREST, "linear": cv2.INTER_LINEAR,
                  "area": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC}
_PLAN_CACHE_SIZE = 4


class ImageError(Sim2RealError, ValueError):
    """An image cannot be processed: unknown encoding, wrong shape/dtype, or a size that does not
    match its camera model. The text says which and gives both sides."""


def to_rgb(image: np.ndarray, encoding: str) -> np.ndarray:
    """(H, W, C) uint8 in `encoding` -> (H, W, 3) uint8 rgb8 (full-resolution color conversion)."""
    encoding = _check_image(image, encoding)
    if encoding in _BEFORE_REMAP:
        return cv2.cvtColor(np.ascontiguousarray(image), _BEFORE_REMAP[encoding])
    code = _AFTER_REMAP[encoding]
    plane = image[:, :, 0] if encoding == "mono8" else image
    return np.array(image, copy=True) if code is None else cv2.cvtColor(plane, code)


def _check_image(image: np.ndarray, encoding: str) -> str:
    encoding = encoding.lower()
    channels = ENCODING_CHANNELS.get(encoding)
    if channels is None:
        raise ImageError(f"unknown image encoding {encoding!r} (known: {sorted(ENCODING_CHANNELS)})")
    if image.dtype != np.uint8:
        raise ImageError(f"image must be uint8, got {image.dtype}")
    if image.ndim == 2 and channels == 1:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] != channels:
        raise ImageError(f"encoding {encoding} needs (H, W, {channels}), got shape {image.shape}")
    if channels == 2 and image.shape[1] % 2:
        raise ImageError(f"{encoding} packs pixel pairs and needs an even width, got {image.shape[1]}")
    return encoding


@dataclass(frozen=True)
class CoverageReport:
    """How much of the policy camera's view a source camera sees.

    source_fov_deg, policy_fov_deg: (horizontal, vertical) field of view [deg] through the
    principal point, the source's distortion and center crop included.
    uncovered_fraction: share of policy pixels the source does not see (filled with fill_rgb).
    """

    source_size: tuple[int, int]
    source_fov_deg: tuple[float, float]
    policy_fov_deg: tuple[float, float]
    uncovered_fraction: float
    uncovered_pixels: int

    @property
    def covers_policy(self) -> bool:
        return self.uncovered_pixels == 0

    def message(self, fill_rgb: tuple[int, int, int]) -> str:
        return (
            f"source camera {self.source_size[0]}x{self.source_size[1]} sees "
            f"{self.source_fov_deg[0]:.1f} x {self.source_fov_deg[1]:.1f} deg but the policy camera needs "
            f"{self.policy_fov_deg[0]:.1f} x {self.policy_fov_deg[1]:.1f} deg: "
            f"{100.0 * self.uncovered_fraction:.1f}% of the policy image ({self.uncovered_pixels} px) is not "
            f"covered and is filled with {tuple(fill_rgb)}, not stretched. The policy will see a border it "
            f"may never have seen in training: use a camera with a wider field of view or retrain."
        )


@dataclass(frozen=True)
class _RemapPlan:
    """Everything computed once per source camera model."""

    map1: np.ndarray
    map2: np.ndarray | None
    uncovered: np.ndarray | None  # (h, w) uint8 mask (1 = fill) of policy pixels, None when fully covered
    fill_image: np.ndarray  # (h, w, 3) uint8 of fill_rgb, copied through `uncovered`
    crop: tuple[int, int, int, int]  # source window x0, y0, x1, y1 [px]
    prescale: int  # integer box-downscale of the window before the remap ("area"), 1 = none
    coverage: CoverageReport


class ImagePipeline:
    """Undistort + reproject + color-convert + crop, in one cached remap.

    config: the preprocessing config (policy camera, center_crop, fill_rgb, interpolation).
    on_warning: called once per source camera model that does not cover the policy camera
      (default: the `logging` module), with the numbers.
    """

    def __init__(self, config: PreprocessConfig, on_warning: Callable[[str], None] | None = None) -> None:
        self.config = config
        self._on_warning = on_warning or _LOG.warning
        self._plans: OrderedDict[CameraModel, _RemapPlan] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def policy_camera(self) -> CameraModel:
        """The camera model of every output image (what policy/camera_info carries)."""
        return self.config.policy_camera

    def coverage(self, source: CameraModel) -> CoverageReport:
        """How much of the policy view `source` covers (computes and caches its remap tables)."""
        return self._plan(source).coverage

    def process(self, image: np.ndarray, encoding: str, source: CameraModel) -> np.ndarray:
        """image (H, W, C) uint8 in `encoding`, taken by `source` (H x W = its size) -> (h, w, 3) uint8
        rgb8 as the policy camera (h x w = its size) sees it. Raises ImageError for bad input."""
        encoding = _check_image(image, encoding)
        if image.shape[:2] != (source.height, source.width):
            raise ImageError(f"image is {image.shape[1]}x{image.shape[0]} but its camera_info says "
                             f"{source.width}x{source.height}")
        plan = self._plan(source)
        x0, y0, x1, y1 = plan.crop
        if encoding in _BEFORE_REMAP:
            # Packed 4:2:2 must be cut at pixel-pair boundaries (the width is even, so this fits).
            xa0, xa1 = x0 - x0 % 2, x1 + (x1 - x0 + x0 % 2) % 2
            rgb = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, xa0:xa1]), _BEFORE_REMAP[encoding])
            window = rgb[:, x0 - xa0: x0 - xa0 + (x1 - x0)]
            after = None
        else:
            window = image[y0:y1, x0:x1, 0] if encoding == "mono8" else image[y0:y1, x0:x1]
            after = _AFTER_REMAP[encoding]
        if plan.prescale > 1:
            f = plan.prescale
            window = cv2.resize(window, ((x1 - x0) // f, (y1 - y0) // f), interpolation=cv2.INTER_AREA)
        out = cv2.remap(window, plan.map1, plan.map2, _INTERPOLATION[self.config.interpolation],
                        borderMode=cv2.BORDER_REPLICATE)
        if after is not None:
            out = cv2.cvtColor(out, after)
        if plan.uncovered is not None:
            # cv2.copyTo with a uint8 mask: several times cheaper than numpy boolean indexing here.
            out = cv2.copyTo(plan.fill_image, plan.uncovered, out)
        return out

    def _plan(self, source: CameraModel) -> _RemapPlan:
        with self._lock:
            plan = self._plans.get(source)
            if plan is not None:
                self._plans.move_to_end(source)
                return plan
        plan = build_plan(self.config, source)
        with self._lock:
            self._plans[source] = plan
            while len(self._plans) > _PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        if not plan.coverage.covers_policy:
            self._on_warning(plan.coverage.message(self.config.fill_rgb))
        return plan


def crop_window(config: PreprocessConfig, source: CameraModel) -> tuple[int, int, int, int]:
    """Source pixels the pipeline may use: the central center_crop (width, height) [px] of the source
    image (clamped to it), or the whole image. Returns x0, y0, x1, y1 (exclusive) [px]."""
    if config.center_crop is None:
        return 0, 0, source.width, source.height
    w = min(config.center_crop[0], source.width)
    h = min(config.center_crop[1], source.height)
    x0, y0 = (source.width - w) // 2, (source.height - h) // 2
    return x0, y0, x0 + w, y0 + h


def source_coordinates(config: PreprocessConfig, source: CameraModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each policy pixel, the source pixel [px] that sees the same ray, and whether the source
    sees it at all (inside the crop window, and inside the distortion model's valid range).
    Returns map_x, map_y (h, w) float64 in full source image coordinates, covered (h, w) bool."""
    policy = config.policy_camera
    v, u = np.mgrid[0: policy.height, 0: policy.width].astype(float)
    x = (u - policy.cx) / policy.fx
    y = (v - policy.cy) / policy.fy
    map_x, map_y = project_normalized(source, x, y)
    x0, y0, x1, y1 = crop_window(config, source)
    covered = np.hypot(x, y) <= fold_radius(source)
    covered &= (map_x >= x0 - 0.5) & (map_x <= x1 - 0.5) & (map_y >= y0 - 0.5) & (map_y <= y1 - 0.5)
    return map_x, map_y, covered


def build_plan(config: PreprocessConfig, source: CameraModel) -> _RemapPlan:
    """Compute the remap tables, the uncovered mask and the coverage report for one source camera."""
    policy = config.policy_camera
    map_x, map_y, covered = source_coordinates(config, source)
    x0, y0, x1, y1 = crop_window(config, source)
    prescale = 1
    if config.interpolation == "area":
        prescale = _area_prescale(map_x, map_y, covered)
    # Tables are relative to the (prescaled) crop window the remap reads.
    # The exact box-downscale ratio (window sizes need not divide by the factor).
    scale_x = ((x1 - x0) // prescale) / (x1 - x0)
    scale_y = ((y1 - y0) // prescale) / (y1 - y0)
    local_x = (map_x - x0 + 0.5) * scale_x - 0.5
    local_y = (map_y - y0 + 0.5) * scale_y - 0.5
    # Points outside are filled afterwards; keep their table entries finite and in range.
    local_x = np.where(covered, local_x, 0.0).astype(np.float32)
    local_y = np.where(covered, local_y, 0.0).astype(np.float32)
    nearest = config.interpolation == "nearest"
    map1, map2 = cv2.convertMaps(local_x, local_y, cv2.CV_16SC2, nninterpolation=nearest)
    uncovered_count = int(np.count_nonzero(~covered))
    coverage = CoverageReport(
        source_size=(source.width, source.height),
        source_fov_deg=field_of_view_deg(source, (x0 - 0.5, y0 - 0.5, x1 - 0.5, y1 - 0.5)),
        policy_fov_deg=field_of_view_deg(policy),
        uncovered_fraction=uncovered_count / covered.size,
        uncovered_pixels=uncovered_count,
    )
    return _RemapPlan(
        map1=map1, map2=map2 if map2 is not None and map2.size else None,
        uncovered=(~covered).astype(np.uint8) if uncovered_count else None,
        fill_image=np.full((policy.height, policy.width, 3), config.fill_rgb, dtype=np.uint8),
        crop=(x0, y0, x1, y1), prescale=prescale, coverage=coverage,
    )


def _area_prescale(map_x: np.ndarray, map_y: np.ndarray, covered: np.ndarray) -> int:
    """Integer box-downscale factor so the remap samples about one source pixel per policy pixel
    (anti-aliasing: a 640 px image point-sampled to 96 px aliases, differently in sim and real)."""
    steps = []
    if map_x.shape[1] > 1:
        steps.append(np.abs(np.diff(map_x, axis=1))[covered[:, 1:] & covered[:, :-1]])
    if map_y.shape[0] > 1:
        steps.append(np.abs(np.diff(map_y, axis=0))[covered[1:, :] & covered[:-1, :]])
    values = np.concatenate(steps) if steps else np.array([])
    if values.size == 0:
        return 1
    return max(1, int(np.floor(float(np.median(values)))))
