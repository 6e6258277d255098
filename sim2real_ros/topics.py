"""The stack's ROS edge, typed, in one place (docs/design.md §2): every topic and service name, the
QoS of each topic as a plain description, and the project's DiagnosticArray payloads as frozen
dataclasses that are encoded and decoded here and nowhere else.

Pure: no rclpy and no message package. Message types are named by string
("diagnostic_msgs/msg/DiagnosticArray"); nodes turn a QosSpec into an rclpy QoSProfile
(nodes/common.py qos_profile), `conversions.diagnostic_array` turns a StatusPayload into a message,
and the bag writers serialize the same payload with rosbags. Decoding reads any object shaped like
a DiagnosticArray (an rclpy message, a rosbags-deserialized one), once, at the edge, as
nav2_simple_commander's PyCostmap2D copies its message into plain fields: nothing past here parses
a key/value string.

Names are relative (a namespace moves a whole graph); `Topic.absolute` is the name in a bag
recorded without a namespace.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------------------------
# QoS, as descriptions (all KEEP_LAST)


@dataclass(frozen=True)
class QosSpec:
    """A QoS profile in plain words: KEEP_LAST `depth`, reliable or best effort, transient local
    (late joiners get the last `depth` messages) or volatile."""

    depth: int
    reliable: bool = True
    transient_local: bool = False

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"QoS depth must be >= 1, got {self.depth}")


# Camera topics: best effort depth 5. A best-effort subscription also matches reliable publishers,
# so real drivers of either kind connect.
SENSOR_QOS = QosSpec(depth=5, reliable=False)
# policy/image, policy/action_chunk, command/policy, robot commands: reliable, newest only.
RELIABLE_LATEST_QOS = QosSpec(depth=1)
# joint_states: as ros2_control's joint_state_broadcaster.
JOINT_STATE_QOS = QosSpec(depth=10)
# estop, supervisor/state, sim/target, sim/status: late joiners get the last value.
LATCHED_QOS = QosSpec(depth=1, transient_local=True)
# Event streams that must not lose messages between polls (episode outcomes, interventions).
EVENTS_QOS = QosSpec(depth=50, transient_local=True)
# joy: as the ROS joy node publishes it (reliable, depth 10).
JOY_QOS = QosSpec(depth=10)
# clock: reliable, newest only, volatile (a late joiner waits for the next tick).
CLOCK_QOS = QosSpec(depth=1)
# feetech_driver/diagnostics as the supervisor reads it: reliable and volatile, as the driver
# publishes; depth 10 so an alarm is not overwritten by the next report before the callback runs.
SERVO_DIAGNOSTICS_QOS = QosSpec(depth=10)


# ----------------------------------------------------------------------------------------------
# Topics and services

DIAGNOSTIC_ARRAY_TYPE = "diagnostic_msgs/msg/DiagnosticArray"
JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
FLOAT64_ARRAY_TYPE = "std_msgs/msg/Float64MultiArray"
IMAGE_TYPE = "sensor_msgs/msg/Image"
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
TRIGGER_TYPE = "std_srvs/srv/Trigger"


@dataclass(frozen=True)
class Topic:
    """A topic of the graph: relative name, message type, the QoS its producer offers."""

    name: str
    msgtype: str
    qos: QosSpec

    @property
    def absolute(self) -> str:
        """The name in a bag recorded without a namespace ("/joint_states")."""
        return "/" + self.name


CLOCK = Topic("clock", "rosgraph_msgs/msg/Clock", CLOCK_QOS)
JOINT_STATES = Topic("joint_states", JOINT_STATE_TYPE, JOINT_STATE_QOS)
CAMERA_IMAGE = Topic("camera/image_raw", IMAGE_TYPE, SENSOR_QOS)
CAMERA_INFO = Topic("camera/camera_info", CAMERA_INFO_TYPE, SENSOR_QOS)
POLICY_IMAGE = Topic("policy/image", IMAGE_TYPE, RELIABLE_LATEST_QOS)
POLICY_CAMERA_INFO = Topic("policy/camera_info", CAMERA_INFO_TYPE, RELIABLE_LATEST_QOS)
ACTION_CHUNK = Topic("policy/action_chunk", "trajectory_msgs/msg/JointTrajectory", RELIABLE_LATEST_QOS)
POLICY_COMMAND = Topic("command/policy", JOINT_STATE_TYPE, RELIABLE_LATEST_QOS)
TELEOP_COMMAND = Topic("command/teleop", JOINT_STATE_TYPE, RELIABLE_LATEST_QOS)
JOY = Topic("joy", "sensor_msgs/msg/Joy", JOY_QOS)
ESTOP = Topic("estop", "std_msgs/msg/Bool", LATCHED_QOS)
# The robot command: what a ros2_control forward position controller accepts.
ROBOT_COMMAND = Topic("forward_position_controller/commands", FLOAT64_ARRAY_TYPE, RELIABLE_LATEST_QOS)
SUPERVISOR_STATE = Topic("supervisor/state", DIAGNOSTIC_ARRAY_TYPE, LATCHED_QOS)
INTERVENTIONS = Topic("supervisor/interventions", DIAGNOSTIC_ARRAY_TYPE, EVENTS_QOS)
SIM_EPISODE = Topic("sim/episode", DIAGNOSTIC_ARRAY_TYPE, EVENTS_QOS)
SIM_TARGET = Topic("sim/target", "geometry_msgs/msg/PointStamped", LATCHED_QOS)
SIM_STATUS = Topic("sim/status", DIAGNOSTIC_ARRAY_TYPE, LATCHED_QOS)
SERVO_DIAGNOSTICS = Topic("feetech_driver/diagnostics", DIAGNOSTIC_ARRAY_TYPE, RELIABLE_LATEST_QOS)
# Written by `sim2real dataset import`: a LeRobot episode's start and end, with its operator label.
DATASET_EPISODE = Topic("dataset/episode", DIAGNOSTIC_ARRAY_TYPE, EVENTS_QOS)

TOPICS = (CLOCK, JOINT_STATES, CAMERA_IMAGE, CAMERA_INFO, POLICY_IMAGE, POLICY_CAMERA_INFO, ACTION_CHUNK,
          POLICY_COMMAND, TELEOP_COMMAND, JOY, ESTOP, ROBOT_COMMAND, SUPERVISOR_STATE, INTERVENTIONS, SIM_EPISODE,
          SIM_TARGET, SIM_STATUS, SERVO_DIAGNOSTICS, DATASET_EPISODE)

SIM_RESET = "sim/reset"  # std_srvs/Trigger: a new episode
SIM_RESTART = "sim/restart"  # std_srvs/Trigger: episode 0 of the seed again
# std_srvs/Trigger of sim_camera with `episodes` on: the next episode of its seed, from now (the arm at home)
SIM_START_EPISODE = "sim/start_episode"
SUPERVISOR_RESET = "supervisor/reset"
SUPERVISOR_ARM = "supervisor/arm"
SUPERVISOR_HOLD = "supervisor/hold"


def node_diagnostics(node_name: str) -> str:
    """A node's own report topic, `NODE/diagnostics` (~1 Hz, drops by reason, timings)."""
    return f"{node_name}/diagnostics"


