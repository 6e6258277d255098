"""Random pushes (randomization.pushes): params validation, the schedule, their effect on the arm in
real PyBullet, that pushes off changes nothing, and `eval-sim --pushes` / the sim node's `pushes`
(whose sim/episode also reports a restarted episode 0)."""
import copy
import json

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from std_srvs.srv import Trigger
from support import node_decl, running_nodes, wait_until

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.nodes.common import EVENTS_QOS
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.expert import ReachExpert
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict
from sim2real_ros.sim.world import SimWorld

ARM6 = str(urdf_path())
DT_S = 0.001  # the shipped physics step
ARM6_MOVED_LINKS = {"link1", "link2", "link3", "link4", "link5", "link6"}
# A 12 N, 0.1 s push on the flange link moves the tool point of the arm at home by at least this
# (measured: 2.5-7.5 cm, depending on the direction) [m].
MIN_DISPLACEMENT_M = 0.015


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(config_path("sim_params.yaml").read_text())


def params_with(raw: dict, timeout_s: float | None = None, **pushes):
    data = copy.deepcopy(raw)
    data["randomization"]["pushes"].update(pushes)
    if timeout_s is not None:
        data["task"]["timeout_s"] = timeout_s
    return sim_params_from_dict(data, "test_pushes.yaml")


