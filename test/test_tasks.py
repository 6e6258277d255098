"""Tasks as plug-ins (sim/tasks.py, sim/task_pick_lift.py): success held over time on real PyBullet
trajectories, failure categories, the scripted experts, params and eval-sim --expert."""
import contextlib
import copy
import json
import subprocess
import sys

import numpy as np
import pybullet
import pytest
import yaml

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.robots import get_robot
from sim2real_ros.sim.expert_rollout import evaluate_expert, run_expert_episode
from sim2real_ros.sim.objects import links_touching
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict, with_task
from sim2real_ros.sim.task_base import target_in_base_frame
from sim2real_ros.sim.world import SimWorld

ARM6, SO101 = get_robot("arm6"), get_robot("so101")


def task_params(robot, task: str, timeout_s: float | None = None):
    """The robot's sim params running `task` (optionally with a shorter timeout [s])."""
    raw = yaml.safe_load(robot.sim_params_path().read_text())
    raw = copy.deepcopy(raw)
    raw["task"]["name"] = task
    if timeout_s is not None:
        raw["task"]["timeout_s"] = timeout_s
    return sim_params_from_dict(raw, f"{robot.name} {task}")


@contextlib.contextmanager
def task_world(robot, task: str, timeout_s: float | None = None):
    """(params, world): a headless world of `robot` running `task` (seed 1), closed afterwards."""
    params = task_params(robot, task, timeout_s)
    world = SimWorld(params, str(robot.urdf_path()), seed=1, render=False)
    try:
        yield params, world
    finally:
        world.close()


def run_until(world: SimWorld, t_end_s: float, command, record=None, chunk: int = 10) -> None:
    """Step the world (chunk physics steps at a time) until t_end_s [s] into the episode or its end,
    sending command(world) before each chunk; record(world) after each."""
    while world.episode_outcome() is None and world.episode_elapsed_s() < t_end_s - 1e-9:
        world.set_command(command(world))
        world.step(chunk)
        if record is not None:
            record(world)


# ----------------------------------------------------------------------------------------------
# params
def test_task_names_and_settings_are_validated():
    raw = yaml.safe_load(ARM6.sim_params_path().read_text())
    params = load_sim_params(ARM6.sim_params_path())
    assert params.task.name == "reach" and params.task.reach_hold.hold_s == 1.0
    bad = copy.deepcopy(raw)
    bad["task"]["name"] = "juggle"
    with pytest.raises(ConfigError, match="task.name.*juggle.*reach_hold"):
        sim_params_from_dict(bad, "bad.yaml")
    bad = copy.deepcopy(raw)
    bad["task"]["pick_lift"] = {"size_m": [0.03, 0.02]}
    with pytest.raises(ConfigError, match="task.pick_lift.size_m"):
        sim_params_from_dict(bad, "bad.yaml")
    bad["task"]["pick_lift"] = {"colour": [0, 1]}
    with pytest.raises(ConfigError, match="task.pick_lift.colour.*unknown key"):
        sim_params_from_dict(bad, "bad.yaml")
    good = copy.deepcopy(raw)
    good["task"]["reach_hold"] = {"hold_s": 0.5}
    good["task"]["pick_lift"] = {"mass_kg": [0.05, 0.05], "region": {"x": [0.2, 0.2], "y": [0.0, 0.0]}}
    parsed = sim_params_from_dict(good, "good.yaml").task
    assert parsed.reach_hold.hold_s == 0.5 and parsed.reach_hold.radius_m == 0.02
    assert parsed.pick_lift.mass_kg == (0.05, 0.05) and parsed.pick_lift.region == ((0.2, 0.2), (0.0, 0.0))
    bad = copy.deepcopy(raw)
    bad["task"]["pick_place"] = {"zone_half_m": 0.0}
    with pytest.raises(ConfigError, match="task.pick_place.zone_half_m"):
        sim_params_from_dict(bad, "bad.yaml")
    bad["task"]["pick_place"] = {"bowl": True}
    with pytest.raises(ConfigError, match="task.pick_place.bowl.*unknown key"):
        sim_params_from_dict(bad, "bad.yaml")
    good["task"]["pick_place"] = {"zone_half_m": 0.04, "zone_region": {"x": [0.2, 0.22], "y": [0.1, 0.1]}}
    parsed = sim_params_from_dict(good, "good.yaml").task
    assert parsed.pick_place.zone_half_m == 0.04 and parsed.pick_place.zone_region == ((0.2, 0.22), (0.1, 0.1))
    assert parsed.pick_place.settle_s == 0.5
    # --task: same file, another task; the version is the hash of what runs
    switched = with_task(params, "reach_hold")
    assert switched.task.name == "reach_hold" and switched.version != params.version
    assert with_task(params, "reach") is params
    with pytest.raises(ConfigError, match="juggle"):
        with_task(params, "juggle")


