"""sysid fit (issue #10): a sim with randomly drawn latency, gains and damping is recorded for an
excitation sequence (sysid.excite), and `sim2real sysid fit` must recover the drawn latency within
one control period and the gains within 10 % from nominal parameters, cut the held-out error to
30 % or less, and flag what the data cannot determine. Plus bad input, command stamps, and the
written params file.

Two recordings, both deterministic in sim time, so no assertion depends on scheduling:
- in process (sysid.sim_bag.record_sim_bag: real PyBullet, a real MCAP bag from BagWriter, each
  command logged at the sim time it was sent);
- through DDS: sim_node and the recorder as processes, the sim in lockstep (after each camera frame
  it waits for the command that answers it), the test stamping each command with the frame's sim
  time as the actuator stamps command/policy with its control tick, and the fit using those stamps.
"""
from __future__ import annotations

import copy
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from support import REPO_ROOT, node_decl, running_nodes, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.core.hashing import content_hash
from sim2real_ros.nodes.common import LATCHED_QOS, SENSOR_QOS
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict
from sim2real_ros.sysid.excite import ExcitationSequence, ExciteOptions, excitation_for_robot
from sim2real_ros.sysid.fit import FitOptions
from sim2real_ros.sysid.fit_data import align
from sim2real_ros.sysid.latency import SysidError
from sim2real_ros.sysid.signals import JointStream
from sim2real_ros.sysid.sim_bag import record_sim_bag

JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6"]
EXCITED = ["joint1", "joint2", "joint3"]
# A bent arm (the sim params' home pose): upright, joints 1, 4 and 6 would be aligned and coupled.
BASE_POSE = np.array([0.0, 0.2, 1.2, 0.0, 1.0, 0.0])
RATE_HZ = 50.0
SETTLE_S = 1.0  # [s] at the start pose before the sequence and after it
# The acceptance figures.
LATENCY_TOLERANCE_S = 0.010  # one control period at 100 Hz
GAIN_TOLERANCE = 0.10
HOLDOUT_RATIO = 0.3  # held-out error after the fit / before
STAMPED_COMMAND_TOPIC = "command/policy"


def draw_seed() -> int:
    """A fresh seed per run (the issue asks for random draws), or SIM2REAL_SYSID_SEED to repeat one."""
    seed = int(os.environ.get("SIM2REAL_SYSID_SEED", random.SystemRandom().randrange(2**31)))
    print(f"sysid draw seed {seed} (repeat with SIM2REAL_SYSID_SEED={seed})")
    return seed


def sysid_sequence() -> tuple[ExcitationSequence, float]:
    """A fit part and a shorter, different held-out part (each: steps and a chirp per excited joint,
    from sysid excite), around BASE_POSE. Returns (sequence over all JOINTS, held-out fraction)."""
    urdf = str(urdf_path())
    fit_part = excitation_for_robot(urdf, ExciteOptions(rate_hz=RATE_HZ, hold_s=0.25, chirp_s=2.5,
                                                        amplitude_fraction=0.03, speed_fraction=0.5), EXCITED)
    held_out = excitation_for_robot(urdf, ExciteOptions(rate_hz=RATE_HZ, hold_s=0.15, chirp_s=1.2,
                                                        amplitude_fraction=0.025, speed_fraction=0.5), EXCITED)
    offsets = np.vstack([fit_part.positions, held_out.positions])
    positions = np.tile(BASE_POSE, (len(offsets), 1))
    positions[:, : len(EXCITED)] += offsets
    # The split lands a little inside the held-out part (the recording runs on after the last command).
    fraction = 0.95 * len(held_out.times_s) / len(offsets)
    return ExcitationSequence(tuple(JOINTS), np.arange(len(offsets)) / RATE_HZ, positions), fraction


