"""The reactive pick expert (sim/reactive_pick_expert.py) and its chunk labeller (rl/labeller.py,
teacher: expert): it decides from the state alone, so a cube moved after the start is picked where
it is (the timed expert closes on nothing), and a hovering arm is labelled "down"."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pybullet
import pytest
from test_tasks import SO101, task_params, task_world

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.rl.labeller import EXPERT_ACTION_SCALE_RAD, ScriptedChunkTeacher
from sim2real_ros.sim.reactive_pick_expert import (
    CLOSE,
    DESCEND,
    LIFT,
    RETRY,
    PickState,
    yaw_of_quaternion,
)
from sim2real_ros.sim.task_pick_lift import PickLiftReactiveScriptedExpert
from sim2real_ros.sim.world import SimWorld, episode_seed
from sim2real_ros.training.config import load_train_config

REPO_ROOT = Path(__file__).resolve().parents[1]
CONTROL_STEPS = 20  # physics steps per command (50 Hz at 1 kHz), as eval-sim --expert


def run_reactive(world: SimWorld, seed: int, randomize: bool = False, on_step=None) -> str:
    """One episode of the reactive expert at 50 Hz; the failure category. on_step(world) after each command."""
    world.reset(randomize=randomize, seed=seed)
    expert = PickLiftReactiveScriptedExpert(world, world.task)
    expert.start(world)
    while world.episode_outcome() is None:
        world.set_command(expert.command(world))
        world.step(CONTROL_STEPS)
        if on_step is not None:
            on_step(world)
    outcome = world.episode_outcome()
    return world.task.classify_failure(world, outcome)


def test_reactive_expert_picks_randomized_cubes_under_pushes():
    params = task_params(SO101, "pick_lift")
    outcomes = []
    for k in range(12):
        world = SimWorld(params, str(SO101.urdf_path()), seed=1000, render=False, pushes=True)
        try:
            outcomes.append(run_reactive(world, episode_seed(1000, k), randomize=True))
        finally:
            world.close()
    assert outcomes.count("success") >= 11, outcomes


def _move_cube_once(at_s: float, by_m: np.ndarray):
    """on_step: move the cube by `by_m` (3,) [m] the first time the episode passes at_s [s]."""
    done = []

    def on_step(world: SimWorld) -> None:
        if not done and world.episode_elapsed_s() >= at_s:
            position, orientation = world.client.getBasePositionAndOrientation(world.task.cube)
            world.client.resetBasePositionAndOrientation(world.task.cube, np.asarray(position) + by_m, orientation)
            done.append(True)

    return on_step


def test_a_cube_moved_after_the_start_is_picked_where_it_is_and_the_timed_expert_misses_it():
    shift = np.array([0.0, 0.03, 0.0])  # [m] sideways, after both experts have set off
    with task_world(SO101, "pick_lift") as (params, world):
        world.reset(seed=5)
        timed = world.task.make_expert(world)
        timed.start(world)
        moved = _move_cube_once(0.2, shift)
        while world.episode_outcome() is None:
            world.set_command(timed.command(world))
            world.step(CONTROL_STEPS)
            moved(world)
        assert world.task.classify_failure(world, world.episode_outcome()) != "success"
        assert run_reactive(world, 5, on_step=_move_cube_once(0.2, shift)) == "success"


def _expert_state_and_grasp(world: SimWorld):
    """(the reactive expert, its state, the cube's grasp geometry) for episode seed 5 of `world`."""
    world.reset(seed=5)
    expert = PickLiftReactiveScriptedExpert(world, world.task)
    state = expert.state(world)
    pose = expert.expert.grasp_geometry(state.cube_center, state.cube_yaw_rad, state.cube_size_m, state.table_z)
    return expert, state, pose


def test_phases_follow_the_state():
    with task_world(SO101, "pick_lift") as (params, world):
        expert, state, pose = _expert_state_and_grasp(world)
        gripper = expert.expert.gripper_index
        cfg = expert.expert.config

        def at(point, jaw, **flags) -> PickState:
            q = expert.expert.solve_ik(point, pose.rotation, expert.expert.home_q)
            q[gripper] = jaw
            fields = {**state.__dict__, "q": q, **flags}
            return PickState(**fields)

        # Hovering above the grasp point with the jaw open: down (the stall the DART clone taught).
        hover = pose.above.copy()
        hover[2] -= 0.02
        assert expert.expert.phase(at(hover, cfg.jaw_open_rad))[0] == DESCEND
        # At the grasp point: close; shut on nothing: up and open again; both jaws on it: lift.
        assert expert.expert.phase(at(pose.grasp, cfg.jaw_open_rad))[0] == CLOSE
        assert expert.expert.phase(at(pose.grasp, cfg.jaw_closed_rad))[0] == RETRY
        assert expert.expert.phase(at(pose.grasp, 0.3, jaws_on_cube=True, jaw_touches_cube=True))[0] == LIFT


def test_yaw_of_quaternion_matches_pybullet():
    for yaw in (-2.5, -0.3, 0.0, 0.7, 3.0):
        quat = pybullet.getQuaternionFromEuler([0.0, 0.0, yaw])
        assert yaw_of_quaternion(np.asarray(quat)) == pytest.approx(yaw, abs=1e-9)


def test_the_chunk_labeller_labels_a_hovering_arm_down_and_leaves_the_world_as_it_was():
    with task_world(SO101, "pick_lift") as (params, world):
        expert, state, pose = _expert_state_and_grasp(world)
        q = expert.expert.solve_ik(pose.above, pose.rotation, expert.expert.home_q)
        q[expert.expert.gripper_index] = expert.expert.config.jaw_open_rad
        world.place_joints(dict(zip(world.joint_names, q, strict=True)))
        world.set_command(q)
        world.step(200)  # settle there for 0.2 s
        labeller = ScriptedChunkTeacher(world, 0.05, 0.05, EXPERT_ACTION_SCALE_RAD, "test")
        before = (world.time_ns, world.joint_positions().copy())
        chunk = labeller.chunk(world.joint_positions(), None, 10, 0.05)
        assert (world.time_ns, *world.joint_positions()) == (before[0], *before[1])
        assert chunk.shape == (10, len(world.joint_names))
        assert np.max(np.abs(np.diff(chunk, axis=0))) <= EXPERT_ACTION_SCALE_RAD + 1e-9
        heights = [expert.expert.tool_position(point)[2] for point in chunk]
        assert heights[-1] < heights[0] - 0.015, heights  # the label goes down toward the grasp
        with pytest.raises(ConfigError, match="dt_s"):
            labeller.chunk(world.joint_positions(), None, 10, 0.1)


def test_teacher_expert_is_refused_where_no_reactive_expert_exists(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text("robot: so101\ntask: pick_place\nteacher: expert\n")
    with pytest.raises(ConfigError, match="teacher.*reactive scripted expert exists for pick_lift"):
        load_train_config(config)
    with task_world(SO101, "pick_place") as (params, world), pytest.raises(ConfigError, match="no reactive"):
        ScriptedChunkTeacher(world, 0.05, 0.05, EXPERT_ACTION_SCALE_RAD, "test")


def test_the_committed_expert_recipe_loads():
    config = load_train_config(REPO_ROOT / "config" / "train_pick_lift_so101_wrist_expert.yaml")
    assert (config.teacher, config.task, config.teacher_checkpoint) == ("expert", "pick_lift", None)


def test_eval_sim_runs_the_reactive_expert_and_refuses_it_where_there_is_none(tmp_path):
    out = tmp_path / "reactive.json"
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--expert", "reactive",
                           "--robot", "so101", "--task", "pick_lift", "--episodes", "2", "--perturb", "--pushes",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert (result["driver"], result["task"], result["failures"]) == ("reactive_expert", "pick_lift", {"success": 2})
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--expert", "reactive",
                           "--task", "reach_hold", "--episodes", "1"], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT)
    assert proc.returncode == 2 and "no reactive scripted expert" in proc.stderr, proc.stderr


