"""The fast sim loop (physics.loop: fast, issue 32): it follows the reference loop's response within
the stated bounds on a step and a chirp command for arm6 and the SO-101 (nominal and one randomized
draw), the bounds mean something (the reference loop's own explicit PD at the same coarse step
breaks them), its pieces (the averaged latency queue, the implicit PD) do what they say, and a
snapshot replays bit-identically. Real PyBullet, sim time only: no wall-clock asserts."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.robots import get_robot
from sim2real_ros.sim.expert_rollout import evaluate_expert
from sim2real_ros.sim.loop_check import COMMANDS, STATED_BOUNDS, response_error
from sim2real_ros.sim.motor_model import ImplicitPd, LatencyQueue, pd_torque
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict, with_sim_loop, with_task
from sim2real_ros.sim.quiet_stdout import stdout_to_stderr
from sim2real_ros.sim.world import SimWorld, episode_seed


def _robot(name: str):
    info = get_robot(name)
    return load_sim_params(info.sim_params_path()), str(info.urdf_path())


@pytest.mark.parametrize("robot", sorted(STATED_BOUNDS))
@pytest.mark.parametrize("kind", COMMANDS)
@pytest.mark.parametrize("randomized_seed", [None, 1])
def test_fast_loop_tracks_the_reference_loop_within_the_stated_bound(robot, kind, randomized_seed):
    params, urdf = _robot(robot)
    bound = STATED_BOUNDS[robot]
    with stdout_to_stderr():
        error = response_error(params, urdf, kind, bound.fast_dt_s, randomized_seed=randomized_seed)
    assert bound.holds(error), (robot, kind, randomized_seed, error.summary(), bound)
    # The loops really moved the arm: the comparison is not of two arms at rest.
    assert error.amplitude_rad == pytest.approx(0.3)
    assert error.rms_rad > 1e-5


@pytest.mark.parametrize("robot", sorted(STATED_BOUNDS))
def test_the_bound_fails_the_explicit_pd_at_the_same_coarse_step(robot):
    # The reference loop's explicit PD at the fast loop's step: what the implicit PD is there for.
    params, urdf = _robot(robot)
    bound = STATED_BOUNDS[robot]
    with stdout_to_stderr():
        error = response_error(params, urdf, "step", bound.fast_dt_s, loop="reference")
    assert not bound.holds(error), error.summary()


def test_latency_queue_average_weights_a_command_by_the_part_of_the_step_it_acts_in():
    queue = LatencyQueue(np.zeros(2))
    queue.push(received_ns=0, latency_ns=3_000_000, q_target=np.array([1.0, -2.0]))
    # A 5 ms step from 0: the command acts for the last 2 ms of it.
    np.testing.assert_allclose(queue.average(0, 5_000_000), [0.4, -0.8])
    assert len(queue) == 0
    np.testing.assert_array_equal(queue.active, [1.0, -2.0])  # as update() leaves it after the span
    # Two commands inside one step, and nothing due: the active target itself.
    queue.push(5_000_000, 1_000_000, np.array([3.0, 0.0]))
    queue.push(5_000_000, 4_000_000, np.array([5.0, 0.0]))
    np.testing.assert_allclose(queue.average(5_000_000, 5_000_000), [(1 * 1 + 3 * 3 + 5 * 1) / 5, -2.0 / 5])
    np.testing.assert_array_equal(queue.average(10_000_000, 5_000_000), [5.0, 0.0])


def test_implicit_pd_tends_to_the_explicit_pd_and_stays_stable_where_it_diverges():
    kp, kd, inertia, limit = np.array([2.0]), np.array([0.025]), np.array([9.2e-5]), np.array([100.0])
    q, qd = np.array([0.1]), np.array([0.5])
    explicit = pd_torque(q, qd, np.zeros(1), kp, kd, limit)
    small = ImplicitPd(kp, kd, limit, 1e-7).torque(q, qd, np.zeros(1), None, inertia)
    np.testing.assert_allclose(small, explicit, rtol=1e-3)

    def settle(dt: float, implicit: bool) -> float:
        """|q| after 0.5 s of a 1-DOF joint from 0.1 rad (semi-implicit Euler, as PyBullet)."""
        pd = ImplicitPd(kp, kd, limit, dt)
        position, speed = np.array([0.1]), np.zeros(1)
        for _ in range(int(0.5 / dt)):
            tau = pd.torque(position, speed, np.zeros(1), None, inertia) if implicit \
                else pd_torque(position, speed, np.zeros(1), kp, kd, limit)
            speed = speed + dt * tau / inertia
            position = position + dt * speed
        return float(abs(position[0]))

    assert 0.025 * 0.01 / 9.2e-5 > 2.0  # kd dt / I: the explicit PD's stability limit is passed
    assert settle(0.01, implicit=False) > 1.0
    assert settle(0.01, implicit=True) < 1e-3
    assert settle(0.001, implicit=True) < 1e-3


def test_fast_loop_snapshot_replays_bit_identically():
    params, urdf = _robot("so101")
    fast = with_sim_loop(params, "fast", STATED_BOUNDS["so101"].fast_dt_s)
    with stdout_to_stderr():
        world = SimWorld(fast, urdf, seed=3, render=False, randomize=True, pushes=True)
    try:
        world.reset(randomize=True)
        home = world.joint_positions()
        world.set_command(home + 0.2)
        world.step(7)
        state = world.save_state()
        runs = []
        for _ in range(2):
            world.restore_state(state)
            world.set_command(home - 0.1)
            world.step(13)
            runs.append((world.joint_positions(), world.joint_velocities(), world.time_ns))
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])
        assert runs[0][2] == runs[1][2] == state.time_ns + 13 * world.dt_ns
    finally:
        world.close()


def test_sim_loop_is_validated_and_defaults_to_reference():
    params, _ = _robot("arm6")
    assert params.physics.loop == "reference"
    data = dict(params.raw)
    data["physics"] = {**data["physics"], "loop": "turbo"}
    with pytest.raises(ConfigError, match=r"physics\.loop.*turbo"):
        sim_params_from_dict(data, "test.yaml")
    fast = with_sim_loop(params, "fast", 0.005)
    assert (fast.physics.loop, fast.physics.dt_s) == ("fast", 0.005)
    assert fast.version != params.version  # a checkpoint trained on it records another version


def test_push_schedule_follows_the_withheld_schedule():
    # push_schedule() keeps its summaries between calls: they must follow unstarted_pushes_withheld.
    params, urdf = _robot("arm6")
    with stdout_to_stderr():
        world = SimWorld(params, urdf, seed=0, render=False, pushes=True)
    try:
        full = world.push_schedule()
        assert len(full) >= 2 and world.pushes_applied() == 0
        with world.unstarted_pushes_withheld():
            assert world.push_schedule() == []
        assert world.push_schedule() == full
        full[0]["force_n"][0] = 1e9  # a caller's copy: the world's schedule is untouched
        assert world.push_schedule()[0]["force_n"][0] != 1e9
    finally:
        world.close()


# ----------------------------------------------------------------------------------------------
# Grasping on the fast loop: a jaw closed on the cube is held by it (ImplicitPd's `held`), and the
# contacts are resolved at 2.5 ms (physics.substeps 2 at 5 ms).
def test_implicit_pd_gives_a_joint_held_by_contact_the_explicit_grip():
    kp, kd, inertia, dt = np.array([1.5, 1.5]), np.array([0.007, 0.007]), np.array([1.6e-5, 1.6e-5]), 0.005
    pd = ImplicitPd(kp, kd, np.array([10.0, 10.0]), dt)
    q, q_target, qd = np.zeros(2), np.array([-0.5, -0.5]), np.zeros(2)
    free = pd.torque(q, qd, q_target, None, inertia)
    held = pd.torque(q, qd, q_target, None, inertia, held=np.array([False, True]))
    assert held[0] == free[0]  # the free joint keeps the implicit PD
    assert held[1] == pytest.approx(-0.75)  # kp * error, as the reference loop's PD pushes
    assert abs(free[1]) < abs(held[1]) / 5  # what the implicit formula made of the grip: 5.5x weaker
    moving = pd.torque(q, np.array([0.0, 2.0]), q_target, np.array([0.0, 0.5]), inertia, held=np.array([False, True]))
    assert moving[1] == pytest.approx(-0.75 - 0.007 * (2.0 - 0.5))  # explicit: kd on the speed error


def _pick_lift(loop: str, dt_s: float, substeps: int = 1):
    params, _ = _robot("so101")
    return with_sim_loop(with_task(params, "pick_lift"), loop, dt_s, substeps)


def _grip_once_lifted(params, episode: int, jaw_held: bool = True) -> float | None:
    """The jaw's motor torque [N*m] when the scripted expert has the cube 4 cm up, None if it never does."""
    info = get_robot("so101")
    with stdout_to_stderr():
        world = SimWorld(params, str(info.urdf_path()), seed=1000, render=False)
    try:
        if not jaw_held:
            world._jaw_held = None  # noqa: SLF001 - the fast loop as it was before the held jaw
        world.reset(seed=episode_seed(1000, episode))
        expert = world.task.make_expert(world)
        expert.start(world)
        per_tick = int(round(0.02 / params.physics.dt_s))
        jaw = world.all_joint_names.index(info.gripper)
        while world.episode_outcome() is None:
            world.set_command(expert.command(world))
            world.step(per_tick)
            if world.client.getBasePositionAndOrientation(world.task.cube)[0][2] > 0.04:
                return float(world.joint_efforts(all_joints=True)[jaw])
        return None
    finally:
        world.close()


