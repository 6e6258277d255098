"""sysid fit: a sim with randomly drawn dynamics runs as a process, the test plays an excitation
sequence (sysid.excite) into it over DDS while the recorder node records, and `sim2real sysid fit`
must recover the drawn latency and gains from nominal parameters, improve the held-out error, and
flag what the data cannot determine. Plus bad input and the written params file."""
from __future__ import annotations

import copy
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from support import REPO_ROOT, node_decl, running_nodes, wait_until

from sim2real_ros.core.hashing import content_hash
from sim2real_ros.nodes.common import JOINT_STATE_QOS, RELIABLE_LATEST_QOS
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict
from sim2real_ros.sysid.excite import ExcitationSequence, ExciteOptions, excitation_for_robot
from sim2real_ros.sysid.fit import FitOptions
from sim2real_ros.sysid.latency import SysidError

JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6"]
EXCITED = ["joint1", "joint2", "joint3"]
# A bent arm (the sim params' home pose): upright, joints 1, 4 and 6 would be aligned and coupled.
BASE_POSE = np.array([0.0, 0.2, 1.2, 0.0, 1.0, 0.0])
RATE_HZ = 50.0
GAIN_TOLERANCE = 0.20


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
    # Far enough from nominal that the parameters, not the timing noise of a loaded machine's DDS,
    # dominate the error before the fit: latency 20-60 ms above nominal, gains 20-40 % off either way.
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


def record_excitation(ros, tmp_path: Path, params_file: Path, sequence: ExcitationSequence) -> Path:
    """Run sim_node + recorder as processes; publish the sequence paced on the sim clock."""
    bag = tmp_path / "sysid_bag"
    # About a third of real time: a sim that keeps ahead of its schedule sleeps between steps, so its command
    # callback runs when a command arrives. A sim behind schedule on a loaded machine never sleeps and
    # takes commands late and in bursts; the recorded commands would not be the ones it acted on.
    sim = node_decl("sim_node", {"sim_params_file": str(params_file), "pacing": "realtime", "real_time_factor": 0.35,
                                 "camera_enabled": False, "auto_reset": False, "joint_state_rate_hz": 100.0,
                                 "clock_rate_hz": 500.0})
    recorder = node_decl("recorder", {"output": str(bag), "flush_period_s": 0.5, "discovery_period_s": 0.2,
                                      "topics": ["joint_states", "forward_position_controller/commands"]})
    clock = ros.collect(Clock, "clock", 10)
    states = ros.collect(JointState, "joint_states", JOINT_STATE_QOS)
    publisher = ros.publisher(Float64MultiArray, "forward_position_controller/commands", RELIABLE_LATEST_QOS)
    with running_nodes([sim, recorder], tmp_path) as launcher:
        ros.wait_for_subscribers(publisher, count=2, timeout_s=60.0)  # the sim and the recorder
        ros.wait_for_messages(states, 5, timeout_s=60.0)
        assert wait_until(lambda: len(clock) > 0, 30.0)

        def sim_now() -> float:
            last = clock[-1].clock
            return last.sec + last.nanosec * 1e-9

        def publish(q: np.ndarray) -> None:
            publisher.publish(Float64MultiArray(data=[float(v) for v in q]))

        publish(sequence.positions[0])
        start = sim_now() + 1.0  # settle at the start pose while the recorder already records
        for t, q in zip(sequence.times_s, sequence.positions, strict=True):
            assert wait_until(lambda t=t: sim_now() >= start + t, 60.0, poll_s=0.002), "sim clock stopped"
            publish(q)
        end = start + sequence.times_s[-1] + 1.0
        assert wait_until(lambda: sim_now() >= end, 60.0)
        codes = launcher.shutdown()
    assert codes.get("recorder") == 0, codes
    return bag


