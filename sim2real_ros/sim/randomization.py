"""Domain randomization: one draw of every randomized quantity per episode.

Every value is always drawn (randomization on or off) so a seed gives the same target either way;
with randomization off the nominal values are used instead of the draws.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .params import RandomizationParams, SimParams
from .rendering import small_rotation


@dataclass(frozen=True)
class EpisodeRandomization:
    """Multipliers and values for one episode (1.0 / nominal when randomization is off).

    mass_scale (n_links,), damping/friction/kp/kd scale (n_joints,); actuation_latency_s [s];
    gravity (3,) [m/s^2]; light_direction (3,) unit; light_intensity; camera_offset_m (3,) [m]
    and camera_rotation (3, 3) applied in the camera's own frame; target_rgba; noise_std [0-255].
    """

    mass_scale: np.ndarray
    damping_scale: np.ndarray
    friction_scale: np.ndarray
    kp_scale: np.ndarray
    kd_scale: np.ndarray
    actuation_latency_s: float
    gravity: np.ndarray
    light_direction: np.ndarray
    light_intensity: float
    camera_offset_m: np.ndarray
    camera_rotation: np.ndarray
    target_rgba: tuple[float, float, float, float]
    noise_std: float
    servo_speed_scale: np.ndarray | float = 1.0  # (n_joints,) servo model only
    servo_acceleration_scale: np.ndarray | float = 1.0
    servo_gain_scale: np.ndarray | float = 1.0

    def summary(self) -> dict:
        """Plain-number dict (for episode info and logs)."""
        out = {}
        for key, value in asdict(self).items():
            out[key] = value.tolist() if isinstance(value, np.ndarray) else value
        return out


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def sample_episode(params: SimParams, rng: np.random.Generator, n_links: int, n_joints: int,
                   randomize: bool) -> EpisodeRandomization:
    """Draw one episode's values (always the same draws for a given rng state)."""
    r: RandomizationParams = params.randomization
    draws = {
        "mass_scale": rng.uniform(*r.mass_scale, size=n_links),
        "damping_scale": rng.uniform(*r.damping_scale, size=n_joints),
        "friction_scale": rng.uniform(*r.friction_scale, size=n_joints),
        "kp_scale": rng.uniform(*r.kp_scale, size=n_joints),
        "kd_scale": rng.uniform(*r.kd_scale, size=n_joints),
        "latency": rng.uniform(*r.actuation_latency_s),
        "gravity_z": rng.uniform(*r.gravity_z),
        "light_rot": rng.uniform(-r.light_direction_jitter_rad, r.light_direction_jitter_rad, size=3),
        "light_intensity": rng.uniform(*r.light_intensity),
        "camera_offset": rng.uniform(-r.camera_position_jitter_m, r.camera_position_jitter_m, size=3),
        "camera_rot": rng.uniform(-r.camera_rotation_jitter_rad, r.camera_rotation_jitter_rad, size=3),
        "target_rgb": rng.uniform(-r.target_rgb_jitter, r.target_rgb_jitter, size=3),
        "noise_std": rng.uniform(*r.noise_std),
    }
    # Servo scales are drawn last and only for the servo model: a pd world draws exactly as before.
    servo = {}
    if params.actuator.model == "servo":
        servo = {"servo_speed_scale": rng.uniform(*r.servo_speed_scale, size=n_joints),
                 "servo_acceleration_scale": rng.uniform(*r.servo_acceleration_scale, size=n_joints),
                 "servo_gain_scale": rng.uniform(*r.servo_gain_scale, size=n_joints)}
    nominal_light = _unit(np.asarray(params.lighting.direction, dtype=float))
    rgba = params.task.target_rgba
    if not randomize:
        return EpisodeRandomization(
            mass_scale=np.ones(n_links), damping_scale=np.ones(n_joints), friction_scale=np.ones(n_joints),
            kp_scale=np.ones(n_joints), kd_scale=np.ones(n_joints),
            actuation_latency_s=params.actuator.actuation_latency_s,
            gravity=np.asarray(params.physics.gravity, dtype=float), light_direction=nominal_light,
            light_intensity=params.lighting.intensity, camera_offset_m=np.zeros(3), camera_rotation=np.eye(3),
            target_rgba=tuple(rgba), noise_std=float(params.artifacts.get("noise_std", 0.0)),
        )
    gravity = np.asarray(params.physics.gravity, dtype=float).copy()
    gravity[2] = draws["gravity_z"]
    rgb = np.clip(np.asarray(rgba[:3]) + draws["target_rgb"], 0.0, 1.0)
    return EpisodeRandomization(
        mass_scale=draws["mass_scale"], damping_scale=draws["damping_scale"],
        friction_scale=draws["friction_scale"], kp_scale=draws["kp_scale"], kd_scale=draws["kd_scale"],
        actuation_latency_s=float(draws["latency"]), gravity=gravity,
        light_direction=_unit(small_rotation(draws["light_rot"]) @ nominal_light),
        light_intensity=float(draws["light_intensity"]), camera_offset_m=draws["camera_offset"],
        camera_rotation=small_rotation(draws["camera_rot"]),
        target_rgba=(float(rgb[0]), float(rgb[1]), float(rgb[2]), float(rgba[3])),
        noise_std=float(draws["noise_std"]), **servo,
    )
