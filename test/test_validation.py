"""Staged validation: gate rules and verdict (pure), the sim stages' graph and core figures,
failure-mode comparison, real episodes from the teleop teleop_recording, and `sim2real validate` end to
end (real PyBullet, real torch, real bags; and once through the real ROS graph)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from support import REPO_ROOT

from sim2real_ros.cli.main import main as sim2real
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.stats import wilson_interval
from sim2real_ros.paths import config_path
from sim2real_ros.validation.gates import (
    NOT_READY,
    READY,
    PathFigure,
    RealGate,
    block_bootstrap_mean,
    decide,
    error_stage,
    gates_from_dict,
    load_gates,
    sim_success_stage,
    success_stage,
)
from sim2real_ros.validation.sim_vs_real import compare_failure_modes, read_real_episodes, real_outcomes


def test_a_success_gate_passes_only_when_the_wilson_lower_bound_clears_it():
    # 9 of 10 is a 90% rate, but its lower bound (0.60) does not clear 0.8: not enough evidence.
    lucky = success_stage("nominal_sim", 9, 10, 0.8)
    assert lucky.figure == pytest.approx(0.9) and lucky.interval == pytest.approx(wilson_interval(9, 10))
    assert not lucky.passed
    assert success_stage("nominal_sim", 48, 50, 0.8).passed  # lower bound 0.87
    assert not success_stage("nominal_sim", 0, 0, 0.8).passed  # nothing run is not a pass


def test_an_error_gate_passes_only_when_the_upper_bound_stays_under_it():
    gate = RealGate(max_action_mae_rad=0.05, min_frames=10)
    assert error_stage("real_offline", 0.03, (0.02, 0.045), 100, gate).passed
    assert not error_stage("real_offline", 0.03, (0.02, 0.055), 100, gate).passed
    too_few = error_stage("real_offline", 0.01, (0.005, 0.02), 5, gate)
    assert not too_few.passed and "only 5 frames" in too_few.note
    missing = error_stage("real_offline", None, None, 0, gate, note="no real bags given")
    assert not missing.passed and not missing.ran


def test_the_verdict_names_the_first_failing_stage_with_figure_and_threshold():
    gate = RealGate(max_action_mae_rad=0.05, min_frames=10)
    good = [success_stage("nominal_sim", 50, 50, 0.8), success_stage("perturbed_sim", 45, 50, 0.6),
            error_stage("real_offline", 0.03, (0.02, 0.04), 200, gate)]
    verdict = decide(good)
    assert verdict.verdict == READY and verdict.text == "ready for supervised rollout"
    bad = [good[0], success_stage("perturbed_sim", 20, 50, 0.6), error_stage("real_offline", 0.2, (0.1, 0.3), 200,
                                                                               gate)]
    verdict = decide(bad)
    assert verdict.verdict == NOT_READY and verdict.failed == ("perturbed_sim", "real_offline")
    assert "stage 2" in verdict.reason and "40%" in verdict.reason and "threshold 0.60" in verdict.reason
    assert decide(good[:2]).failed == ("real_offline",)  # a stage that never ran fails


def sim(stage, threshold, core=None, graph=None):
    """A sim stage from (successes, episodes) per path; None: that path was not run."""
    paths = [PathFigure(name, *figure) for name, figure in (("core", core), ("graph", graph)) if figure is not None]
    return sim_success_stage(stage, threshold, paths)


def test_a_sim_stage_without_the_graph_figure_fails_however_good_the_core_path():
    core_only = sim("nominal_sim", 0.8, core=(50, 50))  # core lower bound 0.93
    assert not core_only.passed and not core_only.ran and core_only.figure is None
    assert "graph figure missing" in core_only.note and "core path 100% 50/50" in core_only.describe()
    gate = RealGate(max_action_mae_rad=0.05, min_frames=10)
    stages = [core_only, sim("perturbed_sim", 0.6, core=(50, 50)), error_stage("real_offline", 0.03, (0.02, 0.04),
                                                                                200, gate)]
    verdict = decide(stages)
    assert verdict.verdict == NOT_READY and verdict.failed == ("nominal_sim", "perturbed_sim")
    assert "stage 1" in verdict.reason and "graph figure missing" in verdict.reason
    # A graph that failed to run is no figure either; its error is kept.
    broken = sim_success_stage("nominal_sim", 0.8, [PathFigure("core", 50, 50),
                                                    PathFigure("graph", 0, 0, "TimeoutError: never armed")])
    assert not broken.passed and "never armed" in broken.describe()
    assert broken.to_dict()["paths"]["graph"]["error"] == "TimeoutError: never armed"


def test_a_sim_stage_passes_only_when_both_measured_lower_bounds_clear_the_threshold():
    core_good_graph_bad = sim("nominal_sim", 0.8, core=(50, 50), graph=(30, 50))
    assert not core_good_graph_bad.passed and core_good_graph_bad.ran
    # The stage's figure is the graph's; both figures and intervals are reported.
    assert core_good_graph_bad.figure == pytest.approx(0.6)
    assert core_good_graph_bad.interval == pytest.approx(wilson_interval(30, 50))
    paths = core_good_graph_bad.to_dict()["paths"]
    assert paths["graph"]["figure"] == pytest.approx(0.6) and not paths["graph"]["passed"]
    assert paths["core"]["figure"] == 1.0 and paths["core"]["passed"]
    assert paths["core"]["interval"] == pytest.approx(list(wilson_interval(50, 50)))
    assert "full ROS graph below the threshold" in core_good_graph_bad.note
    summary = core_good_graph_bad.describe()
    assert "full ROS graph 60%" in summary and "core path 100%" in summary and "threshold 0.80" in summary
    assert not sim("nominal_sim", 0.8, core=(30, 50), graph=(50, 50)).passed  # the core path must pass too
    assert sim("nominal_sim", 0.8, core=(49, 50), graph=(48, 50)).passed
    assert sim("nominal_sim", 0.8, graph=(48, 50)).passed  # --graph: the graph alone decides
    assert not sim("nominal_sim", 0.8, graph=(9, 10)).passed  # lower bound 0.60
    with pytest.raises(ValueError):
        sim_success_stage("nominal_sim", 0.8, [PathFigure("graph", 1, 1), PathFigure("graph", 1, 1)])


def test_block_bootstrap_interval_brackets_the_mean_and_widens_with_correlation():
    rng = np.random.default_rng(0)
    values = [rng.normal(1.0, 0.1, 200)]
    lo, hi = block_bootstrap_mean(values, block=10, samples=500)
    assert lo < 1.0 < hi and hi - lo < 0.1
    # Runs of identical values: resampling blocks sees the real (small) number of independent samples.
    steps = [np.repeat(rng.normal(1.0, 0.1, 10), 20)]
    wide = block_bootstrap_mean(steps, block=20, samples=500)
    naive = block_bootstrap_mean(steps, block=1, samples=500)
    assert wide[1] - wide[0] > 2 * (naive[1] - naive[0])


def test_gates_yaml_defaults_and_errors(tmp_path):
    gates = load_gates()
    assert gates.source.endswith("gates.yaml") and 0 < gates.nominal_sim.min_success_rate <= 1
    assert gates_from_dict({"nominal_sim": {"episodes": 5}}, "x").nominal_sim.episodes == 5
    bad = tmp_path / "gates.yaml"
    bad.write_text(yaml.safe_dump({"perturbed_sim": {"min_success_rate": 1.5}}))
    with pytest.raises(ConfigError, match=r"gates.yaml: field 'perturbed_sim.min_success_rate' = 1.5"):
        load_gates(bad)
    with pytest.raises(ConfigError, match="unknown stage"):
        gates_from_dict({"stage4": {}}, "x")
    with pytest.raises(ConfigError, match="real_offline.max_action_mae"):
        gates_from_dict({"real_offline": {"max_action_mae": 1}}, "x")


def test_failure_modes_that_differ_in_kind_point_to_a_sim_gap():
    sim = {"success": 40, "timeout_far": 5}
    # In real the policy gets near and cannot settle, which it never does in sim: actuation.
    differ = compare_failure_modes(sim, {"success": 3, "timeout_near": 4})
    assert differ["differ_in_kind"] and differ["only_in_real"] == ["timeout_near"] and differ["gap"] == ["actuation"]
    assert "rather than a policy gap" in differ["message"]
    sensing = compare_failure_modes({"success": 9, "timeout_near": 1}, {"timeout_far": 6, "taken_over": 2})
    assert sensing["gap"] == ["sensing"] and "took over in 2" in sensing["message"]
    same = compare_failure_modes(sim, {"success": 2, "timeout_far": 3})
    assert not same["differ_in_kind"] and "agree" in same["message"]


def test_every_tasks_failure_category_points_to_a_gap():
    """validate explains a failure that appears only in real runs for every task's categories."""
    from sim2real_ros.sim.task_pick_lift import PickLiftTask
    from sim2real_ros.sim.task_pick_place import PickPlaceTask
    from sim2real_ros.sim.tasks import ReachHoldTask, ReachTask
    from sim2real_ros.validation.sim_vs_real import GAP_OF_FAILURE

    for task in (ReachTask, ReachHoldTask, PickLiftTask, PickPlaceTask):
        name = task.name
        missing = set(task.failure_categories) - set(GAP_OF_FAILURE)
        assert not missing, f"task {name}: {sorted(missing)} have no gap"
    # a pick_lift policy that misses its grasps only in real: a sensing gap
    grasp = compare_failure_modes({"success": 38, "dropped": 2}, {"success": 5, "missed_grasp": 4})
    assert grasp["only_in_real"] == ["missed_grasp"] and grasp["gap"] == ["sensing"]