# ----------------------------------------------------------------------------------------------
# DiagnosticArray payloads


class PayloadError(ValueError):
    """A DiagnosticArray lacks what its topic's payload needs. The text says which key."""


@dataclass(frozen=True)
class StatusPayload:
    """One DiagnosticStatus in plain fields, ready to serialize. level: a core.report.Level value
    ("ok", "warn", "error", "stale"); values in the order they are written."""

    name: str
    values: Mapping[str, str]
    level: str = "ok"
    message: str = ""
    hardware_id: str = ""


def status_values(msg: object, index: int = 0) -> dict[str, str]:
    """Key-values of status `index` of a DiagnosticArray-shaped object ({} for None or a missing status)."""
    statuses = list(getattr(msg, "status", None) or [])
    if len(statuses) <= index:
        return {}
    return {str(kv.key): str(kv.value) for kv in statuses[index].values}


def merged_status_values(msg: object) -> dict[str, str]:
    """Key-values of every status of a DiagnosticArray-shaped object, later statuses winning."""
    return {str(kv.key): str(kv.value) for status in (getattr(msg, "status", None) or []) for kv in status.values}


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _float(text: str | None) -> float:
    try:
        return float(text) if text is not None else math.nan
    except ValueError:
        return math.nan


def _counters(values: Mapping[str, str], named: Iterable[str]) -> dict[str, int]:
    """The integer values whose keys are not named fields (the counters)."""
    skip = set(named)
    out = {}
    for key, text in values.items():
        if key in skip:
            continue
        try:
            out[key] = int(text)
        except ValueError:
            continue
    return out


