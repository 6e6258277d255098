"""The one declaration of the graph (docs/design.md §2, §6).

Which nodes run in each mode (sim / robot / replay), with which parameters and remaps. The launch
files under launch/ and `sim2real launch` both build from `declare_graph`, so what runs on a robot
with `ros2 launch` is exactly what the tests start here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .paths import config_path, default_policy_path
from .robots import DEFAULT_ROBOT, ROBOTS, get_robot, robot_description_for, sim_params_for
from .topics import CAMERA_IMAGE, CAMERA_INFO, CLOCK, JOINT_STATES, ROBOT_COMMAND

MODES = ("sim", "robot", "replay")
# Robot graph real-time knobs (core.realtime, docs/deployment.md): the supervisor and the actuator
# wake on events and timers and do bounded work, so they go above the camera path (SCHED_OTHER); so
# do the servo-bus drivers (one sync read per period, then a sleep to an absolute deadline, also after
# a failed read: they cannot spin), at 50 as ros2_control's controller manager, which they stand in
# for: an e-stop's hold reaches the bus without waiting behind a render or a forward pass. The policy,
# the camera path and anything that can spin without sleeping never get a real-time priority; the
# camera path (camera, preprocessor, policy) gets nice -10 instead: under SCHED_OTHER a frame's work
# outweighs the machine's other work about 9 to 1, and can still never starve anything.
# Applied where the process may, else one warning and the node runs as before.
# The same four also get a 0.5 ms GIL switch interval: each runs two Python threads (the supervisor's
# e-stop thread beside its main one, a driver's bus loop beside its executor), and a thread woken by
# an event waits for the other to hand over the interpreter, up to Python's 5 ms by default. On the
# emulated SO-101 (quiet VM, 2 x 30 e-stops each, interleaved) e-stop -> hold on the bus went from
# p99 3.9 / 9.3 ms to 2.9 / 2.7 ms (docs/so101.md). The policy node too (its inference thread beside
# the executor): camera -> command p99 5.3-5.7 ms against 8.9-9.2 without it, quiet (2 x 2 runs,
# interleaved, lean robot graph, 2026-12-06).
CAMERA_PATH_NICE = -10
EVENT_THREAD_SWITCH_S = 0.0005
ROBOT_REALTIME: dict[str, dict[str, Any]] = {
    "supervisor": {"sched_policy": "fifo", "sched_priority": 60, "lock_memory": True,
                   "gil_switch_interval_s": EVENT_THREAD_SWITCH_S},
    "actuator_node": {"sched_policy": "fifo", "sched_priority": 55, "lock_memory": True,
                      "gil_switch_interval_s": EVENT_THREAD_SWITCH_S},
    "feetech_driver": {"sched_policy": "fifo", "sched_priority": 50, "lock_memory": True,
                       "gil_switch_interval_s": EVENT_THREAD_SWITCH_S},
    "leader_arm": {"sched_policy": "fifo", "sched_priority": 50, "lock_memory": True,
                   "gil_switch_interval_s": EVENT_THREAD_SWITCH_S},
    "camera_node": {"nice": CAMERA_PATH_NICE},
    "camera_preprocessor": {"nice": CAMERA_PATH_NICE},
    "policy_node": {"nice": CAMERA_PATH_NICE, "gil_switch_interval_s": EVENT_THREAD_SWITCH_S},
}

# The modes whose graph is lean by default (GraphArgs.lean): on a robot the camera path is the control
# path (camera-to-command p99 9.7-13 ms lean under load against 13-22 as two processes, docs/benchmarks.md).
# The sim and replay graphs keep camera_preprocessor: their figures and recordings compare against runs
# made that way, and their time is the sim's.
LEAN_MODES = ("robot",)

# GraphArgs fields that bring up the robot's own nodes (robot mode only).
BRINGUP_FIELDS = ("port", "calibration", "camera", "camera_calibration", "leader_port", "leader_calibration")


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
    checkpoint: str = ""  # "" = the robot's shipped reach policy (robots.RobotInfo.policy)
    use_sim_time: bool | None = None  # None: true for sim and replay, false on the robot
    camera_image_topic: str = CAMERA_IMAGE.name
    camera_info_topic: str = CAMERA_INFO.name
    joint_states_topic: str = JOINT_STATES.name
    command_topic: str = ROBOT_COMMAND.name
    ee_link: str = ""  # tool link for the sim task and Cartesian jogging; "" = the sim params' / the arm's tip
    extra_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    # True: no camera_preprocessor; policy_node takes the camera and preprocesses in its own process
    # (image_input camera: one image hop and one process wake-up fewer on the camera path, issue 36),
    # and a launch runs the checkpoint's ONNX export when one made from it lies beside it
    # (evaluation.checkpoint_graph.lean_policy). None: LEAN_MODES decide (the robot graph is lean).
    preprocess_in_policy: bool | None = None
    viz: bool = False  # add viz_node: a live Foxglove view (docs/viz.md)
    viz_port: int = 8765  # its WebSocket port
    viz_host: str = "127.0.0.1"  # where it listens: this machine only, unless told otherwise
    # Robot mode, bring-up on a Feetech servo-bus arm (docs/so101.md "Running on an SO-101"): with
    # `port` the graph starts feetech_driver itself instead of expecting ros2_control.
    port: str = ""  # the servo bus (/dev/ttyACM0, or an emulator's pty); "" = no driver in the graph
    calibration: str = ""  # the arm's LeRobot calibration JSON (required with port)
    camera: str = ""  # camera_node's source (index, /dev/videoN, file); "" = no camera node
    camera_calibration: str = ""  # camera_node's ROS calibration YAML; "" = the robot's sim camera file
    sim_camera: bool = False  # camera from the sim following joint_states (the emulator rehearsal)
    leader_port: str = ""  # a leader arm's bus: add leader_arm (command/teleop)
    leader_calibration: str = ""  # the leader arm's LeRobot calibration JSON (required with leader_port)
    estop_heartbeat_s: float = 0.0  # > 0: the supervisor's estop_heartbeat_timeout_s [s] (a stop source)

    def __post_init__(self) -> None:
        if not self.checkpoint:
            # An unknown robot is refused by name where the graph is declared; its policy is arm6's meanwhile.
            robot = ROBOTS.get(self.robot)
            object.__setattr__(self, "checkpoint", str(robot.policy_path() if robot else default_policy_path()))

    def description(self) -> str:
        """robot_description, or the robot's URDF file when it is empty."""
        return robot_description_for(self.robot, self.robot_description, "graph")

    def lean(self, mode: str) -> bool:
        """Whether the `mode` graph preprocesses in the policy node: preprocess_in_policy, or by
        default true where the camera path's latency is the robot's (LEAN_MODES)."""
        return self.preprocess_in_policy if self.preprocess_in_policy is not None else mode in LEAN_MODES

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
        pairs += [(CAMERA_IMAGE.name, args.camera_image_topic), (CAMERA_INFO.name, args.camera_info_topic)]
    if joints:
        pairs.append((JOINT_STATES.name, args.joint_states_topic))
    if command:
        pairs.append((ROBOT_COMMAND.name, args.command_topic))
    return tuple((a, b) for a, b in pairs if a != b)


