"""Message <-> numpy conversion, in one place (docs/design.md §6).

Imports message types only (no rclpy.init needed), so it is tested without a running node.
Everything that turns a ROS message into arrays, or arrays into a message, lives here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from .core.control.action_chunk import ActionChunk
from .core.perception.camera_model import CameraModel
from .core.report import Level
from .core.timebase import NS_PER_S
from .topics import EpisodeOutcome, StatusPayload, merged_status_values, status_values

# Channels and dtype of each image encoding the stack accepts (real drivers publish all of these).
ENCODING_CHANNELS = {
    "rgb8": 3,
    "bgr8": 3,
    "rgba8": 4,
    "bgra8": 4,
    "mono8": 1,
    "yuv422": 2,  # UYVY
    "uyvy": 2,
    "yuv422_yuy2": 2,  # YUYV
    "yuyv": 2,
}


class MessageError(ValueError):
    """A message is malformed (wrong size, unknown encoding, NaN...). The text says what and why."""


# ----------------------------------------------------------------------------------------------
# Time
def stamp_to_ns(stamp: Time) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def ns_to_stamp(ns: int) -> Time:
    """Integer nanoseconds -> builtin_interfaces/Time."""
    ns = int(ns)
    return Time(sec=ns // NS_PER_S, nanosec=ns % NS_PER_S)


def seconds_to_duration(seconds: float) -> Duration:
    """Seconds [s] -> builtin_interfaces/Duration (rounded to the nearest ns)."""
    ns = int(round(seconds * NS_PER_S))
    return Duration(sec=ns // NS_PER_S, nanosec=ns % NS_PER_S)


def duration_to_seconds(duration: Duration) -> float:
    """builtin_interfaces/Duration -> seconds [s]."""
    return duration.sec + duration.nanosec * 1e-9


# ----------------------------------------------------------------------------------------------
# Images
def image_to_array(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> uint8 array (H, W, C) in the message's own encoding (a copy-free view
    where the rows are contiguous). Raises MessageError for unknown encodings and size mismatches."""
    encoding = msg.encoding.lower()
    channels = ENCODING_CHANNELS.get(encoding)
    if channels is None:
        raise MessageError(f"unknown image encoding '{msg.encoding}' (known: {sorted(ENCODING_CHANNELS)})")
    row_bytes = msg.width * channels
    if msg.width == 0 or msg.height == 0:
        raise MessageError(f"empty image {msg.width}x{msg.height}")
    if msg.step < row_bytes:
        raise MessageError(f"step {msg.step} < width*channels {row_bytes} for {msg.width}x{msg.height} {encoding}")
    if len(msg.data) != msg.step * msg.height:
        raise MessageError(f"data has {len(msg.data)} bytes, expected step*height = {msg.step * msg.height}")
    buf = np.frombuffer(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)
    return buf[:, :row_bytes].reshape(msg.height, msg.width, channels)


def array_to_image(array: np.ndarray, encoding: str, stamp_ns: int, frame_id: str = "") -> Image:
    """uint8 array (H, W, C) -> sensor_msgs/Image with the given encoding and capture stamp [ns]."""
    if array.dtype != np.uint8:
        raise MessageError(f"image array must be uint8, got {array.dtype}")
    if array.ndim == 2:
        array = array[:, :, None]
    height, width, channels = array.shape
    expected = ENCODING_CHANNELS.get(encoding)
    if expected != channels:
        raise MessageError(f"encoding {encoding} needs {expected} channels, array has {channels}")
    msg = Image()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(height), int(width)
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(width * channels)
    msg.data = np.ascontiguousarray(array).tobytes()
    return msg


# ----------------------------------------------------------------------------------------------
# Joint states
@dataclass(frozen=True)
class JointSample:
    """A joint state as arrays: names, positions [rad], velocities [rad/s] (or None), stamp [ns]."""

    names: tuple[str, ...]
    positions: np.ndarray
    velocities: np.ndarray | None
    stamp_ns: int


def joint_state_to_sample(msg: JointState, use_velocities: bool = True) -> JointSample:
    """sensor_msgs/JointState -> JointSample. Raises MessageError on length mismatch or NaN/Inf.

    use_velocities=False: the velocities are neither read nor checked (the sample has none). For a
    reader that uses positions only: ros2_control's joint_state_broadcaster publishes NaN for an
    interface a joint lacks, which must not reject the positions (issue 34). Efforts are never read.
    """
    positions = np.asarray(msg.position, dtype=float)
    if msg.name and len(msg.name) != len(positions):
        raise MessageError(f"JointState has {len(msg.name)} names but {len(positions)} positions")
    if not np.isfinite(positions).all():
        raise MessageError(f"JointState positions contain NaN/Inf: {positions.tolist()}")
    velocities = None
    if use_velocities and len(msg.velocity) == len(positions) and len(positions) > 0:
        velocities = np.asarray(msg.velocity, dtype=float)
        if not np.isfinite(velocities).all():
            raise MessageError(f"JointState velocities contain NaN/Inf: {velocities.tolist()}")
    return JointSample(tuple(msg.name), positions, velocities, stamp_to_ns(msg.header.stamp))


