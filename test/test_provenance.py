"""Portable, honest provenance; teachers as first-class checkpoints; training curves (issue 33, parts 4-6).

Real files, a real git repository (GitPython), real PyBullet episodes, real tiny training runs, and
tensorboard's own reader for the event files.
"""
import json
import subprocess
import sys
from pathlib import Path

import git
import pytest
import yaml

from sim2real_ros.cli.main import main as sim2real
from sim2real_ros.core.policy.checkpoint import read_checkpoint
from sim2real_ros.paths import config_path, share_dir
from sim2real_ros.provenance import (
    ReusedTrainingEpisodeError,
    absolute_paths,
    assert_unseen_episodes,
    git_state,
    portable_path,
    portable_provenance,
    sim_params_version,
    training_git_state,
)
from sim2real_ros.rl.ppo import TeacherConfig, TeacherTrainer
from sim2real_ros.rl.teacher_checkpoint import is_teacher_file, load_teacher

POLICIES = sorted((share_dir() / "policies").glob("*.safetensors"))


def _provenance(path: Path) -> dict:
    if is_teacher_file(path):
        return load_teacher(path).spec.provenance
    return read_checkpoint(path)[0].provenance


def _other_sim_params(tmp_path: Path) -> Path:
    """The shipped sim params with one physical value changed: another version."""
    data = yaml.safe_load(config_path("sim_params.yaml").read_text())
    data["camera"]["calibration_file"] = str(config_path(data["camera"]["calibration_file"]))
    data["task"]["success_radius_m"] = float(data["task"]["success_radius_m"]) * 1.01
    path = tmp_path / "other_sim_params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# -- paths and git -----------------------------------------------------------------------------------
def test_paths_become_repository_relative_or_name_plus_hash(tmp_path):
    outside = tmp_path / "mine.yaml"
    outside.write_text("a: 1\n")
    assert portable_path("/work/main/config/sim_params.yaml", ["/work/main"]) == "config/sim_params.yaml"
    assert portable_path(str(outside), ["/work/main"]) == {"name": "mine.yaml", "sha256": sim_hash(outside)}
    assert portable_path("config/x.yaml", ["/work/main"]) == "config/x.yaml"
    assert portable_path("/work/main/../etc/passwd", ["/work/main"])["name"] == "passwd"
    nested = {"config": {"sim_params": "/srv/repo/config/a.yaml", "list": ["C:\\data\\b.yaml", 3]}, "n": 1}
    assert absolute_paths(nested) == [("provenance.config.list[0]", "C:\\data\\b.yaml"),
                                      ("provenance.config.sim_params", "/srv/repo/config/a.yaml")]
    portable = portable_provenance(nested, ["/srv/repo"])
    assert portable["config"]["sim_params"] == "config/a.yaml" and absolute_paths(portable) == []


