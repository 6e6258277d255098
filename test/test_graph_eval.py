"""`sim2real eval-sim --graph`: the full sim graph as processes over DDS, outcomes from sim/episode."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from support import REPO_ROOT

from sim2real_ros.core.stats import wilson_interval
from sim2real_ros.evaluation.graph_timing import episode_timing, read_trace
from sim2real_ros.paths import config_path
from sim2real_ros.sim.world import episode_seed


def test_eval_sim_graph_counts_episodes_and_reports_the_latency_the_policy_saw(tmp_path):
    # Short episodes (2 s of sim time) keep the run short whatever the policy does.
    raw = yaml.safe_load(config_path("sim_params.yaml").read_text())
    raw["task"]["timeout_s"] = 2.0
    raw["camera"]["calibration_file"] = str(config_path("camera_sim.yaml"))
    sim_config = tmp_path / "sim_params_short.yaml"
    sim_config.write_text(yaml.safe_dump(raw))
    out, bag = tmp_path / "eval_graph.json", tmp_path / "timing_bag"
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--graph", "--episodes", "2",
         "--sim-config", str(sim_config), "--real-time-factor", "0.5", "--json", str(out), "--record", str(bag)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "graph" and result["episodes"] == 2
    # The totals are the per-episode outcomes counted, each outcome consistent with its distance.
    per_episode = result["per_episode"]
    wins = sum(e["success"] for e in per_episode)
    assert result["successes"] == wins and result["success_rate"] == wins / 2
    assert list(result["ci95"]) == pytest.approx(list(wilson_interval(wins, 2)))
    assert result["failures"] == dict(Counter(e["failure"] for e in per_episode))
    for e in per_episode:
        # the reach task's category, sent by the sim node (the core path's classify_failure)
        if e["success"]:
            assert e["failure"] == "success", e
        elif e["failure"] in ("timeout_near", "timeout_far"):
            assert e["failure"] == ("timeout_near" if e["final_distance_m"] < 0.10 else "timeout_far"), e
        else:
            assert e["failure"] in ("joint_limit", "table_contact"), e
        assert e["success"] or e["duration_s"] >= 2.0 - 0.05  # a failure ran to the 2 s timeout
    assert 0 < result["episode_length_s"]["max"] <= 2.0 + 0.05  # [s] sim time: the task timeout ends each
    # The policy ran in the graph and measured its observation-to-chunk latency (sim time).
    assert math.isfinite(result["obs_to_chunk_ms"]["p50"]) and result["obs_to_chunk_ms"]["p50"] > 0
    assert result["real_time_factor"]["requested"] == 0.5
    assert 0 < result["real_time_factor"]["p50"] <= 0.5 * 1.2  # paced: never faster than asked
    assert result["supervisor"]["estops"] == 0
    # The sim restarted at episode 0 of the seed once armed: the core path's episodes, seed by seed.
    assert [e["seed"] for e in result["per_episode"]] == [episode_seed(1000, k) for k in range(2)]
    # The reset between the episodes: the supervisor waited for a plan made after it, refused nothing
    # and never timed out on a silent policy (the actuator dropped the old plans). A hold for a sim clock
    # standing still (the sim starved of CPU on a loaded machine) is the supervisor doing its job.
    supervisor = result["supervisor"]
    assert supervisor["watchdog_holds"] == supervisor["clock_stall_holds"], supervisor
    # At most one refused arming per reset: on a loaded machine (a CI run at load 4) the supervisor
    # refused one first plan after a reset (a failed check, e.g. its handover gap), which is its
    # job; what this test checks is that each episode then armed on its own first chunk (below).
    assert supervisor["arm_refused"] <= 2, supervisor
    # The recorded timing: each episode got its own first chunk, observed after it started, and the
    # supervisor armed on it (a chunk observed before the reset may still arrive: the actuator refuses it).
    rows = episode_timing(read_trace(bag))
    seeds = [e["seed"] for e in result["per_episode"]]
    # Episodes that ended while the graph came up (same seeds, before the restart) come first.
    start = max(i for i in range(len(rows) - 1) if [r["seed"] for r in rows[i:i + 2]] == seeds)
    for row in rows[start:start + 2]:
        assert 0 <= row["first_observation_ms"] <= row["start_to_first_chunk_ms"] < 1000, row
        assert row["start_to_armed_ms"] is not None, row
        assert 90 <= row["observation_period_ms"]["p50"] <= 110, row  # the 10 Hz the policy was trained at


def test_eval_sim_graph_refuses_a_bad_real_time_factor():
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--graph", "--episodes", "1",
         "--real-time-factor", "0"], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 2 and "--real-time-factor must be in (0, 10], got 0.0" in done.stdout


def test_the_default_graph_log_is_kept_when_the_run_fails_and_removed_when_it_succeeds(tmp_path):
    """The errors of eval-sim --graph / --emulate name the node log: it must still be there."""
    from sim2real_ros.runtime.graph_log import graph_log

    with graph_log(None, "sim2real_test_graph_log_") as good:
        good.write_text("nodes ran\n")
    assert not good.exists()
    with pytest.raises(TimeoutError), graph_log(None, "sim2real_test_graph_log_") as failed:
        failed.write_text("the supervisor never armed\n")
        raise TimeoutError("never armed")
    try:
        assert failed.read_text() == "the supervisor never armed\n"
    finally:
        failed.unlink()
    given = tmp_path / "mine.log"
    with graph_log(given, "unused_") as path:
        path.write_text("kept\n")
    assert path == given and given.read_text() == "kept\n"


def test_graph_log_applies_only_to_a_graph():
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--episodes", "1", "--graph-log", "x.log"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 2 and "--graph-log applies to --graph and --emulate" in done.stderr


def test_eval_sim_graph_runs_a_student_on_its_own_task_camera_and_preprocessing(tmp_path):
    """The shipped wrist pick_lift student through the graph: the sim node runs the checkpoint's task
    (pick_lift, over the wrist sim params' own reach) and camera, and camera_preprocessor its policy
    camera (preprocess_wrist.yaml, not the graph's default, which its policy node refuses). Episode 0 of
    seed 1000 is one the student picks in the core path (docs/learning.md)."""
    from sim2real_ros.paths import share_dir

    out, log = tmp_path / "eval.json", tmp_path / "graph.log"
    student = share_dir() / "policies" / "so101_pick_lift_wrist.safetensors"
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--graph", "--checkpoint", str(student),
         "--episodes", "1", "--real-time-factor", "0.5", "--json", str(out), "--graph-log", str(log)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    text = log.read_text() if log.exists() else ""
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:] + text[-3000:]
    result = json.loads(out.read_text())
    assert result["task"] == "pick_lift" and result["sim_params_from"] == "checkpoint"
    assert result["sim_params_file"].endswith("sim_params_so101_wrist.yaml")
    pick_lift = {"success", "knocked_off_table", "dropped", "collision", "missed_grasp", "timeout"}
    assert result["per_episode"][0]["failure"] in pick_lift, result["per_episode"]
    assert "policy camera 96x96 fx=48.0 fy=48.0" in text  # the wrist policy camera (preprocess_wrist.yaml)
    assert "does not match the running graph" not in text
    assert math.isfinite(result["obs_to_chunk_ms"]["p50"])  # the policy ran


def test_checkpoint_preprocessing_is_written_only_when_it_is_not_the_graphs_default(tmp_path):
    from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
    from sim2real_ros.evaluation.checkpoint_graph import checkpoint_preprocessing_parameters

    default = PreprocessConfig.from_yaml(config_path("preprocess.yaml"))
    assert checkpoint_preprocessing_parameters(default.to_dict(), tmp_path) == {}
    assert not list(tmp_path.iterdir())
    wrist = PreprocessConfig.from_yaml(config_path("preprocess_wrist.yaml"))
    extra = checkpoint_preprocessing_parameters(wrist.to_dict(), tmp_path)
    assert set(extra) == {"camera_preprocessor", "policy_node"}
    written = extra["camera_preprocessor"]["preprocess_config"]
    assert extra["policy_node"]["preprocess_config"] == written
    assert PreprocessConfig.from_yaml(written).content_hash == wrist.content_hash