def reorder(sample: JointSample, names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Positions of `sample` in the order of `names` [rad]. Raises MessageError naming missing joints."""
    if tuple(sample.names) == tuple(names):
        return sample.positions
    index = {n: i for i, n in enumerate(sample.names)}
    missing = [n for n in names if n not in index]
    if missing:
        raise MessageError(f"joint state lacks joints {missing} (it has {list(sample.names)})")
    return sample.positions[[index[n] for n in names]]


def make_joint_state(
    names: list[str] | tuple[str, ...],
    positions: np.ndarray,
    stamp_ns: int,
    velocities: np.ndarray | None = None,
    efforts: np.ndarray | None = None,
) -> JointState:
    """Arrays -> sensor_msgs/JointState (positions [rad], velocities [rad/s], efforts [N*m])."""
    msg = JointState()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.name = list(names)
    msg.position = [float(v) for v in positions]
    if velocities is not None:
        msg.velocity = [float(v) for v in velocities]
    if efforts is not None:
        msg.effort = [float(v) for v in efforts]
    return msg


# ----------------------------------------------------------------------------------------------
# Action chunks
def chunk_to_trajectory(chunk: ActionChunk) -> JointTrajectory:
    """ActionChunk -> trajectory_msgs/JointTrajectory (header.stamp = observation stamp)."""
    msg = JointTrajectory()
    msg.header.stamp = ns_to_stamp(chunk.stamp_ns)
    msg.joint_names = list(chunk.joint_names)
    for t, q in zip(chunk.times_s, chunk.positions, strict=False):
        point = JointTrajectoryPoint()
        point.positions = [float(v) for v in q]
        point.time_from_start = seconds_to_duration(float(t))
        msg.points.append(point)
    return msg


def trajectory_to_chunk(msg: JointTrajectory) -> ActionChunk:
    """JointTrajectory -> ActionChunk. Raises MessageError for empty chunks, ragged or non-finite
    points, and time_from_start that does not strictly increase."""
    n = len(msg.joint_names)
    if n == 0:
        raise MessageError("action chunk has no joint_names")
    if not msg.points:
        raise MessageError("action chunk has no points")
    positions = np.empty((len(msg.points), n))
    times = np.empty(len(msg.points))
    for k, point in enumerate(msg.points):
        if len(point.positions) != n:
            raise MessageError(f"point {k} has {len(point.positions)} positions for {n} joints")
        positions[k] = point.positions
        times[k] = duration_to_seconds(point.time_from_start)
    if not np.isfinite(positions).all():
        raise MessageError("action chunk contains NaN/Inf positions")
    if np.any(np.diff(times) <= 0):
        raise MessageError(f"time_from_start must strictly increase, got {times.tolist()}")
    return ActionChunk(tuple(msg.joint_names), stamp_to_ns(msg.header.stamp), times, positions)


# ----------------------------------------------------------------------------------------------
# Robot commands
def make_position_command(positions: np.ndarray) -> Float64MultiArray:
    """Joint positions (n,) [rad] in the configured joint order -> Float64MultiArray, exactly what a
    ros2_control forward_position_controller accepts."""
    msg = Float64MultiArray()
    dim = MultiArrayDimension(label="joints", size=len(positions), stride=len(positions))
    msg.layout.dim = [dim]
    msg.data = [float(v) for v in positions]
    return msg


def position_command_to_array(msg: Float64MultiArray, expected_len: int) -> np.ndarray:
    """Float64MultiArray -> positions (n,) [rad]. Raises MessageError on wrong length or NaN/Inf."""
    values = np.asarray(msg.data, dtype=float)
    if len(values) != expected_len:
        raise MessageError(f"command has {len(values)} values, expected {expected_len}")
    if not np.isfinite(values).all():
        raise MessageError(f"command contains NaN/Inf: {values.tolist()}")
    return values



# ----------------------------------------------------------------------------------------------
# Diagnostics (every state, event and report topic of the stack speaks DiagnosticArray)
_LEVELS = {Level.OK: DiagnosticStatus.OK, Level.WARN: DiagnosticStatus.WARN,
           Level.ERROR: DiagnosticStatus.ERROR, Level.STALE: DiagnosticStatus.STALE}


def diagnostic_array(name: str, values: Mapping[str, object], stamp_ns: int, *, level: Level | str = Level.OK,
                     message: str = "", hardware_id: str = "") -> DiagnosticArray:
    """One DiagnosticStatus (name, level, message, hardware_id, values as str(value) in the
    mapping's order) in a DiagnosticArray stamped `stamp_ns` [ns]. level: a core.report.Level or
    its value ("ok", "warn", "error", "stale")."""
    status = DiagnosticStatus(level=_LEVELS[Level(level)], name=name, message=message, hardware_id=hardware_id,
                              values=[KeyValue(key=str(k), value=str(v)) for k, v in values.items()])
    msg = DiagnosticArray(status=[status])
    msg.header.stamp = ns_to_stamp(stamp_ns)
    return msg


def payload_to_diagnostics(payload: StatusPayload, stamp_ns: int) -> DiagnosticArray:
    """A typed payload (topics.SupervisorState(...).to_status(), ...) as its DiagnosticArray [ns stamp]."""
    return diagnostic_array(payload.name, payload.values, stamp_ns, level=payload.level, message=payload.message,
                            hardware_id=payload.hardware_id)


def diagnostic_values(msg: DiagnosticArray | None, index: int = 0) -> dict[str, str]:
    """Key-values of status `index` of a DiagnosticArray ({} for None or a missing status): a
    node's generic report. The stack's own payloads have types in topics.py."""
    return status_values(msg, index)


def merged_diagnostic_values(msg: DiagnosticArray | None) -> dict[str, str]:
    """Key-values of every status of a DiagnosticArray, later statuses winning ({} for None)."""
    return merged_status_values(msg)


def diagnostic_level(msg: DiagnosticArray, index: int = 0) -> Level:
    """The Level of status `index` of a DiagnosticArray (IndexError when it has none)."""
    raw = msg.status[index].level
    return next(level for level, byte in _LEVELS.items() if byte == raw)


# ----------------------------------------------------------------------------------------------
# Camera info
def camera_model_to_info(model: CameraModel, stamp_ns: int, frame_id: str = "") -> CameraInfo:
    """CameraModel -> sensor_msgs/CameraInfo (K, D, R = I, P = [K | 0])."""
    msg = CameraInfo()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame_id
    msg.width, msg.height = model.width, model.height
    msg.distortion_model = model.distortion_model if model.distortion_model != "none" else "plumb_bob"
    msg.d = [float(v) for v in model.distortion] if model.distortion_model != "none" else [0.0] * 5
    msg.k = [float(v) for v in model.K.ravel()]
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [float(v) for v in np.hstack([model.K, np.zeros((3, 1))]).ravel()]
    return msg


def camera_info_to_model(msg: CameraInfo) -> CameraModel:
    """sensor_msgs/CameraInfo -> CameraModel. Raises MessageError for an uncalibrated (K = 0) or
    inconsistent camera_info."""
    k = np.asarray(msg.k, dtype=float).reshape(3, 3)
    if k[0, 0] <= 0 or k[1, 1] <= 0:
        raise MessageError(f"camera_info has no calibration (K = {k.ravel().tolist()})")
    model = msg.distortion_model or "plumb_bob"
    try:
        return CameraModel(
            width=int(msg.width), height=int(msg.height), fx=float(k[0, 0]), fy=float(k[1, 1]),
            cx=float(k[0, 2]), cy=float(k[1, 2]), distortion_model=model,
            distortion=tuple(float(v) for v in msg.d),
        )
    except ValueError as err:
        raise MessageError(f"camera_info is invalid: {err}") from err


def episode_outcome_message(outcome: Mapping, stamp_ns: int, hardware_id: str) -> DiagnosticArray:
    """sim/episode: one DiagnosticStatus "episode" (topics.EpisodeOutcome) from a SimWorld's
    episode_outcome() dict (with its task's failure category under "failure" when known), sent by
    `hardware_id` (the node judging the episode)."""
    typed = EpisodeOutcome(int(outcome["episode"]), bool(outcome["success"]), str(outcome["reason"]),
                           float(outcome["duration_s"]), float(outcome["final_distance_m"]), int(outcome["seed"]),
                           int(outcome.get("pushes_applied", -1)), str(outcome.get("failure", "")))
    return payload_to_diagnostics(typed.to_status(hardware_id), stamp_ns)