# DiagnosticStatus level bytes, by name (core.report.Level values).
LEVEL_NAMES = ("ok", "warn", "error", "stale")


def level_name(level: object) -> str:
    """A DiagnosticStatus level as its name: rclpy gives a byte (b'\x02'), rosbags an int (2)."""
    number = level[0] if isinstance(level, (bytes, bytearray)) and len(level) == 1 else level
    try:
        return LEVEL_NAMES[int(number)]  # type: ignore[call-overload]
    except (TypeError, ValueError, IndexError):
        return "stale"


@dataclass(frozen=True)
class StatusReport:
    """One status of any node's report (a driver's feetech_driver/diagnostics, NODE/diagnostics):
    name, hardware_id, level name, message and its key-values as text."""

    name: str
    hardware_id: str
    level: str
    message: str
    values: Mapping[str, str]

    @property
    def is_error(self) -> bool:
        return self.level == "error"

    @classmethod
    def all_from_msg(cls, msg: object) -> list[StatusReport]:
        return [cls(str(s.name), str(s.hardware_id), level_name(s.level), str(s.message),
                    {str(kv.key): str(kv.value) for kv in s.values}) for s in (getattr(msg, "status", None) or [])]


# Supervisor modes (core.safety.supervisor.Mode values) and the level each reports at.
_MODE_LEVELS = {"ESTOP": "error", "HOLD": "warn"}


@dataclass(frozen=True)
class SupervisorState:
    """supervisor/state: the supervisor's mode, why, its e-stop sources and counters.

    intervention_start_ns [ns] (0 when none is running); foreign_publishers: other writers of the
    robot command topic; counters: name -> count (rejected_*, watchdog_holds, estops, ...).
    """

    mode: str
    reason: str = ""
    estop_sources: tuple[str, ...] = ()
    intervention_active: bool = False
    intervention_start_ns: int = 0
    jog_mode: str = ""
    foreign_publishers: int = 0
    last_rejection: str = ""
    estop_vanished: str = ""
    counters: Mapping[str, int] = field(default_factory=dict)

    NAMED = ("mode", "reason", "estop_sources", "intervention_active", "intervention_start_ns", "jog_mode",
             "foreign_publishers", "last_rejection", "estop_vanished")

    @property
    def summary(self) -> str:
        """"MODE: reason", the status message."""
        return f"{self.mode}: {self.reason}"

    def to_status(self) -> StatusPayload:
        values = {
            "mode": self.mode, "reason": self.reason, "estop_sources": "; ".join(self.estop_sources),
            "intervention_active": str(self.intervention_active).lower(),
            "intervention_start_ns": str(self.intervention_start_ns), "jog_mode": self.jog_mode,
            "foreign_publishers": str(self.foreign_publishers), "last_rejection": self.last_rejection,
            "estop_vanished": self.estop_vanished, **{name: str(count) for name, count in self.counters.items()},
        }
        return StatusPayload("supervisor", values, _MODE_LEVELS.get(self.mode, "ok"), self.summary)

    @classmethod
    def from_msg(cls, msg: object) -> SupervisorState | None:
        """The state a DiagnosticArray carries (its statuses' values merged, later ones winning);
        None when none carries a `mode` (not a supervisor state). Missing fields take their defaults."""
        v = merged_status_values(msg)
        if "mode" not in v:
            return None
        sources = v.get("estop_sources", "")
        return cls(mode=v["mode"], reason=v.get("reason", ""),
                   estop_sources=tuple(s for s in sources.split("; ") if s),
                   intervention_active=v.get("intervention_active", "false") == "true",
                   intervention_start_ns=_int(v.get("intervention_start_ns"), 0), jog_mode=v.get("jog_mode", ""),
                   foreign_publishers=_int(v.get("foreign_publishers"), 0),
                   last_rejection=v.get("last_rejection", ""), estop_vanished=v.get("estop_vanished", ""),
                   counters=_counters(v, cls.NAMED))