def _hardware(args: GraphArgs, node, description: dict[str, Any]) -> list[NodeDecl]:
    """The robot's own nodes when the graph brings them up: bus driver, camera, leader arm."""
    out = []
    if args.port:
        out.append(node("feetech_driver", {**description, "port": args.port, "calibration": args.calibration},
                        _remaps(args, joints=True, command=True)))
    if args.sim_camera:
        # The camera from the sim, drawing the arm at the measured joint positions (nodes/sim_camera.py).
        out.append(node("sim_camera", {"robot": args.robot, **description,
                                       **({"camera_calibration": args.camera_calibration}
                                          if args.camera_calibration else {})},
                        _remaps(args, camera=True, joints=True)))
    elif args.camera:
        camera_calibration = args.camera_calibration or str(config_path(DEFAULT_CAMERA_CALIBRATION))
        out.append(node("camera_node", {"source": args.camera, "camera_calibration": camera_calibration},
                        _remaps(args, camera=True)))
    if args.leader_port:
        out.append(node("leader_arm", {**description, "port": args.leader_port,
                                       "calibration": args.leader_calibration,
                                       "follower_calibration": args.calibration}))
    return out


# camera_node's calibration when none is given: the sim camera's, which both robots' sim params name
# (test_bringup checks it), so the camera is asked for the image size the policy was trained on. A
# real webcam's own calibration (ROS camera_calibration) is better: pass camera_calibration.
DEFAULT_CAMERA_CALIBRATION = "camera_sim.yaml"


