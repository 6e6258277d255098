"""The robots this package knows, in one place: name -> URDF, joints, gripper, tool link, camera, sim params.

`robot: arm6 | so101` (a node parameter, a `--robot` option, a training config key) selects one; every
place that needs a robot's URDF or sim parameters asks here instead of naming a file. arm6 stays the
default so an existing config or command means what it meant. docs/robots.md describes both robots.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core.errors import CheckpointError, ConfigError, Sim2RealError
from .paths import config_path, share_dir
from .provenance import sim_params_version


@dataclass(frozen=True)
class RobotInfo:
    """One robot. urdf: path under the package share dir (urdf/...); joints: the movable joints in
    command order (what joint_states, command arrays and checkpoints list); gripper: the jaw joint (a
    position-commanded joint like the others) or None; tool_link: the tool point (sim task, Cartesian
    jogging); camera_link: the URDF link the sim camera is mounted on; sim_params: file under config/;
    jaw_links: the links whose collision shapes grip (the pick tasks' grasp test), () without a gripper;
    policy: the shipped reach policy trained for this robot (under the package share dir), what a
    graph runs when no checkpoint is named."""

    name: str
    urdf: str
    joints: tuple[str, ...]
    gripper: str | None
    tool_link: str
    camera_link: str
    sim_params: str
    summary: str
    jaw_links: tuple[str, ...] = ()
    policy: str = "policies/reach_default.safetensors"

    def urdf_path(self) -> Path:
        return share_dir() / self.urdf

    def policy_path(self) -> Path:
        return share_dir() / self.policy

    def sim_params_path(self) -> Path:
        return config_path(self.sim_params)


ROBOTS: dict[str, RobotInfo] = {
    "arm6": RobotInfo(
        name="arm6", urdf="urdf/arm6.urdf",
        joints=("joint1", "joint2", "joint3", "joint4", "joint5", "joint6"), gripper=None,
        tool_link="ee_link", camera_link="camera_link", sim_params="sim_params.yaml",
        summary="the project's 6-joint desktop arm (a design, not a product; no gripper)"),
    "so101": RobotInfo(
        name="so101", urdf="urdf/so101/so101.urdf",
        joints=("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"),
        gripper="gripper", tool_link="gripper_frame_link", camera_link="camera_link",
        sim_params="sim_params_so101.yaml",
        summary="LeRobot's SO-101 follower arm: 5 joints + gripper jaw, Feetech STS3215 servos",
        # the fixed jaw is part of gripper_link's collision shapes
        jaw_links=("gripper_link", "moving_jaw_so101_v1_link"),
        policy="policies/reach_so101.safetensors"),
}
DEFAULT_ROBOT = "arm6"
ROBOT_NAMES = tuple(ROBOTS)


def get_robot(name: str, source: str = "robot") -> RobotInfo:
    """The registered robot `name`; ConfigError naming the known ones otherwise."""
    robot = ROBOTS.get(str(name).strip())
    if robot is None:
        raise ConfigError(source, "robot", name, f"must be one of {list(ROBOT_NAMES)}")
    return robot


def robot_description_for(robot: str, description: str | None = None, source: str = "robot") -> str:
    """`description` (URDF path or XML) when given, else the URDF file of `robot`."""
    if description is not None and str(description).strip():
        return str(description)
    return str(get_robot(robot, source).urdf_path())


def sim_params_for(robot: str, sim_params: str | Path | None = None, source: str = "robot") -> str:
    """`sim_params` (YAML path) when given, else the sim params file of `robot`."""
    if sim_params is not None and str(sim_params).strip():
        return str(sim_params)
    return str(get_robot(robot, source).sim_params_path())


def trained_sim_params(provenance: Mapping[str, Any]) -> str | None:
    """The shipped sim params file a checkpoint was trained on, when it is still here unchanged: its
    provenance's `sim_params_file` naming a file of this installation's config/ folder
    ("config/NAME.yaml", nothing else: a checkpoint is untrusted input, so no other folder, no `..`,
    no symlink) whose content hash is the provenance's `sim_params_version`. None otherwise (trained
    on a file elsewhere, or one edited since)."""
    recorded, version = provenance.get("sim_params_file"), provenance.get("sim_params_version")
    if not (isinstance(recorded, str) and isinstance(version, str) and version):
        return None
    folder, _, name = recorded.partition("/")
    if folder != "config" or not name.endswith(".yaml") or "/" in name or "\\" in name or name.startswith("."):
        return None
    candidate = config_path(name)
    if candidate.is_symlink() or not candidate.is_file():
        return None
    try:
        return str(candidate) if sim_params_version(candidate) == version else None
    except Sim2RealError:
        return None


def sim_params_for_checkpoint(robot: str, sim_params: str | Path | None,
                              provenance: Mapping[str, Any]) -> tuple[str, str]:
    """The sim params an evaluation of a checkpoint runs on, and why: (`sim_params`, "given") when
    given; else (the file it was trained on, "checkpoint") when trained_sim_params finds it and the
    checkpoint was trained for `robot` (a wrist-camera student then sees through its wrist camera);
    else (the robot's own, "robot")."""
    if sim_params is not None and str(sim_params).strip():
        return str(sim_params), "given"
    trained = trained_sim_params(provenance) if provenance.get("robot") == robot else None
    if trained is not None:
        return trained, "checkpoint"
    return sim_params_for(robot), "robot"


def checkpoint_task(provenance: Any) -> str | None:
    """The sim task a checkpoint was trained on (students record it since issue 32), or None."""
    task = provenance.get("task") if isinstance(provenance, Mapping) else None
    return task if isinstance(task, str) and task else None


def robot_for_joints(joint_names: Sequence[str]) -> RobotInfo | None:
    """The registered robot whose joints are exactly `joint_names` (in order), if any."""
    names = tuple(str(n) for n in joint_names)
    return next((r for r in ROBOTS.values() if r.joints == names), None)


def checkpoint_robot(joint_names: Sequence[str], provenance: Mapping[str, Any]) -> str | None:
    """The robot a checkpoint was trained for: its provenance's `robot` when that is a registered name
    (training writes it since issue 30; `policy init` wrote a URDF path there before), else the
    registered robot with its joint names, else None (another URDF)."""
    recorded = provenance.get("robot")
    if isinstance(recorded, str) and recorded in ROBOTS:
        return recorded
    match = robot_for_joints(joint_names)
    return match.name if match else None


def check_checkpoint_robot(joint_names: Sequence[str], provenance: Mapping[str, Any], robot: str,
                           source: str) -> None:
    """CheckpointError when the checkpoint at `source` was trained for a registered robot other than
    `robot`, naming both (a checkpoint for an unregistered URDF is left to the joint-name check)."""
    trained = checkpoint_robot(joint_names, provenance)
    if trained is not None and trained != robot:
        raise CheckpointError(
            f"{source}: this checkpoint was trained for robot '{trained}' (joints {list(joint_names)}), "
            f"not for '{robot}' (joints {list(get_robot(robot).joints)}); train one for '{robot}' "
            f"(sim2real train with robot: {robot}) or choose --robot {trained}")


def robot_for_checkpoint(requested: str | None, joint_names: Sequence[str], provenance: Mapping[str, Any],
                         source: str) -> str:
    """The robot a command runs a checkpoint on: `requested` (a --robot option), checked against the
    checkpoint (CheckpointError naming both when it was trained for the other one); without a request,
    the checkpoint's own robot, else the default robot."""
    if requested is not None and str(requested).strip():
        robot = get_robot(requested, source).name
        check_checkpoint_robot(joint_names, provenance, robot, source)
        return robot
    trained = checkpoint_robot(joint_names, provenance)
    return trained if trained in ROBOTS else DEFAULT_ROBOT
