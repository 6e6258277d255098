"""viz_node: a live Foxglove view of the graph (docs/viz.md), off by default (`--viz`, `viz:=true`).

Parameters: robot_description (URDF path or XML), ee_link (tool point; '' = the sim params' ee_link,
else the arm's tip), host (default 127.0.0.1: only this machine), port (default 8765; 0 = any free
port), jpeg_quality (camera JPEG quality; 0 = raw), client_backlog (messages queued per client before
the oldest is dropped), stats_period_s, allowed_origins (browser origins let in besides Foxglove's
app; any other web page is refused: viz/origin_gate.py).

A Foxglove WebSocket server (foxglove-sdk) streaming what sim2real_ros/viz/channels.py lists:
frame transforms by forward kinematics of joint_states, the URDF and its visuals, camera and
policy images, the planned tool path of every chunk, commanded vs measured joints, supervisor
state and events, episode outcomes, the sim's target and per-topic rates and drops. High-rate
inputs are taken best effort (a slow viz_node never makes a publisher resend); a channel nobody
watches costs no conversion; the SDK drops the oldest messages of a client that cannot keep up.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile

from .. import topics
from ..core.errors import ConfigError, UrdfError
from ..core.robot.urdf import RobotModel
from ..viz.channels import VizPublisher
from ..viz.kinematics import ArmKinematics
from ..viz.router import INPUTS, VizRouter
from ..viz.server import (
    DEFAULT_HOST,
    LatchOnSubscribe,
    ServerStartError,
    start_viz_server,
)
from ..viz.source import tool_link_for
from .common import EVENTS_QOS, LATCHED_QOS, SENSOR_QOS, now_ns, run_node
from .parameters import VIZ_NODE, declare_table

QOS = {"sensor": SENSOR_QOS, "latched": LATCHED_QOS, "events": EVENTS_QOS}
LATCH_CHECK_S = 0.2
# Topics whose last message a late Foxglove client is sent (latched on ROS).
LATCHED_TOPICS = (topics.SIM_TARGET.name, topics.SUPERVISOR_STATE.name, topics.CAMERA_INFO.name,
                  topics.POLICY_CAMERA_INFO.name)


def _message_class(msgtype: str) -> Any:
    package, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


class VizNode(Node):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__("viz_node", **node_kwargs)
        source = f"node '{self.get_name()}' parameters"
        v = declare_table(self, VIZ_NODE)  # parameters.VIZ_NODE, docs/parameters.md
        description, ee_link, host, port = v["robot_description"], v["ee_link"], v["host"], v["port"]
        quality, backlog, stats_period = v["jpeg_quality"], v["client_backlog"], v["stats_period_s"]
        try:
            model = RobotModel.from_description(description)
            urdf_xml = description if description.lstrip().startswith("<") else Path(description).read_text()
            tool = tool_link_for(model, ee_link)
        except (UrdfError, OSError) as err:
            raise ConfigError(source, "robot_description", description, str(err)) from err
        if not host:
            raise ConfigError(source, "host", host, "must name an address (127.0.0.1, 0.0.0.0, ...)")
        self._publisher = VizPublisher(self._context_for_server(), jpeg_quality=int(quality))
        self.router = VizRouter(self._publisher, ArmKinematics(model, tool), urdf_xml)
        self._latch = LatchOnSubscribe()
        try:
            self.server = start_viz_server(self._publisher.context, host=host, port=int(port),
                                           backlog=int(backlog), listener=self._latch,
                                           allowed_origins=list(v["allowed_origins"]), on_refused=self._refused)
        except ServerStartError as err:
            self._publisher.close()
            field = "allowed_origins" if "allowed origins" in str(err) else "port"
            raise ConfigError(source, field, v[field], str(err)) from err
        for warning in self.server.warnings():
            self.get_logger().warning(warning)
        self._latest: dict[str, tuple[Any, int]] = {}
        for item in INPUTS:
            if item.topic == "robot_description":
                continue
            qos: QoSProfile = QOS[item.qos]
            self.create_subscription(_message_class(item.msgtype), item.topic,
                                     lambda msg, t=item.topic: self._on_message(t, msg), qos)
        self.create_timer(LATCH_CHECK_S, self._resend_latched)
        self.create_timer(float(stats_period), lambda: self.router.publish_stats(now_ns(self)))
        self.router.publish_robot(now_ns(self))
        self.get_logger().info(
            f"Foxglove server on ws://{host}:{self.server.port} (tool point {tool}); open Foxglove -> "
            f"Open connection -> Foxglove WebSocket -> ws://{'localhost' if host == DEFAULT_HOST else host}:"
            f"{self.server.port}")

    def _refused(self, origin: str, reason: str) -> None:
        """A web page not in allowed_origins tried to connect (gate thread: logging only)."""
        hint = "; to allow it, add it to allowed_origins (docs/viz.md)" if reason == "origin not allowed" else ""
        self.get_logger().warning(f"Foxglove connection refused: {reason}: {origin!r}{hint}", throttle_duration_sec=5.0)

    @staticmethod
    def _context_for_server():
        from foxglove import Context

        return Context()

    def _on_message(self, topic: str, msg: Any) -> None:
        t = now_ns(self)
        if topic in LATCHED_TOPICS:
            self._latest[topic] = (msg, t)
        self.router.handle(topic, msg, t)

    def _resend_latched(self) -> None:
        """A client subscribed: send what a ROS late joiner gets from latched topics."""
        if not self._latch.take():
            return
        t = now_ns(self)
        self.router.publish_robot(t)
        for topic, (msg, _) in list(self._latest.items()):
            self.router.handle(topic, msg, t)

    def destroy_node(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.stop()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    # One thread: the router is not shared between threads; the SDK sends on its own threads.
    sys.exit(run_node(lambda: VizNode(), args, num_threads=1))
