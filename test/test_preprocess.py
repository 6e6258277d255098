"""Observation matching geometry and color: core/preprocess.py and core/image_geometry.py.

Source images are rendered through OpenCV's own (independent) distortion code, so the pipeline's
distortion math is checked against a second implementation, not against itself.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from sim2real_ros.core.perception.camera_model import CameraModel
from sim2real_ros.core.perception.image_geometry import (
    field_of_view_deg,
    fold_radius,
    project_normalized,
    undistort_pixels,
)
from sim2real_ros.core.perception.preprocess import ImageError, ImagePipeline, crop_window, to_rgb
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.paths import config_path

PLUMB_BOB = CameraModel(640, 480, 500.0, 505.0, 331.0, 236.0, "plumb_bob", (-0.28, 0.09, 0.0012, -0.0009, -0.012))
RATIONAL = CameraModel(640, 480, 500.0, 500.0, 318.0, 242.0, "rational_polynomial",
                       (-0.3, 0.1, 0.001, 0.0005, -0.01, 0.02, 0.01, 0.001))
FISHEYE = CameraModel(640, 480, 300.0, 300.0, 322.0, 238.0, "equidistant", (0.05, -0.02, 0.004, -0.001))
HD_WIDE = CameraModel(1280, 720, 700.0, 700.0, 645.0, 352.0, "plumb_bob", (-0.12, 0.03, 0.0, 0.0, 0.0))


def policy_config(width=96, height=96, f=96.0, **kwargs) -> PreprocessConfig:
    camera = CameraModel(width, height, f, f, (width - 1) / 2 + 0.3, (height - 1) / 2 - 0.2, "none", ())
    return PreprocessConfig(policy_camera=camera, **kwargs)


def opencv_rays(camera: CameraModel, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ideal normalized rays of pixels (u, v), by OpenCV's iterative undistortion (independent code)."""
    pts = np.stack([u.ravel(), v.ravel()], axis=1).reshape(-1, 1, 2).astype(np.float64)
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-12)
    if camera.distortion_model == "equidistant":
        out = cv2.fisheye.undistortPoints(pts, camera.K, camera.D, criteria=criteria)
    else:
        out = cv2.undistortPoints(pts, camera.K, camera.D, criteria=criteria)
    return out[:, 0, 0].reshape(u.shape), out[:, 0, 1].reshape(u.shape)


def render(camera: CameraModel, shade, supersample: int = 3) -> np.ndarray:
    """Render a (H, W) uint8 image: shade(x, y) in [0, 1] of each ideal ray, box-supersampled."""
    offsets = (np.arange(supersample) + 0.5) / supersample - 0.5
    v, u = np.mgrid[0: camera.height, 0: camera.width].astype(float)
    acc = np.zeros(u.shape)
    for dy in offsets:
        for dx in offsets:
            x, y = opencv_rays(camera, u + dx, v + dy)
            acc += shade(x, y)
    return np.clip(np.rint(255.0 * acc / supersample**2), 0, 255).astype(np.uint8)


def checker(square: float, depth: float):
    """A fronto-parallel checkerboard at `depth` [m] with `square` [m] squares, offset so that a
    corner does not sit on the optical axis."""
    def shade(x, y):
        return ((np.floor(x * depth / square + 0.37) + np.floor(y * depth / square + 0.21)) % 2).astype(float)
    return shade


# ----------------------------------------------------------------------------------------------
# Distortion math against OpenCV
@pytest.mark.parametrize("camera", [PLUMB_BOB, RATIONAL, FISHEYE, HD_WIDE], ids=lambda c: c.distortion_model)
def test_forward_distortion_matches_opencv_projection(camera):
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-0.6, 0.6, 200), rng.uniform(-0.45, 0.45, 200)
    u, v = project_normalized(camera, x, y)
    points = np.stack([x, y, np.ones_like(x)], axis=1).reshape(-1, 1, 3)
    if camera.distortion_model == "equidistant":
        ref, _ = cv2.fisheye.projectPoints(points, np.zeros(3), np.zeros(3), camera.K, camera.D)
    else:
        ref, _ = cv2.projectPoints(points, np.zeros(3), np.zeros(3), camera.K, camera.D)
    assert np.max(np.abs(u - ref[:, 0, 0])) < 1e-6
    assert np.max(np.abs(v - ref[:, 0, 1])) < 1e-6