def sim_hash(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_git_state_names_the_commit_and_whether_the_tree_was_dirty(tmp_path):
    repo = git.Repo.init(tmp_path / "repo")
    (tmp_path / "repo" / "a.txt").write_text("one\n")
    repo.index.add(["a.txt"])
    commit = repo.index.commit("first", author=git.Actor("t", "t@x"), committer=git.Actor("t", "t@x")).hexsha
    assert git_state(tmp_path / "repo") == {"git_commit": commit, "git_dirty": False}
    (tmp_path / "repo" / "a.txt").write_text("two\n")
    assert git_state(tmp_path / "repo") == {"git_commit": commit, "git_dirty": True}
    assert git_state(tmp_path / "not_a_repo") == {"git_commit": None, "git_dirty": None}
    # Taken when training starts and kept: a resumed run names the start's tree, and the change since.
    work = tmp_path / "work"
    started = training_git_state(work, tmp_path / "repo", fresh=True)
    assert started["git_dirty"] is True and started["git_taken"] == "training start"
    (tmp_path / "repo" / "a.txt").write_text("one\n")
    resumed = training_git_state(work, tmp_path / "repo", fresh=False)
    assert resumed["git_dirty"] is True and resumed["git_at_resume"] == {"git_commit": commit, "git_dirty": False}


def test_no_shipped_checkpoint_carries_an_absolute_path():
    assert {p.name for p in POLICIES} >= {"reach_default.safetensors", "reach_no_dr.safetensors",
                                          "reach_ppo.safetensors", "teacher_reach.safetensors"}
    for path in POLICIES:
        provenance = _provenance(path)
        assert absolute_paths(provenance) == [], path
        assert "git_commit" in provenance and "git_dirty" in provenance, path
    # The student names its teacher by the teacher file's current hash.
    ppo = _provenance(share_dir() / "policies" / "reach_ppo.safetensors")
    teacher = load_teacher(share_dir() / "policies" / "teacher_reach.safetensors")
    assert ppo["teacher"]["hash"] == teacher.checkpoint_hash


def test_unseen_episode_check_refuses_the_worlds_training_played():
    training = {"seed": 0, "index_ranges": [[0, 120], [100_000, 100_040]]}
    assert_unseen_episodes(0, range(900_000, 900_030), training, "ckpt")
    assert_unseen_episodes(1000, range(0, 200), training, "ckpt")  # another run seed: other worlds
    with pytest.raises(ReusedTrainingEpisodeError, match="episode 100001 of run seed 0 is a training episode"):
        assert_unseen_episodes(0, [5_000, 100_001], training, "ckpt")


# -- policy info ---------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_policy_info_reads_students_and_teachers_as_json_and_yaml():
    for name, kind in (("reach_ppo.safetensors", "student"), ("teacher_reach.safetensors", "teacher")):
        path = str(share_dir() / "policies" / name)
        as_json = _cli("policy", "info", path, "--json")
        assert as_json.returncode == 0, as_json.stderr
        info = json.loads(as_json.stdout)
        assert info["kind"] == kind and len(info["hash"]) == 16
        assert info["spec"]["provenance"]["sim_params_file"] == "config/sim_params.yaml"
        text = _cli("policy", "info", path)
        assert text.returncode == 0, text.stderr
        provenance = yaml.safe_load(text.stdout[text.stdout.index("provenance:"):])["provenance"]
        assert provenance["config"]["sim_params"] == "config/sim_params.yaml"
        assert "{'" not in text.stdout  # no Python reprs


# -- a teacher in eval-sim; the sim params check -------------------------------------------------------
def test_eval_sim_runs_a_teacher_and_warns_on_other_sim_params(tmp_path, capsys):
    other = _other_sim_params(tmp_path)
    out = tmp_path / "eval.json"
    teacher = share_dir() / "policies" / "teacher_reach.safetensors"
    assert sim2real(["eval-sim", "--checkpoint", str(teacher), "--episodes", "3", "--pushes",
                     "--sim-config", str(other), "--json", str(out)]) == 0
    captured = capsys.readouterr()
    result = json.loads(out.read_text())
    trained, current = load_teacher(teacher).spec.sim_params_version, sim_params_version(other)
    assert trained != current
    assert trained in captured.err and current in captured.err and "[warning]" in captured.err
    assert result["kind"] == "teacher" and result["episodes"] == 3 and len(result["per_episode"]) == 3
    groups = result["by_pushes"]
    assert groups["pushed"]["episodes"] + groups["unpushed"]["episodes"] == 3
    assert groups["pushed"]["episodes"] == sum(r["pushes_applied"] > 0 for r in result["per_episode"])
    assert {"success_rate", "ci95", "failures", "episode_length_s"} <= set(result)
    assert "pushed:" in captured.out and "unpushed:" in captured.out
    # Outcomes named as the expert's and the graph's are: successes are "success", under the task's name.
    assert result["task"] == "reach" and "outcomes (reach):" in captured.out
    assert all((r["failure"] == "success") == r["success"] for r in result["per_episode"])
    # The same seeds as a student's evaluation: episode i of --seed S is episode_seed(S, i).
    from sim2real_ros.sim.world import episode_seed

    assert [r["seed"] for r in result["per_episode"]] == [episode_seed(1000, i) for i in range(3)]
    # Training's own worlds are refused (the teacher trained on run seed 0 from index 0).
    assert sim2real(["eval-sim", "--checkpoint", str(teacher), "--episodes", "1", "--seed", "0"]) == 2
    assert "is a training episode" in capsys.readouterr().err


def test_eval_sim_on_a_student_warns_naming_both_sim_params_versions(tmp_path, capsys):
    ckpt = tmp_path / "untrained.pt"
    assert sim2real(["policy", "init", "--out", str(ckpt)]) == 0
    other = _other_sim_params(tmp_path)
    assert sim2real(["eval-sim", "--checkpoint", str(ckpt), "--episodes", "1", "--sim-config", str(other),
                     "--no-graph-conditions"]) == 0
    err = capsys.readouterr().err
    trained = read_checkpoint(ckpt)[0].sim_params_version
    assert trained in err and sim_params_version(other) in err
    provenance = read_checkpoint(ckpt)[0].provenance
    assert absolute_paths(provenance) == [] and "git_commit" in provenance and "git_dirty" in provenance


def test_eval_sim_runs_on_the_sim_params_file_the_checkpoint_was_trained_on(tmp_path, capsys):
    """A wrist-camera student evaluated on the SO-101's own sim params saw the mast camera (eval-sim only
    warned): now the checkpoint's own config/ file is the default, and --sim-config still wins."""
    wrist = config_path("sim_params_so101_wrist.yaml")
    ckpt, out = tmp_path / "wrist_untrained.pt", tmp_path / "eval.json"
    assert sim2real(["policy", "init", "--robot", "so101", "--out", str(ckpt), "--sim-params", str(wrist),
                     "--preprocess", str(config_path("preprocess_wrist.yaml"))]) == 0
    assert read_checkpoint(ckpt)[0].provenance["sim_params_file"] == "config/sim_params_so101_wrist.yaml"
    assert sim2real(["eval-sim", "--checkpoint", str(ckpt), "--episodes", "1", "--no-graph-conditions",
                     "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["sim_params_from"], Path(result["sim_params_file"]).name) == ("checkpoint", wrist.name)
    assert result["sim_params_version"] == sim_params_version(wrist) and result["sim_params_warning"] is None
    assert f"sim params: {wrist}" in capsys.readouterr().err
    assert sim2real(["eval-sim", "--checkpoint", str(ckpt), "--episodes", "1", "--no-graph-conditions",
                     "--sim-config", str(config_path("sim_params_so101.yaml")), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["sim_params_from"], Path(result["sim_params_file"]).name) == ("given", "sim_params_so101.yaml")
    assert result["sim_params_warning"]  # the mast camera is not what it was trained on


@pytest.mark.parametrize("recorded", [
    "../config/sim_params_so101_wrist.yaml", str(config_path("sim_params_so101_wrist.yaml")),
    "config/../config/sim_params_so101_wrist.yaml", "config/sub/sim_params_so101_wrist.yaml",
    "urdf/so101/so101.urdf", "config/.sim_params_so101_wrist.yaml", "config\\sim_params_so101_wrist.yaml",
    "config/sim_params_so101_wrist.yml", "config/missing.yaml", "", 7, None])
def test_a_checkpoint_can_name_only_an_unchanged_file_of_config_for_its_evaluation(recorded):
    """Checkpoints are untrusted input: the sim params file their provenance names is used only when it
    is config/NAME.yaml of this installation with the recorded content hash; anything else (another
    folder, `..`, an absolute path, a file edited since, another robot) falls back to the robot's own."""
    from sim2real_ros.robots import sim_params_for_checkpoint, trained_sim_params

    wrist = config_path("sim_params_so101_wrist.yaml")
    good = {"robot": "so101", "sim_params_file": "config/sim_params_so101_wrist.yaml",
            "sim_params_version": sim_params_version(wrist)}
    assert trained_sim_params(good) == str(wrist)
    assert sim_params_for_checkpoint("so101", None, good) == (str(wrist), "checkpoint")
    assert sim_params_for_checkpoint("arm6", None, good) == (str(config_path("sim_params.yaml")), "robot")
    assert trained_sim_params({**good, "sim_params_version": "0123456789abcdef"}) is None
    hostile = {**good, "sim_params_file": recorded}
    assert trained_sim_params(hostile) is None
    assert sim_params_for_checkpoint("so101", None, hostile) == (str(config_path("sim_params_so101.yaml")), "robot")


def test_a_student_trained_on_the_fast_loop_is_told_apart_from_one_trained_on_other_sim_params(tmp_path, capsys):
    """Fast-loop students are evaluated on the reference loop on purpose: eval-sim says so instead of
    warning that the sim params differ; another difference still warns; a bad override is ignored."""
    from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
    from sim2real_ros.sim.params import load_sim_params, trained_loop_note, with_sim_loop_override
    from sim2real_ros.training.untrained import init_checkpoint

    fast = {"loop": "fast", "dt_s": 0.005, "substeps": 2}
    params = load_sim_params(config_path("sim_params_so101.yaml"))
    trained = with_sim_loop_override(params, fast, "test")
    assert "sim_loop {loop: fast, dt_s: 0.005, substeps: 2}" in trained_loop_note(
        {"config": {"sim_loop": fast}}, trained.version, params, "ck")
    assert trained_loop_note({"config": {"sim_loop": fast}}, "0123456789abcdef", params, "ck") is None
    assert trained_loop_note({"config": {"sim_loop": {"loop": "warp"}}}, trained.version, params, "ck") is None
    assert trained_loop_note({"config": "not a mapping"}, trained.version, params, "ck") is None
    # End to end: a checkpoint whose sim params are the SO-101's on the fast loop.
    fast_file = tmp_path / "so101_fast.yaml"
    fast_file.write_text(yaml.safe_dump(dict(trained.raw)))
    assert sim_params_version(fast_file) == trained.version
    ckpt, out = tmp_path / "fast.pt", tmp_path / "eval.json"
    from sim2real_ros.robots import ROBOTS
    init_checkpoint(ckpt, ROBOTS["so101"].joints, PreprocessConfig.from_yaml(config_path("preprocess.yaml")),
                    sim_params_path=fast_file, provenance={"robot": "so101", "config": {"sim_loop": fast}})
    assert sim2real(["eval-sim", "--checkpoint", str(ckpt), "--episodes", "1", "--no-graph-conditions",
                     "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sim_params_warning"] is None and "runs loop reference" in result["sim_loop_note"]
    assert "[eval-sim] " + result["sim_loop_note"] in capsys.readouterr().err


def test_a_teacher_cloned_on_the_fast_loop_is_told_which_loop_an_evaluation_runs(tmp_path, capsys):
    """`--sim-loop fast` is the fast loop at the file's dt_s with one substep, not the pick tasks'
    {loop: fast, dt_s: 0.005, substeps: 2}: a teacher cloned on the latter and evaluated so placed 45/100
    against 84/100 on its own loop (2026-12-07). eval-sim names both loops and how to run the right one."""
    teacher = share_dir() / "policies" / "teacher_so101_pick_place_dart_fast.safetensors"
    out = tmp_path / "eval.json"
    assert sim2real(["eval-sim", "--checkpoint", str(teacher), "--episodes", "1", "--sim-loop", "fast",
                     "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    note = result["sim_loop_note"]
    assert result["sim_params_warning"] is None and result["kind"] == "teacher"
    trained = note.split("sim_loop {", 1)[1].split("}", 1)[0]
    assert sorted(trained.split(", ")) == ["dt_s: 0.005", "loop: fast", "substeps: 2"]
    assert "runs loop fast, dt_s 0.001, substeps 1" in note and f"--sim-loop '{{{trained}}}'" in note
    assert "[eval-sim] " + note in capsys.readouterr().err


# -- training curves and fresh provenance -------------------------------------------------------------
def _scalars(event_dir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list(event_dir.glob("events.out.tfevents.*"))
    assert files, f"no event file in {event_dir}"
    accumulator = EventAccumulator(str(event_dir))
    accumulator.Reload()
    return {tag: [e.value for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_a_tiny_teacher_run_writes_curves_and_portable_provenance(tmp_path):
    config = TeacherConfig(source="test", env={"pushes": False}, num_envs=2, steps_per_env=4, iterations=2,
                           eval_episodes=1, workers=0, actor={"hidden_dims": [16], "activation": "elu",
                                                               "init_std": 0.5})
    lines: list[str] = []
    out = tmp_path / "teacher.pt"
    result = TeacherTrainer(config, out, tmp_path / "work", workers=0, log=lines.append).run(resume=False)
    scalars = _scalars(tmp_path / "work" / "tensorboard")
    assert len(scalars["train/reward_per_step"]) == 2 and len(scalars["perf/steps_per_s"]) == 2
    assert "train/learning_rate" in scalars and any(t.startswith("loss/") for t in scalars)
    assert {"reward/distance", "reward/success"} <= set(scalars)
    png = tmp_path / "work" / "curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and result["curves"]["png"] == str(png)
    assert any("tensorboard --logdir" in line and str(png) in line for line in lines)
    provenance = load_teacher(out).spec.provenance
    assert absolute_paths(provenance) == []
    assert provenance["config"]["sim_params"] == "config/sim_params.yaml"
    assert provenance["git_taken"] == "training start" and isinstance(provenance["git_dirty"], bool)
    assert provenance["git_commit"] == git_state(share_dir())["git_commit"]
    assert provenance["training_episodes"]["seed"] == 0


def test_a_tiny_student_run_writes_curves_and_portable_provenance(tmp_path, capsys):
    data = {"sim_params": str(config_path("sim_params.yaml")), "preprocess": str(config_path("preprocess.yaml")),
            "bc_episodes": 2, "dagger_rounds": 1, "dagger_episodes": 1, "epochs_bc": 2, "epochs_per_round": 1,
            "eval_episodes": 1, "rollout": {"max_episode_s": 1.0}}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "policy.pt"
    assert sim2real(["train", "--config", str(path), "--out", str(out), "--work-dir", str(tmp_path / "work")]) == 0
    stdout = capsys.readouterr().out
    png = tmp_path / "work" / "curves.png"
    assert f"summary {png}" in stdout and png.read_bytes()[:4] == b"\x89PNG"
    scalars = _scalars(tmp_path / "work" / "tensorboard")
    assert len(scalars["loss/behavior_cloning_mse"]) == 3  # 2 BC epochs + 1 DAgger epoch
    assert len(scalars["train/success"]) == 2 and "train/learning_rate" in scalars
    provenance = read_checkpoint(out)[0].provenance
    assert absolute_paths(provenance) == []
    assert provenance["sim_params_file"] == "config/sim_params.yaml"
    assert provenance["config"]["source"] == {"name": "train.yaml", "sha256": sim_hash(path)}
    assert provenance["git_taken"] == "training start" and isinstance(provenance["git_dirty"], bool)


def test_the_sim_graph_gives_the_policy_node_the_sim_nodes_sim_params(tmp_path):
    from sim2real_ros.graph import GraphArgs, declare_graph
    from sim2real_ros.robots import get_robot

    nodes = {d.name: d for d in declare_graph("sim", GraphArgs(robot="so101"))}
    assert nodes["policy_node"].parameters["sim_params_file"] == str(get_robot("so101").sim_params_path())
    other = str(_other_sim_params(tmp_path))
    args = GraphArgs(extra_parameters={"sim_node": {"sim_params_file": other}})
    nodes = {d.name: d for d in declare_graph("sim", args)}
    assert nodes["policy_node"].parameters["sim_params_file"] == other
    robot = {d.name: d for d in declare_graph("robot")}
    assert "sim_params_file" not in robot["policy_node"].parameters  # no sim on a robot: nothing to check
