"""Every node that takes a `joints` list refuses a duplicate or unknown joint at start-up (issue 18.4).

A joint list maps positions to joints by index: `[joint1, joint1, joint3, ...]` would send joint1's
value, with joint1's limits, to the controller's second joint. The nodes run as real processes; each
must exit with code 2 and one line naming the parameter and the bad value.
"""
from __future__ import annotations

import pytest
from support import node_decl, running_nodes, wait_until

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.robot.joint_list import resolve_joint_list
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.paths import urdf_path

MODEL = RobotModel.from_file(urdf_path())
MOVABLE = MODEL.joint_names  # joint1 .. joint6 of urdf/arm6.urdf
DUPLICATE = [MOVABLE[0], *MOVABLE[:-1]]  # joint1 twice, one joint short: the length alone looks fine
UNKNOWN = [*MOVABLE[:-1], "joint7"]
FIXED = [*MOVABLE[:-1], "ee_joint"]  # a joint of the URDF, but not one that moves


def test_resolve_joint_list_keeps_order_defaults_to_the_urdf_and_refuses_bad_names():
    assert resolve_joint_list([], MODEL, "src") == tuple(MOVABLE)
    assert resolve_joint_list(MOVABLE[::-1], MODEL, "src") == tuple(MOVABLE[::-1])
    assert resolve_joint_list(MOVABLE[:2], MODEL, "src") == tuple(MOVABLE[:2])  # a subset is fine
    cases = [(DUPLICATE, f"duplicate joint '{MOVABLE[0]}' (entries 0 and 1)"),
             (UNKNOWN, "'joint7' is not a joint of"),
             (FIXED, "'ee_joint' is a fixed joint of"),
             ([MOVABLE[0], ""], "entry 1 is an empty joint name")]
    for names, problem in cases:
        with pytest.raises(ConfigError) as info:
            resolve_joint_list(names, MODEL, "node parameters")
        assert (info.value.source, info.value.field, info.value.value) == ("node parameters", "joints", names)
        assert problem in str(info.value), str(info.value)
        if names in (UNKNOWN, FIXED):
            assert f"its movable joints are {MOVABLE}" in str(info.value)  # says what would be valid


@pytest.mark.parametrize("executable", ["supervisor", "actuator_node", "sim_node", "policy_node"])
def test_node_refuses_a_duplicate_or_unknown_joint_at_start(executable, tmp_path):
    cases = {f"{executable}_duplicate": (DUPLICATE, "duplicate"),
             f"{executable}_unknown": (UNKNOWN, "'joint7' is not a joint of")}
    decls = [node_decl(executable, {"robot_description": str(urdf_path()), "joints": joints}, name=name)
             for name, (joints, _) in cases.items()]
    with running_nodes(decls, tmp_path) as launcher:  # side by side: one start-up cost
        assert wait_until(lambda: len(launcher.check()) == len(cases), 90.0), "a node did not exit"
        assert sorted(launcher.check()) == sorted((name, 2) for name in cases)
    log = (tmp_path / "graph.log").read_text()
    assert "Traceback" not in log, log
    for name, (joints, problem) in cases.items():
        errors = [line for line in log.splitlines() if line.startswith(f"[{name}]") and "[ERROR]" in line]
        assert len(errors) == 1, log
        assert f"field 'joints' = {joints!r}" in errors[0] and problem in errors[0], errors[0]