def test_a_recorded_episode_keeps_the_tasks_failure_category(tmp_path):
    """A sim/episode message with the task's category (what the sim node sends) is read back as it."""
    from rclpy.serialization import serialize_message

    from sim2real_ros.bags.writer import BagWriter
    from sim2real_ros.conversions import episode_outcome_message

    bag = tmp_path / "bag"
    outcome = {"episode": 3, "success": False, "reason": "timeout", "duration_s": 8.0, "final_distance_m": 0.02,
               "seed": 7, "failure": "missed_grasp"}
    with BagWriter(bag) as writer:
        writer.add_topic("/sim/episode", "diagnostic_msgs/msg/DiagnosticArray")
        message = episode_outcome_message(outcome, 9 * 10**9, "sim_node")
        writer.write("/sim/episode", 9 * 10**9, serialize_message(message))
    (episode,) = read_real_episodes(bag)
    assert episode.category == "missed_grasp" and episode.driver == "policy" and not episode.success


def test_real_episodes_from_the_bags_count_only_what_the_policy_started(teleop_recording):
    episodes = [e for bag in teleop_recording.bags for e in read_real_episodes(bag)]
    assert [e.driver for e in episodes] == ["demonstration", "intervention", "demonstration"]
    real = real_outcomes(episodes)
    assert real["episodes"] == 1 and real["successes"] == 0 and real["failures"] == {"taken_over": 1}
    assert real["demonstrations"]["episodes"] == 2
    assert real["ci95"] == pytest.approx(list(wilson_interval(0, 1)))


