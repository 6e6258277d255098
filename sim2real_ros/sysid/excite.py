"""Excitation sequences for system identification: what to command the real robot while recording.

One joint moves at a time, the others hold the home pose (the middle of each joint's URDF range).
Per joint: ramped steps (out, back, the other way, back; each ramp at a fraction of the URDF
velocity limit and followed by a hold, so latency and settling show) and then a chirp whose peak
speed stays under the same fraction. Every target lies within the URDF position limits; the
supervisor still clamps everything it sends. Pure numpy.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ..core.robot.urdf import JointLimits, RobotModel
from .latency import SysidError

# Used for joints without limits (continuous): a modest range and speed [rad], [rad/s].
FALLBACK_LIMITS = JointLimits(lower=-math.pi, upper=math.pi, velocity=1.0, effort=0.0)


@dataclass(frozen=True)
class ExciteOptions:
    """rate_hz [Hz]; amplitude_fraction: largest excursion from home as a fraction of the joint's
    range; speed_fraction: largest commanded speed as a fraction of the URDF velocity limit;
    hold_s [s]: hold after each ramp and at the start; chirp_s [s]: chirp length per joint;
    chirp_start_hz [Hz]: lowest chirp frequency."""

    rate_hz: float = 50.0
    amplitude_fraction: float = 0.15
    speed_fraction: float = 0.2
    hold_s: float = 2.0
    chirp_s: float = 20.0
    chirp_start_hz: float = 0.1

    def __post_init__(self) -> None:
        checks = {
            "rate_hz": 0 < self.rate_hz <= 1000,
            "amplitude_fraction": 0 < self.amplitude_fraction <= 0.45,
            "speed_fraction": 0 < self.speed_fraction <= 0.5,
            "hold_s": self.hold_s >= 0,
            "chirp_s": self.chirp_s >= 0,
            "chirp_start_hz": self.chirp_start_hz > 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise SysidError(
                    f"excite option {name} = {getattr(self, name)!r} is out of range "
                    "(rate (0, 1000] Hz, amplitude (0, 0.45], speed (0, 0.5], times >= 0)"
                )


@dataclass(frozen=True)
class ExcitationSequence:
    """times_s (K,) [s] from the start; positions (K, n) [rad] in joint_names order."""

    joint_names: tuple[str, ...]
    times_s: np.ndarray
    positions: np.ndarray


def _ramp_hold(start: float, target: float, speed: float, hold_s: float, dt: float) -> np.ndarray:
    ramp_n = max(1, int(math.ceil(abs(target - start) / speed / dt)))
    ramp = start + (target - start) * np.arange(1, ramp_n + 1) / ramp_n
    return np.concatenate([ramp, np.full(int(round(hold_s / dt)), target)])


def joint_excitation(limits: JointLimits, options: ExciteOptions) -> tuple[float, np.ndarray]:
    """(home [rad], offsets from home (K,) [rad]) for one joint: ramped steps, then a chirp."""
    dt = 1.0 / options.rate_hz
    home = 0.5 * (limits.lower + limits.upper)
    amplitude = options.amplitude_fraction * (limits.upper - limits.lower)
    speed = options.speed_fraction * limits.velocity
    parts = [np.zeros(int(round(options.hold_s / dt)))]
    position = 0.0
    for target in (amplitude, 0.0, -amplitude, 0.0, 0.5 * amplitude, 0.0):
        parts.append(_ramp_hold(position, target, speed, options.hold_s, dt))
        position = target
    if options.chirp_s > 0:
        fade_s = min(1.0, 0.25 * options.chirp_s)
        # Speed of a*e(t)*sin(phase) is at most a*(2*pi*f + 1/fade): amplitude and top frequency
        # keep it under the limit (with 5 % to spare).
        chirp_amplitude = min(0.5 * amplitude, 0.5 * speed / (2 * math.pi * options.chirp_start_hz + 1 / fade_s))
        top_hz = (0.95 * speed - chirp_amplitude / fade_s) / (2 * math.pi * chirp_amplitude)
        end_hz = max(options.chirp_start_hz, top_hz)
        t = np.arange(int(round(options.chirp_s / dt))) * dt
        rate = (end_hz - options.chirp_start_hz) / options.chirp_s
        phase = 2 * math.pi * (options.chirp_start_hz * t + 0.5 * rate * t**2)
        # The envelope fades in and out so the chirp starts and ends at rest.
        envelope = np.clip(np.minimum(t, options.chirp_s - t) / fade_s, 0.0, 1.0)
        parts.append(chirp_amplitude * envelope * np.sin(phase))
        parts.append(np.zeros(int(round(options.hold_s / dt))))
    return home, np.concatenate(parts)


def excitation(
    joint_names: list[str], limits: list[JointLimits], options: ExciteOptions | None = None
) -> ExcitationSequence:
    """The whole sequence: each joint in turn, the others at home."""
    options = options or ExciteOptions()
    homes, offsets = zip(*(joint_excitation(lim, options) for lim in limits), strict=True)
    total = sum(len(o) for o in offsets)
    positions = np.tile(np.array(homes), (total, 1))
    row = 0
    for j, joint_offsets in enumerate(offsets):
        positions[row: row + len(joint_offsets), j] += joint_offsets
        row += len(joint_offsets)
    lower = np.array([lim.lower for lim in limits])
    upper = np.array([lim.upper for lim in limits])
    positions = np.clip(positions, lower, upper)
    return ExcitationSequence(tuple(joint_names), np.arange(total) / options.rate_hz, positions)


def excitation_for_robot(
    description: str | None, options: ExciteOptions | None = None, joints: list[str] | None = None
) -> ExcitationSequence:
    """The sequence for a robot given as URDF XML or path (default: the package's arm)."""
    from ..paths import urdf_path

    model = RobotModel.from_description(description or str(urdf_path()))
    by_name = {j.name: j for j in model.movable_joints}
    names = joints or [j.name for j in model.movable_joints]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SysidError(f"joints {unknown} are not movable joints of the URDF (it has {list(by_name)})")
    limits = [by_name[n].limits or FALLBACK_LIMITS for n in names]
    return excitation(names, limits, options)


def write_sequence(sequence: ExcitationSequence, path: str | Path) -> None:
    """CSV (time_s, one column per joint) or YAML (joint_names, times_s, positions) by suffix."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        data = {
            "joint_names": list(sequence.joint_names),
            "times_s": [round(float(t), 6) for t in sequence.times_s],
            "positions": [[round(float(v), 6) for v in row] for row in sequence.positions],
        }
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return
    if path.suffix.lower() != ".csv":
        raise SysidError(f"{path}: output must end in .csv, .yaml or .yml")
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time_s", *sequence.joint_names])
        for t, row in zip(sequence.times_s, sequence.positions, strict=True):
            writer.writerow([f"{t:.6f}", *(f"{v:.6f}" for v in row)])
