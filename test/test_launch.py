"""Launch files and their argument mapping; the graphs themselves are tested via declare_graph."""
import ast
import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from sim2real_ros.graph import GraphArgs, declare_graph
from sim2real_ros.launch_support import LAUNCH_ARGUMENTS, _launch_node, graph_args_from_launch
from sim2real_ros.runtime.launcher import ros_arguments

LAUNCH_DIR = Path(__file__).resolve().parent.parent / "launch"


def test_every_launch_argument_maps_to_a_graph_field():
    fields = {f.name for f in GraphArgs.__dataclass_fields__.values()}
    assert {field for field, _ in LAUNCH_ARGUMENTS.values() if field} <= fields
    # The one argument that is not a graph field: it starts a process before the graph (an emulated arm).
    assert [name for name, (field, _) in LAUNCH_ARGUMENTS.items() if not field] == ["emulate"]


def test_launch_values_become_graph_args():
    args = graph_args_from_launch({"namespace": "arm1", "use_sim_time": "false", "command_topic": "fpc/cmd",
                                   "checkpoint": ""})
    assert args.namespace == "arm1" and args.use_sim_time is False and args.command_topic == "fpc/cmd"
    assert args.checkpoint == GraphArgs().checkpoint  # empty string = default
    with pytest.raises(ValueError, match="use_sim_time"):
        graph_args_from_launch({"use_sim_time": "maybe"})


def test_the_default_policy_follows_the_robot(tmp_path):
    """No checkpoint named: the robot's shipped reach policy (arm6's was refused for an SO-101 by name, so
    `sim2real launch robot --robot so101 --emulate` failed without --checkpoint); a named one is kept."""
    assert Path(GraphArgs().checkpoint).name == "reach_default.safetensors"
    assert Path(GraphArgs(robot="so101").checkpoint).name == "reach_so101.safetensors"
    from_launch = graph_args_from_launch({"robot": "so101", "checkpoint": ""})
    assert Path(from_launch.checkpoint).name == "reach_so101.safetensors"
    assert Path(GraphArgs(robot="so101").checkpoint).is_file()
    mine = str(tmp_path / "mine.safetensors")
    assert graph_args_from_launch({"robot": "so101", "checkpoint": mine}).checkpoint == mine
    policy = next(d for d in declare_graph("robot", GraphArgs(robot="so101")) if d.executable == "policy_node")
    assert Path(policy.parameters["checkpoint"]).name == "reach_so101.safetensors"


@pytest.mark.parametrize(("argv", "says"), [
    (["sim", "--emulate-realtime-priority", "5"], "--emulate-realtime-priority: only with --emulate"),
    (["robot", "--robot", "so101", "--emulate", "--emulate-realtime-priority", "120"],
     "--emulate-realtime-priority 120: must be in 0..99"),
])
def test_launch_refuses_a_bad_emulator_priority_before_starting_anything(argv, says):
    done = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "launch", *argv],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and says in done.stderr, done.stderr


@pytest.mark.parametrize("mode", ["sim", "robot", "replay"])
def test_launch_file_calls_the_declaration(mode):
    path = LAUNCH_DIR / f"{mode}.launch.py"
    tree = ast.parse(path.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "launch_description"]
    assert [c.args[0].value for c in calls] == [mode]
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)


