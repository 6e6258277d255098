"""Sim camera artifacts (core/camera_artifacts.py): distortion geometry checked against OpenCV's
projection, and each artifact measured on the image it produces."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.perception.camera_model import CameraModel, load_calibration_yaml
from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.paths import config_path
from sim2real_ros.sim.camera_artifacts import ArtifactConfig, apply_artifacts, distortion_maps, motion_blur_kernel

CAMERA = CameraModel(320, 240, 220.0, 221.0, 162.5, 118.2, "plumb_bob", (-0.25, 0.07, 0.001, -0.0015, 0.0))
FISHEYE = CameraModel(320, 240, 150.0, 150.0, 158.0, 121.0, "equidistant", (0.04, -0.01, 0.002, -0.0005))
OFF = ArtifactConfig(distortion=False)


def ideal_spots(camera: CameraModel, points_xy: np.ndarray, sigma_px: float = 1.5) -> np.ndarray:
    """An ideal pinhole render (camera.K, no distortion) of Gaussian spots at normalized rays."""
    v, u = np.mgrid[0: camera.height, 0: camera.width].astype(float)
    value = np.zeros(u.shape)
    for x, y in points_xy:
        pu, pv = camera.fx * x + camera.cx, camera.fy * y + camera.cy
        value += np.exp(-((u - pu) ** 2 + (v - pv) ** 2) / (2 * sigma_px**2))
    gray = np.clip(np.rint(255 * np.clip(value, 0, 1)), 0, 255).astype(np.uint8)
    return np.repeat(gray[:, :, None], 3, axis=2)


def centroid(gray: np.ndarray, center: np.ndarray, radius: int = 6) -> np.ndarray:
    x0, y0 = int(round(center[0])) - radius, int(round(center[1])) - radius
    patch = gray[y0: y0 + 2 * radius + 1, x0: x0 + 2 * radius + 1].astype(float)
    ys, xs = np.mgrid[0: patch.shape[0], 0: patch.shape[1]]
    return np.array([(xs * patch).sum() / patch.sum() + x0, (ys * patch).sum() / patch.sum() + y0])


@pytest.mark.parametrize("camera", [CAMERA, FISHEYE], ids=lambda c: c.distortion_model)
def test_distortion_moves_points_where_the_real_lens_images_them(camera):
    xy = np.array([[0.45, 0.3], [-0.5, 0.35], [-0.4, -0.3], [0.0, 0.0], [0.2, -0.1]])
    render = ideal_spots(camera, xy)
    out = apply_artifacts(render, camera, ArtifactConfig(), np.random.default_rng(0))
    points = np.concatenate([xy, np.ones((len(xy), 1))], axis=1).reshape(-1, 1, 3)
    if camera.distortion_model == "equidistant":
        expected, _ = cv2.fisheye.projectPoints(points, np.zeros(3), np.zeros(3), camera.K, camera.D)
    else:
        expected, _ = cv2.projectPoints(points, np.zeros(3), np.zeros(3), camera.K, camera.D)
    moved = 0.0
    for (x, y), target in zip(xy, expected[:, 0, :], strict=True):
        got = centroid(out[:, :, 0], target)
        assert np.hypot(*(got - target)) <= 0.3, f"ray {x, y}: {got} vs {target}"
        ideal = np.array([camera.fx * x + camera.cx, camera.fy * y + camera.cy])
        moved = max(moved, float(np.hypot(*(ideal - target))))
    assert moved > 5.0  # the lens really moves points: an identity "distortion" would fail


def test_preprocessing_undoes_the_sim_distortion():
    """Sim render -> artifacts (distortion) -> preprocessor back into the ideal camera = the render."""
    rng = np.random.default_rng(1)
    render = cv2.GaussianBlur(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8), (0, 0), 3.0)
    distorted = apply_artifacts(render, CAMERA, ArtifactConfig(), rng)
    assert np.mean(np.abs(distorted.astype(float) - render)) > 5.0
    ideal = CameraModel(320, 240, CAMERA.fx, CAMERA.fy, CAMERA.cx, CAMERA.cy, "none", ())
    back = ImagePipeline(PreprocessConfig(policy_camera=ideal)).process(distorted, "rgb8", CAMERA)
    interior = (slice(30, 210), slice(40, 280))
    assert np.mean(np.abs(back[interior].astype(float) - render[interior])) < 1.5


def test_no_distortion_and_no_artifacts_is_an_identity_copy():
    render = np.random.default_rng(2).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    out = apply_artifacts(render, CAMERA, OFF, np.random.default_rng(0))
    assert np.array_equal(out, render) and out is not render
    undistorted = CameraModel(320, 240, 220.0, 220.0, 160.0, 120.0, "plumb_bob", (0.0,) * 5)
    assert np.array_equal(apply_artifacts(render, undistorted, ArtifactConfig(), np.random.default_rng(0)), render)


def test_distortion_maps_are_computed_once_per_camera():
    assert distortion_maps(CAMERA) is distortion_maps(CAMERA)
    sim_camera = load_calibration_yaml(config_path("camera_sim.yaml"))
    assert distortion_maps(sim_camera) is not distortion_maps(CAMERA)


def test_noise_has_the_configured_std_and_follows_the_seed():
    gray = np.full((240, 320, 3), 128, np.uint8)
    config = ArtifactConfig(distortion=False, noise_std=6.0)
    a = apply_artifacts(gray, CAMERA, config, np.random.default_rng(7))
    b = apply_artifacts(gray, CAMERA, config, np.random.default_rng(7))
    c = apply_artifacts(gray, CAMERA, config, np.random.default_rng(8))
    diff = a.astype(float) - 128
    assert diff.std() == pytest.approx(6.0, rel=0.05)
    assert abs(diff.mean()) < 0.1
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_noise_saturates_instead_of_wrapping():
    white = np.full((240, 320, 3), 255, np.uint8)
    out = apply_artifacts(white, CAMERA, ArtifactConfig(distortion=False, noise_std=20.0), np.random.default_rng(0))
    assert out.min() > 100  # uint8 wrap-around would produce values near 0


def test_motion_blur_spreads_a_point_into_a_line_of_the_configured_length():
    for length in (0.5, 3.0, 7.5):
        kernel = motion_blur_kernel(length, 0.0)
        assert kernel.sum() == pytest.approx(1.0, abs=1e-5)
        row = kernel.sum(axis=0)
        positions = np.arange(row.size) - row.size // 2
        spread = np.sqrt((row * positions**2).sum())
        assert spread == pytest.approx(length / np.sqrt(12), abs=0.25)  # std of a uniform segment
    image = np.zeros((240, 320, 3), np.uint8)
    image[120, 160] = 255
    out = apply_artifacts(image, CAMERA, ArtifactConfig(distortion=False, motion_blur_px=9.0), np.random.default_rng(3))
    lit = np.argwhere(out[:, :, 0] > 0)
    extent = np.max(np.ptp(lit, axis=0))
    assert 7 <= extent <= 11
    assert out[:, :, 0].sum() == pytest.approx(255, rel=0.1)  # energy is conserved, not amplified


def test_jpeg_quality_sets_the_compression_loss():
    rng = np.random.default_rng(5)
    render = cv2.GaussianBlur(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8), (0, 0), 1.5)

    def error(quality: int) -> float:
        out = apply_artifacts(render, CAMERA, ArtifactConfig(distortion=False, jpeg_quality=quality), rng)
        return float(np.mean(np.abs(out.astype(float) - render)))

    high, low = error(95), error(10)
    assert 0.0 < high < 3.0
    assert low > 2 * high


def test_sim_rate_cost_is_bounded_by_caching():
    """The maps are built once; a second call reuses them (identity of the cached tables)."""
    camera = CameraModel(320, 240, 230.0, 230.0, 160.0, 120.0, "plumb_bob", (-0.1, 0.01, 0.0, 0.0, 0.0))
    first = distortion_maps(camera)
    apply_artifacts(np.zeros((240, 320, 3), np.uint8), camera, ArtifactConfig(), np.random.default_rng(0))
    assert distortion_maps(camera) is first


def test_config_round_trip_and_errors_name_source_field_value():
    config = ArtifactConfig.from_dict({"distortion": False, "noise_std": 2, "motion_blur_px": 1.5,
                                       "jpeg_quality": 80}, "sim.yaml")
    assert config == ArtifactConfig(False, 2.0, 1.5, 80)
    assert ArtifactConfig.from_dict(config.to_dict(), "x") == config
    assert ArtifactConfig.from_dict(None, "x") == ArtifactConfig()
    for data, field, value in [
        ({"noise_std": -1.0}, "noise_std", -1.0),
        ({"jpeg_quality": 101}, "jpeg_quality", 101),
        ({"jpeg_quality": 50.5}, "jpeg_quality", 50.5),
        ({"motion_blur_px": "fast"}, "motion_blur_px", "fast"),
        ({"distortion": "yes"}, "distortion", "yes"),
        ({"blur": 2}, "blur", 2),
    ]:
        with pytest.raises(ConfigError) as err:
            ArtifactConfig.from_dict(data, "sim.yaml")
        assert err.value.source == "sim.yaml" and err.value.field == field and err.value.value == value
        assert "sim.yaml" in str(err.value) and field in str(err.value)


def test_wrong_image_is_refused():
    with pytest.raises(ValueError, match="640x480 but the camera model is 320x240"):
        apply_artifacts(np.zeros((480, 640, 3), np.uint8), CAMERA, ArtifactConfig(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="uint8"):
        apply_artifacts(np.zeros((240, 320, 3), np.float32), CAMERA, ArtifactConfig(), np.random.default_rng(0))
