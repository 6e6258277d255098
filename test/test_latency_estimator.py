"""Latency estimation from synthetic command / measurement signals with a known delay."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.core.control.latency_estimator import LatencyEstimator, LatencyEstimatorConfig
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.sysid.latency import LatencyOptions, estimate_latency
from sim2real_ros.sysid.signals import JointStream

NS = 1_000_000_000


def signal(t_s: np.ndarray) -> np.ndarray:
    """(N, 3) smooth multi-sine joint positions [rad]."""
    return np.stack(
        [
            0.3 * np.sin(2 * np.pi * 0.7 * t_s) + 0.1 * np.sin(2 * np.pi * 2.3 * t_s + 1.0),
            0.2 * np.sin(2 * np.pi * 1.1 * t_s + 0.5),
            0.25 * np.cos(2 * np.pi * 0.45 * t_s) + 0.05 * np.sin(2 * np.pi * 3.1 * t_s),
        ],
        axis=1,
    )


def feed(estimator: LatencyEstimator, delay_s: float, constant: bool = False, noise: float = 0.0,
         duration_s: float = 4.0, start_s: float = 100.0, seed: int = 0, held: bool = True) -> None:
    """100 Hz commands; 250 Hz measurements of the commands `delay_s` later. held: the joints follow
    each command until the next (a forward position controller), else the smooth signal itself."""
    rng = np.random.default_rng(seed)
    cmd_t = start_s + np.arange(0, duration_s, 0.01)  # 100 Hz commands
    # 250 Hz measurements with stamp jitter, as a real joint_state_broadcaster gives them.
    meas_t = np.sort(start_s + np.arange(0, duration_s, 0.004) + rng.uniform(-0.0005, 0.0005, int(duration_s / 0.004)))
    cmd = signal(cmd_t) * (0.0 if constant else 1.0) + (0.4 if constant else 0.0)
    if held:
        index = np.clip(np.searchsorted(cmd_t, meas_t - delay_s, side="right") - 1, 0, len(cmd_t) - 1)
        source_t = cmd_t[index]
    else:
        source_t = meas_t - delay_s
    meas = signal(source_t) * (0.0 if constant else 1.0) + (0.4 if constant else 0.0) + 0.02
    meas = meas + rng.normal(scale=noise, size=meas.shape)
    events = [(t, 0, q) for t, q in zip(cmd_t, cmd, strict=True)]
    events += [(t, 1, q) for t, q in zip(meas_t, meas, strict=True)]
    for t, kind, q in sorted(events, key=lambda e: e[0]):
        (estimator.add_command if kind == 0 else estimator.add_measurement)(int(round(t * NS)), q)


@pytest.mark.parametrize("delay_s", [0.0, 0.013, 0.047, 0.08])
def test_recovers_a_known_delay_with_high_confidence(delay_s):
    estimator = LatencyEstimator()
    feed(estimator, delay_s, noise=1e-4)
    estimate = estimator.estimate()
    assert estimate.latency_s == pytest.approx(delay_s, abs=0.002)  # sub-sample: well inside a 10 ms tick
    assert estimate.confidence > 0.9 and estimate.reason == "ok"
    assert estimate.excitation > 0.5


def test_a_smooth_follower_of_interpolated_commands_is_recovered():
    estimator = LatencyEstimator(LatencyEstimatorConfig(commands_held=False))
    feed(estimator, 0.031, held=False, noise=1e-4)
    estimate = estimator.estimate()
    assert estimate.latency_s == pytest.approx(0.031, abs=0.001) and estimate.confidence > 0.95


def test_constant_signal_has_no_excitation_and_no_confidence():
    estimator = LatencyEstimator()
    feed(estimator, 0.05, constant=True, noise=1e-4)
    estimate = estimator.estimate()
    assert estimate.latency_s is None and estimate.confidence == 0.0
    assert "no excitation" in estimate.reason


def test_unrelated_measurement_gives_low_confidence():
    estimator = LatencyEstimator()
    rng = np.random.default_rng(1)
    for i in range(400):
        t = 50 * NS + i * 10_000_000
        estimator.add_command(t, signal(np.array([t / NS]))[0])
        estimator.add_measurement(t + 1, rng.normal(scale=0.05, size=3).cumsum())
    assert estimator.estimate().confidence < 0.5


def test_window_slides_and_clock_jumps_reset():
    estimator = LatencyEstimator(LatencyEstimatorConfig(window_s=2.0, max_lag_s=0.2))
    feed(estimator, 0.03, duration_s=6.0)
    assert estimator.estimate().latency_s == pytest.approx(0.03, abs=0.002)
    # A sim reset: the clock restarts near 0 with a different delay; the old history is dropped.
    feed(estimator, 0.06, duration_s=2.5, start_s=1.0)
    assert estimator.estimate().latency_s == pytest.approx(0.06, abs=0.002)


def test_a_pause_in_the_commands_restarts_the_estimate():
    estimator = LatencyEstimator(LatencyEstimatorConfig(window_s=3.0))
    feed(estimator, 0.03, duration_s=3.0, start_s=10.0)
    assert estimator.estimate().latency_s == pytest.approx(0.03, abs=0.002)
    # Commands pause for 0.5 s (the joints hold, then jump); they resume with another delay.
    feed(estimator, 0.07, duration_s=2.0, start_s=13.5)
    estimate = estimator.estimate()
    assert estimate.latency_s == pytest.approx(0.07, abs=0.002) and estimate.confidence > 0.9


def test_too_few_samples():
    estimator = LatencyEstimator()
    assert estimator.estimate().latency_s is None
    feed(estimator, 0.02, duration_s=0.3)
    assert estimator.estimate().confidence == 0.0


def test_streams_too_slow_for_the_lag_range_give_no_estimate():
    # 10 Hz commands and joint states: a 50 ms grid leaves 3 steps in 0..0.15 s, too few for a peak.
    estimator = LatencyEstimator(LatencyEstimatorConfig(max_lag_s=0.15))
    for i in range(40):
        t = 100 * NS + i * 100_000_000
        estimator.add_command(t, signal(np.array([t / NS]))[0])
        estimator.add_measurement(t + 1, signal(np.array([t / NS - 0.05]))[0])
    estimate = estimator.estimate()
    assert estimate.latency_s is None and estimate.confidence == 0.0
    assert "too coarse" in estimate.reason


def recorded(delay_s: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A 4 s recording: 100 Hz commands [ns], (N, 3) [rad]; 250 Hz joint states with stamp jitter and
    noise, each holding the command sent `delay_s` earlier. The states start just over max_lag_s
    (0.25 s) after the first command, so the online estimate's window (which skips the first
    max_lag_s of commands) and `sysid latency`'s (the overlap of both topics) are the same samples."""
    rng = np.random.default_rng(seed)
    start_ns = 1_700_000_000 * NS
    cmd_t = np.arange(0.0, 4.0, 0.01)
    meas_t = np.arange(0.251, 4.0, 0.004) + rng.uniform(-0.0005, 0.0005, len(np.arange(0.251, 4.0, 0.004)))
    held = np.clip(np.searchsorted(cmd_t, meas_t - delay_s, side="right") - 1, 0, None)
    meas = signal(cmd_t[held]) + 0.02 + rng.normal(scale=1e-4, size=(len(meas_t), 3))
    return (start_ns + np.round(cmd_t * NS).astype(np.int64), signal(cmd_t),
            start_ns + np.round(meas_t * NS).astype(np.int64), meas)