def test_a_cube_turned_45_degrees_keeps_the_face_pair_the_jaw_is_closing_on():
    from sim2real_ros.sim.pick_expert import tool_down_rotation
    from sim2real_ros.sim.reactive_pick_expert import closing_direction

    for angle in (-1.0, 0.0, 0.4, 2.0):
        rotation = tool_down_rotation(np.array([np.cos(angle), np.sin(angle), 0.0]), 0.2)
        assert closing_direction(rotation) == pytest.approx(angle, abs=1e-9)
    assert closing_direction(np.eye(3)) is None  # a tool pointing up
    with task_world(SO101, "pick_lift") as (params, world):
        expert = PickLiftReactiveScriptedExpert(world, world.task).expert
        center = np.array([0.22, 0.0, 0.0125])  # on the x axis: radial direction 0
        angles = []
        for yaw in (np.pi / 4 - 0.01, np.pi / 4 + 0.01):  # either side of the tie
            free = expert.grasp_geometry(center, yaw, 0.025, 0.0)
            kept = expert.grasp_geometry(center, yaw, 0.025, 0.0, closing_hint_rad=np.pi / 4 - 0.01)
            angles.append((closing_direction(free.rotation), closing_direction(kept.rotation)))
        (free_a, kept_a), (free_b, kept_b) = angles
        assert abs(free_a - free_b) == pytest.approx(np.pi / 2, abs=0.05)  # without the hint: a flip
        assert kept_a == pytest.approx(kept_b, abs=0.05)  # with it: the same pair


