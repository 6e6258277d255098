"""Open a bag for replay: resolve the topics the evaluation needs, fail fast when some are missing."""
from __future__ import annotations

from dataclasses import dataclass

from ..bags import BagReader
from ..topics import DATASET_EPISODE
from .options import ReplayOptions
from .recording import ACTION_TYPES, RecordingCollector
from .topics import resolve_topic, resolve_topics

IMAGE_TYPES = ("sensor_msgs/msg/Image",)
CAMERA_INFO_TYPES = ("sensor_msgs/msg/CameraInfo",)
JOINT_STATE_TYPES = ("sensor_msgs/msg/JointState",)
STATE_TYPES = ("diagnostic_msgs/msg/DiagnosticArray",)


@dataclass(frozen=True)
class BagTopics:
    """The bag's names of the topics the replay reads (role -> bag topic) and their types."""

    image: str
    camera_info: str
    joint_states: str
    action: str
    action_type: str
    supervisor_state: str | None
    # dataset/episode of an imported LeRobot bag: its operator labels stand in for the supervisor
    # state, which such a bag does not have (None when the bag has a supervisor state or no filter).
    operator_labels: str | None = None

    @property
    def mode_topics(self) -> tuple[str, ...]:
        """The topics that say which mode the graph was in (supervisor state or operator labels)."""
        return tuple(t for t in (self.supervisor_state, self.operator_labels) if t)

    def as_dict(self) -> dict[str, str | None]:
        out = {"image": self.image, "camera_info": self.camera_info, "joint_states": self.joint_states,
               "action": self.action, "action_type": self.action_type, "supervisor_state": self.supervisor_state}
        return {**out, "operator_labels": self.operator_labels} if self.operator_labels else out


def find_topics(reader: BagReader, options: ReplayOptions) -> BagTopics:
    """Resolve the option topics in the bag; MissingTopicsError names every missing one and lists
    what the bag has."""
    available = reader.topic_types()
    wanted = {"image": options.image_topic, "camera_info": options.camera_info_topic,
              "joint_states": options.joint_states_topic, "action": options.action_topic}
    types = {"image": IMAGE_TYPES, "camera_info": CAMERA_INFO_TYPES, "joint_states": JOINT_STATE_TYPES,
             "action": ACTION_TYPES, "supervisor_state": STATE_TYPES}
    hint = ""
    labels = None
    if options.filters_modes:
        state, _ = resolve_topic(options.supervisor_state_topic, available)
        labels, _ = resolve_topic(DATASET_EPISODE.name, available)
        if state is not None or labels is None or available[labels] != DATASET_EPISODE.msgtype:
            labels = None
            wanted["supervisor_state"] = options.supervisor_state_topic
        hint = ("The supervisor state tells which commands a person sent; without it, compare with every "
                "command (--all-actions)")
    resolved = resolve_topics(str(reader.path), wanted, available, types, hint)
    return BagTopics(image=resolved["image"], camera_info=resolved["camera_info"],
                     joint_states=resolved["joint_states"], action=resolved["action"],
                     action_type=available[resolved["action"]], supervisor_state=resolved.get("supervisor_state"),
                     operator_labels=labels)


def recorded_joint_names(reader: BagReader, topics: BagTopics, scan: int = 50) -> list[str] | None:
    """The joint names of the first well-formed, named joint state of the bag (among its first
    `scan` on the topic), in its order; None when there is none."""
    for i, message in enumerate(reader.messages([topics.joint_states])):
        if i >= scan:
            break
        names = [str(n) for n in getattr(message.msg, "name", [])]
        if names and len(names) == len(getattr(message.msg, "position", [])):
            return names
    return None


def make_collector(topics: BagTopics, joint_names: tuple[str, ...], options: ReplayOptions) -> RecordingCollector:
    return RecordingCollector(joint_names, topics.action_type, options.action_joints, options.human_modes)


def feed(collector: RecordingCollector, topics: BagTopics, topic: str, msg, log_ns: int):
    """Give a non-image message to the collector; returns joint positions for joint states."""
    if topic == topics.joint_states:
        positions = collector.add_joint_state(msg, log_ns)
        if topic == topics.action:  # a bag whose "human" action is the measured state itself
            collector.add_action(msg, log_ns)
        return positions
    if topic == topics.action:
        collector.add_action(msg, log_ns)
    elif topic == topics.supervisor_state:
        collector.add_supervisor_state(msg, log_ns)
    elif topic == topics.operator_labels:
        collector.add_operator_label(msg, log_ns)
    return None
