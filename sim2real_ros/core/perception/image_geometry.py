"""Lens distortion math shared by the preprocessor (real -> policy camera) and the sim camera artifacts
(ideal pinhole -> real camera), so both directions use one definition of each ROS distortion model.

Pixel convention (OpenCV and ROS): pixel centers at integer coordinates, an image of width W spans
[-0.5, W - 0.5]. Normalized coordinates (x, y) are a ray (x, y, 1) in the camera frame.

Models (CameraModel.distortion_model, D as ROS orders it):
- plumb_bob: (k1, k2, p1, p2, k3), shorter vectors are zero-padded.
- rational_polynomial: (k1, k2, p1, p2, k3, k4, k5, k6).
- equidistant (fisheye): (k1, k2, k3, k4) on the angle theta from the optical axis.
- none: ideal pinhole.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .camera_model import CameraModel

_INVERSE_TOLERANCE = 1e-9  # normalized units; 1e-9 * f (~1000 px) is far below a pixel
_INVERSE_MAX_ITERATIONS = 30


def _brown_coefficients(model: CameraModel) -> np.ndarray:
    """(k1, k2, p1, p2, k3, k4, k5, k6) for plumb_bob / rational_polynomial (zero-padded)."""
    d = model.D
    if d.size > 8 and np.any(d[8:] != 0.0):
        raise ValueError(f"thin-prism / tilt distortion terms are not supported, got D={d.tolist()}")
    out = np.zeros(8)
    out[: min(8, d.size)] = d[:8]
    return out


def _fisheye_coefficients(model: CameraModel) -> np.ndarray:
    d = model.D
    out = np.zeros(4)
    out[: min(4, d.size)] = d[:4]
    return out


def _is_fisheye(model: CameraModel) -> bool:
    return model.distortion_model == "equidistant"


def distort_normalized(model: CameraModel, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ideal normalized coordinates -> distorted normalized coordinates (before K) of `model`."""
    if not model.has_distortion:
        return x, y
    if _is_fisheye(model):
        k1, k2, k3, k4 = _fisheye_coefficients(model)
        r = np.hypot(x, y)
        theta = np.arctan(r)
        t2 = theta * theta
        theta_d = theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
        # r -> 0: theta_d / r -> 1 (no division by zero at the optical axis)
        scale = np.where(r > 1e-12, theta_d / np.maximum(r, 1e-12), 1.0)
        return x * scale, y * scale
    k1, k2, p1, p2, k3, k4, k5, k6 = _brown_coefficients(model)
    r2 = x * x + y * y
    radial = (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)))
    xy = x * y
    xd = x * radial + 2.0 * p1 * xy + p2 * (r2 + 2.0 * x * x)
    yd = y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * xy
    return xd, yd