@pytest.mark.parametrize("camera", [PLUMB_BOB, RATIONAL, FISHEYE], ids=lambda c: c.distortion_model)
def test_undistort_inverts_distortion_over_the_whole_image(camera):
    v, u = np.mgrid[0: camera.height: 7, 0: camera.width: 7].astype(float)
    x, y, valid = undistort_pixels(camera, u, v)
    assert valid.all()
    u2, v2 = project_normalized(camera, x, y)
    assert np.max(np.hypot(u2 - u, v2 - v)) < 1e-5


def test_fold_of_strong_barrel_distortion_is_found():
    camera = CameraModel(640, 480, 300.0, 300.0, 320.0, 240.0, "plumb_bob", (-0.4, 0.0, 0.0, 0.0, 0.0))
    # r_d = r - 0.4 r^3 stops increasing at r = 1 / sqrt(1.2)
    assert fold_radius(camera) == pytest.approx(1 / np.sqrt(1.2), abs=1e-3)
    assert fold_radius(PLUMB_BOB) > 1.0
    h, _ = field_of_view_deg(camera)
    assert h == pytest.approx(2 * np.degrees(np.arctan(1 / np.sqrt(1.2))), abs=0.1)


# ----------------------------------------------------------------------------------------------
# Geometry of the pipeline
@pytest.mark.parametrize("camera", [PLUMB_BOB, FISHEYE], ids=lambda c: c.distortion_model)
def test_checkerboard_comes_out_with_straight_lines_at_the_policy_projection(camera):
    depth, square = 1.0, 0.08
    source_image = render(camera, checker(square, depth))
    config = policy_config(width=200, height=160, f=170.0)
    pipeline = ImagePipeline(config)
    out = pipeline.process(source_image[:, :, None], "mono8", camera)
    assert out.shape == (160, 200, 3)
    assert pipeline.coverage(camera).covers_policy

    # Ground truth: the board's corners projected by the policy intrinsics.
    policy = config.policy_camera
    i = np.arange(-8, 9)
    gx = (i[None, :] - 0.37) * square / depth
    gy = (i[:, None] - 0.21) * square / depth
    gx, gy = np.broadcast_arrays(gx, gy)
    expected = np.stack([policy.fx * gx + policy.cx, policy.fy * gy + policy.cy], axis=-1)
    inside = ((expected[..., 0] > 6) & (expected[..., 0] < policy.width - 7)
              & (expected[..., 1] > 6) & (expected[..., 1] < policy.height - 7))
    rows_cols = inside.any(axis=1).sum(), inside.any(axis=0).sum()
    assert rows_cols[0] >= 5 and rows_cols[1] >= 6

    # Had the pipeline ignored the distortion, the corners would be far off (the test can fail).
    dx, dy = project_normalized(camera, gx[inside], gy[inside])
    sx = policy.fx * (dx - camera.cx) / camera.fx + policy.cx
    sy = policy.fy * (dy - camera.cy) / camera.fy + policy.cy
    assert np.max(np.hypot(sx - expected[inside][:, 0], sy - expected[inside][:, 1])) > 2.0

    gray = cv2.cvtColor(out, cv2.COLOR_RGB2GRAY)
    found = cv2.cornerSubPix(gray, expected[inside].astype(np.float32).reshape(-1, 1, 2).copy(), (4, 4), (-1, -1),
                             (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 100, 1e-4))[:, 0, :]
    error = np.hypot(*(found - expected[inside]).T)
    assert error.max() <= 0.5, f"corner error max {error.max():.3f} px"

    # Straightness: each row and column of corners lies on a line (total least squares).
    grid = np.full(expected.shape, np.nan)
    grid[inside] = found
    deviations = []
    for line in [*grid, *grid.transpose(1, 0, 2)]:
        pts = line[~np.isnan(line[:, 0])]
        if len(pts) < 4:
            continue
        centered = pts - pts.mean(axis=0)
        normal = np.linalg.svd(centered)[2][1]
        deviations.append(np.max(np.abs(centered @ normal)))
    assert len(deviations) >= 10
    assert max(deviations) <= 0.5, f"line deviation max {max(deviations):.3f} px"


