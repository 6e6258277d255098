"""Fine-tuning on real bags: label timing on a hand-built bag, then real fine-tuning (torch) on the
teleop recording (the `teleop_recording` session fixture, test/teleop_data.py: the scripted operator in
the "real" sim variant)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.serialization import serialize_message
from teleop_data import JOINTS

from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.cli.main import main as sim2real
from sim2real_ros.conversions import (
    array_to_image,
    camera_model_to_info,
    make_joint_state,
    make_position_command,
    ns_to_stamp,
)
from sim2real_ros.core.errors import CheckpointError, ConfigError
from sim2real_ros.core.perception.camera_model import load_calibration_yaml
from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.policy.checkpoint import (
    checkpoint_hash,
    encode_checkpoint,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    write_atomically,
)
from sim2real_ros.core.policy.model import build_model
from sim2real_ros.core.stats import wilson_interval
from sim2real_ros.episodes.dataset import LabelConfig, build_dataset, default_actuation_latency_s
from sim2real_ros.finetune.finetune import FinetuneConfig, finetune, split_episodes
from sim2real_ros.paths import config_path
from sim2real_ros.provenance import absolute_paths

S = 1_000_000_000
MS = 1_000_000
SLOPE = np.array([0.1, 0.2, 0.3, -0.1, -0.2, 0.05])  # [rad/s] command ramp per joint
TAKEOVER_S, END_S, LATENCY_S = 1.5, 4.0, 0.03


def _state(stamp_ns: int, mode: str) -> bytes:
    msg = DiagnosticArray()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.status = [DiagnosticStatus(name="supervisor", values=[KeyValue(key="mode", value=mode)])]
    return serialize_message(msg)


def _outcome(stamp_ns: int, duration_s: float, success: bool = True) -> bytes:
    msg = DiagnosticArray()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    values = {"episode": "1", "success": "true" if success else "false", "duration_s": f"{duration_s:.4f}",
              "reason": "success" if success else "timeout",
              "final_distance_m": "0.02"}
    msg.status = [DiagnosticStatus(name="episode", values=[KeyValue(key=k, value=v) for k, v in values.items()])]
    return serialize_message(msg)


def hand_built_bag(path, human: bool = True, success: bool = True):
    """Policy (AUTONOMOUS) until TAKEOVER_S, then a person (TELEOP) sends a ramp of commands,
    one episode [0, END_S]; 10 Hz images stamped at 0.05 + 0.1 i, 100 Hz joint states."""
    camera = load_calibration_yaml(config_path("camera_sim.yaml"))
    writer = BagWriter(path)
    for topic, msgtype in (("/camera/image_raw", "sensor_msgs/msg/Image"),
                           ("/camera/camera_info", "sensor_msgs/msg/CameraInfo"),
                           ("/joint_states", "sensor_msgs/msg/JointState"),
                           ("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
                           ("/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray"),
                           ("/sim/episode", "diagnostic_msgs/msg/DiagnosticArray")):
        writer.add_topic(topic, msgtype)
    writer.write("/supervisor/state", 0, _state(1, "AUTONOMOUS"))
    if human:
        writer.write("/supervisor/state", int(TAKEOVER_S * S), _state(int(TAKEOVER_S * S), "TELEOP"))
    image = np.full((camera.height, camera.width, 3), 90, np.uint8)
    for tick in range(1, int(END_S * 100) + 20):
        t = tick * 10 * MS
        joints = make_joint_state(list(JOINTS), 0.01 * t / S + np.zeros(6), t)
        writer.write("/joint_states", t, serialize_message(joints))
        command = make_position_command(SLOPE * t / S)
        writer.write("/forward_position_controller/commands", t, serialize_message(command))
        if tick % 10 == 5:
            writer.write("/camera/camera_info", t, serialize_message(camera_model_to_info(camera, t)))
            writer.write("/camera/image_raw", t + 2 * MS, serialize_message(array_to_image(image, "rgb8", t)))
    writer.write("/sim/episode", int(END_S * S) + 5 * MS, _outcome(int(END_S * S), END_S, success))
    writer.close()
    return path


def _pipeline():
    return ImagePipeline(PreprocessConfig.from_yaml(config_path("preprocess.yaml")))


def test_labels_are_the_human_commands_meant_for_t_plus_k_dt(tmp_path):
    bag = hand_built_bag(tmp_path / "bag")
    config = LabelConfig(actuation_latency_s=LATENCY_S)
    dataset = build_dataset([bag], _pipeline(), JOINTS, chunk_length=10, dt_s=0.05, config=config)
    (episode,) = dataset.usable()
    assert episode.kind == "intervention"  # the policy drove for 1.5 s, then a person took over
    stamps = episode.stamps_ns / S
    # First frame: every chunk point meant after the first human command takes effect (1.5 + 0.03 s);
    # last: the last image of the episode; points past its end hold the person's command at the end.
    assert stamps[0] == pytest.approx(1.55) and stamps[-1] == pytest.approx(3.95)
    assert np.allclose(np.diff(stamps), 0.1)
    times = np.minimum(stamps[:, None] + np.arange(10)[None, :] * 0.05, END_S)
    # A command sent at tau is meant for tau + latency: the label at time s is the command sent at s - latency.
    expected = (times - LATENCY_S)[:, :, None] * SLOPE[None, None, :]
    assert np.allclose(episode.labels, expected, atol=1e-9)
    assert np.allclose(episode.joints, 0.01 * stamps[:, None] * np.ones(6))
    assert episode.images.shape[1:] == (96, 96, 3) and episode.images.dtype == np.uint8
    assert dataset.skipped["not_human_controlled"] > 0 and dataset.skipped["episode_edge"] > 0
    # Another latency shifts the labels by exactly that much.
    shifted = build_dataset([bag], _pipeline(), JOINTS, 10, 0.05, LabelConfig(actuation_latency_s=0.0)).usable()[0]
    common = np.isin(shifted.stamps_ns, episode.stamps_ns)
    assert np.allclose(shifted.labels[common] - episode.labels, LATENCY_S * SLOPE, atol=1e-9)


def test_no_human_commands_is_a_clear_error(tmp_path):
    bag = hand_built_bag(tmp_path / "bag", human=False)
    with pytest.raises(ConfigError, match="no labelled frame"):
        finetune(teleop_checkpoint(tmp_path), [bag], tmp_path / "out.pt", FinetuneConfig(epochs=1))
    with pytest.raises(ConfigError, match="'lr' = 2"):
        FinetuneConfig(lr=2.0)
    with pytest.raises(ConfigError, match="holdout"):
        FinetuneConfig(holdout=1.0)
    assert default_actuation_latency_s() == pytest.approx(0.02)  # config/params.yaml's actuator value


def teleop_checkpoint(tmp_path):
    from teleop_data import tiny_checkpoint

    return tiny_checkpoint(tmp_path / "tiny.pt")


def test_non_finite_weights_are_neither_fine_tuned_from_nor_written(tmp_path, capsys):
    """A parent with a NaN weight is refused before any training; a model whose training diverged
    (an infinity in its weights) is not written, and an older file at `out` is left as it was."""
    tiny = teleop_checkpoint(tmp_path)
    spec, state, _ = read_checkpoint(tiny)
    name = sorted(k for k in state if k.startswith("head"))[0]
    state[name] = state[name].clone()
    state[name].view(-1)[0] = float("nan")
    poisoned = tmp_path / "poisoned.pt"
    write_atomically(poisoned, encode_checkpoint(spec, state))
    bag = hand_built_bag(tmp_path / "bag")
    out = tmp_path / "out.pt"
    with pytest.raises(CheckpointError, match=f"{poisoned}: tensors .*{name}.* contain NaN/Inf; refusing to fine-tune"):
        finetune(poisoned, [bag], out, FinetuneConfig(epochs=1, real_fraction=1.0))
    assert not out.exists()
    code = sim2real(["finetune", "--checkpoint", str(poisoned), "--bags", str(bag), "--out", str(out),
                     "--epochs", "1", "--real-fraction", "1"])
    captured = capsys.readouterr()
    assert code == 2 and "refusing to fine-tune" in captured.err and "Traceback" not in captured.err
    assert not out.exists()
    model = build_model(spec.architecture, spec, **spec.hparams)
    _, clean, _ = read_checkpoint(tiny)
    model.load_state_dict(clean)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("inf")
    out.write_bytes(b"an older file")
    with pytest.raises(CheckpointError, match=r"cannot save .*out\.pt: tensors .* contain NaN/Inf; nothing written"):
        save_checkpoint(out, model, spec)
    assert out.read_bytes() == b"an older file"


def test_split_holds_out_whole_episodes():
    episodes = list(range(10))
    train, held = split_episodes(episodes, 0.3, seed=0)
    assert len(held) == 3 and sorted(train + held) == episodes and not set(train) & set(held)
    assert split_episodes(episodes[:1], 0.3, 0) == ([0], [])
    assert split_episodes(episodes, 0.0, 0) == (episodes, [])


def test_finetune_fits_the_real_episodes_holds_out_whole_ones_and_records_provenance(teleop_recording, tmp_path):
    spec, parent_state, _ = read_checkpoint(teleop_recording.tiny)
    dataset = build_dataset(teleop_recording.bags, ImagePipeline(PreprocessConfig.from_dict(spec.preprocess)), JOINTS,
                            spec.chunk_length, spec.dt_s, LabelConfig())
    assert len(dataset.usable()) == 3 and dataset.frames >= 12, json.dumps(dataset.summary())
    assert {e.kind for e in dataset.usable()} <= {"demonstration", "intervention"}
    out = tmp_path / "tuned.pt"
    report = finetune(teleop_recording.tiny, teleop_recording.bags, out,
                      FinetuneConfig(epochs=100, lr=1e-3, holdout=0.34, seed=1, real_fraction=1.0),
                      dataset=dataset)
    # It fits the training episodes; the held-out episode is measured apart, before and after (whether
    # it improves needs more than three short episodes: benchmarks/bench_finetune.py shows that).
    assert report["after"]["train"]["mae_rad"] < 0.95 * report["before"]["train"]["mae_rad"], report["after"]
    held_frames = sum(len(e) for e in dataset.usable() if e.episode_id in report["holdout_episodes"])
    assert report["before"]["holdout"]["frames"] == report["after"]["holdout"]["frames"] == held_frames > 0
    assert report["before"]["holdout"]["mae_rad"] > 0 and report["after"]["holdout"]["mae_rad"] > 0
    provenance = load_checkpoint(out).spec.provenance
    assert provenance["parent"] == checkpoint_hash(teleop_recording.tiny)
    assert [b["name"] for b in provenance["bags"]] == [Path(b).name for b in teleop_recording.bags]
    assert absolute_paths(provenance) == []  # bags outside the repository: folder name + fingerprint
    assert all(len(b["fingerprint"]) == 16 for b in provenance["bags"])
    held, train = provenance["episodes"]["holdout"], provenance["episodes"]["train"]
    assert len(held) == 1 and len(train) == 2 and not set(held) & set(train)
    # Without freezing, the encoder learns too.
    _, tuned_state, _ = read_checkpoint(out)
    assert any(not torch.equal(tuned_state[k], parent_state[k]) for k in parent_state if k.startswith("image_encoder"))


def test_cli_freeze_encoder_keeps_the_encoder_and_changes_the_head(teleop_recording, tmp_path, capsys):
    out, report_file = tmp_path / "frozen.pt", tmp_path / "finetune.json"
    code = sim2real(["finetune", "--checkpoint", str(teleop_recording.tiny), "--bags", str(teleop_recording.out),
                     "--out", str(out),
                     "--epochs", "3", "--lr", "1e-3", "--freeze-encoder", "--holdout", "0.3", "--real-fraction", "1",
                     "--report", str(report_file)])
    assert code == 0
    assert "held-out offline action error" in capsys.readouterr().out
    spec, parent, _ = read_checkpoint(teleop_recording.tiny)
    _, tuned, _ = read_checkpoint(out)
    encoder = [k for k in parent if k.startswith("image_encoder")]
    assert encoder and all(torch.equal(tuned[k], parent[k]) for k in encoder)
    assert any(not torch.equal(tuned[k], parent[k]) for k in parent if k.startswith("head"))
    # Normalization statistics are the parent's (the network works in those units).
    for name in ("joint_mean", "joint_std", "action_mean", "action_std"):
        assert torch.equal(tuned[name], parent[name])
    report = json.loads(report_file.read_text())
    assert report["parent"] == checkpoint_hash(teleop_recording.tiny) and report["frozen_parameters"]
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(tuned)  # still the parent's architecture
    # Its ONNX export beside it, of this checkpoint: what a lean robot graph runs (cli/onnx_beside.py).
    from sim2real_ros.core.policy.onnx_policy import onnx_parent_hash
    assert onnx_parent_hash(out.with_suffix(".onnx")) == checkpoint_hash(out)


def test_cotraining_mixes_sim_frames_of_the_training_distribution(teleop_recording, tmp_path):
    from sim2real_ros.finetune.finetune import INTERVENTION_WEIGHT, frame_weights
    from sim2real_ros.finetune.sim_data import collect_sim_frames, training_distribution

    spec, state, _ = read_checkpoint(teleop_recording.tiny)
    dataset = build_dataset(teleop_recording.bags, ImagePipeline(PreprocessConfig.from_dict(spec.preprocess)), JOINTS,
                            spec.chunk_length, spec.dt_s, LabelConfig())
    # Interventions (the states the policy drove into) are drawn more often than demonstrations.
    weights = frame_weights(dataset.usable())
    kinds = np.concatenate([[e.kind] * len(e) for e in dataset.usable()])
    assert "intervention" in kinds and np.all(weights[kinds == "intervention"] == INTERVENTION_WEIGHT)
    assert np.all(weights[kinds != "intervention"] == 1)
    # A checkpoint without training provenance: the default training sim, randomized, IK teacher.
    dist = training_distribution(spec)
    assert dist["sim_params"] == str(config_path("sim_params.yaml")) and dist["randomize"] and dist["teacher"] == "ik"
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(state)
    sim = collect_sim_frames(spec, model, 2, seed=3)
    assert len(sim) > 0 and sim.images.shape[1:] == (96, 96, 3) and sim.labels.shape[1:] == (10, len(JOINTS))
    # DAgger labels from the teacher: point 0 is where the arm is when observed (docs/design.md §3).
    assert np.allclose(sim.labels[:, 0], sim.joints, atol=1e-6)
    out = tmp_path / "cotrained.pt"
    report = finetune(teleop_recording.tiny, teleop_recording.bags, out,
                      FinetuneConfig(epochs=3, lr=1e-3, real_fraction=0.5, holdout=0.0, seed=1),
                      dataset=dataset, sim_frames=sim)
    assert report["sim_frames"]["frames"] == len(sim) and report["sim_frames"]["episodes"] == 2
    assert report["before"]["sim"]["frames"] == len(sim) and report["after"]["sim"]["mae_rad"] > 0
    provenance = load_checkpoint(out).spec.provenance
    assert provenance["data"] == "real bags + sim" and provenance["config"]["real_fraction"] == 0.5
    # real_fraction 1.0: real data only, no sim frames used or reported.
    real_only = finetune(teleop_recording.tiny, teleop_recording.bags, tmp_path / "real_only.pt",
                         FinetuneConfig(epochs=1, lr=1e-3, real_fraction=1.0, holdout=0.0), dataset=dataset)
    assert real_only["sim_frames"] is None and "sim" not in real_only["after"]
    with pytest.raises(ConfigError, match="real_fraction"):
        FinetuneConfig(real_fraction=0.0)


def test_judging_compares_intervals_and_names_disagreement():
    from sim2real_ros.finetune.judge import compare, disagreement

    def figure(wins, n=20):
        return {"successes": wins, "episodes": n, "ci95": list(wilson_interval(wins, n))}

    assert compare(figure(9), figure(19)) == "higher" and compare(figure(19), figure(9)) == "lower"
    assert compare(figure(18), figure(16)) == "same within CIs"
    # Lower offline error but no better in closed loop: said, with the figures.
    text = disagreement(0.0356, 0.0295, figure(20), figure(16))
    assert "35.6 -> 29.5 mrad" in text and "20/20 -> 16/20" in text
    assert disagreement(0.0356, 0.0295, figure(9), figure(19)) == ""
    assert "did not fall" in disagreement(0.03, 0.031, figure(9), figure(19))
    assert disagreement(None, None, figure(9), figure(19)) == ""


def test_finetune_cli_judges_in_closed_loop(teleop_recording, tmp_path, capsys):
    report_file = tmp_path / "finetune.json"
    code = sim2real(["finetune", "--checkpoint", str(teleop_recording.tiny), "--bags", str(teleop_recording.out),
                     "--out", str(tmp_path / "tuned.pt"), "--epochs", "1", "--real-fraction", "1.0",
                     "--robot-sim", str(config_path("sim_params_real_b.yaml")), "--eval-episodes", "1",
                     "--report", str(report_file), "--no-export-onnx"])
    assert code == 0
    printed = capsys.readouterr().out
    assert not (tmp_path / "tuned.onnx").exists() and "ONNX export" not in printed
    assert "closed-loop success, robot: 0/1" in printed and "closed-loop success, perturbed" in printed
    written = json.loads(report_file.read_text())
    # One episode held out to measure; the written checkpoint was refit on all three.
    assert len(written["holdout_episodes"]) == 1 and len(written["checkpoint_trained_on"]) == 3
    assert written["after"]["written_checkpoint_all_episodes"]["frames"] == sum(
        e["frames"] for e in written["dataset"]["episode_list"])
    judged = written["closed_loop"]
    assert judged["seeds"] == {"robot": 5000, "nominal": 1000, "perturbed": 51000}
    for where in ("robot", "nominal", "perturbed"):
        for name in ("before", "after"):
            figure = judged[where][name]
            assert figure["episodes"] == 1 and figure["actuation_latency_source"] == "deployment"
            assert figure["ci95"] == list(wilson_interval(figure["successes"], 1))
    assert sim2real(["finetune", "--checkpoint", str(teleop_recording.tiny), "--bags", str(teleop_recording.out),
                     "--out", str(tmp_path / "x.pt"), "--robot-sim", str(tmp_path / "none.yaml")]) == 2


def test_episodes_the_person_did_not_finish_are_left_out(tmp_path):
    bag = hand_built_bag(tmp_path / "bag", success=False)
    config = FinetuneConfig(epochs=1, real_fraction=1.0, holdout=0.0, labels=LabelConfig(actuation_latency_s=LATENCY_S))
    with pytest.raises(ConfigError, match=r"no labelled frame.*left out as unfinished: \['bag#0'\]"):
        finetune(teleop_checkpoint(tmp_path), [bag], tmp_path / "out.pt", config)
    import dataclasses

    report = finetune(teleop_checkpoint(tmp_path), [bag], tmp_path / "out.pt",
                      dataclasses.replace(config, successful_only=False))
    assert report["failed_episodes_left_out"] == [] and report["checkpoint_trained_on"] == ["bag#0"]