def project_normalized(model: CameraModel, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ideal normalized coordinates -> pixel coordinates [px] in `model`'s (distorted) image."""
    xd, yd = distort_normalized(model, x, y)
    return model.fx * xd + model.cx, model.fy * yd + model.cy


def undistort_pixels(model: CameraModel, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixel coordinates [px] of `model`'s image -> ideal normalized coordinates (x, y) and a mask of
    the points where the inverse converged (False where no ray maps to that pixel)."""
    xd = (np.asarray(u, dtype=float) - model.cx) / model.fx
    yd = (np.asarray(v, dtype=float) - model.cy) / model.fy
    if not model.has_distortion:
        return xd, yd, np.ones(xd.shape, dtype=bool)
    if _is_fisheye(model):
        return _undistort_fisheye(model, xd, yd)
    return _undistort_brown(model, xd, yd)


def _undistort_fisheye(model: CameraModel, xd: np.ndarray, yd: np.ndarray):
    k1, k2, k3, k4 = _fisheye_coefficients(model)
    theta_d = np.hypot(xd, yd)
    theta = np.clip(theta_d.copy(), 0.0, np.pi / 2)
    for _ in range(_INVERSE_MAX_ITERATIONS):  # Newton on theta_d = f(theta)
        t2 = theta * theta
        f = theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))) - theta_d
        df = 1.0 + t2 * (3.0 * k1 + t2 * (5.0 * k2 + t2 * (7.0 * k3 + t2 * 9.0 * k4)))
        theta = theta - f / np.where(np.abs(df) > 1e-12, df, 1e-12)
    t2 = theta * theta
    residual = np.abs(theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))) - theta_d)
    valid = (residual < 1e-7) & (theta >= 0.0) & (theta < np.pi / 2 - 1e-6)
    valid &= theta <= fold_angle_rad(model)
    scale = np.where(theta_d > 1e-12, np.tan(np.clip(theta, 0.0, np.pi / 2 - 1e-6)) / np.maximum(theta_d, 1e-12), 1.0)
    return xd * scale, yd * scale, valid


def _undistort_brown(model: CameraModel, xd: np.ndarray, yd: np.ndarray):
    """Gauss-Newton with a finite-difference Jacobian, started at the distorted point (as OpenCV)."""
    x, y = xd.copy(), yd.copy()
    eps = 1e-7
    for _ in range(_INVERSE_MAX_ITERATIONS):
        fx, fy = distort_normalized(model, x, y)
        ex, ey = fx - xd, fy - yd
        if float(np.max(np.abs(ex), initial=0.0)) < _INVERSE_TOLERANCE and float(
                np.max(np.abs(ey), initial=0.0)) < _INVERSE_TOLERANCE:
            break
        ax, ay = distort_normalized(model, x + eps, y)
        bx, by = distort_normalized(model, x, y + eps)
        j11, j21 = (ax - fx) / eps, (ay - fy) / eps
        j12, j22 = (bx - fx) / eps, (by - fy) / eps
        det = j11 * j22 - j12 * j21
        det = np.where(np.abs(det) > 1e-12, det, 1e-12)
        dx = (j22 * ex - j12 * ey) / det
        dy = (-j21 * ex + j11 * ey) / det
        # Damped steps keep far-off points from jumping past the fold of the polynomial.
        step = np.minimum(1.0, 0.5 / np.maximum(np.hypot(dx, dy), 1e-12))
        x, y = x - step * dx, y - step * dy
    fx, fy = distort_normalized(model, x, y)
    valid = (np.abs(fx - xd) < 1e-7) & (np.abs(fy - yd) < 1e-7) & np.isfinite(x) & np.isfinite(y)
    valid &= np.hypot(x, y) <= fold_radius(model)
    return x, y, valid


@lru_cache(maxsize=32)
def fold_radius(model: CameraModel, max_radius: float = 20.0) -> float:
    """Largest normalized radius up to which the radial distortion is monotonic [tan(angle)].

    Beyond it a polynomial model folds back: rays from outside the lens's field of view would land
    inside the image. Such rays are treated as not seen (filled), never sampled.
    """
    if not model.has_distortion:
        return float("inf")
    if _is_fisheye(model):
        return float(np.tan(fold_angle_rad(model)))
    k1, k2, _, _, k3, k4, k5, k6 = _brown_coefficients(model)
    r = np.linspace(0.0, max_radius, 200_001)
    r2 = r * r
    radial = (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)))
    denominator_ok = (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6))) > 0.0
    increasing = (np.diff(r * radial) > 0.0) & denominator_ok[1:]
    bad = np.flatnonzero(~increasing)
    return float(r[bad[0]]) if bad.size else float("inf")


@lru_cache(maxsize=32)
def fold_angle_rad(model: CameraModel) -> float:
    """Equidistant model: largest angle from the optical axis [rad] where theta_d(theta) increases."""
    k1, k2, k3, k4 = _fisheye_coefficients(model)
    theta = np.linspace(0.0, np.pi / 2, 100_001)
    t2 = theta * theta
    theta_d = theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
    bad = np.flatnonzero(np.diff(theta_d) <= 0.0)
    return float(theta[bad[0]]) if bad.size else float(np.pi / 2)


def field_of_view_deg(model: CameraModel,
                      window: tuple[float, float, float, float] | None = None) -> tuple[float, float]:
    """(horizontal, vertical) field of view [deg] through the principal point, distortion included,
    between the edges of `window` (x0, y0, x1, y1) [px] (default: the whole image, -0.5 .. W - 0.5)."""
    x0, y0, x1, y1 = window or (-0.5, -0.5, model.width - 0.5, model.height - 0.5)
    u = np.array([x0, x1, model.cx, model.cx])
    v = np.array([model.cy, model.cy, y0, y1])
    x, y, valid = undistort_pixels(model, u, v)
    if not np.all(valid):  # an edge beyond the model's fold: the widest ray the model can represent
        limit = fold_radius(model)
        x = np.where(valid, x, np.sign(u - model.cx) * limit)
        y = np.where(valid, y, np.sign(v - model.cy) * limit)
    # Signed angles: a principal point outside the window still gives the right span.
    horizontal = np.arctan(x[1]) - np.arctan(x[0])
    vertical = np.arctan(y[3]) - np.arctan(y[2])
    return float(np.degrees(horizontal)), float(np.degrees(vertical))