def short_sim_params(tmp_path, timeout_s: float):
    """config/sim_params.yaml with episodes of `timeout_s` [s] of sim time (affordable tests)."""
    raw = yaml.safe_load(config_path("sim_params.yaml").read_text())
    raw["task"]["timeout_s"] = timeout_s
    raw["camera"]["calibration_file"] = str(config_path(raw["camera"]["calibration_file"]))
    path = tmp_path / "sim_short.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, raw


def test_validate_end_to_end_on_real_bags(teleop_recording, tmp_path, capsys):
    # A short sim episode keeps the test affordable; the untrained policy holds still. --core-only
    # (no graph): quick, but then stages 1 and 2 fail whatever the core figure.
    sim_file, sim = short_sim_params(tmp_path, 1.5)
    report_dir = tmp_path / "report"
    code = sim2real(["validate", "--checkpoint", str(teleop_recording.untrained),
                     "--real-bags", str(teleop_recording.out),
                     "--report", str(report_dir), "--episodes", "1", "--sim-config", str(sim_file), "--json",
                     "--core-only"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["verdict"] == "not_ready" and out["sim_paths"] == ["core"]
    assert [s["stage"] for s in out["stages"]] == ["nominal_sim", "perturbed_sim", "real_offline"]
    nominal, perturbed, real = out["stages"]
    for stage in (nominal, perturbed):
        assert not stage["passed"] and not stage["ran"] and stage["figure"] is None
        assert "graph figure missing" in stage["note"] and set(stage["paths"]) == {"core"}
    assert nominal["paths"]["core"]["figure"] == 0.0 and nominal["paths"]["core"]["interval"][0] == 0.0
    assert "stage 1" in out["reason"] and "threshold 0.80" in out["reason"] and "graph figure missing" in out["reason"]
    # Stage 3 compared the policy with the person's commands on the real bags.
    assert real["ran"] and real["figure"] > 0 and real["interval"][0] <= real["figure"] <= real["interval"][1]
    table = out["sim_vs_real"]
    assert set(table) == {"success_rate", "episode_length_s", "action_magnitude_rad", "failures"}
    assert table["failures"]["sim_nominal"] == {"timeout_far": 1} and table["failures"]["real"] == {"taken_over": 1}
    assert table["success_rate"]["sim_nominal_graph"]["rate"] is None  # the graph did not run
    assert table["action_magnitude_rad"]["real"]["max"] < 0.01  # holds still on real observations too
    assert table["action_magnitude_rad"]["real_human"]["max"] > 0.05  # the person moved
    for name in ("report.md", "report.json", "success_rates.png", "action_magnitude.png"):
        assert (report_dir / name).is_file(), name
    text = (report_dir / "report.md").read_text()
    assert "**Verdict: not ready**" in text and "| task success rate" in text
    assert "sim nominal (graph) | sim nominal (core)" in text and "graph: not run; core: 0% (0/1)" in text
    perturbed_params = yaml.safe_load((report_dir / "sim_params_perturbed.yaml").read_text())
    assert perturbed_params["randomization"]["actuation_latency_s"][1] == pytest.approx(
        sim["randomization"]["actuation_latency_s"][1] + load_gates().perturbed_sim.extra_latency_s)


def test_validate_refuses_bad_input(tmp_path, capsys):
    assert sim2real(["validate", "--report", str(tmp_path / "r"), "--episodes", "0"]) == 2
    bad = tmp_path / "gates.yaml"
    bad.write_text("nominal_sim: [1, 2]\n")
    assert sim2real(["validate", "--report", str(tmp_path / "r"), "--gates", str(bad)]) == 2
    assert "nominal_sim" in capsys.readouterr().err
    assert sim2real(["validate", "--report", str(tmp_path / "r"), "--real-bags", str(tmp_path / "none")]) == 2


def test_report_plots_a_perfect_success_rate(tmp_path):
    from sim2real_ros.validation.report import write_validation_report

    ci = list(wilson_interval(10, 10))
    cell = {"rate": 1.0, "ci95": ci, "episodes": 10}
    stats = {"mean": 0.1, "std": 0.0, "p50": 0.1, "p90": 0.1, "p99": 0.1, "max": 0.1}
    stage = sim("nominal_sim", 0.8, core=(10, 10), graph=(10, 10)).to_dict()
    sims = ("sim_nominal_graph", "sim_nominal", "sim_perturbed_graph", "sim_perturbed")
    report = {"checkpoint": "x.pt", "checkpoint_hash": "h", "verdict_text": "not ready", "reason": "r",
              "stages": [stage], "gates": {"source": "g"}, "real_episodes": {"demonstrations": {"episodes": 0}},
              "failure_modes": {"message": "m"},
              "sim_vs_real": {"success_rate": {**{c: cell for c in sims}, "real": {"rate": None}},
                              "episode_length_s": {**{c: stats for c in sims}, "real": stats},
                              "action_magnitude_rad": {"sim_nominal": stats, "sim_perturbed": stats, "real": stats},
                              "failures": {**{c: {"success": 10} for c in sims}, "real": {}}}}
    assert write_validation_report(report, tmp_path) == ["success_rates.png", "action_magnitude.png"]
    text = (tmp_path / "report.md").read_text()
    assert "100% [0.72, 1.00] (n=10)" in text
    assert "graph: 100% (10/10); core: 100% (10/10) | graph: 0.72-1.00; core: 0.72-1.00" in text


def test_validate_runs_the_real_graph_and_reports_both_figures(tmp_path):
    # One short episode per stage on each path: the graph comes up twice (nominal, perturbed).
    sim_file, _ = short_sim_params(tmp_path, 2.0)
    report_dir = tmp_path / "report"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "validate", "--episodes", "1", "--sim-config", str(sim_file),
         "--real-time-factor", "0.5", "--report", str(report_dir), "--no-plots", "--json"],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    wall_s = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # no real bags: not ready
    out = json.loads(done.stdout)  # stdout is the JSON and nothing else
    assert out["sim_paths"] == ["core", "graph"]
    for stage in out["stages"][:2]:
        assert set(stage["paths"]) == {"graph", "core"}, stage["summary"]
        graph, core = stage["paths"]["graph"], stage["paths"]["core"]
        for figure in (graph, core):
            assert figure["episodes"] == 1 and figure["figure"] in (0.0, 1.0) and not figure["error"]
            assert figure["interval"] == pytest.approx(list(wilson_interval(figure["successes"], 1)))
        # The stage's figure is the graph's; one episode can never clear a threshold (bound <= 0.21).
        assert stage["figure"] == graph["figure"] and stage["interval"] == graph["interval"]
        assert not stage["passed"] and stage["ran"]
        assert "full ROS graph" in stage["summary"] and "core path" in stage["summary"]
    table = out["sim_vs_real"]["success_rate"]
    for column in ("sim_nominal_graph", "sim_nominal", "sim_perturbed_graph", "sim_perturbed"):
        assert table[column]["episodes"] == 1, column
    report = json.loads((report_dir / "report.json").read_text())
    nominal = report["stages"][0]
    assert nominal["details"]["graph"]["mode"] == "graph" and nominal["details"]["core"]["mode"] == "core"
    assert report["failure_modes"]["sim_path"] == "graph"
    text = (report_dir / "report.md").read_text()
    assert "sim nominal (graph)" in text and "graph: " in text and "core: " in text
    print(f"validate through the graph: {wall_s:.0f} s wall")


def test_an_optional_closed_loop_stage_counts_when_it_ran_and_disagreement_is_named():
    from sim2real_ros.validation.validate import offline_vs_closed_loop

    gate = RealGate(max_action_mae_rad=0.05, min_frames=10)
    good = [success_stage("nominal_sim", 50, 50, 0.8), success_stage("perturbed_sim", 45, 50, 0.6),
            error_stage("real_offline", 0.03, (0.02, 0.04), 200, gate)]
    assert decide(good).verdict == READY  # no stage 4: not required
    closed = success_stage("robot_closed_loop", 9, 20, 0.8)
    verdict = decide([*good, closed])
    assert verdict.verdict == NOT_READY and verdict.failed == ("robot_closed_loop",) and "stage 4" in verdict.reason
    text = offline_vs_closed_loop(good[2], closed)
    assert "offline action error passes" in text and "45%" in text
    assert offline_vs_closed_loop(good[2], success_stage("robot_closed_loop", 20, 20, 0.8)) == ""
    assert gates_from_dict({"robot_closed_loop": {"episodes": 5}}, "g.yaml").robot_closed_loop.episodes == 5
    with pytest.raises(ConfigError, match="robot_closed_loop.min_success_rate"):
        gates_from_dict({"robot_closed_loop": {"min_success_rate": 2.0}}, "g.yaml")


def test_validate_robot_sim_adds_the_closed_loop_stage(teleop_recording, tmp_path, capsys):
    sim_file, _ = short_sim_params(tmp_path, 1.5)
    robot_sim = tmp_path / "real_b_short.yaml"  # the stand-in with short episodes
    raw = yaml.safe_load(config_path("sim_params_real_b.yaml").read_text())
    raw["task"]["timeout_s"] = 1.5
    raw["camera"]["calibration_file"] = str(config_path(raw["camera"]["calibration_file"]))
    robot_sim.write_text(yaml.safe_dump(raw))
    code = sim2real(["validate", "--checkpoint", str(teleop_recording.untrained),
                     "--real-bags", str(teleop_recording.out),
                     "--report", str(tmp_path / "report"), "--episodes", "1", "--sim-config", str(sim_file),
                     "--json", "--core-only", "--no-plots", "--robot-sim", str(robot_sim)])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [s["stage"] for s in out["stages"]] == ["nominal_sim", "perturbed_sim", "real_offline", "robot_closed_loop"]
    robot = out["stages"][3]
    assert robot["ran"] and robot["figure"] == 0.0 and not robot["passed"]  # the untrained policy holds still
    assert out["sim_vs_real"]["success_rate"]["robot_sim"]["episodes"] == 1
    assert out["sim_vs_real"]["failures"]["robot_sim"] in ({"timeout_far": 1}, {"timeout_near": 1})
    assert "robot stand-in (closed loop)" in (tmp_path / "report" / "report.md").read_text()
    assert sim2real(["validate", "--report", str(tmp_path / "r"), "--robot-sim-graph"]) == 2