def bringup_problems(args: GraphArgs, flag=lambda name: "--" + name.replace("_", "-")) -> list[str]:
    """What is wrong with the robot's own nodes' arguments, each naming its flag (flag(field) -> how
    the user spells it: `--port` on the command line, `port:=` for ros2 launch). Checked before any
    node starts, so a missing file or an unplugged adapter is one clear line, not a node's traceback."""
    import os

    problems = []

    def need_file(field: str, what: str) -> None:
        value = getattr(args, field)
        if not value:
            needed_by = flag("port") if field == "calibration" else flag("leader_port")
            problems.append(f"{flag(field)}: required with {needed_by} ({what})")
        elif not os.path.isfile(value):
            problems.append(f"{flag(field)} {value}: no such file ({what})")

    if args.port:
        if args.robot != "so101":
            problems.append(f"{flag('port')}: the Feetech servo-bus driver drives an SO-101; add {flag('robot')} so101 "
                            f"(robot is {args.robot!r})")
        if not os.path.exists(args.port):
            problems.append(f"{flag('port')} {args.port}: no such device (is the arm's USB adapter plugged in and "
                            f"powered? see ls /dev/serial/by-id/)")
        need_file("calibration", "the LeRobot calibration JSON of this arm")
    elif args.calibration:
        problems.append(f"{flag('calibration')}: given without {flag('port')}, the bus it calibrates")
    if args.leader_port:
        if not os.path.exists(args.leader_port):
            problems.append(f"{flag('leader_port')} {args.leader_port}: no such device")
        need_file("leader_calibration", "the LeRobot calibration JSON of the leader arm")
    if args.camera and args.sim_camera:
        problems.append(f"{flag('camera')}: the sim's camera is already the camera here")
    if args.camera_calibration and not os.path.isfile(args.camera_calibration):
        problems.append(f"{flag('camera_calibration')} {args.camera_calibration}: no such file")
    return problems


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
    # In the sim, the policy node checks the sim params the sim node runs against those the checkpoint
    # was trained on (a warning naming both versions); on a robot there are none to check.
    sim_params = ({"sim_params_file": sim_params_for(args.robot, args.extra_parameters.get("sim_node", {})
                                                     .get("sim_params_file"), "graph")} if mode == "sim" else {})
    policy = {**description, "checkpoint": args.checkpoint, **sim_params}
    if args.lean(mode):
        camera_path = [node("policy_node", {**policy, "image_input": "camera"},
                            _remaps(args, camera=True, joints=True))]
    else:
        camera_path = [node("camera_preprocessor", {}, _remaps(args, camera=True)),
                       node("policy_node", policy, _remaps(args, joints=True))]
    perception = [*camera_path, node("actuator_node", description, _remaps(args, joints=True))]
    tool = {"ee_link": args.ee_link} if args.ee_link else {}
    viewer = [node("viz_node", {**description, **tool, "port": int(args.viz_port), "host": args.viz_host},
                   _remaps(args, camera=True, joints=True, command=True))] if args.viz else []
    if mode == "sim":
        sim_remaps = _remaps(args, camera=True, joints=True, command=True)
        if args.namespace:
            # Every node's sim-time source listens on /clock, whatever its namespace.
            sim_remaps += ((CLOCK.name, CLOCK.absolute),)
        sim = node("sim_node", {"robot": args.robot, **description, **tool}, sim_remaps)
        supervisor = node("supervisor", {"robot": args.robot, **description, **tool, "auto_arm": True},
                          _remaps(args, joints=True, command=True))
        return [sim, *perception, supervisor, *viewer]
    if mode == "robot":
        # Without `port`, the camera driver and ros2_control (joint_state_broadcaster + forward position
        # controller) are the robot's own; with it, feetech_driver and a camera node are part of the
        # graph. The supervisor never arms by itself on hardware, and arms only while a stop source is
        # live (an `estop` heartbeat or a joystick; losing it latches ESTOP, docs/design.md §4).
        heartbeat = {"estop_heartbeat_timeout_s": float(args.estop_heartbeat_s)} if args.estop_heartbeat_s > 0 else {}
        supervisor = node("supervisor", {"robot": args.robot, **description, **tool, "auto_arm": False,
                                         "require_stop_source": True, **heartbeat},
                          _remaps(args, joints=True, command=True))
        return [*_hardware(args, node, description), *perception, supervisor, *viewer]
    # replay: a bag player provides camera, joint_states and clock; nothing commands a robot.
    return [*perception, *viewer]
