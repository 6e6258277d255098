"""Sim parameters (config/sim_params.yaml): dynamics, actuator model, task, camera, randomization.

The version of a parameter set is `content_hash` of the YAML mapping exactly as `yaml.safe_load`
returns it: checkpoints record it, and system identification writes a new file (so a new version).
Every field is validated here; a missing or invalid one raises ConfigError naming the file, the
field (dotted path) and the value.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..core.errors import ConfigError, Sim2RealError
from ..core.hashing import content_hash
from ..paths import config_path

DEFAULT_FILE = "sim_params.yaml"


@dataclass(frozen=True)
class JointValues:
    """A per-joint quantity: one default plus optional values by joint name.

    Names the loaded robot lacks are ignored, so one YAML serves several URDFs.
    """

    default: float
    by_name: tuple[tuple[str, float], ...] = ()

    def resolve(self, names: Sequence[str]) -> np.ndarray:
        """Values (n,) in the order of `names`."""
        table = dict(self.by_name)
        return np.array([table.get(n, self.default) for n in names], dtype=float)

    def to_yaml(self) -> float | dict[str, float]:
        if not self.by_name:
            return self.default
        return {"default": self.default, **dict(self.by_name)}


SIM_LOOPS = ("reference", "fast")
MAX_SUBSTEPS = 20  # physics.substeps: beyond this the fast loop is slower than the reference


@dataclass(frozen=True)
class PhysicsParams:
    """dt_s: physics step [s]; gravity (3,) [m/s^2]; solver_iterations of the constraint solver;
    loop: how SimWorld.step runs the actuator model each physics step (docs/benchmarks.md, "The sim loop"):
    'reference' (the default: explicit PD, made for a 1 kHz dt_s) or 'fast' (implicit PD on fewer
    PyBullet calls, latency-queue commands weighted by the part of the step they act in, made for a
    coarser dt_s such as 0.005 s; SimWorld._step_fast). substeps: constraint-solver steps per physics
    step (PyBullet's numSubSteps; the actuator model still runs once per dt_s): contacts resolved at
    dt_s / substeps, for grasping on the fast loop (2 at 5 ms for the SO-101's pick tasks)."""

    dt_s: float
    gravity: tuple[float, float, float]
    solver_iterations: int
    loop: str = "reference"
    substeps: int = 1


@dataclass(frozen=True)
class RateParams:
    """Default publishing rates of the sim node [Hz]."""

    joint_states_hz: float
    camera_hz: float
    clock_hz: float


@dataclass(frozen=True)
class RobotParams:
    """ee_link: tool point link; home_pose: joint name -> position [rad or m] at episode start."""

    ee_link: str
    home_pose: tuple[tuple[str, float], ...]


ACTUATOR_MODELS = ("pd", "servo")


@dataclass(frozen=True)
class ServoParams:
    """The servo actuator model (actuator.model: servo), what hobby and smart servos (Feetech STS,
    Dynamixel) do inside: after the dead time (actuation_latency_s), a position loop whose speed
    command, gain * (target - reference), is limited to max_speed and changes at most at
    max_acceleration; the reference it integrates is what the PD loop (kp, kd, effort limit) then
    tracks. Within deadband of the target the loop commands no speed.

    max_speed [rad/s] (> 0), max_acceleration [rad/s^2] (> 0), gain [1/s] (> 0), deadband [rad] (>= 0).
    """

    max_speed: JointValues
    max_acceleration: JointValues
    gain: JointValues
    deadband: JointValues


@dataclass(frozen=True)
class ActuatorParams:
    """The actuator model every command goes through (all in sim time):

    model: 'pd' (the default: the PD loop tracks the delayed command) or 'servo' (the PD loop
    tracks the reference of a speed- and acceleration-limited servo position loop, `servo`);
    actuation_latency_s [s]: delay from command receipt to the PD loop (the dead time);
    kp [N*m/rad], kd [N*m*s/rad]: PD position loop; effort_limit [N*m]: may only tighten the URDF's;
    gravity_compensation: fraction of the gravity torque fed forward (0 = none, 1 = perfect model);
    damping [N*m*s/rad]: viscous joint damping; friction [N*m]: Coulomb joint friction.
    """

    actuation_latency_s: float
    kp: JointValues
    kd: JointValues
    effort_limit: JointValues | None
    gravity_compensation: float
    damping: JointValues
    friction: JointValues
    model: str = "pd"
    servo: ServoParams | None = None


TASK_NAMES = ("reach", "reach_hold", "pick_lift", "pick_place")


@dataclass(frozen=True)
class ReachHoldParams:
    """reach_hold (task.reach_hold, optional): the tool point must stay within radius_m [m] of the
    target with a speed under max_speed_m_s [m/s] for hold_s [s] without a break."""

    radius_m: float = 0.02
    max_speed_m_s: float = 0.05
    hold_s: float = 1.0


@dataclass(frozen=True)
class PickLiftParams:
    """pick_lift (task.pick_lift, optional): a cube drawn per episode, uniformly: edge size_m [m],
    mass_kg [kg], lateral friction coefficient, colour (each RGB channel in rgb), yaw_rad [rad] about
    the vertical, center x, y [m] in region (world frame, resting on the table). Success: the cube
    at least lift_height_m [m] above the table (its lowest point) while touching both jaws, for
    hold_s [s] without a break."""

    size_m: tuple[float, float] = (0.02, 0.03)
    mass_kg: tuple[float, float] = (0.03, 0.12)
    friction: tuple[float, float] = (0.8, 1.2)
    rgb: tuple[float, float] = (0.1, 0.9)
    yaw_rad: tuple[float, float] = (-0.7854, 0.7854)
    region: tuple[tuple[float, float], tuple[float, float]] = ((0.16, 0.25), (-0.08, 0.08))
    lift_height_m: float = 0.05
    hold_s: float = 1.0


@dataclass(frozen=True)
class PickPlaceParams:
    """pick_place (task.pick_place, optional; the cube is drawn from task.pick_lift's ranges): a
    square zone marked on the table, half-side zone_half_m [m], its center x, y [m] drawn uniformly
    in zone_region (world frame) at least min_separation_m [m] from the cube. Success: the cube's
    center over the zone, resting on the table (lowest point under rest_height_m [m]), touched by
    neither jaw and slower than settle_speed_m_s [m/s], for settle_s [s] without a break."""

    zone_half_m: float = 0.03
    zone_region: tuple[tuple[float, float], tuple[float, float]] = ((0.16, 0.25), (-0.12, 0.12))
    min_separation_m: float = 0.08
    zone_rgba: tuple[float, float, float, float] = (0.1, 0.7, 0.2, 1.0)
    rest_height_m: float = 0.004
    settle_speed_m_s: float = 0.02
    settle_s: float = 0.5


@dataclass(frozen=True)
class TaskParams:
    """The task (name: reach | reach_hold | pick_lift | pick_place, sim/tasks.py): success radius [m]
    (reach), timeout [s] (sim time), target sphere and sampling box [m]
    (reach, reach_hold), and the settings of the other tasks (defaults unless the file has
    task.reach_hold / task.pick_lift / task.pick_place)."""

    name: str
    success_radius_m: float
    timeout_s: float
    target_radius_m: float
    target_rgba: tuple[float, float, float, float]
    target_region: tuple[tuple[float, float], tuple[float, float], tuple[float, float]]
    reach_hold: ReachHoldParams = field(default_factory=ReachHoldParams)
    pick_lift: PickLiftParams = field(default_factory=PickLiftParams)
    pick_place: PickPlaceParams = field(default_factory=PickPlaceParams)


@dataclass(frozen=True)
class TableParams:
    """Box table whose top surface is at z = 0: size (x, y, z) [m], center_xy [m], color."""

    size: tuple[float, float, float]
    center_xy: tuple[float, float]
    rgba: tuple[float, float, float, float]


@dataclass(frozen=True)
class CameraParams:
    """calibration_file: ROS camera_calibration YAML (relative paths are relative to config/);
    link: URDF camera link (optical frame); fallback_position / fallback_look_at [m]: the camera pose
    when the URDF has no such link; near_m / far_m [m]: render clipping planes.

    mount_xyz / mount_look_at [m] and mount_up, optional: a camera mounted on `link` rather than being
    it (a wrist camera on the gripper's link, whose frame is not an optical one): the optical frame
    sits at mount_xyz in the link's frame, its z axis toward mount_look_at and image up toward mount_up
    (the link's +z unless given). None (not in the file) = the link's frame is the optical frame."""

    calibration_file: str
    link: str
    fallback_position: tuple[float, float, float]
    fallback_look_at: tuple[float, float, float]
    near_m: float
    far_m: float
    mount_xyz: tuple[float, float, float] | None = None
    mount_look_at: tuple[float, float, float] | None = None
    mount_up: tuple[float, float, float] = (0.0, 0.0, 1.0)

    def calibration_path(self) -> Path:
        path = Path(self.calibration_file)
        return path if path.is_absolute() else config_path(self.calibration_file)


@dataclass(frozen=True)
class LightingParams:
    """direction (3,): toward the light (world); intensity: diffuse scale; ambient coefficient."""

    direction: tuple[float, float, float]
    intensity: float
    ambient: float
    shadow: bool


PUSH_KEYS = ("interval_s", "force_n", "duration_s", "links")


@dataclass(frozen=True)
class PushParams:
    """Random pushes: external forces on the arm's links at random times (randomization.pushes).

    Drawn per episode (sim.world.SimWorld, only where pushes are enabled): the first push starts
    interval_s after the episode start, each next one interval_s after the previous one's start,
    until the task's timeout. Each push acts on one link drawn uniformly from `links` (empty = every
    link a movable joint carries), at its center of mass, with a force of magnitude force_n in a
    direction uniform on the sphere, held constant for duration_s (pushes that overlap add up).
    interval_s [s] (low > 0), force_n [N] (>= 0), duration_s [s] (low > 0): ranges [low, high].
    """

    interval_s: tuple[float, float]
    force_n: tuple[float, float]
    duration_s: tuple[float, float]
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class RandomizationParams:
    """Ranges [low, high] sampled uniformly per episode (scales multiply the nominal values), and
    jitter magnitudes (uniform in [-j, j] per axis)."""

    mass_scale: tuple[float, float]
    damping_scale: tuple[float, float]
    friction_scale: tuple[float, float]
    kp_scale: tuple[float, float]
    kd_scale: tuple[float, float]
    actuation_latency_s: tuple[float, float]
    gravity_z: tuple[float, float]
    light_direction_jitter_rad: float
    light_intensity: tuple[float, float]
    camera_position_jitter_m: float
    camera_rotation_jitter_rad: float
    target_rgb_jitter: float
    noise_std: tuple[float, float]
    # Servo model only (drawn only when actuator.model is servo, so a pd world draws as before);
    # absent from the file = [1, 1] (not randomized).
    servo_speed_scale: tuple[float, float] = (1.0, 1.0)
    servo_acceleration_scale: tuple[float, float] = (1.0, 1.0)
    servo_gain_scale: tuple[float, float] = (1.0, 1.0)
    # Random pushes (absent from the file = None: a world cannot enable pushes).
    pushes: PushParams | None = None


@dataclass(frozen=True)
class SimParams:
    """Everything in config/sim_params.yaml, validated. `version` is the content hash of the raw YAML
    mapping; `source` the file it came from. `artifacts` is the mapping given to
    core.camera_artifacts.ArtifactConfig.from_dict."""

    physics: PhysicsParams
    rates: RateParams
    robot: RobotParams
    actuator: ActuatorParams
    task: TaskParams
    table: TableParams
    camera: CameraParams
    lighting: LightingParams
    artifacts: dict[str, Any]
    randomization: RandomizationParams
    version: str
    source: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    # Shortcuts for the names the rest of the stack uses.
    @property
    def physics_dt(self) -> float:
        """Physics step [s]."""
        return self.physics.dt_s

    @property
    def actuation_latency_s(self) -> float:
        return self.actuator.actuation_latency_s

    def home_pose(self, names: Sequence[str]) -> dict[str, float]:
        """Home positions by joint name for the joints in `names` that the file lists."""
        table = dict(self.robot.home_pose)
        return {n: table[n] for n in names if n in table}

    def to_dict(self) -> dict[str, Any]:
        """The YAML mapping these parameters came from (hashes to `version`)."""
        return dict(self.raw)


# ----------------------------------------------------------------------------------------------
class _Reader:
    """Field access with errors that name the file, the dotted field and the value."""

    def __init__(self, data: Any, source: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(source, "<file>", data, "expected a YAML mapping")
        self.data = data
        self.source = source

    def error(self, path: str, value: Any, problem: str) -> ConfigError:
        return ConfigError(self.source, path, value, problem)

    def get(self, path: str, default: Any = ...) -> Any:
        node: Any = self.data
        walked = []
        for key in path.split("."):
            walked.append(key)
            if not isinstance(node, Mapping) or key not in node:
                if default is not ...:
                    return default
                if not isinstance(node, Mapping):
                    raise self.error(".".join(walked[:-1]), node, "expected a mapping")
                raise self.error(path, None, "missing")
            node = node[key]
        return node

    def number(self, path: str, low: float | None = None, high: float | None = None, *,
               strict_low: bool = False, default: Any = ...) -> float:
        value = self.get(path, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(path, value, "must be a finite number")
        if low is not None and (value <= low if strict_low else value < low):
            raise self.error(path, value, f"must be {'>' if strict_low else '>='} {low}")
        if high is not None and value > high:
            raise self.error(path, value, f"must be <= {high}")
        return float(value)

    def integer(self, path: str, low: int) -> int:
        value = self.get(path)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.error(path, value, f"must be an integer >= {low}")
        return int(value)

    def text(self, path: str) -> str:
        value = self.get(path)
        if not isinstance(value, str) or not value:
            raise self.error(path, value, "must be a non-empty string")
        return value

    def boolean(self, path: str, default: Any = ...) -> bool:
        value = self.get(path, default)
        if not isinstance(value, bool):
            raise self.error(path, value, "must be true or false")
        return value

    def vector(self, path: str, length: int, low: float | None = None, high: float | None = None) -> tuple:
        value = self.get(path)
        if (not isinstance(value, Sequence) or isinstance(value, str) or len(value) != length
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                           for v in value)):
            raise self.error(path, value, f"must be a list of {length} finite numbers")
        if low is not None and min(value) < low or high is not None and max(value) > high:
            raise self.error(path, value, f"values must lie in [{low}, {high}]")
        return tuple(float(v) for v in value)

    def interval(self, path: str, low: float | None = None, high: float | None = None) -> tuple[float, float]:
        lo, hi = self.vector(path, 2, low, high)
        if lo > hi:
            raise self.error(path, [lo, hi], "must be [low, high] with low <= high")
        return lo, hi

    def per_joint(self, path: str, low: float, *, strict_low: bool = False, default: Any = ...) -> JointValues | None:
        value = self.get(path, default)
        if value is None:
            return None

        def check(where: str, v: Any) -> float:
            bad = isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
            if bad or (v <= low if strict_low else v < low):
                raise self.error(where, v, f"must be a finite number {'>' if strict_low else '>='} {low}")
            return float(v)

        if isinstance(value, Mapping):
            entries = {str(k): check(f"{path}.{k}", v) for k, v in value.items()}
            fallback = entries.pop("default", math.inf if path.endswith("effort_limit") else None)
            if fallback is None:
                raise self.error(f"{path}.default", None, "missing (needed for joints not listed)")
            return JointValues(fallback, tuple(sorted(entries.items())))
        return JointValues(check(path, value))


def _optional_interval(r: _Reader, path: str) -> tuple[float, float]:
    """A scale range [low, high] (low > 0) that may be absent (then [1, 1])."""
    if r.get(path, None) is None:
        return 1.0, 1.0
    low, high = r.interval(path, 0.0)
    if low <= 0:
        raise r.error(path, [low, high], "scales must be > 0")
    return low, high


def _push_params(r: _Reader, dt_s: float) -> PushParams | None:
    """randomization.pushes (optional): validated ranges, see PushParams."""
    path = "randomization.pushes"
    value = r.get(path, None)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise r.error(path, value, f"must be a mapping with keys {', '.join(PUSH_KEYS)}")
    for key in value:
        if key not in PUSH_KEYS:
            raise r.error(f"{path}.{key}", value[key], f"unknown key (known: {', '.join(PUSH_KEYS)})")
    ranges = {}
    for key, unit, positive in (("interval_s", "s", True), ("force_n", "N", False), ("duration_s", "s", True)):
        where = f"{path}.{key}"
        low, high = r.vector(where, 2)
        if low > high:
            raise r.error(where, [low, high], "must be [low, high] with low <= high")
        if positive and low <= 0:
            raise r.error(where, [low, high], f"must be > 0 [{unit}]")
        if low < 0:
            raise r.error(where, [low, high], f"must be >= 0 [{unit}] (a magnitude; the direction is drawn)")
        ranges[key] = (low, high)
    if ranges["interval_s"][0] < dt_s:
        raise r.error(f"{path}.interval_s", list(ranges["interval_s"]),
                      f"low must be >= physics.dt_s = {dt_s} (one push start per physics step at most)")
    links = r.get(f"{path}.links", [])
    if (not isinstance(links, Sequence) or isinstance(links, str)
            or not all(isinstance(n, str) and n for n in links) or len(set(links)) != len(links)):
        raise r.error(f"{path}.links", links, "must be a list of distinct link names (empty = every movable link)")
    return PushParams(interval_s=ranges["interval_s"], force_n=ranges["force_n"], duration_s=ranges["duration_s"],
                      links=tuple(links))


def _known_keys(r: _Reader, path: str, known: Sequence[str]) -> Mapping[str, Any]:
    """The optional mapping at `path` ({} when absent); ConfigError for a non-mapping or an unknown key."""
    value = r.get(path, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise r.error(path, value, f"must be a mapping with keys {', '.join(known)}")
    for key in value:
        if key not in known:
            raise r.error(f"{path}.{key}", value[key], f"unknown key (known: {', '.join(known)})")
    return value


def _reach_hold_params(r: _Reader) -> ReachHoldParams:
    """task.reach_hold (optional, defaults of ReachHoldParams)."""
    path = "task.reach_hold"
    default = ReachHoldParams()
    given = _known_keys(r, path, tuple(ReachHoldParams.__dataclass_fields__))
    values = {key: r.number(f"{path}.{key}", 0.0, strict_low=True) if key in given else getattr(default, key)
              for key in ReachHoldParams.__dataclass_fields__}
    return ReachHoldParams(**values)


def _pick_lift_params(r: _Reader) -> PickLiftParams:
    """task.pick_lift (optional, defaults of PickLiftParams); ranges [low, high]."""
    path = "task.pick_lift"
    default = PickLiftParams()
    given = _known_keys(r, path, tuple(PickLiftParams.__dataclass_fields__))
    bounds = {"size_m": (0.01, 0.05), "mass_kg": (1e-3, 1.0), "friction": (0.0, 5.0), "rgb": (0.0, 1.0),
              "yaw_rad": (-math.pi, math.pi)}
    values: dict[str, Any] = {}
    for key, (low, high) in bounds.items():
        values[key] = r.interval(f"{path}.{key}", low, high) if key in given else getattr(default, key)
    if "region" in given:
        values["region"] = (r.interval(f"{path}.region.x"), r.interval(f"{path}.region.y"))
    for key in ("lift_height_m", "hold_s"):
        if key in given:
            values[key] = r.number(f"{path}.{key}", 0.0, strict_low=True)
    return replace(default, **values)


def _pick_place_params(r: _Reader) -> PickPlaceParams:
    """task.pick_place (optional, defaults of PickPlaceParams)."""
    path = "task.pick_place"
    default = PickPlaceParams()
    given = _known_keys(r, path, tuple(PickPlaceParams.__dataclass_fields__))
    values: dict[str, Any] = {}
    if "zone_region" in given:
        values["zone_region"] = (r.interval(f"{path}.zone_region.x"), r.interval(f"{path}.zone_region.y"))
    if "zone_rgba" in given:
        values["zone_rgba"] = r.vector(f"{path}.zone_rgba", 4, 0.0, 1.0)
    if "zone_half_m" in given:
        values["zone_half_m"] = r.number(f"{path}.zone_half_m", 0.005, 0.2)
    for key in ("rest_height_m", "settle_speed_m_s", "settle_s"):
        if key in given:
            values[key] = r.number(f"{path}.{key}", 0.0, strict_low=True)
    if "min_separation_m" in given:
        values["min_separation_m"] = r.number(f"{path}.min_separation_m", 0.0)
    return replace(default, **values)


def with_task(params: SimParams, task_name: str, source: str = "--task") -> SimParams:
    """The same sim params with task.name = task_name (validated again, so the version is the hash
    of what runs). ConfigError naming `source` for an unknown task."""
    if task_name not in TASK_NAMES:
        raise ConfigError(source, "task", task_name, f"unknown task (known: {', '.join(TASK_NAMES)})")
    if task_name == params.task.name:
        return params
    data = dict(params.raw)
    data["task"] = {**dict(data.get("task", {})), "name": task_name}
    return sim_params_from_dict(data, params.source)


def sim_params_from_dict(data: dict, source: str) -> SimParams:
    """Validate a sim params mapping (as yaml.safe_load returns it); ConfigError on bad fields."""
    r = _Reader(data, source)
    physics = PhysicsParams(
        dt_s=r.number("physics.dt_s", 1e-5, 0.02),
        gravity=r.vector("physics.gravity", 3),
        solver_iterations=r.integer("physics.solver_iterations", 1),
        loop=r.get("physics.loop", "reference"),
        substeps=r.get("physics.substeps", 1),
    )
    if physics.loop not in SIM_LOOPS:
        raise r.error("physics.loop", physics.loop, f"unknown sim loop (known: {', '.join(SIM_LOOPS)})")
    if isinstance(physics.substeps, bool) or not isinstance(physics.substeps, int) \
            or not 1 <= physics.substeps <= MAX_SUBSTEPS:
        raise r.error("physics.substeps", physics.substeps, f"must be an integer in [1, {MAX_SUBSTEPS}]")
    rates = RateParams(
        joint_states_hz=r.number("rates.joint_states_hz", 0.0, strict_low=True),
        camera_hz=r.number("rates.camera_hz", 0.0, strict_low=True),
        clock_hz=r.number("rates.clock_hz", 0.0, strict_low=True),
    )
    home = r.get("robot.home_pose")
    if not isinstance(home, Mapping):
        raise r.error("robot.home_pose", home, "must be a mapping {joint name: position}")
    robot = RobotParams(
        ee_link=r.text("robot.ee_link"),
        home_pose=tuple(sorted((str(k), r.number(f"robot.home_pose.{k}")) for k in home)),
    )
    actuator = ActuatorParams(
        actuation_latency_s=r.number("actuator.actuation_latency_s", 0.0, 5.0),
        kp=r.per_joint("actuator.kp", 0.0, strict_low=True),
        kd=r.per_joint("actuator.kd", 0.0),
        effort_limit=r.per_joint("actuator.effort_limit", 0.0, strict_low=True, default=None) or None,
        gravity_compensation=r.number("actuator.gravity_compensation", 0.0, 1.0),
        damping=r.per_joint("actuator.damping", 0.0),
        friction=r.per_joint("actuator.friction", 0.0),
    )
    model = r.get("actuator.model", "pd")
    if model not in ACTUATOR_MODELS:
        raise r.error("actuator.model", model, f"unknown actuator model (known: {', '.join(ACTUATOR_MODELS)})")
    if model == "servo":
        actuator = replace(actuator, model=model, servo=ServoParams(
            max_speed=r.per_joint("actuator.servo.max_speed", 0.0, strict_low=True),
            max_acceleration=r.per_joint("actuator.servo.max_acceleration", 0.0, strict_low=True),
            gain=r.per_joint("actuator.servo.gain", 0.0, strict_low=True),
            deadband=r.per_joint("actuator.servo.deadband", 0.0, default=0.0),
        ))
    elif r.get("actuator.servo", None) is not None:
        raise r.error("actuator.servo", r.get("actuator.servo"), "given, but actuator.model is not servo")
    if actuator.effort_limit is not None and not actuator.effort_limit.by_name \
            and math.isinf(actuator.effort_limit.default):
        actuator = replace(actuator, effort_limit=None)
    task_name = r.text("task.name")
    if task_name not in TASK_NAMES:
        raise r.error("task.name", task_name, f"unknown task (known: {', '.join(TASK_NAMES)})")
    task = TaskParams(
        name=task_name,
        success_radius_m=r.number("task.success_radius_m", 0.0, strict_low=True),
        timeout_s=r.number("task.timeout_s", 0.0, strict_low=True),
        target_radius_m=r.number("task.target_radius_m", 0.0, strict_low=True),
        target_rgba=r.vector("task.target_rgba", 4, 0.0, 1.0),
        target_region=(r.interval("task.target_region.x"), r.interval("task.target_region.y"),
                       r.interval("task.target_region.z")),
        reach_hold=_reach_hold_params(r),
        pick_lift=_pick_lift_params(r),
        pick_place=_pick_place_params(r),
    )
    table = TableParams(
        size=r.vector("table.size", 3, 1e-3),
        center_xy=r.vector("table.center_xy", 2),
        rgba=r.vector("table.rgba", 4, 0.0, 1.0),
    )
    camera = CameraParams(
        calibration_file=r.text("camera.calibration_file"),
        link=r.text("camera.link"),
        fallback_position=r.vector("camera.fallback_position", 3),
        fallback_look_at=r.vector("camera.fallback_look_at", 3),
        near_m=r.number("camera.near_m", 0.0, strict_low=True),
        far_m=r.number("camera.far_m", 0.0, strict_low=True),
    )
    if camera.far_m <= camera.near_m:
        raise r.error("camera.far_m", camera.far_m, f"must be > camera.near_m = {camera.near_m}")
    if np.allclose(camera.fallback_position, camera.fallback_look_at):
        raise r.error("camera.fallback_look_at", list(camera.fallback_look_at), "must differ from fallback_position")
    camera = _camera_mount(r, camera)
    lighting = LightingParams(
        direction=r.vector("lighting.direction", 3),
        intensity=r.number("lighting.intensity", 0.0),
        ambient=r.number("lighting.ambient", 0.0, 1.0),
        shadow=r.boolean("lighting.shadow", False),
    )
    if np.linalg.norm(lighting.direction) == 0:
        raise r.error("lighting.direction", list(lighting.direction), "must not be the zero vector")
    artifacts = r.get("artifacts")
    if not isinstance(artifacts, Mapping):
        raise r.error("artifacts", artifacts, "must be a mapping (core.camera_artifacts.ArtifactConfig fields)")
    rand = RandomizationParams(
        mass_scale=r.interval("randomization.mass_scale", 1e-3),
        damping_scale=r.interval("randomization.damping_scale", 0.0),
        friction_scale=r.interval("randomization.friction_scale", 0.0),
        kp_scale=r.interval("randomization.kp_scale", 1e-3),
        kd_scale=r.interval("randomization.kd_scale", 0.0),
        actuation_latency_s=r.interval("randomization.actuation_latency_s", 0.0, 5.0),
        gravity_z=r.interval("randomization.gravity_z"),
        light_direction_jitter_rad=r.number("randomization.light_direction_jitter_rad", 0.0, math.pi),
        light_intensity=r.interval("randomization.light_intensity", 0.0),
        camera_position_jitter_m=r.number("randomization.camera_position_jitter_m", 0.0, 1.0),
        camera_rotation_jitter_rad=r.number("randomization.camera_rotation_jitter_rad", 0.0, 1.0),
        target_rgb_jitter=r.number("randomization.target_rgb_jitter", 0.0, 1.0),
        noise_std=r.interval("randomization.noise_std", 0.0, 255.0),
        servo_speed_scale=_optional_interval(r, "randomization.servo_speed_scale"),
        servo_acceleration_scale=_optional_interval(r, "randomization.servo_acceleration_scale"),
        servo_gain_scale=_optional_interval(r, "randomization.servo_gain_scale"),
        pushes=_push_params(r, physics.dt_s),
    )
    return SimParams(
        physics=physics, rates=rates, robot=robot, actuator=actuator, task=task, table=table,
        camera=camera, lighting=lighting, artifacts=dict(artifacts), randomization=rand,
        version=content_hash(data), source=source, raw=dict(data),
    )


def with_sim_loop(params: SimParams, loop: str, dt_s: float, substeps: int = 1) -> SimParams:
    """`params` with physics.loop = `loop`, physics.dt_s = `dt_s` [s] and physics.substeps (written
    only when above 1), validated as a file would be (a new version hash: what a checkpoint trained on
    it records); source says what changed."""
    data = dict(params.raw)
    physics = {**dict(data.get("physics") or {}), "loop": loop, "dt_s": dt_s}
    physics.pop("substeps", None)
    if substeps != 1:
        physics["substeps"] = substeps
    data["physics"] = physics
    more = f", substeps {substeps}" if substeps != 1 else ""
    return sim_params_from_dict(data, f"{params.source} (physics.loop {loop}, dt_s {dt_s}{more})")


SIM_LOOP_KEYS = ("loop", "dt_s", "substeps")


def with_sim_loop_override(params: SimParams, override: Mapping[str, Any], source: str,
                           field_name: str = "sim_loop") -> SimParams:
    """`params` with a config's sim loop override applied (`{loop: fast, dt_s: 0.005, substeps: 2}`:
    a training config's `sim_loop`, so a run collects on the fast loop without a copy of the robot's
    sim params); an empty mapping returns `params` unchanged. A bad override fails naming
    `field_name` in `source` and the value."""
    if not override:
        return params
    if not isinstance(override, Mapping):
        raise ConfigError(source, field_name, override, f"expected a mapping of {', '.join(SIM_LOOP_KEYS)}")
    unknown = sorted(set(override) - set(SIM_LOOP_KEYS))
    if unknown or "loop" not in override:
        raise ConfigError(source, field_name, dict(override),
                          f"needs loop, may set dt_s [s] and substeps (unknown: {', '.join(unknown) or 'none'})")
    dt_s = override.get("dt_s", params.physics.dt_s)
    substeps = override.get("substeps", 1)
    try:
        return with_sim_loop(params, str(override["loop"]), dt_s, substeps)
    except ConfigError as err:
        raise ConfigError(source, field_name, dict(override), f"{err.field} = {err.value!r}: {err.problem}") from err


def trained_loop_note(provenance: Mapping[str, Any], trained_version: str, params: SimParams,
                      checkpoint: str) -> str | None:
    """When the checkpoint (a student's or a teacher's) was trained on these sim params with a sim
    loop override (its config's `sim_loop`, e.g. the fast loop) and this evaluation runs another loop
    of them (their own, or another --sim-loop), the line that says so and how to evaluate on the
    training loop; None otherwise (then a version mismatch is a real one). `params`: the sim params
    as this evaluation runs them. The override comes from the checkpoint, an untrusted file: one that
    does not validate is ignored."""
    config = provenance.get("config")
    override = config.get("sim_loop") if isinstance(config, Mapping) else None
    if not isinstance(override, Mapping) or not override or trained_version == params.version:
        return None
    try:
        if with_sim_loop_override(params, override, checkpoint).version != trained_version:
            return None
    except Sim2RealError:
        return None
    flow = "{" + ", ".join(f"{k}: {v}" for k, v in override.items()) + "}"
    physics = params.physics
    return (f"{checkpoint} was trained on these sim params with sim_loop {flow}; this evaluation runs loop "
            f"{physics.loop}, dt_s {physics.dt_s}, substeps {physics.substeps}: the check that the policy holds "
            f"there (--sim-loop '{flow}' evaluates on the training loop)")


def _camera_mount(r: _Reader, camera: CameraParams) -> CameraParams:
    """camera.mount_xyz / mount_look_at / mount_up, optional (all absent: the link is the optical
    frame, as before the keys existed, so older files keep their version hash)."""
    given = [k for k in ("mount_xyz", "mount_look_at", "mount_up") if r.get(f"camera.{k}", None) is not None]
    if not given:
        return camera
    if "mount_xyz" not in given or "mount_look_at" not in given:
        raise r.error("camera.mount_xyz" if "mount_xyz" not in given else "camera.mount_look_at", None,
                      "a camera mount needs both mount_xyz and mount_look_at [m] (in camera.link's frame)")
    xyz, look_at = r.vector("camera.mount_xyz", 3), r.vector("camera.mount_look_at", 3)
    up = r.vector("camera.mount_up", 3) if "mount_up" in given else camera.mount_up
    forward = np.subtract(look_at, xyz)
    if np.linalg.norm(forward) < 1e-6:
        raise r.error("camera.mount_look_at", list(look_at), "must differ from camera.mount_xyz")
    if np.linalg.norm(np.cross(forward / np.linalg.norm(forward), up)) < 1e-3:
        raise r.error("camera.mount_up", list(up), "must not be parallel to mount_look_at - mount_xyz")
    return replace(camera, mount_xyz=xyz, mount_look_at=look_at, mount_up=up)


def load_sim_params(path: str | Path | None = None) -> SimParams:
    """Read and validate a sim params YAML (default config/sim_params.yaml)."""
    path = Path(path) if path else config_path(DEFAULT_FILE)
    source = str(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(source, "<file>", None, f"cannot read sim params: {err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(source, "<file>", None, f"not valid YAML: {err}") from err
    return sim_params_from_dict(data, source)


def params_summary(params: SimParams) -> dict[str, Any]:
    """A flat, loggable summary (for start-up logs and diagnostics)."""
    return {"version": params.version, "source": params.source, "physics": asdict(params.physics)}