def drawn_params(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    """A sim params YAML with randomly drawn latency, gains and damping; returns (path, truth)."""
    nominal = load_sim_params()
    raw = copy.deepcopy(nominal.to_dict())
    actuator = raw["actuator"]
    # Latency 20-60 ms above nominal, gains 20-40 % off either way, damping up to 2x off: far enough
    # from nominal that the fit has to move every parameter well beyond the tolerance.
    truth: dict = {"actuation_latency_s": round(float(nominal.actuation_latency_s + rng.uniform(0.02, 0.06)), 4)}
    actuator["actuation_latency_s"] = truth["actuation_latency_s"]
    for kind, (low, high) in {"kp": (0.2, 0.4), "kd": (0.2, 0.4), "damping": (0.0, 0.7)}.items():
        log_scale = rng.choice([-1.0, 1.0], len(JOINTS)) * rng.uniform(low, high, len(JOINTS))
        values = getattr(nominal.actuator, kind).resolve(JOINTS) * np.exp(log_scale)
        truth[kind] = dict(zip(JOINTS, np.round(values, 5).tolist(), strict=True))
        actuator[kind] = {"default": actuator[kind]["default"], **truth[kind]}
    raw["task"]["timeout_s"] = 10_000.0  # one episode for the whole recording
    path = tmp_path / "sim_params_truth.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_sim_params(path)
    return path, truth


def run_cli(*args: str, timeout_s: float = 900.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "sysid", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout_s)


def fit_with_cli(bag: Path, tmp_path: Path, holdout: float, truth: dict, seed: int,
                 *extra: str) -> tuple[dict, Path, Path, str]:
    """`sim2real sysid fit` from nominal params; returns (report, params file, report dir, context)."""
    out, report_dir = tmp_path / "fitted.yaml", tmp_path / "report"
    started = time.monotonic()
    result = run_cli("fit", "--bag", str(bag), "--out", str(out), "--report", str(report_dir),
                     "--fit", "latency,kp,kd,damping", "--holdout", f"{holdout:.3f}", *extra)
    context = f"seed {seed}, truth {truth}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, context
    print(f"fit took {time.monotonic() - started:.0f} s (seed {seed})")
    return json.loads((report_dir / "report.json").read_text()), out, report_dir, context


def check_acceptance(report: dict, truth: dict, context: str) -> None:
    """The issue's figures: latency within one control period, kp and kd + damping within 10 %,
    damping flagged (see below), held-out error of the fitted joints after <= 30 % of before."""
    params = {p["name"]: p for p in report["parameters"]}
    latency = params["actuation_latency_s"]
    errors = {"latency_ms": round(1e3 * (latency["value"] - truth["actuation_latency_s"]), 2)}
    assert latency["identifiable"], context
    assert abs(latency["value"] - truth["actuation_latency_s"]) <= LATENCY_TOLERANCE_S, context
    identified_joints = 0
    for joint in EXCITED:
        kp, kd, damping = (params[f"{kind}.{joint}"] for kind in ("kp", "kd", "damping"))
        true_b = truth["kd"][joint] + truth["damping"][joint]
        errors[joint] = {"kp": round(kp["value"] / truth["kp"][joint] - 1, 4),
                         "kd": round(kd["value"] / truth["kd"][joint] - 1, 4),
                         "kd+damping": round((kd["value"] + damping["value"]) / true_b - 1, 4)}
        # kd and damping act identically in the sim (both scale joint velocity, and the effort limit
        # never saturates here): only their sum is in the data. Damping, a few % of it, must be
        # reported as not identifiable (confounded with kd, or too small to show) with its nominal
        # value, not get a confident number.
        assert f"damping.{joint}" in report["not_identifiable"], context
        assert f"flat direction of the cost ({damping['flat_weight']:.0%}) with kd.{joint}" in damping["reason"] \
            or "through their sum kd + damping" in damping["reason"], context
        assert damping["value"] == damping["nominal"], context
        if not (kp["identifiable"] and kd["identifiable"]):
            # A strongly overdamped joint shows mostly kp / (kd + damping): that must be said, with
            # why, and that combination must still be right.
            assert all("flat direction" in p["reason"] for p in (kp, kd) if not p["identifiable"]), context
            ratio = kp["value"] / (kd["value"] + damping["value"])
            assert ratio == pytest.approx(truth["kp"][joint] / true_b, rel=GAIN_TOLERANCE), context
            continue
        identified_joints += 1
        assert kp["value"] == pytest.approx(truth["kp"][joint], rel=GAIN_TOLERANCE), f"kp.{joint}: {context}"
        assert kd["value"] + damping["value"] == pytest.approx(true_b, rel=GAIN_TOLERANCE), f"kd.{joint}: {context}"
    # Over the fitted (excited) joints: joints 4-6 hold still, move only by coupling, and keep their
    # nominal parameters (the data cannot fit them), so they would measure something the fit cannot change.
    before = report["errors"]["before"]["holdout"]["fitted_joints_normalized_mse"]
    after = report["errors"]["after"]["holdout"]["fitted_joints_normalized_mse"]
    errors["holdout_ratio"] = round(after / before, 4)
    all_before, all_after = (report["errors"][k]["holdout"]["normalized_mse"] for k in ("before", "after"))
    errors["holdout_ratio_all_joints"] = round(all_after / all_before, 4)
    print(f"fit errors (relative; latency in ms): {errors}; not identifiable: {report['not_identifiable']}")
    assert identified_joints >= 2, context
    assert after <= HOLDOUT_RATIO * before, context


def test_fit_recovers_drawn_sim_dynamics(tmp_path: Path) -> None:
    """The acceptance test on a bag recorded in process: sim time only, so scheduling plays no part."""
    seed = draw_seed()
    params_file, truth = drawn_params(tmp_path, np.random.default_rng(seed))
    sequence, holdout = sysid_sequence()
    bag = record_sim_bag(tmp_path / "sysid_bag", load_sim_params(params_file), str(urdf_path()), sequence,
                         settle_s=SETTLE_S, seed=seed)
    report, out, report_dir, context = fit_with_cli(bag, tmp_path, holdout, truth, seed)
    assert report["data"]["time_source"] == "header", context
    check_acceptance(report, truth, context)

    # The new params file: valid, versioned by content, fitted values in the actuator section.
    params = {p["name"]: p for p in report["parameters"]}
    fitted = load_sim_params(out)
    assert fitted.version == report["params_version"] == content_hash(yaml.safe_load(out.read_text()))
    assert fitted.version != load_sim_params().version
    assert fitted.actuation_latency_s == pytest.approx(params["actuation_latency_s"]["value"], rel=1e-4)
    kp = fitted.actuator.kp.resolve(EXCITED)
    assert kp == pytest.approx([params[f"kp.{j}"]["value"] for j in EXCITED], rel=1e-4)
    assert fitted.actuator.kp.resolve(["joint6"])[0] == load_sim_params().actuator.kp.resolve(["joint6"])[0]
    sysid = fitted.raw["provenance"]["sysid"]
    assert sysid["bag"] == str(bag) and sysid["base_params"]["version"] == load_sim_params().version
    assert "damping.joint1" in sysid["not_identifiable"]
    for name in (*JOINTS,):
        assert (report_dir / f"fit_{name}.png").stat().st_size > 1000
    assert "not identifiable" in (report_dir / "report.md").read_text()


def tiny_camera(tmp_path: Path) -> Path:
    """The sim camera's calibration at 1/10 of its resolution: in lockstep every frame is rendered,
    and only its stamp is used here."""
    raw = yaml.safe_load(config_path("camera_sim.yaml").read_text())
    raw["image_width"], raw["image_height"] = raw["image_width"] // 10, raw["image_height"] // 10
    for key in ("camera_matrix", "projection_matrix"):
        raw[key]["data"] = [v * 0.1 if v not in (0.0, 1.0) else v for v in raw[key]["data"]]
    path = tmp_path / "camera_tiny.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _status_values(msg: DiagnosticArray) -> dict[str, str]:
    return {kv.key: kv.value for kv in msg.status[0].values}


def record_lockstep_over_dds(ros, tmp_path: Path, params_file: Path, sequence: ExcitationSequence) -> Path:
    """Run sim_node (lockstep) + recorder as processes; answer every camera frame with the sequence's
    command for the frame's sim time, on the robot command topic and, stamped, on command/policy.

    In lockstep the sim stops after each frame until a command arrives, so the answer to the frame
    stamped t takes effect at sim time t exactly, however late it comes. The sim's own counters
    (sim/status: commands accepted, sim time of the last one) confirm it for every status message."""
    bag = tmp_path / "sysid_dds_bag"
    period_ns = int(round(1e9 / RATE_HZ))
    sim = node_decl("sim_node", {"sim_params_file": str(params_file), "pacing": "lockstep",
                                 "lockstep_timeout_s": 600.0, "camera_enabled": True,
                                 "camera_calibration": str(tiny_camera(tmp_path)), "camera_rate_hz": RATE_HZ,
                                 "auto_reset": False, "joint_state_rate_hz": 100.0})
    recorder = node_decl("recorder", {"output": str(bag), "flush_period_s": 0.5, "discovery_period_s": 0.2,
                                      "topics": ["joint_states", "forward_position_controller/commands",
                                                 STAMPED_COMMAND_TOPIC]})
    images = ros.collect(Image, "camera/image_raw", SENSOR_QOS)
    statuses = ros.collect(DiagnosticArray, "sim/status", LATCHED_QOS)
    # Reliable with room for every command: the recorder must get all of them, not the newest only.
    every_command = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    command_pub = ros.publisher(Float64MultiArray, "forward_position_controller/commands", every_command)
    stamped_pub = ros.publisher(JointState, STAMPED_COMMAND_TOPIC, every_command)
    start_ns = int(round(SETTLE_S * RATE_HZ)) * period_ns
    last = len(sequence.times_s) - 1
    end_ns = start_ns + last * period_ns + int(round(SETTLE_S * RATE_HZ)) * period_ns
    # sent[i]: the sim time the (i+1)-th command the sim accepts takes effect at.
    sent: list[int] = []
    sequence_commands = 0  # len(sent) once the end is answered
    with running_nodes([sim, recorder], tmp_path) as launcher:
        ros.wait_for_subscribers(command_pub, count=2, timeout_s=60.0)  # the sim and the recorder
        ros.wait_for_subscribers(stamped_pub, count=1, timeout_s=60.0)
        assert wait_until(lambda: ros.node.count_publishers("camera/image_raw") > 0, 60.0)
        # The sim's first frame (sim time 0) was rendered before anyone listened, and the sim waits
        # there for a command: the first command answers it, wherever its image went.
        command_pub.publish(Float64MultiArray(data=[float(v) for v in sequence.positions[0]]))
        sent.append(0)
        answered = 0

        def reported(count: int) -> bool:
            """Whether the sim has reported (sim/status, about once a wall second) `count` commands."""
            return any(int(_status_values(m)["commands_accepted"]) >= count for m in list(statuses))

        # Past the end, hold the last command until the sim's status covers the whole sequence.
        while answered < end_ns or not reported(sequence_commands):
            assert wait_until(lambda after=answered: bool(images) and cv.stamp_to_ns(images[-1].header.stamp) > after,
                              60.0), f"no camera frame after sim time {answered} ns"
            stamp = cv.stamp_to_ns(images[-1].header.stamp)
            assert stamp == answered + period_ns, f"frame at {stamp} ns after answering {answered} ns"
            q = sequence.positions[int(np.clip((stamp - start_ns) // period_ns, 0, last))]
            stamped_pub.publish(cv.make_joint_state(JOINTS, q, stamp))
            command_pub.publish(Float64MultiArray(data=[float(v) for v in q]))
            sent.append(stamp)
            answered = stamp
            if answered == end_ns:
                sequence_commands = len(sent)
        codes = launcher.shutdown()
    assert codes.get("recorder") == 0, codes
    checked = 0
    for msg in statuses:
        values = _status_values(msg)
        accepted = int(values["commands_accepted"])
        assert values["commands_rejected"] == "0", values
        if accepted:
            assert int(values["last_command_sim_ns"]) == sent[accepted - 1], (accepted, values)
            checked += 1
    assert checked >= 1
    print(f"lockstep over DDS: {len(sent)} commands; {checked} sim status reports agree with their stamps")
    return bag


def test_fit_from_a_dds_recording_in_lockstep(ros, tmp_path: Path) -> None:
    """The recording path of a robot (sim_node, recorder, DDS), timed exactly: the acceptance again."""
    seed = draw_seed()
    params_file, truth = drawn_params(tmp_path, np.random.default_rng(seed))
    sequence, holdout = sysid_sequence()
    bag = record_lockstep_over_dds(ros, tmp_path, params_file, sequence)
    report, _out, _report_dir, context = fit_with_cli(bag, tmp_path, holdout, truth, seed,
                                                      "--command-topic", STAMPED_COMMAND_TOPIC)
    assert report["data"]["time_source"] == "header", context
    assert report["data"]["command_time_source"] == "header", context
    check_acceptance(report, truth, context)


def test_stamped_commands_keep_their_stamps_on_the_state_clock() -> None:
    """Command stamps on the state clock are the command times (a late, bursty receive time is not
    used); stamps on another clock, or none, fall back to receive times moved onto the state clock."""
    rng = np.random.default_rng(3)
    state_stamp = np.arange(0, 10 * 10**9, 10**7)  # 100 Hz of sim time [ns]
    wall_offset = 1_700_000_000 * 10**9
    states = JointStream("/joint_states", "sensor_msgs/msg/JointState",
                         state_stamp + wall_offset + rng.integers(10**6, 2 * 10**6, len(state_stamp)), state_stamp,
                         np.sin(state_stamp[:, None] / 1e9), ("joint1",))
    command_stamp = np.arange(0, 10 * 10**9, 2 * 10**7)  # 50 Hz
    late = wall_offset + command_stamp + rng.integers(10**7, 2 * 10**8, len(command_stamp))  # 10-200 ms late
    positions = np.sin(command_stamp[:, None] / 1e9)
    stamped = JointStream("/command/policy", "sensor_msgs/msg/JointState", late, command_stamp, positions, ("joint1",))
    data = align(stamped, states, ["joint1"], 0.3)
    assert data.command_time_source == "header" and data.time_source == "header"
    assert np.allclose(data.command_t, (command_stamp - data.origin_ns) / 1e9, atol=1e-9)

    elsewhere = JointStream("/command/policy", "sensor_msgs/msg/JointState", late, command_stamp + 3600 * 10**9,
                            positions, ("joint1",))
    other_clock = align(elsewhere, states, ["joint1"], 0.3)
    assert other_clock.command_time_source == "log" and "another clock" in other_clock.time_source_reason
    unstamped = JointStream("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray", late, None,
                            positions, ())
    by_log = align(unstamped, states, ["joint1"], 0.3)
    assert by_log.command_time_source == "log"
    # Receive times are 10-200 ms late: the log-time path cannot match the stamps to 1 ms.
    assert np.max(np.abs(by_log.command_t - (command_stamp - by_log.origin_ns) / 1e9)) > 0.005
    assert np.allclose(other_clock.command_t, by_log.command_t)


def test_bad_input_is_reported(tmp_path: Path) -> None:
    with pytest.raises(SysidError, match="fit"):
        FitOptions(fit=("latency", "mass"))
    with pytest.raises(SysidError, match="method"):
        FitOptions(method="gradient")
    with pytest.raises(SysidError, match="max_latency_s"):
        FitOptions(max_latency_s=-1.0)

    missing = run_cli("fit", "--bag", str(tmp_path / "nope"), "--out", str(tmp_path / "o.yaml"),
                      "--report", str(tmp_path / "r"), timeout_s=120)
    assert missing.returncode == 2 and "nope" in missing.stderr, missing.stderr

    short = ExcitationSequence(tuple(JOINTS), np.arange(150) / RATE_HZ, np.tile(BASE_POSE, (150, 1)))
    bag = record_sim_bag(tmp_path / "still", load_sim_params(), str(urdf_path()), short, settle_s=0.2)
    # Wrong topic, wrong joint count, and a recording in which nothing moves: clear errors, no output.
    for args, expected in ((["--state-topic", "js"], "no topic"), (["--joints", "joint1,joint2"], "--joints"),
                           ([], "nothing to fit")):
        result = run_cli("fit", "--bag", str(bag), "--out", str(tmp_path / "o.yaml"), "--report",
                         str(tmp_path / "r"), *args, timeout_s=300)
        assert result.returncode == 2 and expected in result.stderr, (args, result.stderr)
        assert not (tmp_path / "o.yaml").exists()


def test_default_params_file_stays_valid() -> None:
    # The fitted file adds a `provenance` key; the schema must keep ignoring it and the shipped file valid.
    path = config_path("sim_params.yaml")
    raw = yaml.safe_load(path.read_text())
    assert load_sim_params(path).version == content_hash(raw)
    raw["provenance"] = {"sysid": {"bag": "x"}}
    with_provenance = sim_params_from_dict(raw, "test")
    assert with_provenance.version == content_hash(raw) != load_sim_params(path).version
    assert math.isfinite(with_provenance.actuation_latency_s)
