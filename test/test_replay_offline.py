"""Offline replay of a bag recorded from the sim graph (sim_node, camera_preprocessor, policy_node,
actuator_node, supervisor with auto_arm, and the recorder), with an untrained checkpoint.

The robot commands in the bag were produced by that checkpoint, so replaying it must give near-zero
error; another checkpoint (other seed, larger outputs) and a perturbed copy of the command topic
must not. The bag is recorded once per test session (the `sim_recording` fixture, test/recordings.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from recordings import JOINTS, NAMESPACE, NEAR_ZERO_MAE, PERTURBATION, PERTURBED_JOINT
from support import TALKER_BAGS

from sim2real_ros.bags import BagReader
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.conversions import stamp_to_ns
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.episodes.topics import MissingTopicsError
from sim2real_ros.evaluation import ReplayOptions, evaluate_bag
from sim2real_ros.paths import config_path
from sim2real_ros.training.untrained import init_checkpoint

ALL_COMMANDS = ReplayOptions(human_modes=(), progress=False, plots=False)


def images_without_joint_state(bag: Path, topics: dict, tolerance_s: float) -> tuple[int, int]:
    """(images read before any camera_info, the others with no joint state stamped within
    `tolerance_s` [s] of their stamp) in `bag`, in the order the bag holds them. The replay skips the
    first kind as no_camera_info whatever their joint states (CI: the recording's first image had
    neither), so they are not counted in the second."""
    image_ns, joint_ns = [], []
    before_camera_info = 0
    with BagReader(bag) as reader:
        seen_info = False
        for message in reader.messages([topics["image"], topics["joint_states"], topics["camera_info"]]):
            if message.topic == topics["camera_info"]:
                seen_info = True
                continue
            stamp = stamp_to_ns(message.msg.header.stamp)
            if message.topic == topics["joint_states"]:
                joint_ns.append(stamp)
            elif seen_info:
                image_ns.append(stamp)
            else:
                before_camera_info += 1
    joints = np.sort(np.array(joint_ns, dtype=np.int64))
    tolerance_ns = int(round(tolerance_s * 1e9))
    missing = 0
    for stamp in image_ns:
        i = int(np.searchsorted(joints, stamp))
        nearest = min((abs(int(joints[j]) - stamp) for j in (i - 1, i) if 0 <= j < len(joints)), default=None)
        missing += nearest is None or nearest > tolerance_ns
    return before_camera_info, missing


def test_offline_replay_of_the_same_policy_has_near_zero_error_and_writes_the_report(sim_recording, tmp_path):
    report_dir = tmp_path / "report"
    options = ReplayOptions(human_modes=(), progress=False)
    report = evaluate_bag(sim_recording.bag, sim_recording.checkpoint, "offline", report_dir, options)
    frames = report["frames"]
    assert frames["evaluated"] >= 10, frames
    # Exactly the images the bag holds no joint state for within the pairing tolerance are skipped
    # (counted here independently; how many there are depends on how loaded the recording machine was).
    no_camera_info, no_joint_state = images_without_joint_state(sim_recording.bag, report["topics"],
                                                                options.pairing_tolerance_s)
    assert frames["skipped"].get("no_camera_info", 0) == no_camera_info, frames
    assert frames["skipped"]["no_joint_state_within_tolerance"] == no_joint_state, frames
    overall = report["metrics"]["overall"]
    assert overall["mae"] < NEAR_ZERO_MAE and overall["max_abs"] < 5e-3, overall
    assert len(report["metrics"]["by_chunk_index"]) == 10
    assert report["metrics"]["chunk_boundary_jumps"]["max"] < 5e-3
    assert report["topics"]["action"] == "/forward_position_controller/commands"
    assert json.loads((report_dir / "report.json").read_text()) == report
    text = (report_dir / "report.md").read_text()
    assert "| joint1 |" in text and "Error by chunk index" in text
    for name in report["plots"]:
        assert (report_dir / name).stat().st_size > 1000
    assert set(report["plots"]) >= {"predicted_vs_recorded.png", "error_histogram.png"}

    # The actuator's own output (command/policy, stamped with its tick) agrees just as well.
    policy_commands = ReplayOptions(action_topic="command/policy", human_modes=(), progress=False, plots=False)
    report = evaluate_bag(sim_recording.bag, sim_recording.checkpoint, "offline", None, policy_commands)
    assert report["frames"]["evaluated"] >= 10
    assert report["metrics"]["overall"]["mae"] < NEAR_ZERO_MAE


def test_another_checkpoint_is_clearly_off(sim_recording):
    same = evaluate_bag(sim_recording.bag, sim_recording.checkpoint, "offline", None, ALL_COMMANDS)["metrics"]
    other = evaluate_bag(sim_recording.bag, sim_recording.other_checkpoint, "offline", None, ALL_COMMANDS)["metrics"]
    assert other["overall"]["mae"] > 0.02
    assert other["overall"]["mae"] > 20 * same["overall"]["mae"]
    magnitude = other["action_magnitude"]
    assert magnitude["predicted"]["mean"] > 10 * magnitude["human"]["mean"]


def test_perturbed_namespaced_commands_show_on_that_joint_only(sim_recording):
    report = evaluate_bag(sim_recording.perturbed_bag, sim_recording.checkpoint, "offline", None, ALL_COMMANDS)
    assert report["topics"]["image"] == NAMESPACE + "/camera/image_raw"
    per_joint = report["metrics"]["per_joint"]
    for j, name in enumerate(JOINTS):
        if j == PERTURBED_JOINT:
            assert per_joint[name]["mae"] == pytest.approx(PERTURBATION, abs=5e-3)
            assert per_joint[name]["bias"] == pytest.approx(-PERTURBATION, abs=5e-3)  # predicted - recorded
        else:
            assert per_joint[name]["mae"] < NEAR_ZERO_MAE, (name, per_joint[name])


def test_default_compares_only_human_commands_and_the_cli_says_none_were(sim_recording, tmp_path, capsys):
    """The sim graph ran AUTONOMOUS (auto_arm) after HOLD: no command was a person's."""
    code = cli_main(["replay", "--bag", str(sim_recording.bag), "--checkpoint", str(sim_recording.checkpoint),
                     "--report", str(tmp_path), "--no-plots"])
    assert code == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["frames"]["evaluated"] == 0
    skipped = report["frames"]["skipped"]
    # Frames before the supervisor's first command, or past the last one, had no command at all.
    assert skipped["not_in_human_mode"] + skipped["no_human_action"] == report["frames"]["predicted"] > 0
    assert skipped["not_in_human_mode"] > 0.5 * report["frames"]["predicted"]
    assert report["recorded"]["human_actions"] == 0
    assert report["recorded"]["mode_time_s"]["AUTONOMOUS"] > 1.0
    assert "0 of" in capsys.readouterr().out