@dataclass(frozen=True)
class Intervention:
    """One supervisor/interventions event: `event` (start, end, ...), its span [ns], the mode and why."""

    event: str
    start_ns: int
    end_ns: int
    mode: str
    reason: str

    def to_status(self) -> StatusPayload:
        values = {"event": self.event, "start_ns": str(self.start_ns), "end_ns": str(self.end_ns),
                  "mode": self.mode, "reason": self.reason}
        return StatusPayload("supervisor/intervention", values, "ok", f"{self.event}: {self.reason}")

    @classmethod
    def from_values(cls, v: Mapping[str, str]) -> Intervention:
        return cls(v.get("event", ""), _int(v.get("start_ns"), 0), _int(v.get("end_ns"), 0), v.get("mode", ""),
                   v.get("reason", ""))

    @classmethod
    def all_from_msg(cls, msg: object) -> list[Intervention]:
        """Every event of one message (one status each)."""
        return [cls.from_values({str(kv.key): str(kv.value) for kv in status.values})
                for status in (getattr(msg, "status", None) or [])]

    def as_dict(self) -> dict[str, object]:
        return {"event": self.event, "start_ns": self.start_ns, "end_ns": self.end_ns, "mode": self.mode,
                "reason": self.reason}


@dataclass(frozen=True)
class EpisodeOutcome:
    """One sim/episode message: index, success, reason, duration [s], final distance [m], the
    episode's seed (-1 when the message has none), the pushes that started (-1: pushes were off),
    the task's failure category (sim/tasks.py: "missed_grasp", "dropped", ...; "" when the
    message has none: recorded before 2026-12-03)."""

    episode: int
    success: bool
    reason: str
    duration_s: float
    final_distance_m: float
    seed: int = -1
    pushes_applied: int = -1
    failure: str = ""

    def to_status(self, hardware_id: str = "sim_node") -> StatusPayload:
        """One status "episode", message = reason (pushes_applied only when pushes were on)."""
        values = {"episode": str(self.episode), "success": "true" if self.success else "false",
                  "duration_s": f"{self.duration_s:.4f}", "reason": self.reason,
                  "final_distance_m": f"{self.final_distance_m:.4f}", "seed": str(self.seed),
                  **({"pushes_applied": str(self.pushes_applied)} if self.pushes_applied >= 0 else {}),
                  **({"failure": self.failure} if self.failure else {})}
        return StatusPayload("episode", values, "ok" if self.success else "warn", self.reason, hardware_id)

    @classmethod
    def from_values(cls, v: Mapping[str, str], message: str = "") -> EpisodeOutcome:
        return cls(_int(v.get("episode"), -1), v.get("success", "false") == "true", v.get("reason", message),
                   _float(v.get("duration_s")), _float(v.get("final_distance_m")), _int(v.get("seed"), -1),
                   _int(v.get("pushes_applied"), -1), str(v.get("failure", "")))

    @classmethod
    def from_msg(cls, msg: object) -> EpisodeOutcome:
        """The outcome in the first status (missing fields: -1, NaN, "" or false)."""
        statuses = list(getattr(msg, "status", None) or [])
        return cls.from_values(status_values(msg), str(statuses[0].message) if statuses else "")

    @property
    def start_offset_ns(self) -> int:
        """duration_s in [ns] (the episode started this long before its outcome's stamp); 0 when unknown."""
        return 0 if not math.isfinite(self.duration_s) else int(round(self.duration_s * 1e9))


