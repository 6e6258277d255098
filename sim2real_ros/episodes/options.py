"""Options of a bag replay evaluation (`sim2real replay`, `evaluate_bag`)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..core.errors import ConfigError
from ..topics import CAMERA_IMAGE, CAMERA_INFO, JOINT_STATES, ROBOT_COMMAND, SUPERVISOR_STATE

MODES = ("offline", "graph")
# Supervisor modes in which the robot commands come from a person (docs/design.md §4).
HUMAN_MODES = ("TELEOP", "SHARED")
SUPERVISOR_MODES = ("ESTOP", "HOLD", "AUTONOMOUS", "SHARED", "TELEOP")
SOURCE = "replay option"


@dataclass(frozen=True)
class ReplayOptions:
    """What to read from the bag and how to compare.

    Topic names are the graph's names (relative); a bag may carry them under a namespace prefix
    (`/arm1/joint_states`), which is matched by suffix when only one topic fits.

    image_topic, camera_info_topic, joint_states_topic: the recorded observations.
    action_topic: the recorded (human) action: std_msgs/Float64MultiArray robot commands in
      `action_joints` order (default: the checkpoint's joint order), or sensor_msgs/JointState
      (matched by joint name; e.g. command/policy).
    action_joints: joint order of a Float64MultiArray action topic; empty = the checkpoint's.
    supervisor_state_topic: supervisor/state (DiagnosticArray with key "mode").
    human_modes: supervisor modes whose commands count as human actions; empty = every command
      (no mode filter, the supervisor state is then not needed).
    actuation_latency_s [s]: a command sent at time tau is the target for tau + actuation_latency
      (docs/design.md §3); the recorded actions are aligned on that.
    pairing_tolerance_s [s]: largest |image stamp - joint state stamp| paired (as policy_node).
    action_tolerance_s [s]: largest gap between recorded actions interpolated across, and largest
      distance to the nearest action at the ends of a run of actions.
    lag_min_s, lag_max_s, lag_step_s [s]: lag search range (positive lag: the recording does
      what the policy predicted that much later).
    preprocess_config: preprocessing YAML; empty = the config the checkpoint was trained with.
    max_frames: stop after this many images (0 = all).
    rate: graph mode playback rate (1.0 = the recording's timing, 0.5 = half speed).
    clock_period_s [s]: graph mode, bag time between `clock` messages.
    graph_startup_timeout_s [s]: graph mode, how long the graph may take to come up.
    drain_s [s]: graph mode, bag time played on after the last message so late chunks arrive.
    backend: what runs the policy, auto (by the file) | torch | onnxruntime (core/policy_backend.py).
    device: torch device of offline inference. num_threads: torch threads (process-wide; 1, as
      policy_node, is fastest on a busy machine; 0 = torch default). plots: write PNG plots with the report.
    progress: show a progress bar on stderr.
    batch_size: offline, observations per forward pass (they are all known; 1 = one at a time, as
      the node). The same predictions up to the network's float32 rounding.
    """

    image_topic: str = CAMERA_IMAGE.name
    camera_info_topic: str = CAMERA_INFO.name
    joint_states_topic: str = JOINT_STATES.name
    action_topic: str = ROBOT_COMMAND.name
    action_joints: tuple[str, ...] = ()
    supervisor_state_topic: str = SUPERVISOR_STATE.name
    human_modes: tuple[str, ...] = HUMAN_MODES
    actuation_latency_s: float = 0.02
    pairing_tolerance_s: float = 0.05
    action_tolerance_s: float = 0.05
    lag_min_s: float = -0.3
    lag_max_s: float = 0.3
    lag_step_s: float = 0.01
    preprocess_config: str = ""
    max_frames: int = 0
    rate: float = 1.0
    clock_period_s: float = 0.01
    graph_startup_timeout_s: float = 180.0
    drain_s: float = 1.0
    device: str = "cpu"
    num_threads: int = 1
    backend: str = "auto"
    plots: bool = True
    progress: bool = True
    batch_size: int = 32

    def __post_init__(self) -> None:
        def bad(field: str, problem: str) -> ConfigError:
            return ConfigError(SOURCE, field, getattr(self, field), problem)

        for name in ("image_topic", "camera_info_topic", "joint_states_topic", "action_topic"):
            if not str(getattr(self, name)).strip("/"):
                raise bad(name, "must name a topic")
        if self.human_modes and not self.supervisor_state_topic.strip("/"):
            raise bad("supervisor_state_topic", "must name a topic when human_modes filters commands")
        unknown = [m for m in self.human_modes if m not in SUPERVISOR_MODES]
        if unknown:
            raise bad("human_modes", f"unknown modes {unknown}; known: {list(SUPERVISOR_MODES)}")
        if len(set(self.action_joints)) != len(self.action_joints):
            raise bad("action_joints", "contains duplicate names")
        nonnegative = ("actuation_latency_s", "pairing_tolerance_s", "action_tolerance_s", "drain_s")
        for name in nonnegative:
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise bad(name, "must be a finite number >= 0 [s]")
        positive = ("lag_step_s", "rate", "clock_period_s", "graph_startup_timeout_s")
        for name in positive:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise bad(name, "must be a finite number > 0")
        if not (math.isfinite(self.lag_min_s) and math.isfinite(self.lag_max_s) and self.lag_min_s <= self.lag_max_s):
            raise ConfigError(SOURCE, "lag_min_s/lag_max_s", (self.lag_min_s, self.lag_max_s),
                              "must be finite with lag_min_s <= lag_max_s")
        if (self.lag_max_s - self.lag_min_s) / self.lag_step_s > 10_000:
            raise bad("lag_step_s", "gives more than 10000 lags to search; use a coarser step")
        if self.max_frames < 0:
            raise bad("max_frames", "must be >= 0 (0 = every frame)")
        if not 1 <= self.batch_size <= 4096:
            raise bad("batch_size", "must be in [1, 4096]")
        if self.num_threads < 0:
            raise bad("num_threads", "must be >= 0 (0 = torch default)")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise bad("device", "must be 'cpu' or 'cuda[:index]'")
        if self.backend not in ("auto", "torch", "onnxruntime"):
            raise bad("backend", "must be auto, torch or onnxruntime")

    @property
    def filters_modes(self) -> bool:
        """True when only commands sent in `human_modes` count."""
        return bool(self.human_modes)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["action_joints"] = list(self.action_joints)
        out["human_modes"] = list(self.human_modes)
        return out
