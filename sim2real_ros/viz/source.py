"""What a view needs from a bag: its topics matched to the view's inputs, the URDF, the tool link."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..bags import BagReader
from ..core.errors import BagError, ConfigError, UrdfError
from ..core.robot.urdf import RobotModel
from ..core.safety.teleop import default_ee_link
from ..paths import config_path
from ..topics import JOINT_STATES
from .kinematics import ArmKinematics
from .router import INPUTS, VizInput


@dataclass(frozen=True)
class BagView:
    """A bag ready to show: bag topic -> view input, the URDF text and its source, the tool link."""

    path: Path
    inputs: dict[str, VizInput]
    urdf_xml: str
    urdf_source: str
    tool_link: str
    start_ns: int
    end_ns: int
    counts: dict[str, int]

    def kinematics(self) -> ArmKinematics:
        return ArmKinematics(RobotModel.from_string(self.urdf_xml, self.urdf_source), self.tool_link)


def match_topics(bag_topics: dict[str, str], namespace: str = "") -> dict[str, VizInput]:
    """Bag topic -> view input, by name (`/ns/joint_states` matches `joint_states` with namespace
    'ns'; without a namespace the shortest match wins) and type."""
    prefix = "/" + namespace.strip("/") if namespace.strip("/") else ""
    matched: dict[str, VizInput] = {}
    for wanted in INPUTS:
        candidates = [t for t, kind in bag_topics.items() if kind == wanted.msgtype and (
            t == f"{prefix}/{wanted.topic}" if prefix else t.endswith("/" + wanted.topic) or t == wanted.topic)]
        if candidates:
            matched[min(candidates, key=len)] = wanted
    return matched


def tool_link_for(model: RobotModel, requested: str = "") -> str:
    """`requested`, else the sim params' ee_link when the URDF has it, else the arm's tip."""
    links = model.link_names()
    if requested:
        if requested not in links:
            raise ConfigError("viz", "tool_link", requested, f"not a link of {model.source} (links: {links})")
        return requested
    try:
        from ..sim.params import load_sim_params

        ee = load_sim_params(config_path("sim_params.yaml")).robot.ee_link
    except (ConfigError, OSError, AttributeError):
        ee = ""
    return ee if ee in links else default_ee_link(model)


def open_bag_view(path: str | Path, urdf: str | None = None, tool_link: str = "", namespace: str = "") -> BagView:
    """Check that a bag can be shown in 3D and gather what showing it needs.

    BagError names what is missing: a joint_states topic (sensor_msgs/msg/JointState), or a URDF
    (no robot_description topic recorded and no `urdf` given)."""
    path = Path(path)
    with BagReader(path) as reader:
        types = reader.topic_types()
        counts = {t.name: t.count for t in reader.topics()}
        inputs = match_topics(types, namespace)
        if not any(i.topic == JOINT_STATES.name for i in inputs.values()):
            raise BagError(f"{path}: no joint_states topic (sensor_msgs/msg/JointState) to drive the 3D arm; "
                           f"the bag has {sorted(types) or 'no topics'}")
        if urdf:
            try:
                model = RobotModel.from_description(urdf)
            except UrdfError as err:
                raise BagError(f"--urdf {urdf}: {err}") from err
            urdf_xml = urdf if urdf.lstrip().startswith("<") else Path(urdf).read_text()
            source = "robot_description" if urdf.lstrip().startswith("<") else str(urdf)
        else:
            description_topic = next((t for t, i in inputs.items() if i.topic == "robot_description"), None)
            message = next(reader.messages([description_topic]), None) if description_topic else None
            if message is None:
                raise BagError(f"{path}: no robot_description (std_msgs/msg/String with the URDF) recorded; "
                               f"pass --urdf FILE (this repository's arm: urdf/arm6.urdf)")
            urdf_xml, source = str(message.msg.data), f"{path}:{description_topic}"
            try:
                model = RobotModel.from_string(urdf_xml, source)
            except UrdfError as err:
                raise BagError(f"{path}: the recorded robot_description is not a usable URDF: {err}") from err
        start, end = reader.start_ns, reader.end_ns
    return BagView(path, inputs, urdf_xml, source, tool_link_for(model, tool_link), int(start or 0),
                   int(end or 0), counts)


def _lenient(store, data, msgtype: str):
    """Deserialize ignoring bytes left over after the message (the Kilted wheels' JointTrajectory
    serializes with trailing padding that rosbags' strict size check refuses)."""
    raw = bytes(data)
    msgdef = store.get_msgdef(msgtype)
    func = msgdef.deserialize_cdr_le if raw[1] else msgdef.deserialize_cdr_be
    return func(memoryview(raw)[4:], 0, msgdef.cls, store)[0]


def view_messages(reader: BagReader, view: BagView, start_ns: int | None = None):
    """(log time [ns], view input topic, message) of the view's topics in log-time order, from
    `start_ns` on. Decoded like BagReader.messages, with a lenient fallback (_lenient); a message
    that decodes neither way is yielded as None (the router counts it as dropped)."""
    decoders = {t: reader.types.decoder(reader.topic_types()[t]) for t in view.inputs}
    for log_time, topic, data in reader.raw_messages(list(view.inputs)):
        if start_ns is not None and log_time < start_ns:
            continue
        decoder = decoders[topic]
        try:
            msg = decoder.decode(data)
        except Exception:  # noqa: BLE001 - try leniently, else hand on None
            msg = None
            for _, store in decoder.candidates:
                try:
                    msg = _lenient(store, data, decoder.msgtype)
                    break
                except Exception:  # noqa: BLE001, S112
                    continue
        yield log_time, view.inputs[topic].topic, msg