def blob(points_xy: np.ndarray, sigma: float):
    """Gaussian spots of width sigma (normalized units) around the rays of points_xy."""
    def shade(x, y):
        value = np.zeros(x.shape)
        for px, py in points_xy:
            value += np.exp(-((x - px) ** 2 + (y - py) ** 2) / (2 * sigma**2))
        return np.clip(value, 0.0, 1.0)
    return shade


def centroid(gray: np.ndarray, center: np.ndarray, radius: int) -> np.ndarray:
    x0, y0 = int(round(center[0])) - radius, int(round(center[1])) - radius
    patch = gray[y0: y0 + 2 * radius + 1, x0: x0 + 2 * radius + 1].astype(float)
    ys, xs = np.mgrid[0: patch.shape[0], 0: patch.shape[1]]
    return np.array([(xs * patch).sum() / patch.sum() + x0, (ys * patch).sum() / patch.sum() + y0])


@pytest.mark.parametrize("interpolation", ["linear", "area", "cubic"])
def test_3d_points_from_an_hd_camera_land_where_the_policy_intrinsics_project_them(interpolation):
    # 1280x720 source with a different field of view, principal point and distortion.
    config = policy_config(interpolation=interpolation)
    policy = config.policy_camera
    points = np.array([[0.1, 0.05, 1.0], [-0.2, 0.15, 1.2], [0.25, -0.2, 0.9], [-0.05, -0.1, 0.8]])
    xy = points[:, :2] / points[:, 2:]
    image = render(HD_WIDE, blob(xy, sigma=1.6 / policy.fx), supersample=1)
    out = ImagePipeline(config).process(np.repeat(image[:, :, None], 3, axis=2), "rgb8", HD_WIDE)
    assert out.shape == (96, 96, 3)
    gray = out[:, :, 1]
    for x, y in xy:
        expected = np.array([policy.fx * x + policy.cx, policy.fy * y + policy.cy])
        got = centroid(gray, expected, radius=6)
        assert np.hypot(*(got - expected)) <= 0.5, f"point {x, y}: {got} vs {expected}"


def test_source_with_smaller_field_of_view_warns_once_with_numbers_and_fills_the_border():
    narrow = CameraModel(320, 240, 400.0, 400.0, 159.5, 119.5, "plumb_bob", (0.0,) * 5)
    fill = (10, 200, 30)
    config = PreprocessConfig(policy_camera=CameraModel(96, 96, 96.0, 96.0, 47.5, 47.5, "none", ()), fill_rgb=fill)
    warnings: list[str] = []
    pipeline = ImagePipeline(config, on_warning=warnings.append)
    white = np.full((240, 320, 3), 255, np.uint8)
    out = pipeline.process(white, "rgb8", narrow)
    pipeline.process(white, "bgr8", narrow)
    assert len(warnings) == 1
    text = warnings[0]
    # Source FOV 2*atan(160/400) = 43.6 deg x 2*atan(120/400) = 33.4 deg; policy 2*atan(48/96) = 53.1 deg.
    for number in ("43.6", "33.4", "53.1", "320x240"):
        assert number in text, text
    # Covered: |u - 47.5| <= 160 * 96 / 400 = 38.4 px, |v - 47.5| <= 28.8 px.
    u = np.arange(96)
    cols = np.abs(u - 47.5) <= 38.4
    rows = np.abs(u - 47.5) <= 28.8
    covered = rows[:, None] & cols[None, :]
    assert np.all(out[covered] == 255)
    assert np.all(out[~covered] == fill)
    report = pipeline.coverage(narrow)
    assert report.uncovered_fraction == pytest.approx(1 - covered.mean(), abs=1e-9)
    assert f"{100 * report.uncovered_fraction:.1f}%" in text


