"""Camera models: intrinsics, distortion, and the ROS camera_calibration YAML format.

The sim camera, the real camera and the policy camera are all described by a CameraModel, so the
sim can be made to match a real calibration and the preprocessor can reproject between them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..errors import ConfigError

DISTORTION_MODELS = ("plumb_bob", "rational_polynomial", "equidistant", "none")


@dataclass(frozen=True)
class CameraModel:
    """A pinhole camera with optional lens distortion.

    width, height [px]; fx, fy, cx, cy [px]; distortion_model one of DISTORTION_MODELS;
    distortion (D) as ROS orders it: plumb_bob (k1, k2, p1, p2, k3), equidistant (k1, k2, k3, k4).
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion_model: str = "plumb_bob"
    distortion: tuple[float, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"camera size must be positive, got {self.width}x{self.height}")
        if self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"focal lengths must be positive, got fx={self.fx}, fy={self.fy}")
        if self.distortion_model not in DISTORTION_MODELS:
            raise ValueError(f"distortion_model must be one of {DISTORTION_MODELS}, got {self.distortion_model!r}")

    @property
    def K(self) -> np.ndarray:  # noqa: N802 - the name every vision text uses
        """Intrinsic matrix (3, 3) [px]."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def D(self) -> np.ndarray:  # noqa: N802
        """Distortion coefficients (n,), zeros when there is no distortion."""
        return np.asarray(self.distortion, dtype=float)

    @property
    def has_distortion(self) -> bool:
        return self.distortion_model != "none" and bool(np.any(self.D != 0.0))

    def horizontal_fov_rad(self) -> float:
        """Full horizontal field of view [rad] of the undistorted pinhole."""
        return float(np.arctan2(self.cx, self.fx) + np.arctan2(self.width - self.cx, self.fx))

    def vertical_fov_rad(self) -> float:
        """Full vertical field of view [rad] of the undistorted pinhole."""
        return float(np.arctan2(self.cy, self.fy) + np.arctan2(self.height - self.cy, self.fy))

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.width, "height": self.height, "fx": self.fx, "fy": self.fy,
            "cx": self.cx, "cy": self.cy, "distortion_model": self.distortion_model,
            "distortion": list(self.distortion),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<camera>") -> CameraModel:
        """Build from {width, height, fx, fy, cx, cy[, distortion_model, distortion]}; ConfigError
        names the source, the field and the value when something is missing or invalid."""
        values = {}
        for key, kind in (("width", int), ("height", int), ("fx", float), ("fy", float), ("cx", float), ("cy", float)):
            if key not in data:
                raise ConfigError(source, key, None, "missing")
            try:
                values[key] = kind(data[key])
            except (TypeError, ValueError) as err:
                raise ConfigError(source, key, data[key], f"must be a {kind.__name__}") from err
        model = str(data.get("distortion_model", "none"))
        dist = data.get("distortion", [])
        try:
            dist_t = tuple(float(v) for v in dist)
        except (TypeError, ValueError) as err:
            raise ConfigError(source, "distortion", dist, "must be a list of numbers") from err
        try:
            return cls(distortion_model=model, distortion=dist_t, **values)
        except ValueError as err:
            raise ConfigError(source, "camera", data, str(err)) from err


def _matrix(data: dict, key: str, rows: int, cols: int, source: str) -> np.ndarray:
    entry = data.get(key)
    if not isinstance(entry, dict) or "data" not in entry:
        raise ConfigError(source, key, entry, "missing or not a {rows, cols, data} matrix")
    values = np.asarray(entry["data"], dtype=float)
    if cols and values.size != rows * cols:
        raise ConfigError(source, f"{key}.data", entry["data"], f"needs {rows * cols} numbers")
    return values.reshape(rows, cols) if cols else values


def load_calibration_yaml(path: str | Path) -> CameraModel:
    """Read a camera calibration in the format ROS camera_calibration writes (image_width,
    image_height, camera_matrix, distortion_model, distortion_coefficients, projection_matrix).

    The rendered sim image follows camera_matrix (K) and distortion exactly.
    """
    path = Path(path)
    source = str(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(source, "<file>", None, f"cannot read calibration YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(source, "<file>", data, "expected a mapping")
    for key in ("image_width", "image_height", "distortion_model"):
        if key not in data:
            raise ConfigError(source, key, None, "missing")
    k = _matrix(data, "camera_matrix", 3, 3, source)
    d = _matrix(data, "distortion_coefficients", 1, 0, source)
    _matrix(data, "projection_matrix", 3, 4, source)
    try:
        return CameraModel(
            width=int(data["image_width"]), height=int(data["image_height"]),
            fx=float(k[0, 0]), fy=float(k[1, 1]), cx=float(k[0, 2]), cy=float(k[1, 2]),
            distortion_model=str(data["distortion_model"]), distortion=tuple(float(v) for v in d),
        )
    except ValueError as err:
        raise ConfigError(source, "camera_matrix/image size/distortion_model", data, str(err)) from err


def calibration_dict(model: CameraModel, camera_name: str = "camera") -> dict[str, Any]:
    """The camera_calibration YAML content for `model` (inverse of load_calibration_yaml)."""
    d = list(model.distortion)
    return {
        "image_width": model.width, "image_height": model.height, "camera_name": camera_name,
        "camera_matrix": {"rows": 3, "cols": 3, "data": model.K.ravel().tolist()},
        "distortion_model": model.distortion_model,
        "distortion_coefficients": {"rows": 1, "cols": len(d), "data": d},
        "rectification_matrix": {"rows": 3, "cols": 3, "data": np.eye(3).ravel().tolist()},
        "projection_matrix": {"rows": 3, "cols": 4,
                              "data": np.hstack([model.K, np.zeros((3, 1))]).ravel().tolist()},
    }