def test_bc_init_collects_dart_pairs_from_the_reactive_expert():
    """bc_init.expert: reactive (config/teacher_pick_lift_bc_dart_reactive.yaml) plays BC's noisy
    episodes with the reactive expert: with the recipe's DART noise its episodes still pick the cube,
    the labels differ from the timed expert's on the same episode, and a task without a reactive
    expert is refused at load, naming the field."""
    from sim2real_ros.rl.batch import BatchedEnv
    from sim2real_ros.rl.bc import BC_EPISODE_BASE, expert_episode
    from sim2real_ros.rl.ppo import load_teacher_config

    config = load_teacher_config(REPO_ROOT / "config" / "teacher_pick_lift_bc_dart_reactive.yaml")
    bc = config.bc()
    assert bc is not None and (bc.expert, bc.action_noise) == ("reactive", 0.1)
    batch = BatchedEnv(config.env_spec(episode_base=BC_EPISODE_BASE), 0, 1)
    try:
        env = batch.envs[0]
        reactive = [expert_episode(env, BC_EPISODE_BASE + k, 0.99, bc.action_noise, "reactive") for k in range(2)]
        timed = expert_episode(env, BC_EPISODE_BASE, 0.99, bc.action_noise, "timed")
    finally:
        batch.close()
    assert all(pairs.episodes[0]["success"] for pairs in reactive), [p.episodes for p in reactive]
    first = reactive[0]
    assert np.abs(first.actions).max() <= 1.0 and len(first.obs) == len(first.actions)
    steps = min(len(first.actions), len(timed.actions))
    assert not np.allclose(first.actions[:steps], timed.actions[:steps])
    from sim2real_ros.sim.tasks import make_scripted_expert

    with task_world(SO101, "pick_place") as (_, world), pytest.raises(ValueError, match="no 'reactive' scripted"):
        make_scripted_expert(world, "reactive")


def test_the_recovering_labeller_hands_over_once_a_failed_grasp_has_lasted():
    """recovery_teacher: expert. The DART teacher labels; a jaw shut on nothing just over the cube, held
    for RECOVERY_STALL_S, hands the episode to the reactive expert to the end (its label opens the jaw,
    where the teacher's keeps it shut); an open jaw there (a healthy descent) never does."""
    from sim2real_ros.rl.labeller import RECOVERY_STALL_S, PPOChunkTeacher, RecoveringChunkTeacher
    from sim2real_ros.rl.teacher_checkpoint import load_teacher

    teacher = load_teacher(REPO_ROOT / "policies" / "teacher_so101_pick_lift_dart.safetensors")
    with task_world(SO101, "pick_lift") as (params, world):
        expert, state, pose = _expert_state_and_grasp(world)
        gripper, cfg = expert.expert.gripper_index, expert.expert.config
        over = pose.grasp + np.array([0.0, 0.0, 0.04])
        stall_calls = int(round(RECOVERY_STALL_S / 0.1))
        for jaw, fails in ((cfg.jaw_closed_rad, True), (cfg.jaw_open_rad, False)):
            world.reset(seed=5)  # the same cube, a fresh episode
            q = expert.expert.solve_ik(over, pose.rotation, expert.expert.home_q)
            q[gripper] = jaw
            world.place_joints(dict(zip(world.joint_names, q, strict=True)))
            world.set_command(q)
            world.step(200)
            recovering = RecoveringChunkTeacher(
                PPOChunkTeacher(teacher, world, 0.05),
                ScriptedChunkTeacher(world, 0.05, 0.05, EXPERT_ACTION_SCALE_RAD, "test"))
            assert recovering.failed_grasp() is fails
            sources, jaws = [], []
            for _ in range(stall_calls + 3):
                before = recovering.recoverer.labels_made
                chunk = recovering.chunk(world.joint_positions(), None, 10, 0.05)
                sources.append("expert" if recovering.recoverer.labels_made > before else "teacher")
                jaws.append(float(chunk[-1, gripper]))
                world.step(100)  # 0.1 s: the student's observation period, the arm held there
            assert recovering.labels_made == stall_calls + 3
            if fails:
                assert sources == ["teacher"] * stall_calls + ["expert"] * 3, sources
                assert recovering.recovering_since_s == pytest.approx(0.2 + RECOVERY_STALL_S, abs=0.01)
                assert jaws[-1] > jaws[0] + 0.3, jaws  # up and open again, where the teacher kept it shut
            else:
                assert set(sources) == {"teacher"} and recovering.recovering_since_s is None, sources


