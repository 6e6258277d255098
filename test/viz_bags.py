"""A small synthetic recording for the Foxglove tests: joint states, images, camera info, chunks,
robot commands, supervisor states and (optionally) the URDF, written with our own bag writer."""
from __future__ import annotations

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.conversions import ns_to_stamp
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.paths import urdf_path

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000
N_JOINTS, N_IMAGES, N_CHUNKS = 200, 30, 10
URDF = urdf_path().read_text()
MODEL = RobotModel.from_string(URDF, "arm6")
NAMES = MODEL.joint_names


def q(i: int) -> np.ndarray:
    return 0.6 * np.sin(0.05 * i + np.arange(len(NAMES)))


def _joint_state(i: int) -> JointState:
    msg = JointState(name=NAMES, position=list(q(i)), velocity=[0.0] * len(NAMES))
    msg.header.stamp = ns_to_stamp(T0 + i * 10 * MS)
    return msg


def _image(i: int) -> Image:
    msg = Image(height=24, width=32, encoding="rgb8", step=96, data=bytes((i + np.arange(24 * 96)) % 256))
    msg.header.stamp = ns_to_stamp(T0 + i * 33 * MS)
    msg.header.frame_id = "camera_optical"
    return msg


def _chunk(i: int) -> JointTrajectory:
    msg = JointTrajectory(joint_names=NAMES)
    msg.header.stamp = ns_to_stamp(T0 + i * 100 * MS)
    msg.points = [JointTrajectoryPoint(positions=list(q(10 * i + k))) for k in range(10)]
    return msg


def _state(mode: str) -> DiagnosticArray:
    status = DiagnosticStatus(name="supervisor", message=mode, level=1)
    status.values = [KeyValue(key="mode", value=mode), KeyValue(key="reason", value="test"),
                     KeyValue(key="commands_clamped", value="3")]
    return DiagnosticArray(status=[status])


def write_bag(path, *, description: bool = True, joints: bool = True) -> None:
    events = []
    if description:
        events.append((T0, "/robot_description", "std_msgs/msg/String", serialize_message(String(data=URDF))))
    if joints:
        events += [(T0 + i * 10 * MS + 1, "/joint_states", "sensor_msgs/msg/JointState",
                    serialize_message(_joint_state(i))) for i in range(N_JOINTS)]
    events += [(T0 + i * 33 * MS + 2, "/camera/image_raw", "sensor_msgs/msg/Image", serialize_message(_image(i)))
               for i in range(N_IMAGES)]
    events.append((T0 + 3, "/camera/camera_info", "sensor_msgs/msg/CameraInfo",
                   serialize_message(CameraInfo(width=32, height=24, k=[30.0, 0, 16, 0, 30, 12, 0, 0, 1]))))
    events += [(T0 + i * 100 * MS + 4, "/policy/action_chunk", "trajectory_msgs/msg/JointTrajectory",
                serialize_message(_chunk(i))) for i in range(N_CHUNKS)]
    events += [(T0 + i * 10 * MS + 5, "/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray",
                serialize_message(Float64MultiArray(data=list(q(i))))) for i in range(50)]
    events += [(T0 + 6, "/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray", serialize_message(_state("HOLD"))),
               (T0 + 500 * MS, "/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray",
                serialize_message(_state("AUTONOMOUS")))]
    with BagWriter(path) as writer:
        for _, topic, msgtype, _ in events:
            writer.add_topic(topic, msgtype)
        for t, topic, _, data in sorted(events, key=lambda e: e[0]):
            writer.write(topic, t, data)
