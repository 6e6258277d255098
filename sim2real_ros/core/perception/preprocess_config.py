"""The preprocessing config: the policy camera model and what is done to every image.

The same config runs on sim and real images (docs/design.md §1, observation matching). Its content hash
is recorded in every checkpoint; the policy node refuses a checkpoint trained with another one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..hashing import content_hash
from .camera_model import CameraModel

INTERPOLATIONS = ("nearest", "linear", "area", "cubic")


@dataclass(frozen=True)
class PreprocessConfig:
    """policy_camera: the pinhole model (no distortion) the policy sees, output size = its size [px].
    center_crop: optional (width, height) [px] cut from the center of the policy image's source
      region before reprojection (None: the full policy field of view).
    fill_rgb: color of the border the source camera does not cover (filled, never stretched).
    interpolation: remap interpolation.
    """

    policy_camera: CameraModel
    center_crop: tuple[int, int] | None = None
    fill_rgb: tuple[int, int, int] = (0, 0, 0)
    interpolation: str = "linear"

    def __post_init__(self) -> None:
        if self.policy_camera.has_distortion:
            raise ValueError("policy_camera must be an ideal pinhole (no distortion)")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if self.center_crop is not None and (self.center_crop[0] <= 0 or self.center_crop[1] <= 0):
            raise ValueError(f"center_crop must be positive (width, height), got {self.center_crop}")
        if len(self.fill_rgb) != 3 or not all(0 <= c <= 255 for c in self.fill_rgb):
            raise ValueError(f"fill_rgb must be three values in 0..255, got {self.fill_rgb}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy_camera": self.policy_camera.to_dict(),
            "center_crop": list(self.center_crop) if self.center_crop else None,
            "fill_rgb": list(self.fill_rgb),
            "interpolation": self.interpolation,
        }

    @property
    def content_hash(self) -> str:
        """Version of this config: hash of its content (what checkpoints record)."""
        return content_hash(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<preprocess>") -> PreprocessConfig:
        if not isinstance(data, dict) or "policy_camera" not in data:
            raise ConfigError(source, "policy_camera", None, "missing")
        camera_data = dict(data["policy_camera"])
        camera_data.setdefault("distortion_model", "none")
        camera = CameraModel.from_dict(camera_data, source=f"{source} policy_camera")
        crop = data.get("center_crop")
        try:
            return cls(
                policy_camera=camera,
                center_crop=tuple(int(v) for v in crop) if crop else None,
                fill_rgb=tuple(int(v) for v in data.get("fill_rgb", (0, 0, 0))),
                interpolation=str(data.get("interpolation", "linear")),
            )
        except (TypeError, ValueError) as err:
            raise ConfigError(source, "preprocess", data, str(err)) from err

    @classmethod
    def from_yaml(cls, path: str | Path) -> PreprocessConfig:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(str(path), "<file>", None, f"cannot read preprocess YAML: {err}") from err
        return cls.from_dict(data, source=str(path))