@pytest.mark.parametrize("episode", [0, 2])
def test_the_fast_loop_grips_the_cube_as_hard_as_the_reference_loop(episode):
    reference = _grip_once_lifted(_pick_lift("reference", 0.001), episode)
    fast = _grip_once_lifted(_pick_lift("fast", 0.005, substeps=2), episode)
    assert reference is not None and fast is not None
    assert fast == pytest.approx(reference, rel=0.1)
    # Without the held jaw the implicit PD's grip lets the cube go: it is never lifted.
    assert _grip_once_lifted(_pick_lift("fast", 0.005, substeps=2), episode, jaw_held=False) is None


@pytest.mark.parametrize("task", ["pick_lift", "pick_place"])
def test_the_pick_experts_solve_their_task_on_the_fast_loop_with_two_substeps(task):
    params, urdf = _robot("so101")
    fast = with_sim_loop(with_task(params, task), "fast", 0.005, substeps=2)
    result = evaluate_expert(fast, urdf, episodes=10, seed=1000)
    assert result["failures"] == {"success": 10}, result["failures"]


def test_substeps_are_validated_and_leave_older_files_as_they_were():
    params, _ = _robot("so101")
    assert params.physics.substeps == 1
    assert with_sim_loop(params, "fast", 0.005).version == with_sim_loop(params, "fast", 0.005, substeps=1).version
    assert with_sim_loop(params, "fast", 0.005, substeps=2).version != with_sim_loop(params, "fast", 0.005).version
    for bad in (0, 21, 1.5, True, "2"):
        raw = {**params.raw, "physics": {**params.raw["physics"], "substeps": bad}}
        with pytest.raises(ConfigError, match="physics.substeps"):
            sim_params_from_dict(raw, "test")


