"""tools/failure_draws.py: what the failed episodes of an eval-sim run drew (issue 32's grasp failures)."""
from __future__ import annotations

import importlib.util
import json
import math

import pytest
from support import REPO_ROOT

from sim2real_ros.paths import share_dir

SPEC = importlib.util.spec_from_file_location("failure_draws", REPO_ROOT / "tools" / "failure_draws.py")
failure_draws = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(failure_draws)


@pytest.mark.parametrize("angle_rad, expected_deg", [
    (0.0, 0.0), (math.pi / 4, 45.0), (math.pi / 2, 0.0), (-math.pi / 12, 15.0), (math.pi / 6 + math.pi, 30.0)])
def test_a_squares_yaw_is_folded_to_its_offset_from_square(angle_rad, expected_deg):
    assert failure_draws._square_offset_deg(angle_rad) == pytest.approx(expected_deg)


def _report(tmp_path, task="pick_lift", **extra):
    episodes = [{"seed": seed, "success": seed % 3 != 0} for seed in range(1, 7)]
    report = {"robot": "so101", "task": task, "perturb": True, "pushes": True, "per_episode": episodes,
              "sim_params_file": str(share_dir() / "config" / "sim_params_so101_wrist.yaml"), **extra}
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(report))
    return path


def test_the_episodes_seeds_are_redrawn_and_split_by_outcome(tmp_path, capsys):
    failure_draws.analyse(_report(tmp_path))
    out = capsys.readouterr().out
    assert "so101 pick_lift, 4 successes, 2 failures" in out
    assert "cube yaw to the approach [deg]" in out and "largest push [N]" in out
    counted = [line for line in out.splitlines() if "deg:" in line]
    assert len(counted) == 3
    assert sum(int(line.split(": ")[1].split("/")[1].split()[0]) for line in counted) == 6


def test_the_same_seed_draws_the_same_cube(tmp_path):
    from sim2real_ros.robots import robot_description_for
    from sim2real_ros.sim.params import load_sim_params, with_task
    from sim2real_ros.sim.world import SimWorld

    params = with_task(load_sim_params(share_dir() / "config" / "sim_params_so101_wrist.yaml"), "pick_lift")
    world = SimWorld(params, robot_description_for("so101"), render=False, pushes=True)
    try:
        first, other, again = (failure_draws.episode_draws(world.reset(randomize=True, seed=s)) for s in (5, 6, 5))
    finally:
        world.close()
    assert first == again and first != other


@pytest.mark.parametrize("content, message", [
    ("{not json", "not an eval-sim JSON"),
    (json.dumps({"robot": "so101"}), "no 'task'"),
])
def test_a_file_that_is_not_a_pick_evaluation_is_refused_naming_it(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SystemExit, match=message) as caught:
        failure_draws.read_eval(path)
    assert str(path) in str(caught.value)


def test_a_task_without_a_cube_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="draws no cube"):
        failure_draws.read_eval(_report(tmp_path, task="reach"))