def run(world: SimWorld, command: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Command once, then step one physics step at a time: (joint positions (steps, n_all) [rad],
    tool point (steps, 3) [m]) after each step."""
    world.set_command(command)
    q, ee = [], []
    for _ in range(steps):
        world.step(1)
        q.append(world.joint_positions(all_joints=True))
        ee.append(world.ee_position())
    return np.array(q), np.array(ee)


# ----------------------------------------------------------------------------------------------
# params
def test_shipped_params_define_pushes_within_the_documented_ranges():
    for name in ("sim_params.yaml", "sim_params_real_a.yaml"):
        pushes = load_sim_params(config_path(name)).randomization.pushes
        assert pushes is not None, name
        assert pushes.interval_s == (0.4, 1.2) and pushes.force_n == (5.0, 15.0)
        assert pushes.duration_s == (0.05, 0.15) and pushes.links == ()


def test_a_negative_push_force_in_a_params_file_fails_naming_the_field(raw, tmp_path):
    data = copy.deepcopy(raw)
    data["randomization"]["pushes"]["force_n"] = [-5.0, 15.0]
    path = tmp_path / "negative_push.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_sim_params(path)
    assert info.value.field == "randomization.pushes.force_n"
    assert str(info.value).startswith(f"{path}: field 'randomization.pushes.force_n' = [-5.0, 15.0]: must be >= 0")


@pytest.mark.parametrize(("pushes", "field", "shown"), [
    ({"force_n": [15.0, 5.0]}, "randomization.pushes.force_n", "[15.0, 5.0]"),
    ({"force_n": [-15.0, -5.0]}, "randomization.pushes.force_n", "[-15.0, -5.0]"),
    ({"force_n": "strong"}, "randomization.pushes.force_n", "'strong'"),
    ({"interval_s": [0.0, 1.0]}, "randomization.pushes.interval_s", "[0.0, 1.0]"),
    ({"interval_s": [-1.0, 1.0]}, "randomization.pushes.interval_s", "[-1.0, 1.0]"),
    ({"interval_s": [0.0001, 1.0]}, "randomization.pushes.interval_s", "[0.0001, 1.0]"),
    ({"duration_s": [0.0, 0.1]}, "randomization.pushes.duration_s", "[0.0, 0.1]"),
    ({"duration_s": [0.2, 0.1]}, "randomization.pushes.duration_s", "[0.2, 0.1]"),
    ({"strength": 3}, "randomization.pushes.strength", "3"),
    ({"links": "link3"}, "randomization.pushes.links", "'link3'"),
    ({"links": ["link3", "link3"]}, "randomization.pushes.links", "['link3', 'link3']"),
])
def test_bad_push_params_name_the_field_and_value(raw, pushes, field, shown):
    with pytest.raises(ConfigError) as info:
        params_with(raw, **pushes)
    assert info.value.field == field
    assert str(info.value).startswith(f"test_pushes.yaml: field '{field}' = {shown}: ")


def test_pushes_must_be_a_mapping(raw):
    data = copy.deepcopy(raw)
    data["randomization"]["pushes"] = [1.0, 2.0]
    with pytest.raises(ConfigError, match="field 'randomization.pushes' = \\[1.0, 2.0\\]: must be a mapping"):
        sim_params_from_dict(data, "test_pushes.yaml")


@pytest.mark.parametrize("link", ["base_link", "camera_link", "no_such_link"])
def test_push_links_must_be_links_a_movable_joint_moves(raw, link):
    with pytest.raises(ConfigError) as info:
        SimWorld(params_with(raw, links=["link2", link]), ARM6, render=False)
    assert info.value.field == "randomization.pushes.links" and link in str(info.value)


def test_enabling_pushes_without_push_ranges_is_a_config_error(raw):
    data = copy.deepcopy(raw)
    del data["randomization"]["pushes"]
    params = sim_params_from_dict(data, "no_pushes.yaml")
    assert params.randomization.pushes is None
    with pytest.raises(ConfigError, match="no_pushes.yaml: field 'randomization.pushes' = None: missing"):
        SimWorld(params, ARM6, render=False, pushes=True)
    world = SimWorld(params, ARM6, render=False)
    try:
        world.pushes_enabled = True
        with pytest.raises(ConfigError, match="randomization.pushes"):
            world.reset()
    finally:
        world.close()


# ----------------------------------------------------------------------------------------------
# the schedule
def test_the_schedule_follows_the_configured_ranges(raw):
    params = params_with(raw, interval_s=[0.2, 0.5], force_n=[3.0, 20.0], duration_s=[0.02, 0.3],
                         links=["link2", "link4"])
    timeout = params.task.timeout_s
    world = SimWorld(params, ARM6, seed=8, render=False, pushes=True)
    try:
        schedules = [world.reset()["pushes"] for _ in range(30)]
        assert world.reset(seed=77)["pushes"] == world.reset(seed=77)["pushes"] != world.reset(seed=78)["pushes"]
    finally:
        world.close()
    pushes = [p for schedule in schedules for p in schedule]
    assert len(pushes) > 400
    for schedule in schedules:
        starts = np.array([p["start_s"] for p in schedule])
        intervals = np.diff(np.concatenate([[0.0], starts]))
        # starts are rounded up to the physics step: each interval is within one step of the range
        assert np.all(intervals >= 0.2 - DT_S) and np.all(intervals <= 0.5 + DT_S), intervals
        assert starts[-1] < timeout and timeout - starts[-1] <= 0.5 + DT_S  # up to the timeout, not beyond
    magnitudes = np.array([np.linalg.norm(p["force_n"]) for p in pushes])
    durations = np.array([p["duration_s"] for p in pushes])
    assert np.all(magnitudes >= 3.0 - 1e-9) and np.all(magnitudes <= 20.0 + 1e-9)
    assert magnitudes.min() < 4.0 and magnitudes.max() > 19.0  # the whole range is used
    assert np.all(durations >= 0.02 - DT_S / 2) and np.all(durations <= 0.3 + DT_S / 2)
    assert durations.min() < 0.03 and durations.max() > 0.29
    assert {p["link"] for p in pushes} == {"link2", "link4"}
    directions = np.array([p["force_n"] for p in pushes]) / magnitudes[:, None]
    assert np.all(np.abs(directions.mean(axis=0)) < 0.15)  # spread over the sphere, not one way
    assert np.all(directions.min(axis=0) < -0.9) and np.all(directions.max(axis=0) > 0.9)


def test_by_default_pushes_act_on_every_link_a_movable_joint_moves(raw):
    world = SimWorld(load_sim_params(), ARM6, seed=2, render=False, pushes=True)
    try:
        links = {p["link"] for _ in range(20) for p in world.reset()["pushes"]}
    finally:
        world.close()
    assert links == ARM6_MOVED_LINKS


# ----------------------------------------------------------------------------------------------
# physics
def test_a_push_moves_the_tool_point_from_its_scheduled_start_on_only(raw):
    # One push every 0.3 s, 12 N for 0.1 s on the flange link; episodes time out after 1 s.
    params = params_with(raw, timeout_s=1.0, interval_s=[0.3, 0.3], force_n=[12.0, 12.0], duration_s=[0.1, 0.1],
                         links=["link6"])
    pushed = SimWorld(params, ARM6, seed=3, render=False, pushes=True)
    calm = SimWorld(params, ARM6, seed=3, render=False)
    try:
        info = pushed.reset(seed=11)
        assert "pushes" not in calm.reset(seed=11)
        assert [p["start_s"] for p in info["pushes"]] == pytest.approx([0.3, 0.6, 0.9])
        first = info["pushes"][0]
        assert first["link"] == "link6" and first["duration_s"] == pytest.approx(0.1)
        assert np.linalg.norm(first["force_n"]) == pytest.approx(12.0)
        assert pushed.pushes_applied() == 0
        command = pushed.joint_positions() + 0.05
        q_pushed, ee_pushed = run(pushed, command, 1000)
        q_calm, ee_calm = run(calm, command, 1000)
        outcome_pushed, outcome_calm = pushed.episode_outcome(), calm.episode_outcome()
    finally:
        pushed.close()
        calm.close()
    start = 300  # the push acts from the physics step at 0.3 s (row 300 is the state after it)
    assert np.array_equal(q_pushed[:start], q_calm[:start]) and np.array_equal(ee_pushed[:start], ee_calm[:start])
    assert not np.array_equal(q_pushed[start], q_calm[start])
    displacement = np.linalg.norm(ee_pushed - ee_calm, axis=1)
    assert displacement[start:400].max() >= MIN_DISPLACEMENT_M, displacement.max()
    assert outcome_pushed["reason"] == outcome_calm["reason"] == "timeout"
    assert outcome_pushed["pushes_applied"] == 3 and "pushes_applied" not in outcome_calm


def test_with_pushes_off_episodes_are_bit_identical_to_a_world_without_push_params(raw):
    """Pushes off (the default, or toggled off) runs exactly what a world without the section runs."""
    data = copy.deepcopy(raw)
    del data["randomization"]["pushes"]
    without = SimWorld(sim_params_from_dict(data, "without.yaml"), ARM6, seed=5, render=False)
    off = SimWorld(load_sim_params(), ARM6, seed=5, render=False)
    toggled = SimWorld(load_sim_params(), ARM6, seed=5, render=False, pushes=True)
    try:
        assert toggled.push_schedule() and not off.push_schedule()
        toggled.pushes_enabled = False
        runs = []
        for world in (without, off, toggled):
            info = world.reset(randomize=True)
            expert = ReachExpert(world.model, world.joint_names, world.ee_link, world.joint_positions())
            q, ee = run(world, expert.solve_ik(world.target_position()), 1500)
            runs.append((info, q, ee, world.episode_outcome()))
    finally:
        for world in (without, off, toggled):
            world.close()
    reference = runs[0]
    assert "pushes" not in reference[0] and reference[3]["success"] and "pushes_applied" not in reference[3]
    for info, q, ee, outcome in runs[1:]:
        assert info == reference[0] and outcome == reference[3]
        assert np.array_equal(q, reference[1]) and np.array_equal(ee, reference[2])


def test_pushes_on_change_no_other_draw(raw):
    """Targets, physics randomization and images are the same with pushes on or off, seed by seed."""
    off = SimWorld(load_sim_params(), ARM6, seed=9)
    on = SimWorld(load_sim_params(), ARM6, seed=9, pushes=True)
    try:
        for _ in range(3):
            info_off, info_on = off.reset(randomize=True), on.reset(randomize=True)
            assert info_on.pop("pushes") and info_on == info_off
            assert off.dynamics().keys() == on.dynamics().keys()
            for key, value in off.dynamics().items():
                assert np.array_equal(value, on.dynamics()[key]), key
            assert np.array_equal(off.render(), on.render())  # noise from the same image generator
    finally:
        off.close()
        on.close()


# ----------------------------------------------------------------------------------------------
# eval-sim and the sim node
def test_eval_sim_pushes_reports_the_pushes_applied(tmp_path, capsys):
    from sim2real_ros.cli.main import main

    out = tmp_path / "eval.json"
    assert main(["eval-sim", "--episodes", "2", "--pushes", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["pushes"] is True and result["push_params"]["force_n"] == [5.0, 15.0]
    rows = result["per_episode"]
    assert len(rows) == 2 and all(isinstance(r["pushes_applied"], int) for r in rows)
    # a reach takes the shipped policy longer than the longest first interval (1.2 s)
    assert all(r["pushes_applied"] >= 1 for r in rows), rows
    assert result["pushes_applied_total"] == sum(r["pushes_applied"] for r in rows)
    assert f"pushes on, {result['pushes_applied_total']} applied" in capsys.readouterr().out


def test_eval_rows_carry_pushes_applied_only_from_episodes_with_pushes():
    from sim2real_ros.training.evaluation import episode_row

    outcome = {"seed": 4, "success": True, "duration_s": 1.2, "final_distance_m": 0.02, "failure": "success"}
    assert "pushes_applied" not in episode_row(0, outcome)
    assert episode_row(0, {**outcome, "pushes_applied": 2})["pushes_applied"] == 2


def test_sim_node_pushes_parameter_reports_pushes_applied_on_sim_episode(raw, ros, tmp_path):
    from sim2real_ros.conversions import episode_outcome_message
    from sim2real_ros.runtime.graph_session import EpisodeOutcome

    data = copy.deepcopy(raw)
    data["task"]["timeout_s"] = 1.0
    data["randomization"]["pushes"].update(interval_s=[0.3, 0.3])  # pushes at 0.3, 0.6, 0.9 s
    data["camera"]["calibration_file"] = str(config_path("camera_sim.yaml"))
    params_file = tmp_path / "sim_params.yaml"
    params_file.write_text(yaml.safe_dump(data))
    decl = node_decl("sim_node", {"sim_params_file": str(params_file), "pushes": True, "pacing": "fast",
                                  "camera_enabled": False, "auto_reset": False})
    with running_nodes([decl], tmp_path, namespace="pushes"):
        episodes = ros.collect(DiagnosticArray, "/pushes/sim/episode", EVENTS_QOS)
        assert wait_until(lambda: len(episodes) >= 1, 60), "no sim/episode message"
        # sim/restart after episode 0's outcome: the restarted episode 0 is reported too (what
        # eval-sim --graph waits for when the supervisor arms in episode 1)
        assert ros.call(Trigger, "/pushes/sim/restart", timeout_s=45).success
        assert wait_until(lambda: len(episodes) >= 2, 60), "the restarted episode's outcome never came"
    outcomes = [EpisodeOutcome.from_msg(m) for m in list(episodes)]
    assert [o.episode for o in outcomes] == [0, 0] and outcomes[0].seed == outcomes[1].seed
    assert all(o.reason == "timeout" and o.pushes_applied == 3 for o in outcomes), outcomes
    plain = {"episode": 0, "seed": 1, "success": True, "reason": "success", "duration_s": 1.0, "final_distance_m": 0.01}
    assert EpisodeOutcome.from_msg(episode_outcome_message(plain, 0, "sim_node")).pushes_applied == -1
