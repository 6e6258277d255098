"""The one declaration of the graph (docs/design.md §2, §6).

Which nodes run in each mode (sim / robot / replay), with which parameters and remaps. The launch
files under launch/ and `sim2real launch` both build from `declare_graph`, so what runs on a robot
with `ros2 launch` is exactly what the tests start here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .paths import config_path, default_policy_path
from .robots import DEFAULT_ROBOT, get_robot, robot_description_for

MODES = ("sim", "robot", "replay")
# Robot graph real-time knobs (core.realtime, docs/deployment.md): the supervisor and the actuator
# wake on events and timers and do bounded work, so they go above the camera path (SCHED_OTHER);
# the policy, the camera path and anything that can spin without sleeping never get a real-time
# priority. Applied where the process may, else one warning and the node runs as before.
ROBOT_REALTIME: dict[str, dict[str, Any]] = {
    "supervisor": {"sched_policy": "fifo", "sched_priority": 60, "lock_memory": True},
    "actuator_node": {"sched_policy": "fifo", "sched_priority": 55, "lock_memory": True},
}


@dataclass(frozen=True)
class GraphArgs:
    """Arguments of a graph, the same ones the launch files declare.

    Topic arguments name what the bottom of the graph publishes and accepts, so a real camera
    driver and ros2_control controller plug in by remapping rather than by code changes.
    """

    namespace: str = ""
    robot: str = DEFAULT_ROBOT  # robots.ROBOTS name: the default URDF, sim params and tool link
    robot_description: str = ""  # "" = the robot's URDF
    params_file: str = field(default_factory=lambda: str(config_path("params.yaml")))
    checkpoint: str = field(default_factory=lambda: str(default_policy_path()))
    use_sim_time: bool | None = None  # None: true for sim and replay, false on the robot
    camera_image_topic: str = "camera/image_raw"
    camera_info_topic: str = "camera/camera_info"
    joint_states_topic: str = "joint_states"
    command_topic: str = "forward_position_controller/commands"
    ee_link: str = ""  # tool link for the sim task and Cartesian jogging; "" = the sim params' / the arm's tip
    extra_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    viz: bool = False  # add viz_node: a live Foxglove view (docs/viz.md)
    viz_port: int = 8765  # its WebSocket port
    viz_host: str = "127.0.0.1"  # where it listens: this machine only, unless told otherwise

    def description(self) -> str:
        """robot_description, or the robot's URDF file when it is empty."""
        return robot_description_for(self.robot, self.robot_description, "graph")

    def sim_time(self, mode: str) -> bool:
        """use_sim_time of every node: default true where a sim or a bag player publishes `clock`."""
        return self.use_sim_time if self.use_sim_time is not None else mode in ("sim", "replay")


@dataclass(frozen=True)
class NodeDecl:
    """One node of the graph: console script, node name, parameter overrides and remaps."""

    executable: str
    name: str
    parameters: dict[str, Any]
    remappings: tuple[tuple[str, str], ...] = ()
    params_files: tuple[str, ...] = ()


def _remaps(args: GraphArgs, *, camera: bool = False, joints: bool = False, command: bool = False):
    pairs = []
    if camera:
        pairs += [("camera/image_raw", args.camera_image_topic), ("camera/camera_info", args.camera_info_topic)]
    if joints:
        pairs.append(("joint_states", args.joint_states_topic))
    if command:
        pairs.append(("forward_position_controller/commands", args.command_topic))
    return tuple((a, b) for a, b in pairs if a != b)


def declare_graph(mode: str, args: GraphArgs | None = None) -> list[NodeDecl]:
    """The nodes of `mode` ("sim", "robot" or "replay") with their parameters and remaps."""
    if mode not in MODES:
        raise ValueError(f"unknown graph mode {mode!r}; choose one of {MODES}")
    args = args or GraphArgs()
    get_robot(args.robot, "graph")
    common = {"use_sim_time": args.sim_time(mode)}
    files = (args.params_file,) if args.params_file else ()

    realtime = ROBOT_REALTIME if mode == "robot" else {}

    def node(executable: str, params: dict[str, Any], remaps=()) -> NodeDecl:
        merged = {**common, **realtime.get(executable, {}), **params, **args.extra_parameters.get(executable, {})}
        return NodeDecl(executable, executable, merged, tuple(remaps), files)

    description = {"robot_description": args.description()}
    perception = [
        node("camera_preprocessor", {}, _remaps(args, camera=True)),
        node("policy_node", {**description, "checkpoint": args.checkpoint}, _remaps(args, joints=True)),
        node("actuator_node", description, _remaps(args, joints=True)),
    ]
    tool = {"ee_link": args.ee_link} if args.ee_link else {}
    viewer = [node("viz_node", {**description, **tool, "port": int(args.viz_port), "host": args.viz_host},
                   _remaps(args, camera=True, joints=True, command=True))] if args.viz else []
    if mode == "sim":
        sim_remaps = _remaps(args, camera=True, joints=True, command=True)
        if args.namespace:
            # Every node's sim-time source listens on /clock, whatever its namespace.
            sim_remaps += (("clock", "/clock"),)
        sim = node("sim_node", {"robot": args.robot, **description, **tool}, sim_remaps)
        supervisor = node("supervisor", {"robot": args.robot, **description, **tool, "auto_arm": True},
                          _remaps(args, joints=True, command=True))
        return [sim, *perception, supervisor, *viewer]
    if mode == "robot":
        # The camera driver and ros2_control (joint_state_broadcaster + forward position controller)
        # are the robot's own; the supervisor never arms by itself on hardware, and arms only while a
        # stop source is live (an `estop` heartbeat or a joystick; losing it latches ESTOP, docs/design.md §4).
        supervisor = node("supervisor", {"robot": args.robot, **description, **tool, "auto_arm": False,
                                         "require_stop_source": True},
                          _remaps(args, joints=True, command=True))
        return [*perception, supervisor, *viewer]
    # replay: a bag player provides camera, joint_states and clock; nothing commands a robot.
    return [*perception, *viewer]
