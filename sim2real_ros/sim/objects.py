"""Loose objects on the table and contact queries (the pick tasks' bodies), beside sim/world.py.

PyBullet only: a cube is a box body with its own size, mass, friction and colour; contacts are read
from the last physics step (client.getContactPoints), so the queries cost nothing extra to step.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pybullet


@dataclass(frozen=True)
class CubeSpec:
    """One cube: edge size_m [m], mass_kg [kg], lateral_friction (Coulomb coefficient), rgba,
    position (3,) [m] of its center and yaw_rad [rad] about the world z axis."""

    size_m: float
    mass_kg: float
    lateral_friction: float
    rgba: tuple[float, float, float, float]
    position: tuple[float, float, float]
    yaw_rad: float

    def summary(self) -> dict[str, Any]:
        """The episode info entry (plain floats and lists)."""
        return {"size_m": self.size_m, "mass_kg": self.mass_kg, "lateral_friction": self.lateral_friction,
                "rgba": list(self.rgba), "position": list(self.position), "yaw_rad": self.yaw_rad}


def spawn_cube(client: Any, spec: CubeSpec) -> int:
    """Create the cube body (at rest) and return its PyBullet id. Shapes are made per cube because
    the size changes between episodes (PyBullet cannot rescale a collision shape)."""
    half = [spec.size_m / 2.0] * 3
    collision = client.createCollisionShape(pybullet.GEOM_BOX, halfExtents=half)
    visual = client.createVisualShape(pybullet.GEOM_BOX, halfExtents=half, rgbaColor=list(spec.rgba))
    orientation = client.getQuaternionFromEuler([0.0, 0.0, spec.yaw_rad])
    body = client.createMultiBody(baseMass=spec.mass_kg, baseCollisionShapeIndex=collision,
                                  baseVisualShapeIndex=visual, basePosition=list(spec.position),
                                  baseOrientation=orientation)
    # Rolling/spinning friction keep a resting cube from creeping; restitution 0: no bounce.
    client.changeDynamics(body, -1, lateralFriction=spec.lateral_friction, spinningFriction=0.001,
                          rollingFriction=0.0001, restitution=0.0)
    return int(body)


def remove_body(client: Any, body: int) -> None:
    """Remove a body if it exists (a negative id means none)."""
    if body >= 0:
        with contextlib.suppress(pybullet.error):
            client.removeBody(body)


def body_position(client: Any, body: int) -> np.ndarray:
    """Base position (3,) [m], world frame."""
    return np.asarray(client.getBasePositionAndOrientation(body)[0], dtype=float)


def body_velocity(client: Any, body: int) -> np.ndarray:
    """Base linear velocity (3,) [m/s], world frame."""
    return np.asarray(client.getBaseVelocity(body)[0], dtype=float)


def touching(client: Any, body_a: int, body_b: int, link_b: int | None = None) -> bool:
    """Whether body_a touches body_b (its link link_b, or any link when None) after the last step."""
    if link_b is None:
        return bool(client.getContactPoints(bodyA=body_a, bodyB=body_b))
    return bool(client.getContactPoints(bodyA=body_a, bodyB=body_b, linkIndexA=-1, linkIndexB=link_b))


def links_touching(client: Any, body_a: int, body_b: int) -> set[int]:
    """The link indices of body_b that touch body_a after the last step (-1 = its base)."""
    return {int(point[4]) for point in client.getContactPoints(bodyA=body_a, bodyB=body_b)}