@pytest.mark.parametrize(("delay_s", "seed"), [(0.013, 1), (0.047, 2), (0.12, 3)])
def test_online_estimate_and_sysid_latency_give_the_same_figure(delay_s, seed):
    """One correlation (core/control/lag_correlation.py): the same series through the actuator's
    online estimator and through `sysid latency` (same lag range) give the same latency and
    confidence, and both recover the injected delay within one joint-state sample (4 ms)."""
    cmd_ns, cmd_q, meas_ns, meas_q = recorded(delay_s, seed)
    config = LatencyEstimatorConfig()
    estimator = LatencyEstimator(config)
    events = [(t, 0, q) for t, q in zip(cmd_ns, cmd_q, strict=True)]
    events += [(t, 1, q) for t, q in zip(meas_ns, meas_q, strict=True)]
    for t, kind, q in sorted(events, key=lambda e: e[0]):
        (estimator.add_command if kind == 0 else estimator.add_measurement)(int(t), q)
    online = estimator.estimate()
    names = ("j1", "j2", "j3")
    command = JointStream("command/policy", "sensor_msgs/msg/JointState", cmd_ns, cmd_ns, cmd_q, names)
    state = JointStream("joint_states", "sensor_msgs/msg/JointState", meas_ns, meas_ns, meas_q, names)
    options = LatencyOptions(method="correlation", min_lag_s=0.0, max_lag_s=config.max_lag_s)
    offline = estimate_latency(command, state, options)
    assert online.reason == "ok" and offline.time_source == "header"
    assert online.latency_s == pytest.approx(offline.latency_s, abs=1e-12)
    assert online.confidence == pytest.approx(offline.confidence, abs=1e-12)
    assert online.confidence > 0.9
    assert abs(online.latency_s - delay_s) <= 0.004
    # What the default run (method 'model', a servo fit on top) reports as its bulk lag.
    assert offline.bulk_lag_s == offline.latency_s


@pytest.mark.parametrize(
    "kwargs, field",
    [(dict(window_s=0.0), "window_s"), (dict(max_lag_s=3.0), "max_lag_s"),
     (dict(min_velocity_rms=-1.0), "min_velocity_rms")],
)
def test_bad_config_names_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        LatencyEstimatorConfig(**kwargs)
    assert info.value.field == field
