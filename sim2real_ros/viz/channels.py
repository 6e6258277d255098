"""The Foxglove channels of a view and the publisher that writes them to one Foxglove context.

A context is bound to a sink: the live WebSocket server (viz_node, `sim2real view`) or an MCAP file
(`sim2real bag export-foxglove`, the demo), so the three share every channel, schema and
conversion here. Every method takes the message's log time [ns] as an argument (the node's clock,
or the bag's log time); nothing reads a clock.

Channels (Foxglove topic -> schema):

    /tf                        foxglove.FrameTransforms   world -> root, then every URDF joint
    /robot_description         std_msgs/msg/String (JSON) the URDF text, once
    /robot_model               foxglove.SceneUpdate       the URDF's visuals, locked to the link frames
    /camera/image_raw          foxglove.CompressedImage (JPEG) or foxglove.RawImage
    /camera/camera_info        foxglove.CameraCalibration
    /policy/image              foxglove.RawImage (96x96: compressing saves little)
    /policy/camera_info        foxglove.CameraCalibration
    /policy/planned_path       foxglove.SceneUpdate       the latest chunk as the tool point's path
    /joints/measured           JSON {position: {joint: rad}, velocity: {joint: rad/s}}
    /joints/commanded          JSON {position: {joint: rad}}  (the supervisor's output)
    /joints/policy_command     JSON {position: {joint: rad}}  (the actuator's output)
    /supervisor/state          JSON {mode, reason, level, values: {...}, counters: {...}}
    /supervisor/interventions  JSON {event, start_ns, end_ns, mode, reason}
    /sim/episode               JSON {episode, success, reason, duration_s, final_distance_m}
    /sim/target                foxglove.SceneUpdate       the sim's target (a sphere in `world`)
    /viz/stats                 JSON {topics: {ros topic: {received, published, dropped, rate_hz}}}
"""
from __future__ import annotations

import json
from collections.abc import Iterable

import cv2
import numpy as np
from foxglove import Channel, Context, Schema
from foxglove.channels import (
    CameraCalibrationChannel,
    CompressedImageChannel,
    FrameTransformsChannel,
    RawImageChannel,
    SceneUpdateChannel,
)
from foxglove.messages import (
    CameraCalibration,
    Color,
    CompressedImage,
    CubePrimitive,
    CylinderPrimitive,
    FrameTransform,
    FrameTransforms,
    LinePrimitive,
    LinePrimitiveLineType,
    Point3,
    Pose,
    Quaternion,
    RawImage,
    SceneEntity,
    SceneUpdate,
    SpherePrimitive,
    Timestamp,
    Vector3,
)

from ..core.robot.urdf import rpy_to_matrix
from .kinematics import WORLD_FRAME, LinkTransform, matrix_to_quaternion
from .model import RobotVisuals

NS_PER_S = 1_000_000_000

TF = "/tf"
ROBOT_DESCRIPTION = "/robot_description"
ROBOT_MODEL = "/robot_model"
CAMERA_IMAGE = "/camera/image_raw"
CAMERA_INFO = "/camera/camera_info"
POLICY_IMAGE = "/policy/image"
POLICY_INFO = "/policy/camera_info"
PLANNED_PATH = "/policy/planned_path"
MEASURED = "/joints/measured"
COMMANDED = "/joints/commanded"
POLICY_COMMAND = "/joints/policy_command"
SUPERVISOR_STATE = "/supervisor/state"
INTERVENTIONS = "/supervisor/interventions"
EPISODES = "/sim/episode"
TARGET = "/sim/target"
STATS = "/viz/stats"

# What a Foxglove client reads as a ROS std_msgs/String: its URDF layer can take the model from here.
STRING_SCHEMA = Schema(name="std_msgs/msg/String", encoding="jsonschema", data=json.dumps(
    {"type": "object", "properties": {"data": {"type": "string"}}}).encode())


def _object_schema(title: str, properties: dict) -> dict:
    return {"title": title, "type": "object", "properties": properties}


_NUMBER_MAP = {"type": "object", "additionalProperties": {"type": "number"}}
JSON_SCHEMAS: dict[str, dict] = {
    MEASURED: _object_schema("sim2real.JointPositions", {"position": _NUMBER_MAP, "velocity": _NUMBER_MAP,
                                                         "stamp_s": {"type": "number"}}),
    COMMANDED: _object_schema("sim2real.JointCommand", {"position": _NUMBER_MAP}),
    POLICY_COMMAND: _object_schema("sim2real.JointCommand", {"position": _NUMBER_MAP, "velocity": _NUMBER_MAP}),
    SUPERVISOR_STATE: _object_schema("sim2real.SupervisorState", {
        "mode": {"type": "string"}, "reason": {"type": "string"}, "level": {"type": "integer"},
        "values": {"type": "object"}, "counters": _NUMBER_MAP}),
    INTERVENTIONS: _object_schema("sim2real.Intervention", {
        "event": {"type": "string"}, "start_ns": {"type": "integer"}, "end_ns": {"type": "integer"},
        "mode": {"type": "string"}, "reason": {"type": "string"}}),
    EPISODES: _object_schema("sim2real.EpisodeOutcome", {
        "episode": {"type": "integer"}, "success": {"type": "boolean"}, "reason": {"type": "string"},
        "duration_s": {"type": "number"}, "final_distance_m": {"type": "number"}}),
    STATS: _object_schema("sim2real.VizStats", {"topics": {"type": "object"}, "window_s": {"type": "number"}}),
}


