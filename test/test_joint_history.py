"""The student's joint history (issue 32 part 3): sampling, the spec field, the model input, the
checkpoint and ONNX round trips, and the sim rollouts that record it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sim2real_ros.core.control.joint_history import (
    MAX_HISTORY_POINTS,
    JointTrack,
    breaks_history,
    buffer_length,
    check_history_lags,
    sample_history,
)
from sim2real_ros.core.control.observation_pairing import ObservationPairer, PairingConfig
from sim2real_ros.core.errors import CheckpointError, ConfigError
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import (
    KIND_POLICY,
    encode_artifact,
    load_checkpoint,
    make_policy_spec,
    read_checkpoint,
    save_checkpoint,
)
from sim2real_ros.core.policy.model import MIN_HISTORY_STD, build_model
from sim2real_ros.core.policy.spec import PolicySpec
from sim2real_ros.paths import config_path, share_dir

JOINTS = ("j1", "j2", "j3")
SMALL = {"channels": [4, 8], "pool_size": 2, "image_features": 16, "hidden": [32]}
LAGS = (0.1, 0.2, 0.3)
MS = 1_000_000


def preprocess() -> PreprocessConfig:
    return PreprocessConfig.from_yaml(config_path("preprocess.yaml"))


def history_spec(lags=LAGS) -> PolicySpec:
    return make_policy_spec(JOINTS, preprocess(), hparams=SMALL, chunk_length=4, dt_s=0.1, joint_history_s=lags)


def trained_like_model(spec: PolicySpec, seed: int = 0):
    """A model with random weights and a wide action scale: its output moves with its inputs."""
    torch.manual_seed(seed)
    model = build_model(spec.architecture, spec, **spec.hparams)
    n, k = spec.joint_count, spec.chunk_length
    model.set_normalization(np.zeros(n), np.ones(n), np.zeros((k, n)), np.full((k, n), 0.3))
    if spec.joint_history_s:
        model.set_history_normalization(np.full((len(spec.joint_history_s), n), 0.05))
    return model.eval()


# -- sampling -----------------------------------------------------------------------------------------
def test_history_is_linear_between_samples_and_held_before_the_oldest():
    stamps = [0, 10 * MS, 20 * MS, 30 * MS]
    positions = [np.array([0.0, 1.0]), np.array([1.0, 1.0]), np.array([2.0, 0.0]), np.array([3.0, 0.0])]
    out = sample_history(stamps, positions, 30 * MS, (0.005, 0.01, 0.025, 0.5))
    np.testing.assert_allclose(out[0], [2.5, 0.0])  # 25 ms: halfway between the 20 and 30 ms samples
    np.testing.assert_allclose(out[1], [2.0, 0.0])  # on a sample
    np.testing.assert_allclose(out[2], [0.5, 1.0])  # 5 ms: halfway between 0 and 10 ms
    np.testing.assert_allclose(out[3], [0.0, 1.0])  # before the oldest: the oldest
    with pytest.raises(ValueError, match="at least one joint state"):
        sample_history([], [], 0, (0.1,))


def test_the_pairing_buffer_and_the_rollout_track_give_the_same_history():
    rng = np.random.default_rng(0)
    pairer = ObservationPairer(PairingConfig(tolerance_ns=5 * MS, max_age_ns=10**9, history=buffer_length(LAGS)))
    track = JointTrack(max(LAGS))
    for i in range(200):  # 100 Hz, 2 s
        q = rng.normal(size=3)
        pairer.add_joint_state(i * 10 * MS, q)
        track.add(i * 10 * MS, q)
    stamp = 1990 * MS - 3 * MS
    np.testing.assert_array_equal(pairer.history(stamp, LAGS), track.history(stamp, LAGS))
    # the track keeps what its lags need, not the whole stream
    assert len(track.stamps) < 200
    # a clock going back (a sim reset) starts the track over: the old timeline does not leak in
    track.add(5 * MS, np.zeros(3))
    np.testing.assert_array_equal(track.history(5 * MS, LAGS), np.zeros((3, 3)))


def test_buffer_length_reaches_the_oldest_lag_at_a_kilohertz():
    assert buffer_length(()) == 256
    assert buffer_length((0.1, 0.5)) >= 500


@pytest.mark.parametrize("value, problem", [
    ("0.1", "list of lags"), ([0.1, 0.1], "increase strictly"), ([0.0], "in \\(0"), ([-0.1], "in \\(0"),
    ([3.0], "in \\(0"), ([float("nan")], "in \\(0"), ([True], "in \\(0"), (["x" * 10_000], "in \\(0"),
    ([0.01 * (i + 1) for i in range(MAX_HISTORY_POINTS + 1)], "MAX_HISTORY_POINTS"),
])
def test_bad_lags_are_refused_naming_the_field(value, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        check_history_lags(value, "cfg.yaml")
    assert "joint_history_s" in str(info.value)
    assert len(str(info.value)) < 600  # a hostile value is shown cut short


# -- spec, model, checkpoint ---------------------------------------------------------------------------
def test_a_spec_without_history_writes_what_it_always_wrote_and_one_with_history_round_trips():
    plain = make_policy_spec(JOINTS, preprocess(), hparams=SMALL)
    assert "joint_history_s" not in plain.to_dict()
    assert PolicySpec.from_dict(plain.to_dict()).joint_history_s == ()
    spec = history_spec()
    assert spec.to_dict()["joint_history_s"] == list(LAGS)
    assert PolicySpec.from_dict(spec.to_dict()) == spec
    bad = {**spec.to_dict(), "joint_history_s": [0.2, 0.1]}
    with pytest.raises(ConfigError, match="joint_history_s"):
        PolicySpec.from_dict(bad, source="file.safetensors spec")


def test_the_model_sees_the_history_and_refuses_to_run_without_it():
    spec = history_spec()
    model = trained_like_model(spec)
    assert model.joint_input_width == 3 * (1 + len(LAGS))
    gen = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (2, spec.image_height, spec.image_width, 3), dtype=torch.uint8, generator=gen)
    q = torch.zeros(2, 3)
    still = q.unsqueeze(1).repeat(1, len(LAGS), 1)
    moving = still + torch.tensor([0.1, 0.0, 0.0])  # the arm was elsewhere before
    with torch.no_grad():
        a = model(images, q, still)
        b = model(images, q, moving)
    assert float((a - b).abs().max()) > 1e-3
    with pytest.raises(ValueError, match="joint_history"):
        model(images, q)
    with pytest.raises(ValueError, match="joint_history"):
        model(images, q, still[:, :2])


def test_history_normalization_is_fitted_from_data_and_floored():
    spec = history_spec()
    model = build_model(spec.architecture, spec, **spec.hparams)
    rng = np.random.default_rng(0)
    q = rng.normal(size=(50, 3))
    histories = q[:, None, :] + rng.normal(scale=[0.2, 0.0, 0.1], size=(50, len(LAGS), 3))
    labels = q[:, None, :] + rng.normal(size=(50, 4, 3)) * 0.1
    model.set_normalization_from_data(q, labels, histories)
    std = model.history_std.numpy()
    assert std.shape == (len(LAGS), 3)
    np.testing.assert_allclose(std[:, 1], MIN_HISTORY_STD)  # a joint that never moved: the floor
    assert 0.1 < std[:, 0].mean() < 0.3
    with pytest.raises(ValueError, match="needs joint_histories"):
        model.set_normalization_from_data(q, labels)


def test_a_history_checkpoint_round_trips_and_runs_one_at_a_time_as_in_a_batch(tmp_path):
    spec = history_spec()
    model = trained_like_model(spec)
    path = tmp_path / "history.safetensors"
    save_checkpoint(path, model, spec)
    read_spec, state, _ = read_checkpoint(path)
    assert read_spec.joint_history_s == LAGS and "history_std" in state
    policy = load_checkpoint(path)
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (4, spec.image_height, spec.image_width, 3), dtype=np.uint8)
    q = rng.normal(scale=0.3, size=(4, 3))
    histories = q[:, None, :] + rng.normal(scale=0.05, size=(4, len(LAGS), 3))
    one = np.stack([policy.select_action(im, qq, h) for im, qq, h in zip(images, q, histories, strict=True)])
    np.testing.assert_allclose(policy.select_actions(images, q, histories), one, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="needs the joint history"):
        policy.select_action(images[0], q[0])
    with pytest.raises(ValueError, match="NaN"):
        policy.select_action(images[0], q[0], np.full((len(LAGS), 3), np.nan))


def test_a_history_tensor_that_does_not_fit_the_lags_is_refused_before_loading(tmp_path):
    """A file whose spec says 3 lags but whose history_std has 2 rows (or none) is refused
    naming the tensor: the spec decides the shapes, as for every other tensor."""
    spec = history_spec()
    model = trained_like_model(spec)
    short = make_policy_spec(JOINTS, preprocess(), hparams=SMALL, chunk_length=4, dt_s=0.1,
                             joint_history_s=(0.1, 0.2))
    path = tmp_path / "mismatch.safetensors"
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["history_std"] = state["history_std"][:2]
    path.write_bytes(encode_artifact(KIND_POLICY, history_spec().to_dict(), state))
    with pytest.raises(CheckpointError, match="history_std"):
        read_checkpoint(path)
    del state["history_std"]
    path.write_bytes(encode_artifact(KIND_POLICY, short.to_dict(), state))
    with pytest.raises(CheckpointError, match="history_std"):
        read_checkpoint(path)


def test_a_shipped_policy_without_history_loads_as_before():
    policy = load_checkpoint(Path(share_dir()) / "policies" / "reach_default.safetensors")
    assert policy.spec.joint_history_s == ()
    assert not hasattr(policy.model, "history_std")


def test_a_history_policy_exports_to_onnx_with_a_third_input(tmp_path):
    from sim2real_ros.core.policy.onnx_export import export_onnx
    from sim2real_ros.core.policy.onnx_policy import load_onnx_policy

    spec = history_spec()
    path = tmp_path / "history.safetensors"
    save_checkpoint(path, trained_like_model(spec), spec)
    result = export_onnx(path, tmp_path / "history.onnx")
    assert result["max_abs_difference_rad"] <= 1e-4
    exported = load_onnx_policy(tmp_path / "history.onnx")
    assert exported.spec.joint_history_s == LAGS
    names = [i.name for i in exported.session.get_inputs()]
    assert names == ["image", "joint_positions", "joint_history"]
    torch_policy = load_checkpoint(path)
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (spec.image_height, spec.image_width, 3), dtype=np.uint8)
    q = rng.normal(scale=0.3, size=3)
    for shift in (0.0, 0.1):
        history = np.tile(q, (len(LAGS), 1)) + shift
        np.testing.assert_allclose(exported.select_action(image, q, history),
                                   torch_policy.select_action(image, q, history), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="needs the joint history"):
        exported.select_action(image, q)


def test_fine_tuning_a_history_policy_is_refused_naming_the_field(tmp_path):
    from sim2real_ros.finetune.finetune import finetune

    spec = history_spec()
    path = tmp_path / "history.safetensors"
    save_checkpoint(path, trained_like_model(spec), spec)
    with pytest.raises(CheckpointError, match="joint_history_s"):
        finetune(path, [tmp_path], tmp_path / "out.safetensors")


# -- the sim rollouts record it, and a student trains and runs on it -------------------------------------
@pytest.fixture(scope="module")
def arm6_world():
    from sim2real_ros.paths import urdf_path
    from sim2real_ros.sim.params import load_sim_params
    from sim2real_ros.sim.world import SimWorld

    world = SimWorld(load_sim_params(), str(urdf_path()), seed=3)
    yield world
    world.close()


def test_the_plain_rollout_records_the_history_the_policy_node_would_sample(arm6_world):
    """Observations every 0.1 s and a 0.1 s lag: each frame's first history row is the previous
    frame's measured joints (both on the 100 Hz control ticks), the first frame's history is where
    the arm started, and the arm moving makes the history differ from the present."""
    from sim2real_ros.core.perception.preprocess import ImagePipeline
    from sim2real_ros.training.rollout import RolloutConfig, run_episode
    from sim2real_ros.training.trainer import make_expert

    pipeline = ImagePipeline(preprocess())
    seen = []

    def controller(image, q, history):  # the expert labels, this drives: a controller sees the history
        seen.append(history)
        return np.tile(q, (10, 1))

    record = run_episode(arm6_world, pipeline, make_expert(arm6_world), None, 10, 0.05,
                         RolloutConfig(max_episode_s=1.0), randomize=False, seed=2, joint_history_s=(0.1, 0.2))
    assert len(record.histories) == len(record.joints) >= 9
    np.testing.assert_array_equal(record.histories[0], np.tile(record.joints[0], (2, 1)))
    for k in range(2, len(record.joints)):
        np.testing.assert_allclose(record.histories[k][0], record.joints[k - 1], atol=1e-12)
        np.testing.assert_allclose(record.histories[k][1], record.joints[k - 2], atol=1e-12)
    moved = max(float(np.abs(h[0] - q).max()) for h, q in zip(record.histories, record.joints, strict=True))
    assert moved > 0.01  # the expert moves the arm: the history is not the present
    run_episode(arm6_world, pipeline, None, controller, 10, 0.05, RolloutConfig(max_episode_s=0.3),
                randomize=False, seed=2, joint_history_s=(0.1,))
    assert seen and all(h.shape == (1, 6) for h in seen)
    without = run_episode(arm6_world, pipeline, make_expert(arm6_world), None, 10, 0.05,
                          RolloutConfig(max_episode_s=0.3), randomize=False, seed=2)
    assert without.histories == []


def test_the_graph_loop_pairs_each_image_with_the_history_of_the_published_joint_states(arm6_world):
    from sim2real_ros.core.perception.preprocess import ImagePipeline
    from sim2real_ros.training.graph_conditions import GraphConditions
    from sim2real_ros.training.rollout import RolloutConfig, run_episode
    from sim2real_ros.training.trainer import make_expert

    config = RolloutConfig(max_episode_s=1.0, graph_conditions=GraphConditions())
    record = run_episode(arm6_world, ImagePipeline(preprocess()), make_expert(arm6_world), None, 10, 0.05, config,
                         randomize=False, seed=5, joint_history_s=(0.05, 0.3))
    assert len(record.histories) == len(record.joints) >= 5
    assert all(h.shape == (2, 6) for h in record.histories)
    # the supervisor holds the arm at the start: the first frame's history is the present
    np.testing.assert_allclose(record.histories[0], np.tile(record.joints[0], (2, 1)), atol=1e-9)
    assert max(float(np.abs(h[1] - q).max()) for h, q in zip(record.histories, record.joints, strict=True)) > 0.01


def test_a_student_with_history_trains_and_is_evaluated_with_it(tmp_path):
    """`joint_history_s` in a training YAML: the frames carry histories, the student is fitted on
    them, the checkpoint records the lags, and eval-sim drives it with histories."""
    from sim2real_ros.training.config import load_train_config
    from sim2real_ros.training.evaluation import evaluate_in_sim
    from sim2real_ros.training.trainer import Dataset, Trainer

    config = load_train_config(config_path("train_reach.yaml"), bc_episodes=2, dagger_rounds=1, dagger_episodes=1,
                               epochs_bc=1, epochs_per_round=1, eval_episodes=1,
                               hparams={"channels": [4, 8], "keypoints": 8, "hidden": [32]},
                               joint_history_s=[0.1, 0.3])
    assert config.to_dict()["joint_history_s"] == [0.1, 0.3]
    trainer = Trainer(config, tmp_path / "student.safetensors", tmp_path / "work", log=lambda s: None)
    try:
        result = trainer.run(resume=False)
    finally:
        trainer.close()
    data = Dataset.load(tmp_path / "work" / "dataset.npz")
    assert len(data.histories) == len(data) > 0 and data.histories[0].shape == (2, 6)
    spec, state, _ = read_checkpoint(result["checkpoint"])
    assert spec.joint_history_s == (0.1, 0.3)
    assert float(state["history_std"].min()) >= np.float32(MIN_HISTORY_STD)
    report = evaluate_in_sim(result["checkpoint"], episodes=1, seed=77, workers=0)
    assert report["episodes"] == 1
    with pytest.raises(ConfigError, match="joint_history_s"):
        load_train_config(config_path("train_reach.yaml"), joint_history_s=[0.3, 0.1])


def test_a_teleport_starts_the_history_over_and_a_fast_motion_does_not():
    """The sim graph restarts an episode by putting the arm home on a clock that runs on: without the
    break, the new episode's first histories said the arm flew 0.6 rad in 10 ms (the supervisor's
    jump warning at every restart of a 40-episode graph run), which no training episode shows. The
    pairing buffer still pairs across it; JointTrack (the rollouts') breaks the same way."""
    lags = [0.1, 0.2, 0.3, 0.4]
    end_of_episode = np.array([0.6, -0.3])
    home = np.zeros(2)
    pairer = ObservationPairer(PairingConfig(tolerance_ns=5 * MS, max_age_ns=1000 * MS, history=256))
    track = JointTrack(max(lags))
    stamps = [k * 10 * MS for k in range(56)]  # 0.55 s at 100 Hz
    for k, stamp in enumerate(stamps):
        q = end_of_episode if k < 50 else home  # the reset at 0.5 s
        pairer.add_joint_state(stamp, q.copy())
        track.add(stamp, q)
    now = stamps[-1]  # 50 ms after the reset: every lag reaches back before it
    for history in (pairer.history(now, lags), track.history(now, lags)):
        np.testing.assert_array_equal(history, np.zeros((4, 2)))
    assert pairer.pair(stamps[10], now_ns=now).positions.tolist() == end_of_episode.tolist()  # still paired
    stamps = [k * 10 * MS for k in range(100)]
    now = stamps[-1]
    # A fast real motion (5 rad/s on one joint) is history, not a break.
    assert not breaks_history(0, np.zeros(2), 10 * MS, np.array([0.05, 0.0]))
    assert breaks_history(0, np.zeros(2), 10 * MS, np.array([0.6, 0.0]))
    moving = ObservationPairer(PairingConfig(tolerance_ns=5 * MS, max_age_ns=1000 * MS, history=256))
    for k, stamp in enumerate(stamps):
        moving.add_joint_state(stamp, np.array([5.0 * k * 0.01, 0.0]))
    np.testing.assert_allclose(moving.history(now, lags)[:, 0], [4.45, 3.95, 3.45, 2.95], atol=1e-9)