def test_a_bag_without_the_needed_topics_fails_fast_naming_both_sides(tmp_path, capsys):
    bag = TALKER_BAGS / "rosbag2_talker_mcap"
    checkpoint = tmp_path / "p.pt"
    init_checkpoint(checkpoint, JOINTS, PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
    with pytest.raises(MissingTopicsError) as err:
        evaluate_bag(bag, checkpoint, "offline", tmp_path / "report")
    text = str(err.value)
    for needed in ("camera/image_raw", "camera/camera_info", "joint_states", "forward_position_controller/commands",
                   "supervisor/state"):
        assert needed in err.value.missing and needed in text
    assert "/topic (std_msgs/msg/String)" in text and "/rosout" in text
    assert not (tmp_path / "report").exists()
    code = cli_main(["replay", "--bag", str(bag), "--checkpoint", str(checkpoint), "--report", str(tmp_path / "r"),
                     "--all-actions"])
    assert code == 2
    err_text = capsys.readouterr().err
    assert "missing topic(s)" in err_text and "supervisor/state" not in err_text.split("the bag has")[0]


def test_batched_offline_replay_gives_the_predictions_of_one_at_a_time(sim_recording):
    """Issue 36: observations evaluated in batches (one forward pass each) predict what one at a
    time does: the same frames, stamps, observed joints and skips; targets equal up to the
    network's float32 rounding (a batched matrix product sums in another order)."""
    from sim2real_ros.core.policy.backend import load_policy
    from sim2real_ros.evaluation.replay_offline import replay_offline

    policy = load_policy(sim_recording.checkpoint, num_threads=1)
    runs = {size: replay_offline(sim_recording.bag, policy, ReplayOptions(human_modes=(), progress=False,
                                                                          plots=False, batch_size=size))
            for size in (1, 7, 32)}
    one = runs[1].predictions
    assert len(one.stamps_ns) >= 10
    for size in (7, 32):
        batched = runs[size].predictions
        assert runs[size].stats["batch_size"] == size
        np.testing.assert_array_equal(batched.stamps_ns, one.stamps_ns)
        np.testing.assert_array_equal(batched.observed_q, one.observed_q)
        assert runs[size].skipped == runs[1].skipped
        np.testing.assert_allclose(batched.targets, one.targets, rtol=0, atol=1e-5)


def test_select_actions_matches_select_action_and_refuses_a_bad_observation(sim_recording):
    from sim2real_ros.core.policy.backend import load_policy

    policy = load_policy(sim_recording.checkpoint, num_threads=1)
    spec = policy.spec
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (5, spec.image_height, spec.image_width, 3), dtype=np.uint8)
    joints = rng.normal(0.0, 0.5, (5, spec.joint_count))
    one = np.stack([policy.select_action(image, q) for image, q in zip(images, joints, strict=True)])
    batched = policy.select_actions(images, joints)
    assert batched.shape == one.shape == (5, spec.chunk_length, spec.joint_count)
    np.testing.assert_allclose(batched, one, rtol=0, atol=1e-5)
    joints[2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        policy.select_actions(images, joints)


def test_a_history_policy_replays_the_bags_joint_states_before_each_image_batched_or_not(sim_recording, tmp_path):
    """Issue 32 part 3: offline replay gives a policy with joint_history_s the bag's joint states at
    those lags before each image (linear between them), the same batched or one at a time. The
    policy's image features are made constant, so a frame's prediction can be recomputed from its
    joints and the history sampled here from the bag."""
    from sim2real_ros.core.control.joint_history import sample_history
    from sim2real_ros.core.policy.backend import load_policy
    from sim2real_ros.core.policy.checkpoint import make_policy_spec, read_checkpoint, save_checkpoint
    from sim2real_ros.core.policy.model import build_model
    from sim2real_ros.evaluation.replay_offline import replay_offline

    trained, _, _ = read_checkpoint(sim_recording.checkpoint)
    lags = (0.1, 0.2)
    spec = make_policy_spec(trained.joint_names, PreprocessConfig.from_dict(trained.preprocess), joint_history_s=lags)
    model = build_model(spec.architecture, spec, **spec.hparams)
    n, k = spec.joint_count, spec.chunk_length
    model.set_normalization(np.zeros(n), np.ones(n), np.zeros((k, n)), np.full((k, n), 0.3))
    with torch.no_grad():
        # The recorded arm (an untrained policy) moves by tens of microradians: a history scale far
        # below the trained floor makes that motion count, so a wrong history would show.
        model.history_std.fill_(1e-6)
        model.image_encoder[-2].weight.zero_()  # the image's features: a constant (the layer's bias)
    path = tmp_path / "history.safetensors"
    save_checkpoint(path, model, spec)
    policy = load_policy(path, num_threads=1)
    runs = {size: replay_offline(sim_recording.bag, policy, ReplayOptions(human_modes=(), progress=False,
                                                                          plots=False, batch_size=size))
            for size in (1, 16)}
    one, batched = runs[1].predictions, runs[16].predictions
    assert len(one.stamps_ns) >= 10
    np.testing.assert_array_equal(batched.stamps_ns, one.stamps_ns)
    np.testing.assert_allclose(batched.targets, one.targets, rtol=0, atol=1e-5)
    with BagReader(sim_recording.bag) as reader:
        states = [m.msg for m in reader.messages(["/joint_states"])]
    stamps = [stamp_to_ns(m.header.stamp) for m in states]
    positions = [np.array([dict(zip(m.name, m.position, strict=True))[j] for j in spec.joint_names]) for m in states]
    black = np.zeros((spec.image_height, spec.image_width, 3), np.uint8)
    telling = 0  # frames whose prediction a present-only history would have changed
    for stamp, q, targets in zip(one.stamps_ns, one.observed_q, one.targets, strict=True):
        history = sample_history(stamps, positions, int(stamp), lags)
        np.testing.assert_allclose(targets, policy.select_action(black, q, history), rtol=0, atol=1e-5)
        present = policy.select_action(black, q, np.tile(q, (len(lags), 1)))
        telling += np.abs(targets - present).max() > 1e-3
    assert telling >= 3