def run_cli(*args: str, timeout_s: float = 900.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "sysid", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.timing
def test_fit_recovers_drawn_sim_dynamics(ros, tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**31)
    rng = np.random.default_rng(seed)
    params_file, truth = drawn_params(tmp_path, rng)
    sequence, holdout = sysid_sequence()
    bag = record_excitation(ros, tmp_path, params_file, sequence)

    out, report_dir = tmp_path / "fitted.yaml", tmp_path / "report"
    started = time.monotonic()
    result = run_cli("fit", "--bag", str(bag), "--out", str(out), "--report", str(report_dir),
                     "--fit", "latency,kp,kd,damping", "--holdout", f"{holdout:.3f}")
    context = f"seed {seed}, truth {truth}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, context
    print(f"fit took {time.monotonic() - started:.0f} s (seed {seed})")
    report = json.loads((report_dir / "report.json").read_text())
    params = {p["name"]: p for p in report["parameters"]}

    assert report["data"]["time_source"] == "header", context
    latency = params["actuation_latency_s"]
    assert latency["identifiable"], context
    assert abs(latency["value"] - truth["actuation_latency_s"]) <= 0.010, context  # one control period
    identified_joints = 0
    for joint in EXCITED:
        gains = [params[f"{kind}.{joint}"] for kind in ("kp", "kd")]
        # kd and damping act identically in the sim (both scale joint velocity): the data fixes their
        # sum; damping, a few % of it here, must be reported as not identifiable, not as a number.
        assert f"damping.{joint}" in report["not_identifiable"], context
        assert params[f"damping.{joint}"]["value"] == params[f"damping.{joint}"]["nominal"]
        if not all(p["identifiable"] for p in gains):
            # A strongly overdamped joint shows mostly kp/(kd + damping): that must be said, with why.
            assert all("flat direction" in p["reason"] for p in gains if not p["identifiable"]), context
            continue
        identified_joints += 1
        # 20 %, not the 10 % reached on bags without DDS (benchmarks/bench_sysid_fit.py): on this loaded
        # 2-core machine the recorder logs commands in bursts 10-200 ms late, and the residual timing
        # noise mostly moves kp and kd together (the inertia-like direction of an overdamped joint).
        for p, kind in zip(gains, ("kp", "kd"), strict=True):
            assert p["value"] == pytest.approx(truth[kind][joint], rel=GAIN_TOLERANCE), f"{kind}.{joint}: {context}"
        total = params[f"kd.{joint}"]["value"] + params[f"damping.{joint}"]["value"]
        assert total == pytest.approx(truth["kd"][joint] + truth["damping"][joint], rel=GAIN_TOLERANCE), context
    assert identified_joints >= 2, context
    before = report["errors"]["before"]["holdout"]["normalized_mse"]
    after = report["errors"]["after"]["holdout"]["normalized_mse"]
    assert after <= 0.3 * before, context

    # The new params file: valid, versioned by content, fitted values in the actuator section.
    fitted = load_sim_params(out)
    assert fitted.version == report["params_version"] == content_hash(yaml.safe_load(out.read_text()))
    assert fitted.version != load_sim_params().version
    assert fitted.actuation_latency_s == pytest.approx(latency["value"], rel=1e-4)
    kp = fitted.actuator.kp.resolve(EXCITED)
    assert kp == pytest.approx([params[f"kp.{j}"]["value"] for j in EXCITED], rel=1e-4)
    assert fitted.actuator.kp.resolve(["joint6"])[0] == load_sim_params().actuator.kp.resolve(["joint6"])[0]
    sysid = fitted.raw["provenance"]["sysid"]
    assert sysid["bag"] == str(bag) and sysid["base_params"]["version"] == load_sim_params().version
    assert "damping.joint1" in sysid["not_identifiable"]
    for name in (*JOINTS,):
        assert (report_dir / f"fit_{name}.png").stat().st_size > 1000
    assert "not identifiable" in (report_dir / "report.md").read_text()


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

    from sim2real_ros.sysid.sim_bag import record_sim_bag

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
