"""Build launch_ros descriptions from the one graph declaration (sim2real_ros.graph).

launch/*.launch.py are three-line files that call `launch_description(mode)`. The mapping from
launch-argument strings to GraphArgs is pure (tested without launch_ros); only
`launch_description` imports launch / launch_ros, which exist on a robot's ROS 2 install.
A checkpoint is launched as it was trained, as `sim2real launch` does (launch_graph_args).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .evaluation.checkpoint_graph import follow_checkpoint
from .graph import GraphArgs, NodeDecl, bringup_problems, declare_graph

# launch argument name -> (GraphArgs field, description)
LAUNCH_ARGUMENTS: dict[str, tuple[str, str]] = {
    "namespace": ("namespace", "namespace to push the whole graph into (one per robot)"),
    "robot": ("robot", "robot: arm6 (default) | so101 (docs/robots.md); its URDF is the default robot_description"),
    "robot_description": ("robot_description", "URDF file path (joint names and limits come from it); "
                          "default: the robot's"),
    "params_file": ("params_file", "ROS parameters YAML passed to every node"),
    "checkpoint": ("checkpoint", "policy checkpoint file (default: the robot's shipped reach policy)"),
    "use_sim_time": ("use_sim_time", "true/false; default true in sim mode, false otherwise"),
    "camera_image_topic": ("camera_image_topic", "the camera driver's image topic (v4l2/usb_cam/RealSense)"),
    "camera_info_topic": ("camera_info_topic", "the camera driver's camera_info topic"),
    "joint_states_topic": ("joint_states_topic", "joint_state_broadcaster's topic"),
    "command_topic": ("command_topic", "the forward position controller's command topic"),
    "ee_link": ("ee_link", "tool link for the sim task and Cartesian jogging (e.g. panda_grasptarget)"),
    "preprocess_in_policy": ("preprocess_in_policy", "true: no camera_preprocessor, policy_node preprocesses the "
                             "camera in its own process (one image hop fewer) and runs the checkpoint's ONNX export "
                             "when one lies beside it; default true in robot mode, false otherwise"),
    "viz": ("viz", "true: add viz_node, a live Foxglove view (docs/viz.md); default false"),
    "viz_port": ("viz_port", "viz_node's Foxglove WebSocket port (default 8765)"),
    "viz_host": ("viz_host", "address viz_node listens on (default 127.0.0.1: this machine only)"),
    "port": ("port", "robot mode: the arm's Feetech servo bus (/dev/ttyACM0): start feetech_driver (docs/so101.md)"),
    "calibration": ("calibration", "the arm's LeRobot calibration JSON (required with port)"),
    "camera": ("camera", "start camera_node on this source: device index, /dev/videoN or a video file"),
    "camera_calibration": ("camera_calibration", "the camera's ROS calibration YAML (default: the sim camera's)"),
    "leader_port": ("leader_port", "a leader arm's servo bus: start leader_arm (command/teleop)"),
    "leader_calibration": ("leader_calibration", "the leader arm's LeRobot calibration JSON"),
    "estop_heartbeat_s": ("estop_heartbeat_s", "the supervisor's estop_heartbeat_timeout_s [s] (> 0: an estop "
                          "heartbeat is a stop source, and its silence stops the arm)"),
    "emulate": ("", "true: rehearse on an emulated SO-101 (sim2real emulate-bus, generated calibration, the sim's "
                    "camera following joint_states); default false"),
}


def graph_args_from_launch(values: dict[str, str]) -> GraphArgs:
    """GraphArgs from launch-argument strings; empty strings mean "use the default"."""
    kwargs: dict[str, Any] = {}
    for arg, (field, _) in LAUNCH_ARGUMENTS.items():
        text = values.get(arg, "")
        if text == "" or not field:
            continue
        if field in ("use_sim_time", "viz", "preprocess_in_policy"):
            if text.lower() not in ("true", "false"):
                raise ValueError(f"launch argument {arg} must be true or false, got {text!r}")
            kwargs[field] = text.lower() == "true"
        elif field == "estop_heartbeat_s":
            try:
                kwargs[field] = float(text)
            except ValueError:
                raise ValueError(f"launch argument estop_heartbeat_s must be seconds, got {text!r}") from None
        elif field == "viz_port":
            if not text.isdigit() or not 0 <= int(text) <= 65535:
                raise ValueError(f"launch argument viz_port must be a port number in [0, 65535], got {text!r}")
            kwargs[field] = int(text)
        else:
            kwargs[field] = text
    return GraphArgs(**kwargs)  # built, not replaced: defaults that follow the robot (checkpoint) follow it


def launch_graph_args(mode: str, graph_args: GraphArgs, folder: Path) -> GraphArgs:
    """graph_args that run the checkpoint as it was trained (its preprocessing; in the sim its task
    and sim params: evaluation.checkpoint_graph.follow_checkpoint, files written in `folder`), said
    once on stdout like `sim2real launch`; then every bring-up problem raised as one ValueError."""
    source = graph_args.checkpoint
    graph_args, followed = follow_checkpoint(mode, graph_args, folder)
    if followed:
        print(f"[launch] as {source} was trained: {', '.join(followed)}", flush=True)
    problems = bringup_problems(graph_args, flag=lambda name: f"launch argument {name}")
    if problems:
        raise ValueError("; ".join(problems))
    return graph_args


def launch_description(mode: str):
    """A launch.LaunchDescription for `mode` (sim / robot / replay), built from declare_graph."""
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, RegisterEventHandler
    from launch.event_handlers import OnShutdown
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    def nodes_for(context, *_args, **_kwargs):
        import shutil
        import tempfile

        values = {name: LaunchConfiguration(name).perform(context) for name in LAUNCH_ARGUMENTS}
        graph_args = graph_args_from_launch(values)
        # The checkpoint's preprocessing file lives as long as the launch.
        scratch = Path(tempfile.mkdtemp(prefix="sim2real_launch_"))
        actions = [RegisterEventHandler(OnShutdown(on_shutdown=lambda *_: shutil.rmtree(scratch, True)))]
        if launch_flag(values, "emulate"):
            graph_args, stop = _start_emulated_arm(graph_args)
            actions.append(RegisterEventHandler(OnShutdown(on_shutdown=lambda *_: stop())))
        graph_args = launch_graph_args(mode, graph_args, scratch)
        return actions + [_launch_node(Node, decl, graph_args.namespace) for decl in declare_graph(mode, graph_args)]

    arguments = [DeclareLaunchArgument(name, default_value="", description=text)
                 for name, (_, text) in LAUNCH_ARGUMENTS.items()]
    return LaunchDescription([*arguments, OpaqueFunction(function=nodes_for)])


def launch_flag(values: dict[str, str], name: str) -> bool:
    """A true/false launch argument ("" = false); anything else is an error naming it."""
    text = values.get(name, "").lower()
    if text not in ("", "true", "false"):
        raise ValueError(f"launch argument {name} must be true or false, got {values[name]!r}")
    return text == "true"


def _start_emulated_arm(graph_args: GraphArgs):
    """emulate:=true: the emulator as a child of the launch process (stopped on shutdown), its pty the
    port, its generated calibration the calibration, the sim's camera the camera."""
    import tempfile
    from pathlib import Path

    from .hardware.emulated_arm import start_emulated_arm
    from .robots import sim_params_for

    if graph_args.robot != "so101" or graph_args.port or graph_args.camera:
        raise ValueError("emulate:=true emulates an SO-101: give robot:=so101 and no port:= or camera:=")
    scratch = tempfile.TemporaryDirectory(prefix="sim2real_emulated_arm_")
    arm = start_emulated_arm(graph_args.description(), sim_params_for(graph_args.robot), Path(scratch.name))

    def stop() -> None:
        arm.stop()
        scratch.cleanup()

    return dataclasses.replace(graph_args, port=arm.port, calibration=str(arm.calibration), sim_camera=True), stop


def _launch_node(node_cls, decl: NodeDecl, namespace: str):
    return node_cls(
        package="sim2real_ros",
        executable=decl.executable,
        name=decl.name,
        namespace=namespace,
        parameters=[*decl.params_files, decl.parameters],
        remappings=list(decl.remappings),
        output="screen",
        emulate_tty=True,
    )