def test_recovery_teacher_is_checked_at_load_naming_the_field(tmp_path):
    config = load_train_config(REPO_ROOT / "config" / "train_pick_lift_so101_wrist_recovery.yaml")
    assert (config.teacher, config.recovery_teacher, config.task) == ("ppo", "expert", "pick_lift")
    assert config.to_dict()["recovery_teacher"] == "expert"
    plain = load_train_config(REPO_ROOT / "config" / "train_pick_lift_so101_wrist.yaml")
    assert "recovery_teacher" not in plain.to_dict()  # the hashes of runs without it stay
    teacher = REPO_ROOT / "policies" / "teacher_so101_pick_lift_dart.safetensors"
    for task, body, says in [
        ("pick_lift", f"teacher: ppo\nteacher_checkpoint: {teacher}\nrecovery_teacher: script\n",
         "recovery_teacher.*script"),
        ("pick_lift", "teacher: expert\nrecovery_teacher: expert\n", "recovery_teacher.*teacher 'expert'"),
        ("pick_place", f"teacher: ppo\nteacher_checkpoint: {teacher}\nrecovery_teacher: expert\n",
         "recovery_teacher.*task 'pick_place'"),
    ]:
        path = tmp_path / "train.yaml"
        path.write_text(f"robot: so101\ntask: {task}\n{body}")
        with pytest.raises(ConfigError, match=says):
            load_train_config(path)


def test_a_student_run_with_a_recovery_teacher_records_it(tmp_path):
    """The committed recovery recipe, tiny: the teacher drives BC, a DAgger round is labelled by the
    recovering labeller, the round's history counts the episodes the expert took over and the
    checkpoint's provenance names the recovery teacher."""
    import yaml

    from sim2real_ros.core.policy.checkpoint import read_checkpoint
    from sim2real_ros.training.trainer import Trainer

    path = REPO_ROOT / "config" / "train_pick_lift_so101_wrist_recovery.yaml"
    rollout = {**yaml.safe_load(path.read_text())["rollout"], "max_episode_s": 1.5}
    config = load_train_config(path, bc_episodes=2, dagger_rounds=1, dagger_episodes=2, epochs_bc=1,
                               epochs_per_round=1, round_minibatches=0, eval_episodes=0, rollout=rollout,
                               hparams={"channels": [4, 8], "keypoints": 8, "hidden": [32]})
    trainer = Trainer(config, tmp_path / "student.safetensors", tmp_path / "work", log=lambda s: None)
    try:
        result = trainer.run(resume=False)
    finally:
        trainer.close()
    assert trainer.history[-1]["kind"] == "dagger" and trainer.history[-1]["episodes_with_recovery_labels"] == 0
    spec, _, _ = read_checkpoint(result["checkpoint"])
    teacher = spec.provenance["teacher"]
    assert teacher["kind"] == "ppo" and teacher["recovery"] == {"kind": "expert", "expert": "reactive_pick"}
    assert spec.provenance["config"]["recovery_teacher"] == "expert"