def timestamp(ns: int) -> Timestamp:
    """A Foxglove timestamp from integer nanoseconds."""
    ns = max(0, int(ns))
    return Timestamp(ns // NS_PER_S, ns % NS_PER_S)


def _pose(xyz, rotation_matrix=None) -> Pose:
    q = (0.0, 0.0, 0.0, 1.0) if rotation_matrix is None else matrix_to_quaternion(rotation_matrix)
    return Pose(position=Vector3(x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2])),
                orientation=Quaternion(x=q[0], y=q[1], z=q[2], w=q[3]))


def _color(rgba) -> Color:
    return Color(r=float(rgba[0]), g=float(rgba[1]), b=float(rgba[2]), a=float(rgba[3]))


class VizPublisher:
    """Every channel of a view on one Foxglove context (bound to a server or an MCAP file).

    jpeg_quality: 1..100 sends the camera as JPEG (CompressedImage); 0 sends it raw. Methods skip
    the conversion work when nobody listens on a channel (`has_sinks`), and return whether they
    logged.
    """

    def __init__(self, context: Context, jpeg_quality: int = 80) -> None:
        if not 0 <= int(jpeg_quality) <= 100:
            raise ValueError(f"jpeg_quality must be in [0, 100] (0 = raw images), got {jpeg_quality}")
        self.jpeg_quality = int(jpeg_quality)
        self.context = context
        self.tf = FrameTransformsChannel(TF, context=context)
        self.robot_description = Channel(ROBOT_DESCRIPTION, schema=STRING_SCHEMA, message_encoding="json",
                                         context=context)
        self.robot_model = SceneUpdateChannel(ROBOT_MODEL, context=context)
        self.camera = (CompressedImageChannel(CAMERA_IMAGE, context=context) if self.jpeg_quality
                       else RawImageChannel(CAMERA_IMAGE, context=context))
        self.camera_info = CameraCalibrationChannel(CAMERA_INFO, context=context)
        self.policy_image = RawImageChannel(POLICY_IMAGE, context=context)
        self.policy_info = CameraCalibrationChannel(POLICY_INFO, context=context)
        self.planned_path = SceneUpdateChannel(PLANNED_PATH, context=context)
        self.target = SceneUpdateChannel(TARGET, context=context)
        self.json = {topic: Channel(topic, schema=schema, context=context) for topic, schema in JSON_SCHEMAS.items()}

    def channels(self) -> list:
        return [self.tf, self.robot_description, self.robot_model, self.camera, self.camera_info,
                self.policy_image, self.policy_info, self.planned_path, self.target, *self.json.values()]

    def close(self) -> None:
        for channel in self.channels():
            channel.close()

    # ------------------------------------------------------------------ robot
    def log_robot(self, urdf_xml: str, visuals: RobotVisuals, log_time_ns: int) -> None:
        """The URDF text and its visuals as one scene entity per link (frame-locked)."""
        self.robot_description.log({"data": urdf_xml}, log_time=log_time_ns)
        entities = []
        for link in dict.fromkeys(v.link for v in visuals.visuals):
            cubes, cylinders, spheres = [], [], []
            for v in (v for v in visuals.visuals if v.link == link):
                pose = _pose(v.xyz, rpy_to_matrix(*v.rpy))
                size = Vector3(x=v.size[0], y=v.size[1], z=v.size[2])
                kind = {"box": (cubes, CubePrimitive), "cylinder": (cylinders, CylinderPrimitive),
                        "sphere": (spheres, SpherePrimitive)}[v.shape]
                if v.shape == "cylinder":
                    kind[0].append(CylinderPrimitive(pose=pose, size=size, bottom_scale=1.0, top_scale=1.0,
                                                     color=_color(v.rgba)))
                else:
                    kind[0].append(kind[1](pose=pose, size=size, color=_color(v.rgba)))
            entities.append(SceneEntity(timestamp=timestamp(log_time_ns), frame_id=link, id=f"robot/{link}",
                                        frame_locked=True, cubes=cubes, cylinders=cylinders, spheres=spheres))
        self.robot_model.log(SceneUpdate(entities=entities), log_time=log_time_ns)

    def log_transforms(self, transforms: Iterable[LinkTransform], stamp_ns: int, log_time_ns: int) -> None:
        """Frame transforms stamped `stamp_ns` [ns] (the joint state's stamp)."""
        stamp = timestamp(stamp_ns)
        self.tf.log(FrameTransforms(transforms=[
            FrameTransform(timestamp=stamp, parent_frame_id=t.parent, child_frame_id=t.child,
                           translation=Vector3(x=t.translation[0], y=t.translation[1], z=t.translation[2]),
                           rotation=Quaternion(x=t.rotation[0], y=t.rotation[1], z=t.rotation[2], w=t.rotation[3]))
            for t in transforms]), log_time=log_time_ns)

    # ------------------------------------------------------------------ images
    def log_image(self, which: str, image: np.ndarray, encoding: str, stamp_ns: int, frame_id: str,
                  log_time_ns: int) -> bool:
        """An image (H, W, C) uint8 in `encoding` (rgb8, bgr8, mono8, ...); which: 'camera' | 'policy'.
        The camera goes out as JPEG when jpeg_quality > 0 and the encoding is rgb8/bgr8/mono8."""
        channel = self.camera if which == "camera" else self.policy_image
        if not channel.has_sinks():
            return False
        stamp = timestamp(stamp_ns)
        if isinstance(channel, CompressedImageChannel):
            if encoding == "rgb8":
                bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
            elif encoding in ("bgr8", "mono8"):
                bgr = image
            else:
                raise ValueError(f"cannot JPEG-compress a {encoding!r} image (rgb8, bgr8, mono8); "
                                 f"set jpeg_quality 0 to send it raw")
            ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
            if not ok:
                raise ValueError(f"JPEG encoding of a {image.shape} {encoding} image failed")
            channel.log(CompressedImage(timestamp=stamp, frame_id=frame_id, data=data.tobytes(), format="jpeg"),
                        log_time=log_time_ns)
            return True
        height, width = image.shape[:2]
        channel.log(RawImage(timestamp=stamp, frame_id=frame_id, width=width, height=height, encoding=encoding,
                             step=int(image.strides[0]), data=np.ascontiguousarray(image).tobytes()),
                    log_time=log_time_ns)
        return True

    def log_calibration(self, which: str, width: int, height: int, distortion_model: str, d, k, r, p,
                        stamp_ns: int, frame_id: str, log_time_ns: int) -> None:
        """A camera calibration (ROS CameraInfo fields); which: 'camera' | 'policy'."""
        channel = self.camera_info if which == "camera" else self.policy_info
        channel.log(CameraCalibration(timestamp=timestamp(stamp_ns), frame_id=frame_id, width=int(width),
                                      height=int(height), distortion_model=distortion_model,
                                      D=[float(v) for v in d], K=[float(v) for v in k], R=[float(v) for v in r],
                                      P=[float(v) for v in p]), log_time=log_time_ns)

    # ------------------------------------------------------------------ scene
    def log_planned_path(self, frame_id: str, points: np.ndarray, stamp_ns: int, log_time_ns: int) -> None:
        """The tool point's planned path (K, 3) [m] in `frame_id`: a line strip with a dot per point."""
        pts = [Point3(x=float(p[0]), y=float(p[1]), z=float(p[2])) for p in np.asarray(points).reshape(-1, 3)]
        dots = [SpherePrimitive(pose=_pose(p), size=Vector3(x=0.012, y=0.012, z=0.012),
                                color=Color(r=0.1, g=0.6, b=1.0, a=0.9)) for p in np.asarray(points).reshape(-1, 3)]
        entity = SceneEntity(timestamp=timestamp(stamp_ns), frame_id=frame_id, id="planned_path",
                             lines=[LinePrimitive(type=LinePrimitiveLineType.LineStrip, thickness=0.006,
                                                  points=pts, color=Color(r=0.1, g=0.6, b=1.0, a=1.0))],
                             spheres=dots)
        self.planned_path.log(SceneUpdate(entities=[entity]), log_time=log_time_ns)

    def log_target(self, xyz, frame_id: str, stamp_ns: int, log_time_ns: int) -> None:
        """The sim's target position (3,) [m] as a green sphere."""
        entity = SceneEntity(timestamp=timestamp(stamp_ns), frame_id=frame_id or WORLD_FRAME, id="target",
                             spheres=[SpherePrimitive(pose=_pose(xyz), size=Vector3(x=0.04, y=0.04, z=0.04),
                                                      color=Color(r=0.1, g=0.85, b=0.3, a=0.8))])
        self.target.log(SceneUpdate(entities=[entity]), log_time=log_time_ns)

    # ------------------------------------------------------------------ JSON
    def log_json(self, topic: str, message: dict, log_time_ns: int) -> None:
        self.json[topic].log(message, log_time=log_time_ns)
