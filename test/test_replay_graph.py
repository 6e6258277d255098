"""Graph replay: the sim bag played (with `clock`) into the replay graph's real nodes as processes.

The bag is the namespaced, perturbed copy of the session's sim recording (test/recordings.py): the player must
find /arm1/camera/... and publish it under the graph's names, and the chunks of the nodes must match
the recorded commands on every joint but joint3, whose commands were moved by 50 mrad.
"""
from __future__ import annotations

import pytest
from recordings import JOINTS, NEAR_ZERO_MAE, PERTURBATION, PERTURBED_JOINT

from sim2real_ros.evaluation import ReplayOptions
from sim2real_ros.runtime.replay_graph import evaluate_bag_in_graph


def test_graph_replay_of_a_namespaced_bag_matches_the_recording_except_the_perturbed_joint(sim_recording, tmp_path):
    sim = sim_recording
    # Half speed: the nodes share 2 busy cores; the clock follows the bag, so sim-time latencies stay small.
    options = ReplayOptions(human_modes=(), rate=0.5, progress=False, plots=False)
    report = evaluate_bag_in_graph(sim.perturbed_bag, sim.checkpoint, tmp_path, options)
    graph = report["graph"]
    assert graph["nodes"] == ["camera_preprocessor", "policy_node", "actuator_node"]
    assert graph["published"]["camera/image_raw"] == report["frames"]["images"] > 10
    assert graph["chunks_received"] >= 5, (graph, (tmp_path / "graph.log").read_text()[-3000:])
    assert graph["exited_during_replay"] == {}, graph["exit_codes"]
    assert report["frames"]["evaluated"] >= 5
    assert report["frames"]["evaluated"] + report["frames"]["skipped_total"] >= report["frames"]["images"]
    per_joint = report["metrics"]["per_joint"]
    commands = graph["command_policy_vs_recorded"]["per_joint_mae"]
    for j, name in enumerate(JOINTS):
        if j == PERTURBED_JOINT:
            assert per_joint[name]["mae"] == pytest.approx(PERTURBATION, abs=5e-3)
            assert commands[name] == pytest.approx(PERTURBATION, abs=5e-3)
        else:
            assert per_joint[name]["mae"] < NEAR_ZERO_MAE, (name, per_joint[name])
            assert commands[name] < NEAR_ZERO_MAE, (name, commands[name])
    assert (tmp_path / "report.md").read_text().count("## Graph") == 1
