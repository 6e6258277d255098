"""ROS-shaped messages to the Foxglove channels, with per-topic rates and drops.

The same router serves the live node (rclpy messages) and bags (rosbags messages): both have the
ROS field names (msg.header.stamp.sec, msg.position, msg.data), which is all it reads.

INPUTS is the table of what a view takes from the graph: ROS topic (relative, as in the graph's
declaration), message type, and the QoS kind the live node subscribes with (`sensor`: best
effort, newest few; `latched`: reliable + transient local; `events`: reliable + transient local,
deep). High-rate streams are taken best effort, so a busy viewer never makes a publisher resend.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..topics import (
    ACTION_CHUNK,
    CAMERA_IMAGE,
    CAMERA_INFO,
    INTERVENTIONS,
    JOINT_STATES,
    POLICY_CAMERA_INFO,
    POLICY_COMMAND,
    POLICY_IMAGE,
    ROBOT_COMMAND,
    SIM_EPISODE,
    SIM_TARGET,
    SUPERVISOR_STATE,
    EpisodeOutcome,
    Intervention,
    SupervisorState,
)
from . import channels as ch
from .kinematics import ArmKinematics
from .model import parse_visuals

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class VizInput:
    topic: str
    msgtype: str
    qos: str  # sensor | latched | events | reliable


INPUTS: tuple[VizInput, ...] = (
    VizInput(JOINT_STATES.name, JOINT_STATES.msgtype, "sensor"),
    VizInput(CAMERA_IMAGE.name, CAMERA_IMAGE.msgtype, "sensor"),
    VizInput(CAMERA_INFO.name, CAMERA_INFO.msgtype, "sensor"),
    VizInput(POLICY_IMAGE.name, POLICY_IMAGE.msgtype, "sensor"),
    VizInput(POLICY_CAMERA_INFO.name, POLICY_CAMERA_INFO.msgtype, "sensor"),
    VizInput(ACTION_CHUNK.name, ACTION_CHUNK.msgtype, "sensor"),
    VizInput(POLICY_COMMAND.name, POLICY_COMMAND.msgtype, "sensor"),
    VizInput(ROBOT_COMMAND.name, ROBOT_COMMAND.msgtype, "sensor"),
    VizInput(SUPERVISOR_STATE.name, SUPERVISOR_STATE.msgtype, "latched"),
    VizInput(INTERVENTIONS.name, INTERVENTIONS.msgtype, "events"),
    VizInput(SIM_EPISODE.name, SIM_EPISODE.msgtype, "events"),
    VizInput(SIM_TARGET.name, SIM_TARGET.msgtype, "latched"),
    VizInput("robot_description", "std_msgs/msg/String", "latched"),
)
INPUT_TOPICS = tuple(i.topic for i in INPUTS)


def stamp_ns(msg) -> int:
    """header.stamp of a ROS message [ns]."""
    return int(msg.header.stamp.sec) * NS_PER_S + int(msg.header.stamp.nanosec)


def image_array(msg) -> np.ndarray:
    """sensor_msgs/Image (rclpy or rosbags) -> (H, W, C) uint8 view; ValueError when sizes disagree."""
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}.get(msg.encoding)
    if channels is None:
        raise ValueError(f"image encoding {msg.encoding!r} is not shown (rgb8, bgr8, rgba8, bgra8, mono8)")
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.frombuffer(memoryview(msg.data).cast("B") if not isinstance(msg.data, np.ndarray)
                         else msg.data.tobytes(), dtype=np.uint8)
    if step < width * channels or data.size < step * height:
        raise ValueError(f"image {width}x{height} {msg.encoding} step {step}: {data.size} bytes is too few")
    rows = data[: step * height].reshape(height, step)[:, : width * channels]
    return rows.reshape(height, width, channels) if channels > 1 else rows.reshape(height, width)


def diagnostic_values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


# The supervisor state's named values a view shows as text (its counters go apart, as numbers).
_SHOWN_STATE_VALUES = ("mode", "reason", "estop_sources", "intervention_active", "intervention_start_ns", "jog_mode",
                       "foreign_publishers", "last_rejection")


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass
class TopicStats:
    """Counts for one input topic; rate over the last `window_s` [s] of log time."""

    received: int = 0
    published: int = 0
    dropped: int = 0
    unsubscribed: int = 0
    last_error: str = ""
    times: deque = field(default_factory=lambda: deque(maxlen=512))


class VizRouter:
    """Turns ROS-shaped messages into Foxglove messages on a VizPublisher.

    model / urdf_xml: the robot (joint names, kinematic tree, visuals); tool_link: the tool point
    whose planned path is drawn; command_joints: the joint order of the supervisor's position
    commands (forward_position_controller/commands has no names; default the URDF's). Every
    `handle` takes the log time [ns] (the node's clock, or the bag's log time).
    """

    def __init__(self, publisher: ch.VizPublisher, kinematics: ArmKinematics, urdf_xml: str,
                 command_joints: list[str] | None = None, window_s: float = 2.0) -> None:
        self.pub = publisher
        self.kin = kinematics
        self.urdf_xml = urdf_xml
        self.visuals = parse_visuals(urdf_xml, kinematics.model.source)
        self.command_joints = list(command_joints or kinematics.model.joint_names)
        self.window_ns = int(window_s * NS_PER_S)
        self.stats: dict[str, TopicStats] = {t: TopicStats() for t in INPUT_TOPICS}
        self._last_joint_stamp_ns: int | None = None
        self._handlers = {
            JOINT_STATES.name: self._joint_states, CAMERA_IMAGE.name: self._camera,
            POLICY_IMAGE.name: self._policy_image, CAMERA_INFO.name: self._camera_info,
            POLICY_CAMERA_INFO.name: self._policy_info, ACTION_CHUNK.name: self._chunk,
            POLICY_COMMAND.name: self._policy_command, ROBOT_COMMAND.name: self._command,
            SUPERVISOR_STATE.name: self._supervisor, INTERVENTIONS.name: self._interventions,
            SIM_EPISODE.name: self._episode, SIM_TARGET.name: self._target, "robot_description": self._description,
        }

    # ------------------------------------------------------------------ entry points
    def publish_robot(self, log_time_ns: int) -> None:
        """The robot model, and the transforms of the last joint state again, stamped with its
        stamp (none before the first joint state: the arm's pose is not known yet)."""
        self.pub.log_robot(self.urdf_xml, self.visuals, log_time_ns)
        if self._last_joint_stamp_ns is not None:
            self.pub.log_transforms(self.kin.transforms(), self._last_joint_stamp_ns, log_time_ns)

    def handle(self, topic: str, msg, log_time_ns: int) -> bool:
        """One message of input `topic` (relative name, as in INPUTS); returns whether it was shown.
        A malformed message is counted as dropped (with the reason in stats), never raised."""
        stats = self.stats[topic]
        stats.received += 1
        stats.times.append(int(log_time_ns))
        try:
            shown = self._handlers[topic](msg, int(log_time_ns))
        except (ValueError, TypeError, IndexError, AttributeError) as err:
            stats.dropped += 1
            stats.last_error = f"{type(err).__name__}: {err}"[:200]
            return False
        if shown is False:
            stats.unsubscribed += 1
            return False
        stats.published += 1
        return True

    def stats_message(self, now_ns: int) -> dict:
        """Per input topic: received, published, dropped (malformed), unsubscribed (nobody watching,
        so not converted), rate_hz over the last window [s of log time], last_error."""
        topics = {}
        for topic, s in self.stats.items():
            recent = [t for t in s.times if now_ns - t <= self.window_ns]
            span = (recent[-1] - recent[0]) / NS_PER_S if len(recent) > 1 else 0.0
            rate = (len(recent) - 1) / span if span > 0 else 0.0
            topics[topic] = {"received": s.received, "published": s.published, "dropped": s.dropped,
                             "unsubscribed": s.unsubscribed, "rate_hz": round(rate, 2), "last_error": s.last_error}
        return {"topics": topics, "window_s": self.window_ns / NS_PER_S}

    def publish_stats(self, now_ns: int) -> dict:
        message = self.stats_message(now_ns)
        self.pub.log_json(ch.STATS, message, now_ns)
        return message

    # ------------------------------------------------------------------ handlers
    def _joint_states(self, msg, t: int):
        names = list(msg.name)
        positions = np.asarray(msg.position, dtype=float)
        if len(names) != len(positions):
            raise ValueError(f"joint_states: {len(names)} names but {len(positions)} positions")
        self.kin.update(names, positions)
        stamp = stamp_ns(msg)
        self._last_joint_stamp_ns = stamp
        self.pub.log_transforms(self.kin.transforms(), stamp, t)
        velocities = np.asarray(msg.velocity, dtype=float)
        self.pub.log_json(ch.MEASURED, {
            "stamp_s": stamp / NS_PER_S,
            "position": {n: float(v) for n, v in zip(names, positions, strict=True)},
            "velocity": ({n: float(v) for n, v in zip(names, velocities, strict=True)}
                         if len(velocities) == len(names) else {})}, t)
        return True

    def _image(self, which: str, msg, t: int):
        return self.pub.log_image(which, image_array(msg), msg.encoding, stamp_ns(msg), msg.header.frame_id, t)

    def _camera(self, msg, t: int):
        return self._image("camera", msg, t)

    def _policy_image(self, msg, t: int):
        return self._image("policy", msg, t)

    def _calibration(self, which: str, msg, t: int):
        self.pub.log_calibration(which, msg.width, msg.height, msg.distortion_model, msg.d, msg.k, msg.r, msg.p,
                                 stamp_ns(msg), msg.header.frame_id, t)
        return True

    def _camera_info(self, msg, t: int):
        return self._calibration("camera", msg, t)

    def _policy_info(self, msg, t: int):
        return self._calibration("policy", msg, t)

    def _chunk(self, msg, t: int):
        names = list(msg.joint_names)
        if not msg.points:
            raise ValueError("action chunk without points")
        positions = np.array([list(p.positions) for p in msg.points], dtype=float)
        if positions.shape[1] != len(names):
            raise ValueError(f"action chunk: {len(names)} joint names but {positions.shape[1]} positions per point")
        self.pub.log_planned_path(self.kin.root, self.kin.tool_path(names, positions), stamp_ns(msg), t)
        return True

    def _policy_command(self, msg, t: int):
        names, positions = list(msg.name), list(msg.position)
        if len(names) != len(positions):
            raise ValueError(f"command/policy: {len(names)} names but {len(positions)} positions")
        velocity = list(msg.velocity)
        self.pub.log_json(ch.POLICY_COMMAND, {
            "position": {n: float(v) for n, v in zip(names, positions, strict=True)},
            "velocity": {n: float(v) for n, v in zip(names, velocity, strict=True)} if len(velocity) == len(names)
            else {}}, t)
        return True

    def _command(self, msg, t: int):
        data = list(msg.data)
        if len(data) != len(self.command_joints):
            raise ValueError(f"position command of {len(data)} values for {len(self.command_joints)} joints")
        self.pub.log_json(ch.COMMANDED, {"position": {n: float(v) for n, v in zip(self.command_joints, data,
                                                                                  strict=True)}}, t)
        return True

    def _supervisor(self, msg, t: int):
        if not msg.status:
            raise ValueError("supervisor/state without a status")
        state = SupervisorState.from_msg(msg)
        if state is None:
            raise ValueError("supervisor/state without a mode")
        shown = state.to_status().values
        self.pub.log_json(ch.SUPERVISOR_STATE, {
            "mode": state.mode, "reason": state.reason, "level": int(msg.status[0].level),
            "values": {k: shown[k] for k in _SHOWN_STATE_VALUES}, "counters": dict(state.counters)}, t)
        return True

    def _interventions(self, msg, t: int):
        for event in Intervention.all_from_msg(msg):
            self.pub.log_json(ch.INTERVENTIONS, event.as_dict(), t)
        return True

    def _episode(self, msg, t: int):
        for status in msg.status:
            outcome = EpisodeOutcome.from_values(diagnostic_values(status), str(status.message))
            self.pub.log_json(ch.EPISODES, {
                "episode": max(outcome.episode, 0), "success": outcome.success, "reason": outcome.reason,
                "duration_s": _finite_or_none(outcome.duration_s),
                "final_distance_m": _finite_or_none(outcome.final_distance_m)}, t)
        return True

    def _target(self, msg, t: int):
        point = msg.point
        self.pub.log_target((point.x, point.y, point.z), msg.header.frame_id, stamp_ns(msg), t)
        return True

    def _description(self, msg, t: int):
        return True  # the router's own URDF is what is drawn; a recorded one is read before it starts