def test_pick_lift_refuses_a_robot_without_a_gripper():
    with pytest.raises(ConfigError, match="gripper"):
        SimWorld(task_params(ARM6, "pick_lift"), str(ARM6.urdf_path()), render=False)


# ----------------------------------------------------------------------------------------------
# reach_hold: success is a hold, not a touch
def test_reach_hold_a_swipe_through_the_target_does_not_count_a_hold_does():
    with task_world(ARM6, "reach_hold", timeout_s=4.0) as (params, world):
        world.reset(seed=11)
        expert = world.task.make_expert(world)
        target = world.target_position()
        # Swipe: aim 6 cm either side of the target (across it), back and forth, never stopping there.
        side = np.array([0.0, 0.06, 0.0])
        q_left = expert.expert.solve_ik(target_in_base_frame(world, target + side))
        q_right = expert.expert.solve_ik(target_in_base_frame(world, target - side))
        closest = []
        run_until(world, 1.5, lambda w: q_left)
        for k in range(5):
            run_until(world, 1.5 + 0.5 * (k + 1), lambda w, q=(q_right if k % 2 == 0 else q_left): q,
                      record=lambda w: closest.append(float(np.linalg.norm(w.ee_position() - target))))
        run_until(world, 4.0, lambda w: q_left)
        outcome = world.episode_outcome()
        assert min(closest) < params.task.reach_hold.radius_m  # it went through the hold sphere...
        assert outcome is not None and not outcome["success"]  # ...but never stayed
        assert world.task.classify_failure(world, outcome) == "unsteady"

        # The same target, reached and held: success once held for hold_s, not at first entry.
        world.reset(seed=11)
        assert np.allclose(world.target_position(), target)
        expert.start(world)
        first_inside = []

        def note(w):
            if not first_inside and np.linalg.norm(w.ee_position() - target) <= params.task.reach_hold.radius_m:
                first_inside.append(w.episode_elapsed_s())

        run_until(world, 4.0, expert.command, record=note, chunk=1)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["success"], outcome
        assert outcome["duration_s"] >= first_inside[0] + params.task.reach_hold.hold_s - 1e-6
        assert outcome["held_s"] >= params.task.reach_hold.hold_s - 1e-9


def test_reach_hold_reports_arm_table_contact_while_the_arm_presses_on_the_table():
    """The quantity behind the `arm_contact` reward: 0 at home, 1 while a link is on the table, and
    the episode that touched it ends as `collision`."""
    from sim2real_ros.rl.rewards import TASK_QUANTITY, TERMS

    with task_world(ARM6, "reach_hold", timeout_s=2.0) as (params, world):
        world.reset(seed=11)
        assert world.task.reward_terms(world)["arm_table_contact"] == 0.0
        expert = world.task.make_expert(world)
        below = world.target_position() * np.array([1.0, 1.0, 0.0]) - np.array([0.0, 0.0, 0.05])
        q_down = expert.expert.solve_ik(target_in_base_frame(world, below))  # 5 cm into the table
        touching = []
        run_until(world, 2.0, lambda w: q_down,
                  record=lambda w: touching.append(w.task.reward_terms(w)["arm_table_contact"]))
        assert max(touching) == 1.0 and min(touching) == 0.0
        outcome = world.episode_outcome()
        assert outcome is not None and world.task.classify_failure(world, outcome) == "collision"
    assert TASK_QUANTITY["arm_contact"] == "arm_table_contact" and "arm_contact" in TERMS


def test_reach_keeps_its_first_touch_success():
    """The original task is unchanged: the same swipe that reach_hold refuses is a reach success."""
    with task_world(ARM6, "reach", timeout_s=4.0) as (params, world):
        world.reset(seed=11)
        expert = world.task.make_expert(world)
        target = world.target_position()
        side = np.array([0.0, 0.06, 0.0])
        q_left = expert.expert.solve_ik(target_in_base_frame(world, target + side))
        q_right = expert.expert.solve_ik(target_in_base_frame(world, target - side))
        run_until(world, 1.5, lambda w: q_left)
        run_until(world, 3.0, lambda w: q_right)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["success"] and world.task.failure_categories[0] == "joint_limit"


