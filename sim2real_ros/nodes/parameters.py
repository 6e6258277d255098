"""Every node's parameters, declared once: one table of ParamSpec per node.

A node declares its parameters from its table (`declare_table`: descriptions, read-only, numeric
ranges as FloatingPointRange/IntegerRange so rclpy refuses a value outside them, a wrongly typed
or out-of-range override as one ConfigError line), then validates the values into its config
dataclass. docs/parameters.md is generated from the same tables:

    python -m sim2real_ros.nodes.parameters            # writes docs/parameters.md
    python -m sim2real_ros.nodes.parameters --check    # exit 1 when the committed file differs

A renamed parameter keeps its old name for one release (ParamSpec.deprecated_names): given, it is
used (unless the new name is given too) and a warning naming the new name is logged once.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.safety.supervisor import CONFIG_RANGES
from ..paths import share_dir
from ..robots import DEFAULT_ROBOT, ROBOT_NAMES
from ..viz.defaults import DEFAULT_BACKLOG, DEFAULT_HOST, DEFAULT_PORT

TYPES = ("string", "double", "integer", "bool", "string_array", "double_array", "integer_array",
         "string_or_string_array")
DOC_PATH = Path(__file__).resolve().parent.parent.parent / "docs" / "parameters.md"


@dataclass(frozen=True)
class ShareFile:
    """A default that is a file of the package (config/, urdf/, policies/): the node gets its full
    path on this machine, the docs show `relative`."""

    relative: str

    def resolve(self) -> str:
        return str(share_dir() / self.relative)


@dataclass(frozen=True)
class ParamSpec:
    """One node parameter.

    name; type: one of TYPES; default: the value (a ShareFile for a package file; () for an empty
    array); description: what `ros2 param describe` shows; unit: e.g. "s", "Hz", "rad" ("" for
    none); value_range: inclusive (low, high) bounds enforced by rclpy (None: the node's config
    validates the value); read_only: set at start-up only; deprecated_names: earlier names still
    accepted (with a warning) for one release.
    """

    name: str
    type: str
    default: Any
    description: str
    unit: str = ""
    value_range: tuple[float, float] | None = None
    read_only: bool = True
    deprecated_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"parameter {self.name}: type {self.type!r} is not one of {TYPES}")
        if self.value_range is not None and self.type not in ("double", "integer"):
            raise ValueError(f"parameter {self.name}: only a double or integer parameter has a range")

    def default_value(self) -> Any:
        """The default as the node declares it (a package file as its full path)."""
        if isinstance(self.default, ShareFile):
            return self.default.resolve()
        if isinstance(self.default, tuple):
            return list(self.default)
        return self.default

    def shown_default(self) -> str:
        """The default as the docs show it."""
        if isinstance(self.default, ShareFile):
            return self.default.relative
        value = list(self.default) if isinstance(self.default, tuple) else self.default
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return value if value else "''"
        return repr(value)


def _bounded(name: str, default: float, description: str, unit: str = "") -> ParamSpec:
    """A supervisor timing or limit parameter with its core.supervisor.CONFIG_RANGES bounds."""
    kind = "integer" if isinstance(default, int) else "double"
    return ParamSpec(name, kind, default, description, unit, value_range=CONFIG_RANGES[name])


URDF = ShareFile("urdf/arm6.urdf")
PREPROCESS_YAML = ShareFile("config/preprocess.yaml")

ROBOT_PARAM = ParamSpec("robot", "string", DEFAULT_ROBOT,
                        f"robot ({' | '.join(ROBOT_NAMES)}, docs/robots.md): its URDF is the default "
                        "robot_description")

SIM_NODE: tuple[ParamSpec, ...] = (
    ParamSpec("robot", "string", DEFAULT_ROBOT,
              f"robot ({' | '.join(ROBOT_NAMES)}, docs/robots.md): its URDF and sim params are the defaults "
              "of robot_description and sim_params_file"),
    ParamSpec("robot_description", "string", "",
              "URDF XML or URDF file path of the simulated robot; empty = the robot's URDF"),
    ParamSpec("sim_params_file", "string", "",
              "sim parameters YAML (dynamics, latency, task, randomization); empty = the robot's "
              "(config/sim_params.yaml for arm6, config/sim_params_so101.yaml for so101)"),
    ParamSpec("camera_calibration", "string", "",
              "camera calibration YAML (ROS format); empty = the sim params' file"),
    ParamSpec("ee_link", "string", "", "end-effector (tool point) link; empty = the sim params' ee_link"),
    ParamSpec("joints", "string_array", (),
              "command joint order (Float64MultiArray layout); empty = all movable URDF joints"),
    ParamSpec("seed", "integer", 0, "random seed of targets and randomization (reproducible episodes)"),
    ParamSpec("randomize", "bool", False, "domain randomization per episode (false = nominal)"),
    ParamSpec("pushes", "bool", False, "random pushes on the arm's links per episode "
              "(the sim params' randomization.pushes ranges; false = none)"),
    ParamSpec("auto_reset", "bool", True, "start a new episode after each outcome"),
    ParamSpec("pacing", "string", "realtime", "realtime | lockstep | fast"),
    ParamSpec("real_time_factor", "double", 1.0, "target sim speed / wall speed for realtime pacing"),
    ParamSpec("joint_state_rate_hz", "double", 0.0, "joint_states rate [Hz]; 0 = sim params rates.joint_states_hz",
              "Hz"),
    ParamSpec("camera_rate_hz", "double", 0.0, "camera rate [Hz] (sim time); 0 = sim params rates.camera_hz", "Hz"),
    ParamSpec("clock_rate_hz", "double", 0.0, "clock rate [Hz] (sim time); 0 = sim params rates.clock_hz", "Hz"),
    ParamSpec("camera_enabled", "bool", True, "render and publish the camera"),
    ParamSpec("lockstep_timeout_s", "double", 1.0, "lockstep: longest wall wait for a command after a frame [s]",
              "s"),
    ParamSpec("world_frame_id", "string", "world", "frame of sim/target (robot base)"),
    ParamSpec("camera_frame_id", "string", "camera_link", "frame_id of the camera topics"),
)

CAMERA_PREPROCESSOR: tuple[ParamSpec, ...] = (
    ParamSpec("preprocess_config", "string", PREPROCESS_YAML,
              "Preprocessing YAML: policy camera intrinsics and size, center_crop, fill_rgb, interpolation. Its "
              "content hash must match the checkpoint's."),
    ParamSpec("diagnostics_period_s", "double", 1.0, "Period of the ~/diagnostics report [s].", "s"),
    ParamSpec("log_throttle_s", "double", 5.0,
              "At most one warning per drop reason per this period [s] (counters are exact).", "s"),
)

POLICY_NODE: tuple[ParamSpec, ...] = (
    ParamSpec("joints", "string_or_string_array", "",
              "graph joint names (string array or comma-separated); empty: movable joints of the URDF"),
    ParamSpec("checkpoint", "string", ShareFile("policies/reach_default.pt"),
              "policy checkpoint file (create one with `sim2real policy init`) or exported .onnx policy "
              "(`sim2real policy export`)"),
    ParamSpec("backend", "string", "auto",
              "what runs the policy: auto (by the file: checkpoint -> torch, .onnx -> onnxruntime), torch or "
              "onnxruntime"),
    ParamSpec("preprocess_config", "string", PREPROCESS_YAML,
              "preprocessing YAML the graph runs; the checkpoint must match its hash"),
    ParamSpec("robot_description", "string", URDF, "URDF XML or file path; the graph's joint names come from it"),
    ParamSpec("device", "string", "cpu", "inference device: cpu or cuda[:index]"),
    ParamSpec("num_threads", "integer", 1,
              "torch (or onnxruntime) intra-op threads (0: its default); 1 leaves a core to the executor"),
    ParamSpec("pairing_tolerance_s", "double", 0.05, "largest |image stamp - joint state stamp| paired [s]", "s"),
    ParamSpec("max_observation_age_s", "double", 0.25,
              "observations older than this on the node clock are dropped [s]", "s"),
    ParamSpec("observation_period_s", "double", -1.0,
              "least time between observations used [s]; 0: every image; -1: the checkpoint's training "
              "observation period", "s"),
    ParamSpec("diagnostics_period_s", "double", 1.0, "diagnostics period [s]", "s"),
    ParamSpec("sim_params_file", "string", "",
              "sim params YAML of the sim this graph runs (empty: none, e.g. on a robot); when its version differs "
              "from the one the checkpoint was trained on, a warning names both"),
)

ACTUATOR_NODE: tuple[ParamSpec, ...] = (
    ParamSpec("robot_description", "string", URDF,
              "URDF XML or a URDF file path; its movable joints are the default `joints`"),
    ParamSpec("joints", "string_array", (),
              "joint names of the commands, in order (default: the URDF's movable joints); each a movable joint "
              "of robot_description, named once"),
    ParamSpec("control_rate_hz", "double", 100.0, "command publication rate [Hz]", "Hz",
              deprecated_names=("control_rate",)),
    ParamSpec("actuation_latency_s", "double", 0.0,
              "delay from sending a command to the joints acting on it [s]; the command at tick t is the chunk "
              "target for t + actuation_latency_s", "s", deprecated_names=("actuation_latency",)),
    ParamSpec("interpolation", "string", "cubic", "between chunk points: linear | cubic (C1 Hermite)"),
    ParamSpec("blending", "string", "crossfade", "overlapping chunks: crossfade (newest wins) | temporal_ensemble "
              "(ACT)"),
    ParamSpec("crossfade_s", "double", 0.05, "fade-in time of a new chunk [s] (0: switch at once)", "s"),
    ParamSpec("ensemble_decay", "double", 0.01,
              "temporal_ensemble: m in w_i = exp(-m i), i = 0 the oldest chunk (m > 0 favours older chunks, as ACT)"),
    ParamSpec("estimate_latency", "bool", True,
              "estimate the actuation latency from commands vs joint_states and report it"),
    ParamSpec("use_estimated_latency", "bool", False,
              "compensate with the estimated latency instead of actuation_latency_s once its confidence reaches "
              "latency_min_confidence"),
    ParamSpec("latency_window_s", "double", 4.0, "history used by the latency estimate [s]", "s"),
    ParamSpec("latency_max_s", "double", 0.25, "largest latency the estimate searches [s]", "s"),
    ParamSpec("latency_min_confidence", "double", 0.8,
              "confidence (normalized correlation) needed to use the estimate [0..1]"),
    ParamSpec("max_joint_jump_rad", "double", 0.2,
              "a measured step beyond 2 x URDF velocity limit x dt plus this is a jump (teleported sim robot, "
              "re-homed encoder): buffered chunks are dropped, chunks observed before it refused [rad]", "rad"),
    ParamSpec("tick_phase_lock", "bool", True,
              "wall clock: nudge the control schedule (at most 10% of a period per chunk) so the first tick after "
              "a typical chunk arrival comes 15% of a period after it; the rate is unchanged"),
    ParamSpec("tick_on_chunk", "bool", True,
              "wall clock: an accepted chunk brings the next tick forward to its arrival (no sooner than "
              "min_command_interval_s after the last one) and the fixed-rate schedule goes on from there, so a chunk "
              "never waits for the next fixed tick; false: it waits (up to a period)"),
    ParamSpec("min_command_interval_s", "double", 0.002,
              "tick_on_chunk: shortest time between two commands [s] (less than a control period); the supervisor's "
              "step limiter scales each step with the time since the last command", "s", value_range=(0.0, 1.0)),
)

# [Hz] supervisor control_rate_hz bounds: the core's control period bounds, inverted.
SUPERVISOR_CONTROL_RATE_RANGE = (1.0 / CONFIG_RANGES["control_period_s"][1],
                                 1.0 / CONFIG_RANGES["control_period_s"][0])
SUPERVISOR_STATE_RATE_RANGE = (0.1, 100.0)  # [Hz]

SUPERVISOR: tuple[ParamSpec, ...] = (
    ROBOT_PARAM,
    ParamSpec("robot_description", "string", "",
              "URDF XML or URDF file path: joints, limits, Jacobian; empty = the robot's URDF"),
    ParamSpec("joints", "string_array", (),
              "command joint order (default: the URDF's movable joints); each a movable joint of the URDF, named "
              "once"),
    ParamSpec("ee_link", "string", "", "end-effector link for Cartesian jogging ('' = the arm's tip)"),
    ParamSpec("joystick_config", "string", ShareFile("config/joystick.yaml"),
              "joystick mapping YAML (buttons, axes, scales, deadzone)"),
    ParamSpec("control_rate_hz", "double", 100.0, "robot command rate [Hz]", "Hz",
              value_range=SUPERVISOR_CONTROL_RATE_RANGE),
    ParamSpec("state_rate_hz", "double", 5.0, "supervisor/state rate when nothing changes [Hz]", "Hz",
              value_range=SUPERVISOR_STATE_RATE_RANGE),
    ParamSpec("forward_policy_commands", "bool", True,
              "AUTONOMOUS: send each command/policy as it arrives (at most one per half control period) instead "
              "of at the next control tick"),
    _bounded("policy_timeout_s", 0.1, "command/policy silence -> HOLD [s]", "s"),
    _bounded("joy_timeout_s", 0.5,
             "joy silence while the human is in control -> HOLD; with require_stop_source, how recent the "
             "joystick's e-stop button must be to count as a live stop source [s]", "s"),
    _bounded("joint_state_timeout_s", 0.2, "joint_states silence -> HOLD [s]", "s"),
    _bounded("teleop_timeout_s", 0.1,
             "TELEOP with a leader arm: command/teleop silence -> hold (the leader must be aligned again) [s]", "s"),
    ParamSpec("servo_diagnostics_topic", "string", "feetech_driver/diagnostics",
              "the servo-bus driver's diagnostics: an `overload` or `overheat` ERROR latches ESTOP, and the reset "
              "is refused while it persists ('' = not watched)"),
    _bounded("estop_heartbeat_timeout_s", 0.0, "estop silence -> ESTOP [s]; 0 = no heartbeat required", "s"),
    ParamSpec("auto_arm", "bool", False, "arm automatically once joint states and policy commands are fresh"),
    ParamSpec("require_stop_source", "bool", False,
              "arming needs a live stop source (estop messages within estop_heartbeat_timeout_s when that is > 0, "
              "or a joystick whose e-stop button was read within joy_timeout_s); losing it while moving latches "
              "ESTOP (true in the robot graph)"),
    _bounded("handover_ramp_s", 1.0, "ramp time for a gap of handover_max_gap_rad; smaller gaps ramp faster [s]",
             "s"),
    _bounded("handover_max_gap_rad", 0.5, "largest policy-vs-measured gap a handover accepts; in TELEOP, the "
             "largest leader-vs-measured gap at which following the leader arm starts [rad]", "rad"),
    _bounded("max_joint_jump_rad", 0.2,
             "measured step beyond 2 x velocity limit x dt plus this -> hold at the new position (re-homed "
             "encoder, teleported sim robot) [rad]", "rad"),
    _bounded("joint_jump_confirm_samples", 3,
             "consecutive joint states a measured jump must persist over before the hold moves to it; a shorter "
             "excursion is rejected as outliers"),
    _bounded("joint_state_limit_margin_rad", 0.5,
             "a measured position beyond the URDF position limits by more than this is rejected as implausible "
             "[rad]", "rad"),
    _bounded("shared_authority", 0.5, "SHARED: fraction of the human's jog velocity added to the policy [0..1]"),
    _bounded("shared_max_offset_rad", 0.3, "SHARED: largest human correction per joint [rad]", "rad"),
    ParamSpec("position_lower_limits", "double_array", (),
              "tighter lower position limits per joint [rad] (empty: URDF)", "rad"),
    ParamSpec("position_upper_limits", "double_array", (),
              "tighter upper position limits per joint [rad] (empty: URDF)", "rad"),
    ParamSpec("velocity_limits", "double_array", (), "tighter velocity limits per joint [rad/s] (empty: URDF)",
              "rad/s"),
    ParamSpec("velocity_scale", "double", 1.0, "scale of the velocity limits, in (0, 1]"),
)

RECORDER: tuple[ParamSpec, ...] = (
    ParamSpec("output", "string", "", "bag folder to create (empty: rosbag2_<date> in the working directory)"),
    ParamSpec("topics", "string_array", ("",), "topics to record; empty = every topic, discovered continuously"),
    ParamSpec("storage", "string", "mcap", "storage plugin: mcap (default) or sqlite3"),
    ParamSpec("flush_period_s", "double", 1.0,
              "the longest a received message waits to be handed to the OS [s]: the most a killed recorder loses "
              "(a flush is no fsync: a power loss loses more)", "s"),
    ParamSpec("discovery_period_s", "double", 0.5, "how often to look for new topics [s]", "s"),
    ParamSpec("max_file_size_mb", "double", 0.0, "split into a new file past this size [MB]; 0 = never", "MB"),
    ParamSpec("max_file_duration_s", "double", 0.0, "split into a new file past this duration [s]; 0 = never", "s"),
    ParamSpec("robot_description", "string", URDF,
              "URDF (file path or XML) stored as robot_description in the bag; '' = none"),
)

VIZ_NODE: tuple[ParamSpec, ...] = (
    ParamSpec("robot_description", "string", URDF, "URDF file path or XML"),
    ParamSpec("ee_link", "string", "", "tool point link ('' = the sim params' ee_link, else the arm's tip)"),
    ParamSpec("host", "string", DEFAULT_HOST,
              "address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface, see docs/viz.md)"),
    ParamSpec("port", "integer", DEFAULT_PORT, "Foxglove WebSocket port (0 = any free port)",
              value_range=(0, 65535)),
    ParamSpec("jpeg_quality", "integer", 80, "camera JPEG quality (0 = raw images)", value_range=(0, 100)),
    ParamSpec("client_backlog", "integer", DEFAULT_BACKLOG, "messages queued per client before the oldest is dropped",
              value_range=(1, 100000)),
    ParamSpec("stats_period_s", "double", 1.0, "period of /viz/stats [s]", "s", value_range=(0.05, 60.0)),
    ParamSpec("allowed_origins", "string_array", (),
              "browser origins (scheme://host[:port]) let in besides Foxglove's app (https://app.foxglove.dev); a "
              "web page of any other origin is refused, clients that send no Origin are let in (docs/viz.md)"),
)

CAMERA_NODE: tuple[ParamSpec, ...] = (
    ParamSpec("source", "string", "0",
              "what to open: a device index (0), a V4L2 path (/dev/video0), a video file (played at fps), or a "
              "network stream URL (rtsp://, http://...) only with allow_url; playlists are refused"),
    ParamSpec("allow_url", "bool", False, "open a network stream URL as source (off: a URL fails at start)"),
    ParamSpec("camera_calibration", "string", "",
              "the camera's calibration YAML (ROS camera_calibration format): camera_info and the image size the "
              "source must give (required)"),
    ParamSpec("fps", "double", 30.0, "frame rate [Hz]: a video file plays at it (late frames are skipped and "
              "counted); a device is asked for it", "Hz", value_range=(0.1, 1000.0)),
    ParamSpec("loop", "bool", False, "a video file restarts at its end (off: publishing stops, diagnostics WARN)"),
    ParamSpec("frame_id", "string", "camera_link", "frame_id of camera/image_raw and camera/camera_info"),
    ParamSpec("reopen_after_failures", "integer", 30,
              "consecutive failed reads of a live source before it is closed and opened again (0: never)",
              value_range=(0, 100000)),
    ParamSpec("diagnostics_period_s", "double", 1.0, "period of ~/diagnostics [s]", "s", value_range=(0.01, 3600.0)),
)

FEETECH_DRIVER: tuple[ParamSpec, ...] = (
    ParamSpec("port", "string", "/dev/ttyACM0", "serial port of the servo bus (a pty from `sim2real emulate-bus`)"),
    ParamSpec("baudrate", "integer", 1000000, "bus baud rate [bit/s]", "bit/s", value_range=(9600, 1000000)),
    ParamSpec("calibration", "string", "", "LeRobot calibration JSON of this arm (required)"),
    ParamSpec("robot_description", "string", ShareFile("urdf/so101/so101_new_calib.urdf"),
              "URDF (file path or XML): joint limits; motor names = joint names"),
    ParamSpec("joints", "string_array", (),
              "joint order of joint_states and the command array; empty = all movable URDF joints"),
    ParamSpec("rate_hz", "double", 100.0, "joint_states rate: one sync read per period [Hz]", "Hz",
              value_range=(1.0, 1000.0)),
    ParamSpec("bus_timeout_s", "double", 0.02, "slack beyond a reply's wire time before it counts as lost [s]",
              "s", value_range=(0.0005, 1.0)),
    ParamSpec("stall_torque_nm", "double", 1.9, "torque at 100 % load, for efforts [N*m]", "N*m",
              value_range=(0.01, 100.0)),
    ParamSpec("overload_fraction", "double", 0.9, "|load| (fraction of max torque) that counts as overload",
              value_range=(0.05, 1.0)),
    ParamSpec("overheat_c", "double", 65.0, "servo temperature that counts as overheat [degC]", "degC",
              value_range=(20.0, 100.0)),
    ParamSpec("alarm_samples", "integer", 50, "consecutive samples past a threshold before the alarm (ERROR)",
              value_range=(1, 10000)),
    ParamSpec("check_homing_offset", "bool", True,
              "refuse to start when a servo's homing offset differs from the calibration file"),
    ParamSpec("torque_off_on_shutdown", "bool", False,
              "release the servos at shutdown (false: hold the last measured position; the arm may fall)"),
    ParamSpec("diagnostics_period_s", "double", 1.0, "period of ~/diagnostics [s]", "s", value_range=(0.05, 60.0)),
)

LEADER_ARM: tuple[ParamSpec, ...] = (
    ParamSpec("port", "string", "/dev/ttyACM1", "serial port of the leader arm's servo bus (a pty from "
              "`sim2real emulate-bus`)"),
    ParamSpec("baudrate", "integer", 1000000, "bus baud rate [bit/s]", "bit/s", value_range=(9600, 1000000)),
    ParamSpec("calibration", "string", "", "LeRobot calibration JSON of the leader arm (required; not the "
              "follower's)"),
    ParamSpec("follower_calibration", "string", "",
              "the follower's LeRobot calibration JSON: the gripper maps by fraction of travel, as LeRobot does "
              "(empty: by angle from the closed end)"),
    ParamSpec("robot_description", "string", ShareFile("urdf/so101/so101_new_calib.urdf"),
              "the follower's URDF (file path or XML): its joint limits clamp the leader; motor names = joint names"),
    ParamSpec("joints", "string_array", (),
              "joint order of command/teleop; empty = all movable URDF joints"),
    ParamSpec("rate_hz", "double", 100.0, "command/teleop rate: one sync read per period [Hz]", "Hz",
              value_range=(1.0, 1000.0)),
    ParamSpec("bus_timeout_s", "double", 0.02, "slack beyond a reply's wire time before it counts as lost [s]",
              "s", value_range=(0.0005, 1.0)),
    ParamSpec("check_homing_offset", "bool", True,
              "refuse to start when a servo's homing offset differs from the calibration file"),
    ParamSpec("diagnostics_period_s", "double", 1.0, "period of ~/diagnostics [s]", "s", value_range=(0.05, 60.0)),
)

# Every node's real-time knobs (core.realtime; applied by nodes/realtime.py through common.run_node).
REALTIME: tuple[ParamSpec, ...] = (
    ParamSpec("sched_policy", "string", "other",
              "scheduling policy of the whole process: other (SCHED_OTHER, as before) | fifo (SCHED_FIFO) | rr "
              "(SCHED_RR); fifo/rr only for event-driven nodes with bounded work (docs/deployment.md)"),
    ParamSpec("sched_priority", "integer", 0, "real-time priority for fifo/rr, 1..99 (0 for other)",
              value_range=(0, 99)),
    ParamSpec("cpu_affinity", "integer_array", (),
              "CPU indices the process may run on, e.g. [1] (empty: all)"),
    ParamSpec("lock_memory", "bool", False,
              "mlockall(MCL_CURRENT | MCL_FUTURE): no page of the process is swapped out or faulted in from disk"),
)

SIM_CAMERA: tuple[ParamSpec, ...] = (
    ParamSpec("robot", "string", DEFAULT_ROBOT,
              f"robot ({' | '.join(ROBOT_NAMES)}): its URDF and sim params (scene, camera) are the defaults"),
    ParamSpec("robot_description", "string", "", "URDF XML or file path; empty = the robot's URDF"),
    ParamSpec("sim_params_file", "string", "", "sim parameters YAML (scene, camera, artifacts); empty = the robot's"),
    ParamSpec("camera_calibration", "string", "", "camera calibration YAML (ROS format); empty = the sim params' file"),
    ParamSpec("seed", "integer", 0, "seed of the scene (episode 0's target and appearance)"),
    ParamSpec("rate_hz", "double", 0.0, "frame rate [Hz]; 0 = sim params rates.camera_hz", "Hz",
              value_range=(0.0, 1000.0)),
    ParamSpec("artifacts", "bool", True, "apply the sim params' camera artifacts (distortion, noise, blur, JPEG)"),
    ParamSpec("frame_id", "string", "camera_link", "frame_id of the camera topics"),
)

# Node name -> its table, in the order of the graph (docs/parameters.md follows it).
NODES: dict[str, tuple[ParamSpec, ...]] = {
    "sim_node": SIM_NODE,
    "camera_node": CAMERA_NODE,
    "camera_preprocessor": CAMERA_PREPROCESSOR,
    "policy_node": POLICY_NODE,
    "actuator_node": ACTUATOR_NODE,
    "supervisor": SUPERVISOR,
    "recorder": RECORDER,
    "viz_node": VIZ_NODE,
    "feetech_driver": FEETECH_DRIVER,
    "leader_arm": LEADER_ARM,
    "sim_camera": SIM_CAMERA,
}


def spec(table: tuple[ParamSpec, ...], name: str) -> ParamSpec:
    """The entry `name` of a table (KeyError naming it when there is none)."""
    for entry in table:
        if entry.name == name:
            return entry
    raise KeyError(f"no parameter {name!r} in the table")


# ----------------------------------------------------------------------------------------------
# Declaring (rclpy is imported here only, so the tables and the docs need no ROS)
def declare_table(node: Any, table: tuple[ParamSpec, ...], range_source: str | None = None) -> dict[str, Any]:
    """Declare every parameter of `table` on `node` and return {name: value}.

    Ranges go into the descriptor (rclpy refuses values outside them); a wrongly typed or
    out-of-range override raises a ConfigError naming the parameter (range_source: what that error
    names as the origin for ranged parameters; default "<node name> parameter"). A deprecated name
    that is set is used unless the new name is set too, with a warning naming the new name.
    """
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.parameter import Parameter

    from .common import declare, declare_array

    arrays = {"string_array": Parameter.Type.STRING_ARRAY, "double_array": Parameter.Type.DOUBLE_ARRAY,
              "integer_array": Parameter.Type.INTEGER_ARRAY}
    values: dict[str, Any] = {}
    for entry in table:
        if entry.type == "string_or_string_array":
            node.declare_parameter(entry.name, entry.default_value(), ParameterDescriptor(
                description=entry.description, read_only=entry.read_only, dynamic_typing=True))
            values[entry.name] = node.get_parameter(entry.name).value
        elif entry.type in arrays and not entry.default:
            values[entry.name] = declare_array(node, entry.name, arrays[entry.type], entry.description)
        else:
            source = range_source if entry.value_range is not None else None
            values[entry.name] = declare(node, entry.name, entry.default_value(), entry.description,
                                         read_only=entry.read_only, value_range=entry.value_range, source=source)
        for old in entry.deprecated_names:
            value = _declare_deprecated(node, entry, old)
            if value is not None and entry.name not in getattr(node, "_parameter_overrides", {}):
                values[entry.name] = value
    return values


_WARNED: set[tuple[str, str]] = set()  # (node, deprecated name) already warned about in this process
_KIND = {"string": "STRING", "double": "DOUBLE", "integer": "INTEGER", "bool": "BOOL"}


def _declare_deprecated(node: Any, entry: ParamSpec, old: str) -> Any:
    """Declare the deprecated name `old` of `entry` (typed, no default); its value when it was
    set (with a warning logged once), else None."""
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.exceptions import InvalidParameterTypeException, ParameterUninitializedException
    from rclpy.parameter import Parameter

    from ..core.errors import ConfigError

    kind = getattr(Parameter.Type, _KIND[entry.type])
    descriptor = ParameterDescriptor(description=f"deprecated: use {entry.name}", read_only=True)
    try:
        node.declare_parameter(old, kind, descriptor)
        value = node.get_parameter(old).value
    except ParameterUninitializedException:
        return None
    except InvalidParameterTypeException as err:
        raise ConfigError(f"{node.get_name()} parameter", old,
                          None, f"must be a {type(entry.default).__name__} (e.g. {entry.default!r}); "
                          f"deprecated: use {entry.name}: {err.args[0]}") from err
    if value is None:
        return None
    ignored = entry.name in getattr(node, "_parameter_overrides", {})
    # rclpy's `once` is per call site (this line, for every name): keep our own once per node and name.
    key = (node.get_fully_qualified_name(), old)
    if key not in _WARNED:
        _WARNED.add(key)
        node.get_logger().warning(
            f"parameter '{old}' is deprecated and will be removed in the next release: use '{entry.name}'"
            + (f" (both are set: '{entry.name}' wins)" if ignored else ""))
    return value


# ----------------------------------------------------------------------------------------------
# docs/parameters.md
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _range(entry: ParamSpec) -> str:
    if entry.value_range is None:
        return ""
    low, high = entry.value_range
    return f"[{low:g}, {high:g}]"


def render_markdown() -> str:
    """docs/parameters.md: one table per node, from NODES."""
    lines = [
        "# Node parameters",
        "",
        "Generated from the declaration tables in `sim2real_ros/nodes/parameters.py` (each node declares",
        "its parameters from them); do not edit by hand: run `python -m sim2real_ros.nodes.parameters`.",
        "A `range` is enforced by rclpy (the node exits 2 naming a value outside it); every other value",
        "is validated by the node at start-up. All parameters are read-only (set at start-up).",
        "",
    ]
    for node, table in NODES.items():
        lines += [f"## {node}", "", "| parameter | type | default | unit | range | description |",
                  "|---|---|---|---|---|---|"]
        for entry in table:
            description = entry.description
            if entry.deprecated_names:
                olds = ", ".join(f"`{old}`" for old in entry.deprecated_names)
                description += f" (formerly {olds}: still accepted, with a warning, for one release)"
            if not entry.read_only:
                description += " (can be changed at run time)"
            lines.append(f"| `{entry.name}` | {entry.type} | `{_cell(entry.shown_default())}` | {entry.unit} | "
                         f"{_range(entry)} | {_cell(description)} |")
        lines.append("")
    lines += ["## every node: real-time knobs", "",
              "Declared on every node by `common.run_node` (docs/deployment.md): applied at start-up where the",
              "process may, otherwise one warning and the node runs as before; reported on `~/realtime`.", "",
              "| parameter | type | default | unit | range | description |", "|---|---|---|---|---|---|"]
    for entry in REALTIME:
        lines.append(f"| `{entry.name}` | {entry.type} | `{_cell(entry.shown_default())}` | {entry.unit} | "
                     f"{_range(entry)} | {_cell(entry.description)} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim2real_ros.nodes.parameters", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="file to write (default: docs/parameters.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the generated text")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run python -m sim2real_ros.nodes.parameters", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
