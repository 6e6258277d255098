"""The default Foxglove layout of a view: 3D arm, camera, joint plots, supervisor state.

    +-----------------------------+------------------+
    |  3D: arm, planned path,     |  camera image    |
    |  target (follows `world`)   +------------------+
    |                             |  policy image    |
    +--------------+--------------+------------------+
    | joint plots: | supervisor   | supervisor state |
    | measured vs  | mode over    | (raw) and        |
    | commanded    | time         | /viz/stats       |
    +--------------+--------------+------------------+

Import it in Foxglove with Layouts -> Import from file. It names only the channels of channels.py.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import channels as ch
from .kinematics import WORLD_FRAME

PLOT_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")


def layout(joint_names: list[str]) -> dict:
    """The layout JSON object for an arm with `joint_names` (measured solid, commanded dashed)."""
    paths = []
    for i, name in enumerate(joint_names):
        color = PLOT_COLORS[i % len(PLOT_COLORS)]
        paths.append({"value": f"{ch.MEASURED}.position.{name}", "enabled": True, "color": color,
                      "label": f"{name} measured", "timestampMethod": "receiveTime"})
        paths.append({"value": f"{ch.COMMANDED}.position.{name}", "enabled": True, "color": color,
                      "label": f"{name} commanded", "lineSize": 1, "timestampMethod": "receiveTime"})
    config = {
        "3D!arm": {
            "followTf": WORLD_FRAME, "followMode": "follow-pose",
            "cameraState": {"distance": 1.6, "perspective": True, "phi": 60, "thetaOffset": 45,
                            "targetOffset": [0.3, 0, 0.2], "target": [0, 0, 0], "fovy": 45, "near": 0.01, "far": 100},
            "scene": {"transforms": {"showLabel": False, "axisScale": 0.5}},
            "transforms": {},
            "topics": {ch.ROBOT_MODEL: {"visible": True}, ch.PLANNED_PATH: {"visible": True},
                       ch.TARGET: {"visible": True}},
            "layers": {"grid": {"layerId": "foxglove.Grid", "visible": True, "frameId": WORLD_FRAME,
                                "size": 2, "divisions": 20, "lineWidth": 1, "color": "#248eff40"}},
        },
        "Image!camera": {"imageMode": {"imageTopic": ch.CAMERA_IMAGE, "calibrationTopic": ch.CAMERA_INFO}},
        "Image!policy": {"imageMode": {"imageTopic": ch.POLICY_IMAGE, "calibrationTopic": ch.POLICY_INFO}},
        "Plot!joints": {"paths": paths, "showLegend": True, "legendDisplay": "floating", "isSynced": True,
                        "xAxisVal": "timestamp", "followingViewWidth": 10},
        "StateTransitions!mode": {"paths": [
            {"value": f"{ch.SUPERVISOR_STATE}.mode", "timestampMethod": "receiveTime"},
            {"value": f"{ch.EPISODES}.success", "timestampMethod": "receiveTime"},
            {"value": f"{ch.INTERVENTIONS}.event", "timestampMethod": "receiveTime"}], "isSynced": True},
        "RawMessages!supervisor": {"topicPath": ch.SUPERVISOR_STATE, "expansion": "all"},
        "RawMessages!stats": {"topicPath": f"{ch.STATS}.topics", "expansion": "all"},
    }
    tree = {
        "direction": "column", "splitPercentage": 62,
        "first": {"direction": "row", "splitPercentage": 62, "first": "3D!arm",
                  "second": {"direction": "column", "first": "Image!camera", "second": "Image!policy"}},
        "second": {"direction": "row", "splitPercentage": 45, "first": "Plot!joints",
                   "second": {"direction": "row", "first": "StateTransitions!mode",
                              "second": {"direction": "column", "first": "RawMessages!supervisor",
                                         "second": "RawMessages!stats"}}},
    }
    return {"configById": config, "globalVariables": {}, "userNodes": {}, "playbackConfig": {"speed": 1.0},
            "layout": tree}


def panel_ids(tree) -> list[str]:
    """Every panel id in a layout tree (what a layout's `layout` refers to)."""
    if isinstance(tree, str):
        return [tree]
    return panel_ids(tree["first"]) + panel_ids(tree["second"])


def write_layout(path: str | Path, joint_names: list[str]) -> Path:
    """Write the default layout to `path` (JSON); returns the path."""
    path = Path(path)
    path.write_text(json.dumps(layout(joint_names), indent=2) + "\n")
    return path
