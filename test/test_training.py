"""Training and sim evaluation through the same core the nodes run (real PyBullet, real torch)."""
import json

import numpy as np
import pytest
import yaml

from sim2real_ros.cli.main import main as sim2real
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import load_checkpoint
from sim2real_ros.core.stats import wilson_interval
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.params import load_sim_params, with_sim_loop
from sim2real_ros.sim.world import SimWorld
from sim2real_ros.training.augment import random_shift
from sim2real_ros.training.config import load_train_config
from sim2real_ros.training.rollout import RolloutConfig, run_episode
from sim2real_ros.training.trainer import Trainer, make_expert


def tiny_config(tmp_path, **fields):
    data = {"sim_params": str(config_path("sim_params.yaml")), "preprocess": str(config_path("preprocess.yaml")),
            "bc_episodes": 2, "dagger_rounds": 1, "dagger_episodes": 1, "epochs_bc": 1, "epochs_per_round": 1,
            "eval_episodes": 1, "rollout": {"max_episode_s": 1.5}, **fields}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(45, 50)
    assert lo == pytest.approx(0.7864, abs=1e-3) and hi == pytest.approx(0.9565, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_teacher_reaches_the_target_through_the_actuator_core():
    params = load_sim_params()
    world = SimWorld(params, str(urdf_path()), seed=3)
    try:
        pipeline = ImagePipeline(PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
        for seed in (1, 2):
            record = run_episode(world, pipeline, make_expert(world), None, 10, 0.05, RolloutConfig(),
                                 randomize=False, seed=seed)
            assert record.outcome["success"], record.outcome
            assert record.images[0].shape == (96, 96, 3) and record.images[0].dtype == np.uint8
            # Labels follow docs/design.md §3: point 0 is the target at the observation time (= where the arm is).
            assert np.allclose(record.labels[0][0], record.joints[0])
    finally:
        world.close()


def test_train_writes_a_checkpoint_with_spec_and_provenance_and_resumes(tmp_path, capsys):
    config = load_train_config(tiny_config(tmp_path))
    out, work = tmp_path / "policy.pt", tmp_path / "work"
    trainer = Trainer(config, out, work, log=print)
    try:
        result = trainer.run()
    finally:
        trainer.close()
    policy = load_checkpoint(out)
    spec = policy.spec
    assert spec.sim_params_version == load_sim_params().version
    assert spec.preprocess_hash == PreprocessConfig.from_yaml(config_path("preprocess.yaml")).content_hash
    assert spec.provenance["config"]["bc_episodes"] == 2 and len(spec.provenance["rounds"]) == 2
    assert 0.0 <= result["evaluation"]["success_rate"] <= 1.0
    action = policy.select_action(np.zeros((96, 96, 3), np.uint8), np.zeros(len(spec.joint_names)))
    assert action.shape == (10, len(spec.joint_names)) and np.all(np.isfinite(action))
    # A second run with the same config resumes after the last stage instead of collecting again,
    # also from a copy of the file elsewhere (as one would to add DAgger rounds: the path is no part
    # of what the saved data depend on); through the command this time, which writes the student's
    # ONNX export beside it (what a lean robot graph runs, cli/onnx_beside.py).
    from sim2real_ros.core.policy.checkpoint import checkpoint_hash
    from sim2real_ros.core.policy.onnx_policy import onnx_parent_hash

    (tmp_path / "copied").mkdir()
    copy = tmp_path / "copied" / "train.yaml"
    copy.write_text((tmp_path / "train.yaml").read_text())
    capsys.readouterr()
    again = tmp_path / "again.safetensors"
    assert sim2real(["train", "--config", str(copy), "--out", str(again), "--work-dir", str(work)]) == 0
    printed = capsys.readouterr().out
    assert "resuming after stage 1" in printed
    summary = json.loads(printed[printed.index("{\n"):])
    assert summary["onnx"] == str(tmp_path / "again.onnx") and summary["hash"] == checkpoint_hash(again)
    assert onnx_parent_hash(tmp_path / "again.onnx") == checkpoint_hash(again)
    assert load_checkpoint(again).spec.provenance["rounds"] == spec.provenance["rounds"]


def test_bad_training_config_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"train.yaml: field 'lr' = 5"):
        load_train_config(tiny_config(tmp_path, lr=5))
    with pytest.raises(ConfigError, match="unknown field"):
        load_train_config(tiny_config(tmp_path, epochs=3))


def test_a_training_config_collects_and_trains_on_the_sim_loop_it_names(tmp_path, monkeypatch):
    """`sim_loop` runs the episodes on that loop over the sim params' own, and the student records
    that loop's params version (eval-sim on the reference loop then names the mismatch); a config
    without it hashes as before (no key), and a bad one fails at load naming the field. The same
    run's image_shift_px reaches every minibatch."""
    from sim2real_ros.training import trainer as trainer_module

    shifts = []

    def recording_shift(images, max_px, generator):
        shifts.append(max_px)
        return random_shift(images, max_px, generator)

    monkeypatch.setattr(trainer_module, "random_shift", recording_shift)
    plain = load_train_config(tiny_config(tmp_path))
    assert "sim_loop" not in plain.to_dict()
    loop = {"loop": "fast", "dt_s": 0.00625}
    (tmp_path / "fast").mkdir()
    config = load_train_config(tiny_config(tmp_path / "fast", sim_loop=loop, bc_episodes=1, dagger_rounds=0,
                                           eval_episodes=0, image_shift_px=2))
    assert config.to_dict()["sim_loop"] == loop
    fast = with_sim_loop(load_sim_params(), "fast", 0.00625)
    out = tmp_path / "fast.pt"
    trainer = Trainer(config, out, tmp_path / "work", log=print)
    try:
        assert trainer.params.version == fast.version
        assert trainer.pool._local.params.physics.loop == "fast"
        assert trainer.pool._local.params.physics.dt_s == pytest.approx(0.00625)
        trainer.run()
    finally:
        trainer.close()
    assert load_checkpoint(out).spec.sim_params_version == fast.version != load_sim_params().version
    assert shifts and set(shifts) == {2}
    for bad, problem in (({"loop": "quick"}, "physics.loop = 'quick'"),
                         ({"loop": "fast", "dt_s": -1.0}, "physics.dt_s"),
                         ({"loop": "fast", "substep": 2}, "unknown: substep"), ({"dt_s": 0.005}, "needs loop"),
                         ("fast", "expected a mapping")):
        with pytest.raises(ConfigError, match=rf"train.yaml: field 'sim_loop' = .*{problem}"):
            load_train_config(tiny_config(tmp_path, sim_loop=bad))


def test_random_shift_moves_each_image_by_its_own_offset_and_repeats_the_edges():
    import torch

    images = torch.zeros((64, 12, 10, 3), dtype=torch.uint8)
    images[:, 6, 5] = torch.tensor([255, 128, 7], dtype=torch.uint8)  # one marked pixel per image
    images[:, :, 0] = 9  # a left edge column
    assert random_shift(images, 0, torch.Generator().manual_seed(0)) is images
    shifted = random_shift(images, 3, torch.Generator().manual_seed(1))
    assert shifted.shape == images.shape and shifted.dtype == torch.uint8
    seen = set()
    for image in shifted:
        rows, cols = torch.nonzero(image[..., 1] == 128, as_tuple=True)
        assert len(rows) == 1  # the mark moved, whole, by at most 3 px each way
        dy, dx = int(rows[0]) - 6, int(cols[0]) - 5
        assert abs(dy) <= 3 and abs(dx) <= 3 and image[rows[0], cols[0]].tolist() == [255, 128, 7]
        seen.add((dy, dx))
        if dx > 0:  # moved right by dx: the left edge column repeats into the first dx + 1 columns
            assert bool(torch.all(image[:, :dx + 1] == 9)) and not bool(torch.any(image[:, dx + 1:] == 9))
    assert len(seen) > 20  # offsets differ between images (49 possible)
    again = random_shift(images, 3, torch.Generator().manual_seed(1))
    assert torch.equal(again, shifted)  # drawn from the generator only


def test_image_shift_px_is_checked_and_left_out_of_the_hash_when_off(tmp_path):
    assert "image_shift_px" not in load_train_config(tiny_config(tmp_path)).to_dict()
    assert load_train_config(tiny_config(tmp_path, image_shift_px=4)).to_dict()["image_shift_px"] == 4
    for bad in (-1, 17, 2.5, True):
        with pytest.raises(ConfigError, match=r"train.yaml: field 'image_shift_px'"):
            load_train_config(tiny_config(tmp_path, image_shift_px=bad))


def test_dagger_rounds_past_the_eighth_skip_the_evaluations_episodes(tmp_path):
    """A ninth DAgger round once played the trainer's evaluation episodes (100_000 x 9 = its offset):
    a 10-round run trained for 2 hours, then refused to evaluate. Rounds 1-8 keep their episodes."""
    from sim2real_ros.training.episode_plan import EVAL_SEED_OFFSET, dagger_offset, training_index_ranges

    assert [dagger_offset(r) for r in range(1, 9)] == [100_000 * r for r in range(1, 9)]
    assert dagger_offset(9) == 1_000_000 and dagger_offset(10) == 1_100_000
    ranges = training_index_ranges(120, 48, 100_000)
    evaluation = set(range(EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + 100_000, 997))
    assert all(b[0] >= a[1] for a, b in zip(ranges, ranges[1:], strict=False))  # in order, apart
    assert not any(first <= i < last for first, last in ranges for i in evaluation)
    assert ranges[-1][1] <= 5_000_000  # below fine-tuning's co-training episodes
    config = load_train_config(tiny_config(tmp_path, dagger_rounds=10, dagger_episodes=60, eval_episodes=30))
    trainer = Trainer(config, tmp_path / "p.pt", tmp_path / "work", log=print)
    try:
        recorded = trainer.training_episodes()["index_ranges"]
    finally:
        trainer.close()
    assert recorded[9] == [1_000_000, 1_000_060] and not any(
        first < EVAL_SEED_OFFSET + 30 and last > EVAL_SEED_OFFSET for first, last in recorded)
    for field, value in (("dagger_rounds", 49), ("dagger_episodes", 100_001), ("bc_episodes", 100_001),
                         ("eval_episodes", 100_001)):
        with pytest.raises(ConfigError, match=rf"train.yaml: field '{field}' = {value}"):
            load_train_config(tiny_config(tmp_path, **{field: value}))


def test_eval_sim_core_json(tmp_path):
    ckpt = tmp_path / "untrained.pt"
    assert sim2real(["policy", "init", "--robot", str(urdf_path()), "--out", str(ckpt)]) == 0
    out = tmp_path / "eval.json"
    assert sim2real(["eval-sim", "--checkpoint", str(ckpt), "--episodes", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {"success_rate", "episodes", "ci95", "failures", "action_magnitude_rad"} <= set(result)
    # An untrained policy holds still: it never reaches the target.
    assert result["episodes"] == 1 and result["success_rate"] == 0.0
    assert result["failures"] == {"timeout_far": 1} or result["failures"] == {"timeout_near": 1}


def test_eval_sim_compensates_the_deployment_latency_not_the_variants_own(tmp_path, capsys):
    from sim2real_ros.training.evaluation import deployment_actuation_latency_s

    # config/params.yaml's actuator value, not real B's true 80 ms.
    assert deployment_actuation_latency_s() == pytest.approx(0.02)
    params = tmp_path / "params.yaml"
    params.write_text("/**/actuator_node:\n  ros__parameters:\n    actuation_latency: 0.035\n")
    assert deployment_actuation_latency_s(params) == pytest.approx(0.035)
    params.write_text("/**/actuator_node:\n  ros__parameters:\n    actuation_latency: -1.0\n")
    with pytest.raises(ConfigError, match="actuation_latency"):
        deployment_actuation_latency_s(params)
    ckpt = tmp_path / "untrained.pt"
    assert sim2real(["policy", "init", "--robot", str(urdf_path()), "--out", str(ckpt)]) == 0
    variant = config_path("sim_params_real_b.yaml")
    assert load_sim_params(variant).actuator.actuation_latency_s == pytest.approx(0.08)
    out = tmp_path / "eval.json"
    base = ["eval-sim", "--checkpoint", str(ckpt), "--episodes", "1", "--sim-config", str(variant), "--json", str(out)]
    assert sim2real(base) == 0
    result = json.loads(out.read_text())
    assert result["actuation_latency_s"] == pytest.approx(0.02) and result["actuation_latency_source"] == "deployment"
    assert result["sim_actuation_latency_s"] == pytest.approx(0.08)
    assert sim2real([*base, "--actuation-latency", "0.08"]) == 0
    result = json.loads(out.read_text())
    assert result["actuation_latency_s"] == pytest.approx(0.08) and result["actuation_latency_source"] == "override"
    capsys.readouterr()
    assert sim2real([*base, "--actuation-latency", "-0.1"]) == 2
    assert "--actuation-latency" in capsys.readouterr().out


def test_round_minibatches_caps_a_dagger_rounds_refit_in_whole_epochs(tmp_path, monkeypatch):
    """round_minibatches: late rounds over a large dataset refit for about the same number of
    minibatches as early ones (whole epochs, at least one, at most epochs_per_round); it is left out
    of the config's hash when 0 and never in the BC stage's (a work directory resumes with it), and
    the trainer refits each round for that many epochs."""
    import types

    from sim2real_ros.training import trainer as trainer_module
    from sim2real_ros.training.trainer import round_epochs

    assert round_epochs(12, 0, 52_000, 64) == 12  # no budget: epochs_per_round
    assert round_epochs(12, 2_000, 10_000, 64) == 12  # 157 minibatches an epoch: 12 fit
    assert round_epochs(12, 2_000, 52_000, 64) == 2  # 813 an epoch
    assert round_epochs(12, 100, 52_000, 64) == 1  # at least one epoch
    assert round_epochs(3, 5_000, 640, 64) == 3  # at most epochs_per_round
    plain = load_train_config(tiny_config(tmp_path))
    capped = load_train_config(tiny_config(tmp_path, round_minibatches=3))
    assert "round_minibatches" not in plain.to_dict() and capped.to_dict()["round_minibatches"] == 3
    assert Trainer._bc_hash(types.SimpleNamespace(config=plain)) == Trainer._bc_hash(
        types.SimpleNamespace(config=capped))
    with pytest.raises(ConfigError, match=r"train.yaml: field 'round_minibatches' = -1"):
        load_train_config(tiny_config(tmp_path, round_minibatches=-1))

    epochs_fitted = []
    original_fit = trainer_module.fit

    def recording_fit(model, data, epochs, *args, **kwargs):
        epochs_fitted.append((epochs, len(data)))
        return original_fit(model, data, epochs, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "fit", recording_fit)
    (tmp_path / "capped").mkdir()
    config = load_train_config(tiny_config(tmp_path / "capped", bc_episodes=1, dagger_rounds=2, epochs_bc=1,
                                           epochs_per_round=5, batch_size=8, round_minibatches=1, eval_episodes=0,
                                           final_round_minibatches=10_000, final_round_epochs=3))
    trainer = Trainer(config, tmp_path / "capped.pt", tmp_path / "capped_work", log=print)
    try:
        trainer.run()
    finally:
        trainer.close()
    (bc_epochs, _), (dagger_epochs, frames), (last_epochs, _) = epochs_fitted
    assert bc_epochs == 1 and frames > 8  # more than one minibatch an epoch, so the budget of 1 binds
    assert dagger_epochs == round_epochs(5, 1, frames, 8) == 1
    assert last_epochs == 3  # the last round's own budget (10,000 minibatches) and cap (3 epochs)


def test_the_last_dagger_round_has_its_own_refit_budget(tmp_path):
    """final_round_minibatches / final_round_epochs apply to the last round only, fall back to the
    per-round ones when 0, stay out of the config's hash when 0 (the committed recipes keep their
    hashes) and out of the BC stage's (a twelve-round work directory resumes with a long last round)."""
    import types

    from sim2real_ros.training.trainer import round_budget

    plain = load_train_config(tiny_config(tmp_path, dagger_rounds=3, epochs_per_round=12, round_minibatches=8000))
    long_last = load_train_config(tiny_config(tmp_path, dagger_rounds=3, epochs_per_round=12, round_minibatches=8000,
                                              final_round_minibatches=34000, final_round_epochs=40))
    assert [round_budget(plain, r) for r in (1, 2, 3)] == [(12, 8000)] * 3
    assert [round_budget(long_last, r) for r in (1, 2, 3)] == [(12, 8000), (12, 8000), (40, 34000)]
    epochs_only = load_train_config(tiny_config(tmp_path, dagger_rounds=2, final_round_epochs=20))
    assert round_budget(epochs_only, 2) == (20, 0)
    assert "final_round_minibatches" not in plain.to_dict() and "final_round_epochs" not in plain.to_dict()
    assert long_last.to_dict()["final_round_minibatches"] == 34000
    assert Trainer._bc_hash(types.SimpleNamespace(config=plain)) == Trainer._bc_hash(
        types.SimpleNamespace(config=long_last))
    for name in ("final_round_minibatches", "final_round_epochs"):
        with pytest.raises(ConfigError, match=rf"train.yaml: field '{name}' = -5"):
            load_train_config(tiny_config(tmp_path, **{name: -5}))