@dataclass(frozen=True)
class SimStatus:
    """sim/status (~1 Hz): real-time factor, sim time [s], pacing, episode, the sim params' version,
    the actuation latency [s], the sim time of the last command followed [ns] (-1: none yet), the
    last rejection, and counters (commands_accepted, commands_rejected, frames_published, ...)."""

    real_time_factor: float
    sim_time_s: float
    pacing: str
    episode: int
    sim_params_version: str
    actuation_latency_s: float
    last_command_sim_ns: int
    last_rejection: str
    counters: Mapping[str, int] = field(default_factory=dict)

    NAMED = ("real_time_factor", "sim_time_s", "pacing", "episode", "sim_params_version", "actuation_latency_s",
             "last_command_sim_ns", "last_rejection")

    def to_status(self, hardware_id: str = "sim_node") -> StatusPayload:
        values = {
            "real_time_factor": f"{self.real_time_factor:.3f}", "sim_time_s": f"{self.sim_time_s:.3f}",
            "pacing": self.pacing, "episode": str(self.episode), "sim_params_version": self.sim_params_version,
            "actuation_latency_s": f"{self.actuation_latency_s:.4f}",
            "last_command_sim_ns": str(self.last_command_sim_ns), "last_rejection": self.last_rejection,
            **{k: str(v) for k, v in self.counters.items()},
        }
        level = "warn" if self.counters.get("commands_rejected") else "ok"
        return StatusPayload("sim", values, level, f"rtf {self.real_time_factor:.2f}", hardware_id)

    @classmethod
    def from_msg(cls, msg: object) -> SimStatus:
        v = status_values(msg)
        return cls(_float(v.get("real_time_factor")), _float(v.get("sim_time_s")), v.get("pacing", ""),
                   _int(v.get("episode"), -1), v.get("sim_params_version", ""), _float(v.get("actuation_latency_s")),
                   _int(v.get("last_command_sim_ns"), -1), v.get("last_rejection", ""), _counters(v, cls.NAMED))


# Operator labels of a dataset episode, and the supervisor mode each stands for when a bag has no
# supervisor/state (readers filter human commands by mode: a person's demonstration is TELEOP).
OPERATOR_MODES = {"human": "TELEOP", "policy": "AUTONOMOUS"}
# The mode between labelled episodes: nobody drives the arm.
UNLABELLED_MODE = "HOLD"


@dataclass(frozen=True)
class DatasetEpisodeEvent:
    """dataset/episode: a LeRobot episode's `start` or `end` in an imported bag.

    episode: the dataset's index; task and task_index: what it shows; frames and fps [Hz] as the
    dataset declares them; source: the dataset's folder name; duration_s [s] (the end only, NaN on
    the start); operator: who drove the arm (OPERATOR_MODES key; "" in bags imported before the label).
    """

    episode: int
    event: str
    task: str
    task_index: int
    frames: int
    fps: float
    source: str
    operator: str = ""
    duration_s: float = math.nan

    def to_status(self) -> StatusPayload:
        values = {"episode": str(self.episode), "event": self.event, "task": self.task,
                  "task_index": str(self.task_index), "frames": str(self.frames), "fps": f"{self.fps:g}",
                  "source": self.source}
        if self.operator:
            values["operator"] = self.operator
        if self.event == "end":
            values["duration_s"] = f"{self.duration_s:.4f}"
        return StatusPayload("episode", values, "ok", self.task)

    @classmethod
    def from_msg(cls, msg: object) -> DatasetEpisodeEvent:
        v = status_values(msg)
        return cls(_int(v.get("episode"), -1), v.get("event", ""), v.get("task", ""), _int(v.get("task_index"), -1),
                   _int(v.get("frames"), 0), _float(v.get("fps")), v.get("source", ""), v.get("operator", ""),
                   _float(v.get("duration_s")))

    @property
    def operator_mode(self) -> str | None:
        """The supervisor mode this event puts in force: the operator's at a labelled start,
        UNLABELLED_MODE at an end; None for an unlabelled start (a bag imported before the label)."""
        if self.event == "end":
            return UNLABELLED_MODE
        return OPERATOR_MODES.get(self.operator) if self.event == "start" else None