def test_reach_hold_snapshot_keeps_the_hold_timer():
    """Restored mid-hold, the episode ends at the same sim time as it did without the snapshot."""
    with task_world(ARM6, "reach_hold", timeout_s=4.0) as (params, world):
        world.reset(seed=11)
        expert = world.task.make_expert(world)
        expert.start(world)
        snapshot = None
        while world.episode_outcome() is None:
            world.set_command(expert.command(world))
            world.step(10)
            if snapshot is None and world.task.state()[2] > 0.3:  # held for 0.3 s
                snapshot = world.save_state()
        first = world.episode_outcome()
        assert snapshot is not None and first["success"]
        world.restore_state(snapshot)
        assert world.episode_outcome() is None and world.task.state()[2] > 0.3
        while world.episode_outcome() is None:
            world.set_command(expert.command(world))
            world.step(10)
        assert world.episode_outcome()["duration_s"] == pytest.approx(first["duration_s"], abs=1e-9)


# ----------------------------------------------------------------------------------------------
# pick_lift: only a grasp counts
def test_pick_lift_cube_held_up_without_the_jaws_does_not_count():
    with task_world(SO101, "pick_lift", timeout_s=2.5) as (params, world):
        world.reset(seed=7)
        task = world.task
        start = task.cube_position(world)
        # Flung up and kept there by something other than the jaws: a fixed constraint to the world.
        world.client.createConstraint(task.cube, -1, -1, -1, pybullet.JOINT_FIXED, [0, 0, 0], [0, 0, 0],
                                      [start[0], start[1], 0.12])
        home = world.joint_positions()
        heights = []
        run_until(world, 2.5, lambda w: home, record=lambda w: heights.append(task.cube_bottom_height(w)))
        outcome = world.episode_outcome()
        assert min(heights[len(heights) // 2:]) >= params.task.pick_lift.lift_height_m  # up for > 1 s
        assert outcome is not None and not outcome["success"] and outcome["reason"] == "timeout"
        assert task.classify_failure(world, outcome) == "missed_grasp"


def test_pick_lift_expert_grasp_counts_only_after_the_hold():
    with task_world(SO101, "pick_lift") as (params, world):
        info = world.reset(seed=3)
        assert set(info["cube"]) >= {"size_m", "mass_kg", "lateral_friction", "rgba", "position", "yaw_rad"}
        task = world.task
        expert = task.make_expert(world)
        expert.start(world)
        held_from = []

        def note(w):
            if not held_from and task.jaws_on_cube(w) and task.cube_bottom_height(w) >= 0.05:
                held_from.append(w.episode_elapsed_s())

        run_until(world, params.task.timeout_s, expert.command, record=note, chunk=1)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["success"], outcome
        assert outcome["duration_s"] >= held_from[0] + params.task.pick_lift.hold_s - 1e-6
        assert task.jaws_on_cube(world) and outcome["cube_height_m"] >= 0.05
        obs = task.privileged_observation(world)
        assert obs["jaw_contacts"].tolist() == [1.0, 1.0] and obs["hold_progress"][0] == 1.0


def test_pick_lift_cube_pushed_off_the_table_is_knocked_off():
    with task_world(SO101, "pick_lift", timeout_s=3.0) as (params, world):
        world.reset(seed=7)
        task = world.task
        # A shove that slides it off the table's edge (the table top is 0.8 m square around x = 0.2 m).
        world.client.resetBasePositionAndOrientation(task.cube, [0.2, 0.39, 0.02], [0, 0, 0, 1])
        world.client.resetBaseVelocity(task.cube, [0.0, 1.0, 0.0])
        home = world.joint_positions()
        run_until(world, 3.0, lambda w: home)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["reason"] == "knocked_off_table" and outcome["duration_s"] < 3.0
        assert task.classify_failure(world, outcome) == "knocked_off_table"


# ----------------------------------------------------------------------------------------------
# pick_place: lifted, put down in the zone, let go, settled
def place_expert(world, release: bool = True):
    """The task's expert, started; with release=False the jaw stays closed after the place."""
    expert = world.task.make_expert(world)
    expert.start(world)
    pick, place = expert.expert.config, expert.expert.place
    release_s = (pick.approach_s + pick.descend_s + pick.close_s + pick.squeeze_s + place.lift_s + place.carry_s
                 + place.lower_s)

    def command(w):
        q = expert.command(w)
        if not release and w.episode_elapsed_s() >= release_s:
            q[expert.expert.gripper_index] = pick.jaw_closed_rad
        return q

    return expert, command


def test_pick_place_expert_succeeds_only_once_the_cube_rests_let_go_in_the_zone():
    with task_world(SO101, "pick_place") as (params, world):
        info = world.reset(seed=3)
        task = world.task
        zone = np.asarray(info["zone"]["center"])
        separation = np.linalg.norm(zone[:2] - np.asarray(info["cube"]["position"][:2]))
        assert separation >= params.task.pick_place.min_separation_m
        assert np.allclose(world.target_position(), zone)
        _, command = place_expert(world)
        let_go = []

        def note(w):
            if task._was_up_in_hand and not let_go and not (links_touching(w.client, task.cube, w.robot) & task._jaws):
                let_go.append(w.episode_elapsed_s())

        run_until(world, params.task.timeout_s, command, record=note, chunk=1)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["success"], outcome
        assert outcome["duration_s"] >= let_go[0] + params.task.pick_place.settle_s - 1e-6
        assert task.cube_in_zone(world) and outcome["final_distance_m"] < params.task.pick_place.zone_half_m
        assert task.privileged_observation(world)["hold_progress"][0] == 1.0


def test_pick_place_cube_held_in_the_zone_is_not_placed():
    with task_world(SO101, "pick_place") as (params, world):
        world.reset(seed=3)
        _, command = place_expert(world, release=False)
        run_until(world, params.task.timeout_s, command)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["reason"] == "timeout"
        assert world.task.cube_in_zone(world) and world.task.jaws_on_cube(world)
        assert world.task.classify_failure(world, outcome) == "timeout"


def test_pick_place_cube_slid_into_the_zone_without_a_lift_does_not_count():
    with task_world(SO101, "pick_place", timeout_s=2.0) as (params, world):
        info = world.reset(seed=7)
        task = world.task
        zone = info["zone"]["center"]
        size = info["cube"]["size_m"]
        world.client.resetBasePositionAndOrientation(task.cube, [zone[0], zone[1], size / 2.0], [0, 0, 0, 1])
        home = world.joint_positions()
        run_until(world, 2.0, lambda w: home)
        outcome = world.episode_outcome()
        assert task.cube_in_zone(world) and outcome is not None and outcome["reason"] == "timeout"
        assert task.classify_failure(world, outcome) == "missed_grasp"


def test_pick_place_drop_in_the_carry_and_a_put_down_outside_the_zone_are_told_apart():
    with task_world(SO101, "pick_place") as (params, world):
        world.reset(seed=3)
        expert, command = place_expert(world)
        cfg = expert.expert.config
        carrying_s = cfg.approach_s + cfg.descend_s + cfg.close_s + cfg.squeeze_s + cfg.lift_s + 0.3
        opened = world.task.make_expert(world).expert.place.jaw_release_rad

        def drop(w):
            q = command(w)
            if w.episode_elapsed_s() >= carrying_s:
                q[expert.expert.gripper_index] = opened
            return q

        run_until(world, params.task.timeout_s, drop)
        outcome = world.episode_outcome()
        assert outcome is not None and not outcome["success"]
        assert world.task.classify_failure(world, outcome) == "dropped", outcome
    with task_world(SO101, "pick_place") as (params, world):
        world.reset(seed=3)
        _, command = place_expert(world)
        world.task.zone_center = world.task.zone_center + np.array([0.0, 0.1, 0.0])  # moved after the plan
        run_until(world, params.task.timeout_s, command)
        outcome = world.episode_outcome()
        assert outcome is not None and not outcome["success"] and not world.task.cube_in_zone(world)
        assert world.task.classify_failure(world, outcome) == "misplaced"


# ----------------------------------------------------------------------------------------------
# scripted experts in the nominal sim (the 40-seed figures: docs/learning.md, "Tasks")
@pytest.mark.parametrize("robot, task", [(ARM6, "reach_hold"), (SO101, "pick_lift"), (SO101, "pick_place")])
def test_scripted_expert_solves_its_task(robot, task):
    result = evaluate_expert(task_params(robot, task), str(robot.urdf_path()), episodes=10, seed=1000)
    assert result["success_rate"] == 1.0, result["failures"]
    assert result["failures"] == {"success": 10}
    assert all(row["failure"] == "success" for row in result["per_episode"])


def test_expert_episode_is_deterministic():
    params = task_params(SO101, "pick_lift")
    outcomes = []
    for _ in range(2):
        world = SimWorld(params, str(SO101.urdf_path()), seed=1, render=False)
        try:
            outcomes.append(run_expert_episode(world, seed=5))
        finally:
            world.close()
    assert outcomes[0] == outcomes[1]


def test_eval_sim_expert_reports_task_failures(tmp_path):
    out = tmp_path / "expert.json"
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--expert", "--task",
                           "reach_hold", "--episodes", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["task"] == "reach_hold" and result["driver"] == "scripted_expert"
    assert result["failure_categories"] == ["collision", "unsteady", "timeout"]
    assert result["failures"] == {"success": 2}
    assert "outcomes (reach_hold): success 2" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--expert", "--task",
                           "reach_hold", "--pushes", "--episodes", "1", "--seed", "3"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "pushes on" in proc.stdout and "outcomes (reach_hold)" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--expert", "--task",
                           "pick_lift", "--episodes", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "gripper" in proc.stderr