def test_eval_sim_runs_a_checkpoint_on_the_sim_loop_it_names(tmp_path, capsys):
    """eval-sim --sim-loop: the episodes run on that loop over the robot's own sim params (the
    version it reports is the overridden params', and the same seed ends elsewhere than on the
    reference loop); a bad loop is refused naming the flag, and the graph paths refuse the flag."""
    import json

    from sim2real_ros.cli.main import main
    from sim2real_ros.robots import sim_params_for

    fast, reference = tmp_path / "fast.json", tmp_path / "reference.json"
    loop = "{loop: fast, dt_s: 0.005, substeps: 2}"
    assert main(["eval-sim", "--episodes", "1", "--sim-loop", loop, "--json", str(fast)]) == 0
    assert main(["eval-sim", "--episodes", "1", "--json", str(reference)]) == 0
    on_fast, on_reference = json.loads(fast.read_text()), json.loads(reference.read_text())
    expected = with_sim_loop(load_sim_params(sim_params_for("arm6", None)), "fast", 0.005, 2).version
    assert on_fast["sim_params_version"] == expected != on_reference["sim_params_version"]
    assert expected in on_fast["sim_params_warning"]  # it names the version it ran, not the file's
    assert on_fast["per_episode"][0]["final_distance_m"] != on_reference["per_episode"][0]["final_distance_m"]
    capsys.readouterr()
    assert main(["eval-sim", "--episodes", "1", "--sim-loop", "{loop: quick}"]) == 2
    err = capsys.readouterr().err
    assert "--sim-loop" in err and "quick" in err
    assert main(["eval-sim", "--episodes", "1", "--sim-loop", "[1, 2"]) == 2
    assert "--sim-loop" in capsys.readouterr().err
    assert main(["eval-sim", "--episodes", "1", "--graph", "--sim-loop", "fast"]) == 2
    assert "core path" in capsys.readouterr().err
