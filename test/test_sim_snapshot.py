"""SimWorld.save_state / restore_state / discard_state: exact snapshots within an episode (real PyBullet)."""
import copy

import numpy as np
import pytest
import yaml

from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.expert import ReachExpert
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict
from sim2real_ros.sim.world import SimWorld

ARM6 = str(urdf_path())


def make_params(model: str = "pd", push_interval_s: tuple[float, float] | None = None):
    data = yaml.safe_load(config_path("sim_params.yaml").read_text())
    data = copy.deepcopy(data)
    if model == "servo":
        data["actuator"]["model"] = "servo"
        data["actuator"]["servo"] = {"max_speed": 2.0, "max_acceleration": 20.0, "gain": 10.0, "deadband": 0.001}
        data["randomization"]["servo_speed_scale"] = [0.8, 1.2]
    if push_interval_s is not None:
        data["randomization"]["pushes"]["interval_s"] = list(push_interval_s)
    return sim_params_from_dict(data, f"snapshot_{model}.yaml")


def rss_mb() -> float:
    """Resident memory of this process [MiB]."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def drive(world: SimWorld, commands: dict[int, np.ndarray], steps: int) -> np.ndarray:
    """Step one physics step at a time, giving commands[k] before step k: joint positions (steps, n_all)."""
    q = []
    for k in range(steps):
        if k in commands:
            world.set_command(commands[k])
        world.step(1)
        q.append(world.joint_positions(all_joints=True))
    return np.array(q)


@pytest.mark.parametrize(("model", "pushes"), [("pd", False), ("pd", True), ("servo", False), ("servo", True)])
def test_restore_then_the_same_commands_give_the_same_trajectory_bit_for_bit(model, pushes):
    world = SimWorld(make_params(model, push_interval_s=(0.05, 0.15)), ARM6, seed=4, render=False, pushes=pushes)
    try:
        world.reset(randomize=True)
        rng = np.random.default_rng(0)
        home = world.joint_positions()
        span = 0.3 * (world.upper - world.lower) / 2
        commands = {k: home + rng.uniform(-span, span) for k in range(0, 500, 37)}
        drive(world, {0: home + 0.1, 129: home - 0.1}, 130)  # mid-motion, a command in the latency queue
        assert world.pending_commands() > 0 or world.actuation_latency_s == 0
        snapshot = world.save_state()
        pending, effort = world.pending_commands(), world.joint_efforts(all_joints=True)
        first = drive(world, commands, 500)
        first_time, first_outcome, first_effort = world.time_ns, world.episode_outcome(), world.joint_efforts()
        first_pushes = world.pushes_applied()
        world.restore_state(snapshot)
        assert world.pending_commands() == pending and world.time_ns == first_time - 500 * world.dt_ns
        assert np.array_equal(world.joint_efforts(all_joints=True), effort)  # what joint_states reports now
        second = drive(world, commands, 500)
        assert np.array_equal(first, second)
        assert world.time_ns == first_time and world.episode_outcome() == first_outcome
        assert np.array_equal(world.joint_efforts(), first_effort)
        assert world.pushes_applied() == first_pushes
        if pushes:
            assert first_pushes > 0  # a push (0.05-0.15 s apart) started after the snapshot
        assert not np.array_equal(first[0], first[-1])  # the commands did move the arm
        world.discard_state(snapshot)
    finally:
        world.close()


def test_an_outcome_reached_after_the_snapshot_is_undone_and_reached_again_identically():
    world = SimWorld(load_sim_params(), ARM6, seed=6, pushes=True)
    try:
        world.reset()
        expert = ReachExpert(world.model, world.joint_names, world.ee_link, world.joint_positions())
        goal = expert.solve_ik(world.target_position())
        drive(world, {}, 50)
        snapshot = world.save_state()
        image = world.render()
        first = drive(world, {0: goal}, 1500)
        outcome = world.episode_outcome()
        assert outcome is not None and outcome["success"] and "pushes_applied" in outcome
        world.restore_state(snapshot, discard=True)
        assert world.episode_outcome() is None and world.episode_elapsed_s() == pytest.approx(0.05)
        assert np.array_equal(world.render(), image)  # the camera noise generator is restored too
        second = drive(world, {0: goal}, 1500)
        assert np.array_equal(first, second) and world.episode_outcome() == outcome
    finally:
        world.close()


def test_a_snapshot_restores_again_until_discarded_and_only_in_its_own_episode():
    world = SimWorld(load_sim_params(), ARM6, seed=1, render=False)
    other = SimWorld(load_sim_params(), ARM6, seed=1, render=False)
    try:
        world.set_command(world.joint_positions() + 0.2)
        snapshot = world.save_state()
        runs = []
        for _ in range(2):
            runs.append(drive(world, {}, 200))
            world.restore_state(snapshot)
        assert np.array_equal(runs[0], runs[1])
        with pytest.raises(ValueError, match="another world or episode"):
            other.restore_state(snapshot)
        world.discard_state(snapshot)
        world.discard_state(snapshot)  # harmless
        with pytest.raises(ValueError, match="discarded"):
            world.restore_state(snapshot)
        later = world.save_state()  # PyBullet may reuse the freed id: the old snapshot stays refused
        with pytest.raises(ValueError, match="discarded"):
            world.restore_state(snapshot)
        world.reset()
        with pytest.raises(ValueError, match="valid only within the episode"):
            world.restore_state(later)
    finally:
        world.close()
        other.close()


def test_save_restore_discard_cycles_do_not_grow_memory():
    world = SimWorld(load_sim_params(), ARM6, seed=2, render=False)
    try:
        world.set_command(world.joint_positions() + 0.1)
        world.step(10)
        for _ in range(200):  # warm up the allocator
            world.restore_state(world.save_state(), discard=True)
        before = rss_mb()
        for _ in range(2000):
            snapshot = world.save_state()
            world.step(1)
            world.restore_state(snapshot, discard=True)
        for _ in range(1000):  # snapshots never discarded are freed when garbage collected
            snapshot = world.save_state()
            world.step(1)
            world.restore_state(snapshot)
        del snapshot
        growth = rss_mb() - before
        # A PyBullet state of this world is ~0.15 MiB: 3000 leaked states would be ~450 MiB.
        assert growth < 10.0, f"resident memory grew {growth:.1f} MiB over 3000 cycles"
        assert not world._live_states  # noqa: SLF001 - nothing left on the physics server
    finally:
        world.close()


def test_the_commands_sent_are_remembered_restored_and_forgotten_at_reset():
    """sent_at_or_before / commanded_at answer "which command was in force then" (the PPO labeller's
    integrated target); a restore forgets what was sent after the snapshot, a reset the episode."""
    world = SimWorld(load_sim_params(), ARM6, seed=2, render=False)
    try:
        world.reset()
        start = world.time_ns
        assert world.sent_at_or_before(start) is None
        home = world.joint_positions()
        commands = {k: home + 0.01 * (k + 1) for k in range(3)}
        for k in range(3):
            world.set_command(commands[k])
            world.step(10)
        sent_ns = [start + k * 10 * world.dt_ns for k in range(3)]
        np.testing.assert_array_equal(world.sent_at_or_before(sent_ns[1]), commands[1])
        np.testing.assert_array_equal(world.sent_at_or_before(sent_ns[2] - 1), commands[1])
        np.testing.assert_array_equal(world.sent_at_or_before(world.time_ns), commands[2])
        # the commanded trajectory between two ticks is linear between their commands
        np.testing.assert_allclose(world.commanded_at(sent_ns[0] + 4 * world.dt_ns),
                                   commands[0] + 0.4 * (commands[1] - commands[0]))
        np.testing.assert_array_equal(world.commanded_at(sent_ns[1]), commands[1])
        np.testing.assert_array_equal(world.commanded_at(world.time_ns), commands[2])
        assert world.commanded_at(start - 1) is None
        snapshot = world.save_state()
        world.set_command(home - 0.2)
        world.step(10)
        world.restore_state(snapshot, discard=True)
        np.testing.assert_array_equal(world.sent_at_or_before(world.time_ns + 10**9), commands[2])
        world.reset()
        assert world.sent_at_or_before(world.time_ns + 10**9) is None
    finally:
        world.close()