def test_center_crop_limits_the_source_region_and_fills_outside():
    source = CameraModel(640, 480, 200.0, 200.0, 319.5, 239.5, "none", ())
    config = PreprocessConfig(policy_camera=CameraModel(96, 96, 96.0, 96.0, 47.5, 47.5, "none", ()),
                              center_crop=(200, 100), fill_rgb=(1, 2, 3))
    assert crop_window(config, source) == (220, 190, 420, 290)
    image = np.zeros((480, 640, 3), np.uint8)
    image[190:290, 220:420] = 200
    warnings: list[str] = []
    out = ImagePipeline(config, on_warning=warnings.append).process(image, "rgb8", source)
    # Crop half-widths 100 px, 50 px at f=200 -> 48 px, 24 px at f=96: the whole policy width, half its height.
    assert np.all(out[24:72, :] == 200)
    assert np.all(out[:23] == (1, 2, 3)) and np.all(out[73:] == (1, 2, 3))
    assert len(warnings) == 1 and "53.1 x 28.1 deg" in warnings[0]


# ----------------------------------------------------------------------------------------------
# Color
def uyvy_from_yuv(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Pack per-pixel-pair chroma (u, v of shape (H, W/2)) and luma (H, W) into UYVY (H, W, 2)."""
    h, w = y.shape
    packed = np.empty((h, w, 2), np.uint8)
    packed[:, :, 1] = y
    packed[:, 0::2, 0] = u
    packed[:, 1::2, 0] = v
    return packed


def bt601_to_rgb(y, u, v) -> np.ndarray:
    y, u, v = (np.asarray(a, float) for a in (y, u, v))
    r = 1.164 * (y - 16) + 1.596 * (v - 128)
    g = 1.164 * (y - 16) - 0.392 * (u - 128) - 0.813 * (v - 128)
    b = 1.164 * (y - 16) + 2.017 * (u - 128)
    return np.clip(np.rint(np.stack([r, g, b], axis=-1)), 0, 255)


@pytest.fixture
def identity():
    """A source camera equal to the policy camera: the remap is the identity, only color changes."""
    camera = CameraModel(96, 64, 80.0, 80.0, 47.5, 31.5, "none", ())
    return ImagePipeline(PreprocessConfig(policy_camera=camera)), camera


def test_every_rgb_like_encoding_converts_exactly(identity):
    pipeline, camera = identity
    rng = np.random.default_rng(3)
    rgb = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (64, 96, 1), dtype=np.uint8)
    inputs = {
        "rgb8": rgb,
        "bgr8": rgb[:, :, ::-1].copy(),
        "rgba8": np.concatenate([rgb, alpha], axis=2),
        "bgra8": np.concatenate([rgb[:, :, ::-1], alpha], axis=2),
        "RGB8": rgb,
    }
    for encoding, image in inputs.items():
        out = pipeline.process(image, encoding, camera)
        assert out.dtype == np.uint8 and out.shape == (64, 96, 3)
        assert np.array_equal(out, rgb), encoding
        assert np.array_equal(to_rgb(image, encoding), rgb), encoding
    gray = rgb[:, :, 0]
    assert np.array_equal(pipeline.process(gray[:, :, None], "mono8", camera), np.repeat(gray[:, :, None], 3, 2))


@pytest.mark.parametrize("encoding", ["yuv422", "uyvy", "yuv422_yuy2", "yuyv"])
def test_packed_yuv_converts_with_bt601(identity, encoding):
    pipeline, camera = identity
    rng = np.random.default_rng(4)
    y = rng.integers(16, 236, (64, 96)).astype(np.uint8)
    u = rng.integers(16, 241, (64, 48)).astype(np.uint8)
    v = rng.integers(16, 241, (64, 48)).astype(np.uint8)
    packed = uyvy_from_yuv(y, u, v)
    if encoding in ("yuv422_yuy2", "yuyv"):  # YUYV: Y0 U Y1 V  (UYVY: U Y0 V Y1)
        flat = packed.reshape(64, 48, 4)[:, :, [1, 0, 3, 2]]
        packed = flat.reshape(64, 96, 2)
    expected = bt601_to_rgb(y, np.repeat(u, 2, axis=1), np.repeat(v, 2, axis=1))
    out = pipeline.process(packed, encoding, camera)
    assert np.max(np.abs(out.astype(float) - expected)) <= 2.0


def test_encodings_agree_through_a_distorting_reprojection():
    pipeline = ImagePipeline(policy_config())
    rgb = render(PLUMB_BOB, checker(0.05, 1.0), supersample=1)
    rgb = np.stack([rgb, 255 - rgb, rgb // 2], axis=2)
    reference = pipeline.process(rgb, "rgb8", PLUMB_BOB)
    assert np.array_equal(pipeline.process(rgb[:, :, ::-1].copy(), "bgr8", PLUMB_BOB), reference)
    bgra = np.concatenate([rgb[:, :, ::-1], np.full((480, 640, 1), 7, np.uint8)], axis=2)
    assert np.array_equal(pipeline.process(bgra, "bgra8", PLUMB_BOB), reference)


# ----------------------------------------------------------------------------------------------
# Config and bad input
def test_shipped_config_and_cache():
    config = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    pipeline = ImagePipeline(config)
    image = np.zeros((480, 640, 3), np.uint8)
    assert pipeline.process(image, "bgr8", PLUMB_BOB).shape == (config.policy_camera.height,
                                                               config.policy_camera.width, 3)
    assert pipeline.coverage(PLUMB_BOB) is pipeline.coverage(PLUMB_BOB)


@pytest.mark.parametrize(
    ("image", "encoding", "needle"),
    [
        (np.zeros((480, 640, 3), np.uint8), "jpeg", "unknown image encoding"),
        (np.zeros((480, 640, 3), np.float32), "rgb8", "uint8"),
        (np.zeros((480, 640, 4), np.uint8), "rgb8", "needs (H, W, 3)"),
        (np.zeros((240, 320, 3), np.uint8), "rgb8", "320x240 but its camera_info says 640x480"),
        (np.zeros((480, 639, 2), np.uint8), "yuyv", "even width"),
    ],
)
def test_bad_images_raise_a_clear_error(image, encoding, needle):
    with pytest.raises(ImageError, match=None) as err:
        ImagePipeline(policy_config()).process(image, encoding, PLUMB_BOB)
    assert needle in str(err.value)


@pytest.mark.parametrize("crop", [(201, 99), (200, 100), (640, 480)])
def test_packed_yuv_is_cut_at_pixel_pairs_for_any_crop(crop):
    """A crop starting at an odd column must not split a UYVY/YUYV pixel pair."""
    source = CameraModel(640, 480, 200.0, 200.0, 319.5, 239.5, "none", ())
    config = PreprocessConfig(policy_camera=CameraModel(96, 96, 96.0, 96.0, 47.5, 47.5, "none", ()),
                              center_crop=crop)
    rng = np.random.default_rng(6)
    y = cv2.GaussianBlur(rng.integers(16, 236, (480, 640)).astype(np.uint8), (0, 0), 2.0)
    u = rng.integers(16, 241, (480, 320)).astype(np.uint8)
    v = rng.integers(16, 241, (480, 320)).astype(np.uint8)
    packed = uyvy_from_yuv(y, u, v)
    pipeline = ImagePipeline(config, on_warning=lambda _text: None)
    reference = pipeline.process(to_rgb(packed, "uyvy"), "rgb8", source)
    assert np.array_equal(pipeline.process(packed, "uyvy", source), reference)
