"""Camera geometry for rendering, in pure numpy: OpenGL matrices from calibrated intrinsics.

The sim renders a pinhole image with exactly the calibration's fx, fy, cx, cy (principal point
included), so a calibrated real camera and the sim camera see the same rays. Lens distortion is
applied afterwards to the rendered image (core.camera_artifacts).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.perception.camera_model import CameraModel

if TYPE_CHECKING:
    from .params import CameraParams

# Optical frame (x right, y down, z forward) -> OpenGL camera frame (x right, y up, looking down -z).
OPTICAL_TO_GL = np.diag([1.0, -1.0, -1.0])


def projection_matrix(camera: CameraModel, near_m: float, far_m: float) -> np.ndarray:
    """OpenGL projection (4, 4) that makes PyBullet's TinyRenderer put points at the pixels K says.

    ROS intrinsics put pixel centers at integer coordinates, row 0 at the top. TinyRenderer samples
    pixel column i at window x = i and image row j at window y = H - 1 - j (no half-pixel offset,
    rows flipped), so the principal point in window coordinates is (cx, H - 1 - cy); test_sim_world
    checks this to a fraction of a pixel.
    """
    w, h = camera.width, camera.height
    cx_window, cy_window = camera.cx, h - 1.0 - camera.cy
    return np.array([
        [2.0 * camera.fx / w, 0.0, 1.0 - 2.0 * cx_window / w, 0.0],
        [0.0, 2.0 * camera.fy / h, 1.0 - 2.0 * cy_window / h, 0.0],
        [0.0, 0.0, -(far_m + near_m) / (far_m - near_m), -2.0 * far_m * near_m / (far_m - near_m)],
        [0.0, 0.0, -1.0, 0.0],
    ])


def view_matrix(world_from_optical: np.ndarray) -> np.ndarray:
    """OpenGL view matrix (4, 4) for a camera whose optical frame pose in the world is (4, 4)."""
    world_from_gl = world_from_optical.copy()
    world_from_gl[:3, :3] = world_from_optical[:3, :3] @ OPTICAL_TO_GL
    return np.linalg.inv(world_from_gl)


def gl_list(matrix: np.ndarray) -> list[float]:
    """A (4, 4) matrix as the 16 column-major floats PyBullet's getCameraImage expects."""
    return [float(v) for v in np.asarray(matrix).T.ravel()]


def look_at_rotation(eye: np.ndarray, target: np.ndarray, up: np.ndarray | None = None) -> np.ndarray:
    """Rotation (3, 3) of an optical frame at `eye` looking at `target` [m] (image up ~ world `up`)."""
    up = np.array([0.0, 0.0, 1.0]) if up is None else np.asarray(up, dtype=float)
    z = np.asarray(target, dtype=float) - np.asarray(eye, dtype=float)
    z = z / np.linalg.norm(z)
    x = np.cross(z, up)
    if np.linalg.norm(x) < 1e-9:  # looking straight along `up`: any right vector will do
        x = np.cross(z, [1.0, 0.0, 0.0])
    x = x / np.linalg.norm(x)
    y = np.cross(z, x)
    return np.stack([x, y, z], axis=1)


def camera_mount_pose(camera: CameraParams) -> np.ndarray:
    """Pose (4, 4) of the optical frame in its link's frame: the sim params' camera mount (mount_xyz
    [m], toward mount_look_at [m], image up toward mount_up), identity without one."""
    pose = np.eye(4)
    if camera.mount_xyz is not None and camera.mount_look_at is not None:
        pose[:3, :3] = look_at_rotation(np.asarray(camera.mount_xyz), np.asarray(camera.mount_look_at),
                                        np.asarray(camera.mount_up))
        pose[:3, 3] = camera.mount_xyz
    return pose


def project_points(camera: CameraModel, world_from_optical: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Pinhole pixel coordinates (N, 2) [px] of world points (N, 3) [m] (no distortion)."""
    optical_from_world = np.linalg.inv(world_from_optical)
    pts = np.asarray(points, dtype=float).reshape(-1, 3)
    cam = pts @ optical_from_world[:3, :3].T + optical_from_world[:3, 3]
    u = camera.fx * cam[:, 0] / cam[:, 2] + camera.cx
    v = camera.fy * cam[:, 1] / cam[:, 2] + camera.cy
    return np.stack([u, v], axis=1)


def small_rotation(rotvec: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a rotation vector [rad] (Rodrigues)."""
    rotvec = np.asarray(rotvec, dtype=float)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.eye(3)
    x, y, z = rotvec / angle
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)
