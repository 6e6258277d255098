"""The preprocessing a graph started for one checkpoint runs: the one the checkpoint was trained with.

A policy node refuses a checkpoint whose recorded preprocessing (policy camera, crop, fill,
interpolation) differs from the graph's (docs/design.md: the checkpoint is checked against the graph).
The graph's default is config/preprocess.yaml; a student trained with another file (the wrist
camera's 90 deg policy camera, a zoomed one) would be refused by every graph eval-sim starts. These
evaluations run the checkpoint's own preprocessing instead: written from the checkpoint's spec (the
dict the policy node compares) to a file in the run's scratch folder, and given to camera_preprocessor
and policy_node as their `preprocess_config`.

`sim2real launch --checkpoint` and the launch files (launch_support) follow a checkpoint the same way
(follow_checkpoint): a student launched in the sim runs its task on the sim params it was trained on.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import CheckpointError, Sim2RealError
from ..core.perception.preprocess_config import PreprocessConfig
from ..graph import GraphArgs
from ..paths import config_path

# The nodes that read a preprocessing file (camera_preprocessor, or policy_node with image_input camera).
PREPROCESSING_NODES = ("camera_preprocessor", "policy_node")


def checkpoint_preprocessing_parameters(recorded: dict[str, Any], folder: Path,
                                        default: Path | None = None) -> dict[str, dict[str, str]]:
    """extra_parameters for a graph of this checkpoint: {} when its recorded preprocessing is the
    graph's default (`default`, config/preprocess.yaml), else {node: {"preprocess_config": FILE}} for
    PREPROCESSING_NODES with FILE written in `folder`. Raises ConfigError (via PreprocessConfig) for a
    recorded preprocessing that is not one."""
    wanted = PreprocessConfig.from_dict(dict(recorded), "the checkpoint's preprocessing")
    graph_default = PreprocessConfig.from_yaml(default or config_path("preprocess.yaml"))
    if wanted.content_hash == graph_default.content_hash:
        return {}
    path = Path(folder) / "checkpoint_preprocess.yaml"
    path.write_text("# The preprocessing the evaluated checkpoint was trained with (its spec), as the graph runs it.\n"
                    + yaml.safe_dump(wanted.to_dict(), sort_keys=False))
    return {node: {"preprocess_config": str(path)} for node in PREPROCESSING_NODES}


def checkpoint_graph_parameters(spec: Any, mode: str, robot: str,
                                folder: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """extra_parameters that make a `sim2real launch MODE` graph run a checkpoint (its PolicySpec) as
    it was trained, and one line per thing followed (for the launch log): its preprocessing in every
    mode (checkpoint_preprocessing_parameters); in the sim also its task (the provenance's) and the
    sim params file it was trained on (a wrist-camera student sees through its wrist camera), as
    eval-sim --graph runs it. ({}, []) for a checkpoint trained on the graph's defaults."""
    from ..robots import checkpoint_task, sim_params_for, sim_params_for_checkpoint
    from ..sim.params import load_sim_params

    extra: dict[str, dict[str, Any]] = dict(checkpoint_preprocessing_parameters(spec.preprocess, folder))
    followed = ["its preprocessing (policy camera, crop)"] if extra else []
    if mode == "sim":
        sim_node: dict[str, Any] = {}
        params_file, params_from = sim_params_for_checkpoint(robot, None, spec.provenance)
        if params_from == "checkpoint" and Path(params_file).resolve() != Path(sim_params_for(robot)).resolve():
            sim_node["sim_params_file"] = params_file
            followed.append(f"its sim params {params_file}")
        task = checkpoint_task(spec.provenance)
        if task is not None and task != load_sim_params(params_file).task.name:
            sim_node["task"] = task
            followed.append(f"its task {task}")
        if sim_node:
            extra["sim_node"] = sim_node
    return extra, followed


def follow_checkpoint(mode: str, graph_args: GraphArgs, folder: Path) -> tuple[GraphArgs, list[str]]:
    """graph_args with the checkpoint's own preprocessing (and in the sim its task and sim params)
    under the parameters given (checkpoint_graph_parameters; a parameter the user set wins), then in
    a lean graph its ONNX export (lean_policy), and what was followed: a pick_lift wrist student
    launched in the sim picks with its wrist camera, as eval-sim --graph runs it. A file that does not
    load is left as it is to policy_node, which names it at start-up."""
    graph_args, followed = _follow_training(mode, graph_args, folder)
    graph_args, line = lean_policy(mode, graph_args)
    return graph_args, followed + ([line] if line else [])


def lean_policy(mode: str, graph_args: GraphArgs) -> tuple[GraphArgs, str | None]:
    """In a lean graph (GraphArgs.lean: the robot's by default), graph_args running the checkpoint's
    ONNX export when one exported from it (its parent hash is the checkpoint's hash) lies beside it
    as the same name with `.onnx` (what `sim2real policy export CKPT --onnx CKPT.onnx` writes; the
    export counts only within 1e-4 rad of torch): onnxruntime, without torch in the policy node's
    process. Also the line to say what was chosen, or why not (an export of another checkpoint, one
    that does not load): (graph_args, None) when there is nothing to say."""
    from ..core.policy.backend import file_backend
    from ..core.policy.checkpoint import checkpoint_hash
    from ..core.policy.onnx_policy import onnx_parent_hash

    source = Path(graph_args.checkpoint)
    if not graph_args.lean(mode) or not source.is_file() or file_backend(source) != "torch":
        return graph_args, None
    export = source.with_suffix(".onnx")
    if export.is_symlink():  # found, not named by the user: a link could lead anywhere
        return graph_args, f"torch, not {export.name} beside it: a symbolic link, not followed"
    if export == source or not export.is_file():
        return graph_args, None
    try:
        parent = onnx_parent_hash(export)
    except CheckpointError as err:
        return graph_args, f"torch, not {export.name} beside it ({err})"
    digest = checkpoint_hash(source)
    if parent != digest:
        return graph_args, (f"torch, not {export.name} beside it: that was exported from checkpoint {parent}, this "
                            f"one is {digest} (`sim2real policy export {source} --onnx {export}` writes a current one)")
    return dataclasses.replace(graph_args, checkpoint=str(export)), f"its ONNX export {export} (onnxruntime)"


def _follow_training(mode: str, graph_args: GraphArgs, folder: Path) -> tuple[GraphArgs, list[str]]:
    """follow_checkpoint's first half: the preprocessing, task and sim params it was trained with."""
    from ..core.policy.backend import load_policy

    if not Path(graph_args.checkpoint).is_file():
        return graph_args, []
    try:
        spec = load_policy(graph_args.checkpoint, warmup=False).spec
        extra, followed = checkpoint_graph_parameters(spec, mode, graph_args.robot, folder)
    except (Sim2RealError, ValueError, OSError):
        return graph_args, []
    if not followed:
        return graph_args, []
    merged = {node: {**extra.get(node, {}), **graph_args.extra_parameters.get(node, {})}
              for node in {*extra, *graph_args.extra_parameters}}
    return dataclasses.replace(graph_args, extra_parameters=merged), followed