@pytest.mark.skipif(importlib.util.find_spec("launch_ros") is None, reason="launch_ros not installed (pip venv)")
@pytest.mark.parametrize("mode", ["sim", "robot", "replay"])
def test_launch_file_builds_on_a_ros_install(mode):
    spec = importlib.util.spec_from_file_location(f"{mode}_launch", LAUNCH_DIR / f"{mode}.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    assert len(description.entities) == len(LAUNCH_ARGUMENTS) + 1


class _RecordingNode:
    """Stands in for launch_ros.actions.Node: records the arguments a launch node is built with."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_robot_launch_parameters_come_after_the_params_file():
    """A ROS node applies its `parameters` entries in order, the later winning: the graph's own
    values (the robot supervisor's require_stop_source) must follow the params file, so no
    params.yaml can switch the stop-source requirement off."""
    args = graph_args_from_launch({"params_file": "/deploy/params.yaml"})
    supervisor = {d.name: d for d in declare_graph("robot", args)}["supervisor"]
    node = _launch_node(_RecordingNode, supervisor, args.namespace)
    assert node.kwargs["parameters"] == ["/deploy/params.yaml", supervisor.parameters]
    assert node.kwargs["parameters"][-1]["require_stop_source"] is True
    # `sim2real launch` (no launch_ros): the node's own overrides file follows the params file too.
    arguments = ros_arguments(supervisor, args.namespace, Path("/tmp/supervisor.params.yaml"))
    files = [arguments[i + 1] for i, arg in enumerate(arguments) if arg == "--params-file"]
    assert files == ["/deploy/params.yaml", "/tmp/supervisor.params.yaml"]


def test_a_launch_file_runs_a_student_as_it_was_trained(tmp_path, capsys):
    """The launch files follow a checkpoint as `sim2real launch --checkpoint` does: the wrist student's
    preprocessing in every mode (the default one made policy_node refuse it), in the sim its task and
    wrist-camera sim params; a parameter the user gave wins; the shipped reach policy follows nothing."""
    from sim2real_ros.launch_support import launch_graph_args

    student = str(LAUNCH_DIR.parent / "policies" / "so101_pick_lift_wrist.safetensors")
    args = launch_graph_args("sim", graph_args_from_launch({"robot": "so101", "checkpoint": student}), tmp_path)
    assert "its task pick_lift" in capsys.readouterr().out
    nodes = {d.executable: d.parameters for d in declare_graph("sim", args)}
    assert nodes["sim_node"]["task"] == "pick_lift"
    assert Path(nodes["sim_node"]["sim_params_file"]).name == "sim_params_so101_wrist.yaml"
    written = Path(nodes["policy_node"]["preprocess_config"])
    assert written.parent == tmp_path and nodes["camera_preprocessor"]["preprocess_config"] == str(written)

    robot = launch_graph_args("robot", graph_args_from_launch({"robot": "so101", "checkpoint": student}), tmp_path)
    assert "sim_node" not in robot.extra_parameters and "policy_node" in robot.extra_parameters
    mine = dataclasses.replace(args, extra_parameters={"sim_node": {"task": "reach"}})
    assert launch_graph_args("sim", mine, tmp_path).extra_parameters["sim_node"]["task"] == "reach"
    reach = graph_args_from_launch({"robot": "so101"})
    assert launch_graph_args("sim", reach, tmp_path) == reach
    with pytest.raises(ValueError, match="calibration"):
        launch_graph_args("robot", graph_args_from_launch({"robot": "so101", "port": "/dev/ttyACM0"}), tmp_path)


def test_the_robot_graph_runs_each_robots_shipped_policy_as_its_onnx_export(tmp_path, capsys):
    """The robot graph is lean (graph.LEAN_MODES): `sim2real launch robot` and the launch files run the
    shipped policy's ONNX export beside it, on onnxruntime in the policy node's process. The exports
    in policies/ must come from the checkpoints beside them (a stale one would run an old policy);
    the sim graph, and a robot graph told preprocess_in_policy:=false, run the checkpoint itself."""
    from sim2real_ros.core.policy.checkpoint import checkpoint_hash
    from sim2real_ros.core.policy.onnx_policy import onnx_parent_hash
    from sim2real_ros.launch_support import launch_graph_args
    from sim2real_ros.robots import ROBOTS

    for name, robot in ROBOTS.items():
        shipped = robot.policy_path()
        export = shipped.with_suffix(".onnx")
        assert onnx_parent_hash(export) == checkpoint_hash(shipped), \
            f"{export} is stale: `sim2real policy export {shipped} --onnx {export}`"
        args = launch_graph_args("robot", graph_args_from_launch({"robot": name}), tmp_path)
        assert f"its ONNX export {export} (onnxruntime)" in capsys.readouterr().out
        policy = {d.executable: d.parameters for d in declare_graph("robot", args)}["policy_node"]
        assert (policy["checkpoint"], policy["image_input"]) == (str(export), "camera")
        for mode, values in (("sim", {"robot": name}), ("robot", {"robot": name, "preprocess_in_policy": "false"})):
            assert launch_graph_args(mode, graph_args_from_launch(values), tmp_path).checkpoint == str(shipped)


def test_an_onnx_file_beside_a_checkpoint_runs_only_when_exported_from_it(tmp_path):
    """lean_policy swaps a checkpoint for the `.onnx` beside it only when that file's parent hash is the
    checkpoint's: one exported from another checkpoint, or a file that is no ONNX policy, leaves the
    checkpoint on torch with a line naming the file and why; a graph that is not lean never swaps."""
    import shutil

    from sim2real_ros.evaluation.checkpoint_graph import lean_policy
    from sim2real_ros.paths import default_policy_path

    shipped = default_policy_path()
    fresh = tmp_path / "fresh.safetensors"
    shutil.copy(shipped, fresh)
    shutil.copy(shipped.with_suffix(".onnx"), tmp_path / "fresh.onnx")
    args, line = lean_policy("robot", GraphArgs(checkpoint=str(fresh)))
    assert args.checkpoint == str(tmp_path / "fresh.onnx") and "its ONNX export" in line
    assert lean_policy("sim", GraphArgs(checkpoint=str(fresh))) == (GraphArgs(checkpoint=str(fresh)), None)
    assert lean_policy("robot", GraphArgs(checkpoint=str(fresh), preprocess_in_policy=False))[1] is None

    stale = tmp_path / "stale.safetensors"
    shutil.copy(shipped.parent / "reach_no_dr.safetensors", stale)
    shutil.copy(shipped.with_suffix(".onnx"), tmp_path / "stale.onnx")
    args, line = lean_policy("robot", GraphArgs(checkpoint=str(stale)))
    assert args.checkpoint == str(stale)
    assert "torch, not stale.onnx beside it: that was exported from checkpoint" in line and "policy export" in line

    broken = tmp_path / "broken.safetensors"
    shutil.copy(shipped, broken)
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07not an onnx model")
    args, line = lean_policy("robot", GraphArgs(checkpoint=str(broken)))
    assert args.checkpoint == str(broken) and "torch, not broken.onnx beside it" in line and "broken.onnx" in line
    alone = tmp_path / "alone.safetensors"
    shutil.copy(shipped, alone)
    assert lean_policy("robot", GraphArgs(checkpoint=str(alone))) == (GraphArgs(checkpoint=str(alone)), None)
    # A link beside it is not followed, even to the right export: the file was found, not named.
    (tmp_path / "alone.onnx").symlink_to(tmp_path / "fresh.onnx")
    args, line = lean_policy("robot", GraphArgs(checkpoint=str(alone)))
    assert args.checkpoint == str(alone) and "alone.onnx beside it: a symbolic link, not followed" in line
