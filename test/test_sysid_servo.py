"""Servo dynamics: the sim's servo actuator model (dead time, speed- and acceleration-limited position
loop), `sysid latency`'s model-based dead time on sim bags with known servo parameters (real
PyBullet, real bag files) and on the real servo arm bag, split per step."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from support import SERVO_BAG, needs_servo_bag

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.params import load_sim_params, sim_params_from_dict
from sim2real_ros.sim.world import SimWorld
from sim2real_ros.sysid.bag_io import load_streams
from sim2real_ros.sysid.excite import ExcitationSequence
from sim2real_ros.sysid.latency import LatencyOptions, estimate_latency
from sim2real_ros.sysid.sim_bag import COMMAND_TOPIC, STATE_TOPIC, record_sim_bag


def servo_params(latency_s: float = 0.08, speed: float = 0.8, accel: float = 40.0, gain: float = 15.0,
                 deadband: float = 0.0, **randomization: list[float]):
    data = yaml.safe_load(config_path("sim_params.yaml").read_text())
    data["actuator"]["model"] = "servo"
    data["actuator"]["actuation_latency_s"] = latency_s
    data["actuator"]["servo"] = {"max_speed": speed, "max_acceleration": accel, "gain": gain, "deadband": deadband}
    # A servo's motor loop is stiff: the PD tracks the servo loop's reference within a few ms.
    data["actuator"]["kp"]["joint1"] = 400.0
    data["actuator"]["kd"]["joint1"] = 10.0
    data["randomization"].update(randomization)
    return sim_params_from_dict(data, "servo test params")


def step_sequence(joint: str = "joint1", rate_hz: float = 50.0, dwell_s: float = 1.5,
                  levels: tuple[float, ...] = (0.3, -0.2, 0.4, 0.0, -0.3, 0.2, -0.1, 0.35)) -> ExcitationSequence:
    """Held steps of one joint, commanded at rate_hz (the value repeated, as a controller sends it)."""
    per = int(round(dwell_s * rate_hz))
    positions = np.repeat(np.array([0.0, *levels]), per)[:, None]
    return ExcitationSequence((joint,), np.arange(len(positions)) / rate_hz, positions)


def test_servo_params_are_validated_naming_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"actuator\.model.*'stepper'"):
        data = yaml.safe_load(config_path("sim_params.yaml").read_text())
        data["actuator"]["model"] = "stepper"
        sim_params_from_dict(data, "x")
    with pytest.raises(ConfigError, match=r"actuator\.servo\.max_speed.*-1"):
        servo_params(speed=-1.0)
    with pytest.raises(ConfigError, match=r"actuator\.servo\.max_acceleration.*missing"):
        data = yaml.safe_load(config_path("sim_params.yaml").read_text())
        data["actuator"]["model"] = "servo"
        data["actuator"]["servo"] = {"max_speed": 1.0, "gain": 5.0}
        sim_params_from_dict(data, "x")
    with pytest.raises(ConfigError, match=r"randomization\.servo_speed_scale"):
        servo_params(servo_speed_scale=[0.0, 1.2])
    # The shipped file has no model field: pd, and its version (content hash) is unchanged by the feature.
    shipped = load_sim_params()
    assert shipped.actuator.model == "pd" and shipped.actuator.servo is None


def test_servo_model_limits_speed_and_acceleration_after_the_dead_time() -> None:
    params = servo_params(latency_s=0.05, speed=0.6, accel=6.0, gain=20.0)
    world = SimWorld(params, str(urdf_path()), render=False, joints=["joint1"])
    try:
        world.step(500)
        q0 = float(world.joint_positions()[0])
        world.set_command(np.array([q0 + 0.8]))
        positions = []
        for _ in range(2500):
            world.step(1)
            positions.append(float(world.joint_positions()[0]))
        dt = params.physics.dt_s
        q = np.array(positions)
        v = np.gradient(q, dt)
        onset = int(np.argmax(np.abs(q - q0) > 1e-3)) * dt
        assert 0.05 <= onset <= 0.05 + 0.03  # nothing before the dead time, moving soon after
        moving = np.abs(v) > 0.3
        assert np.median(np.abs(v[moving])) == pytest.approx(0.6, rel=0.02)  # slews at the speed limit
        assert np.max(np.abs(v)) < 0.6 * 1.15  # the PD loop catching up with the reference overshoots a little
        accel = np.gradient(gaussian(v, 10), dt)
        assert np.max(np.abs(accel)) < 6.0 * 1.3  # the acceleration limit (PD tracking adds a little)
        assert q[-1] == pytest.approx(q0 + 0.8, abs=0.01)  # reaches the target
        assert world.dynamics()["servo_max_speed"][0] == pytest.approx(0.6)
        with pytest.raises(ValueError, match="servo_gain"):
            world.set_dynamics(servo_gain=0.0)
    finally:
        world.close()
    pd_world = SimWorld(load_sim_params(), str(urdf_path()), render=False, joints=["joint1"])
    try:
        with pytest.raises(ValueError, match="needs actuator.model servo"):
            pd_world.set_dynamics(servo_max_speed=1.0)
    finally:
        pd_world.close()


def gaussian(x: np.ndarray, sigma: int) -> np.ndarray:
    from scipy.ndimage import gaussian_filter1d

    return gaussian_filter1d(x, sigma)


def test_servo_randomization_draws_around_the_nominal() -> None:
    params = servo_params(servo_speed_scale=[0.5, 0.6], servo_acceleration_scale=[2.0, 2.0],
                          servo_gain_scale=[1.0, 1.0])
    world = SimWorld(params, str(urdf_path()), render=False, joints=["joint1"], randomize=True, seed=3)
    try:
        dyn = world.dynamics()
        assert 0.8 * 0.5 <= dyn["servo_max_speed"][0] <= 0.8 * 0.6
        assert dyn["servo_max_acceleration"][0] == pytest.approx(80.0)
        world.reset(randomize=False)
        assert world.dynamics()["servo_max_speed"][0] == pytest.approx(0.8)
    finally:
        world.close()


@pytest.mark.parametrize(("dead_time", "speed", "published"), [(0.08, 0.8, False), (0.15, 0.35, True)])
def test_latency_recovers_dead_time_and_slew_from_a_sim_bag(tmp_path, dead_time: float, speed: float,
                                                             published: bool) -> None:
    params = servo_params(latency_s=dead_time, speed=speed, accel=60.0, gain=15.0)
    # published: commands carry their send time as MCAP publish time (what `sim2real record` stores
    # from the DDS source timestamp), on the state's clock, and reach the recorder with jitter (3 ms).
    bag = record_sim_bag(tmp_path / "bag", params, str(urdf_path()), step_sequence(), joint_state_hz=100.0,
                         publish_times=published, log_origin_ns=0 if published else 1_700_000_000 * 10**9,
                         jitter_s=0.003 if published else 0.0005)
    streams = load_streams(bag, [COMMAND_TOPIC, STATE_TOPIC])
    report = estimate_latency(streams[COMMAND_TOPIC], streams[STATE_TOPIC])
    if published:
        assert streams[COMMAND_TOPIC].stamps_from == "publish"
        assert report.time_source == "header" and "publish time" in report.time_source_reason
    else:
        assert streams[COMMAND_TOPIC].stamp_ns is None and report.time_source == "log"
    joint = report.joints[0]
    assert report.method == "model" and joint.latency_s == joint.dead_time_s
    control_period = 1 / 50.0
    assert joint.dead_time_s == pytest.approx(dead_time, abs=control_period)
    assert joint.slew_rate == pytest.approx(speed, rel=0.1)
    assert len(joint.steps) >= 6
    assert joint.dead_time_spread_s < control_period
    # The cross-correlation figure is kept beside it, under its own name.
    assert joint.bulk_lag_s is not None and report.bulk_lag_s is not None
    assert report.to_dict()["joints"][0]["steps"][0]["dead_time_s"] == pytest.approx(joint.steps[0]["dead_time_s"])


@pytest.fixture(scope="module")
def real_report():
    streams = load_streams(SERVO_BAG, ["/servo/in/state", "/servo/out/state"])
    return streams, estimate_latency(streams["/servo/in/state"], streams["/servo/out/state"])


@needs_servo_bag
def test_real_servo_bag_dead_time_is_stable_across_steps(real_report) -> None:
    _, report = real_report
    q1, q2, q3 = report.joints
    assert q2.dead_time_s is None
    for joint in (q1, q3):
        # Five command steps, each fitted on its own.
        assert len(joint.steps) == 5
        d = np.array([s["dead_time_s"] for s in joint.steps])
        v = np.array([s["slew_rate"] for s in joint.steps])
        # The onset comes before the bulk lag, which includes the slow ramp.
        assert 0.0 < joint.dead_time_s < joint.bulk_lag_s
        assert joint.dead_time_s == pytest.approx(float(np.median(d)))
        # Stable across steps: every step within one refresh interval of the median (the reading
        # refreshes every ~0.27 s), and the slew rate within 5 % of its median.
        assert np.all(np.abs(d - np.median(d)) <= joint.update_period_s)
        assert np.all(np.abs(v / np.median(v) - 1) < 0.05)
        assert 0.2 < joint.slew_rate < 0.3  # ~0.25 rad/s, as read by hand from the ramps
        # The refresh interval is in the uncertainty.
        assert joint.dead_time_uncertainty_s >= joint.update_period_s / math.sqrt(12)
    # q1's dead time, median of its steps, is well below the 0.33 s the correlation alone reported.
    assert q1.dead_time_s < 0.3


@needs_servo_bag
def test_real_servo_bag_correlation_method_keeps_the_bulk_lag(real_report) -> None:
    streams, model = real_report
    corr = estimate_latency(streams["/servo/in/state"], streams["/servo/out/state"],
                            LatencyOptions(method="correlation"))
    assert corr.method == "correlation" and corr.joints[0].steps == ()
    assert corr.latency_s == pytest.approx(model.bulk_lag_s)
    assert corr.joints[0].scale == pytest.approx(model.joints[0].scale)  # sign/offset estimate kept


def test_fit_servo_recovers_random_servo_parameters_from_sim_bags(tmp_path) -> None:
    from sim2real_ros.sysid.servo_fit import ServoFitOptions, fit_servo, write_servo_params

    rng = np.random.default_rng(22)
    control_period = 1 / 50.0
    for trial in range(2):
        truth = {"latency_s": float(rng.uniform(0.03, 0.2)), "speed": float(rng.uniform(0.3, 1.2)),
                 "accel": float(rng.uniform(5.0, 40.0)), "gain": float(rng.uniform(5.0, 30.0))}
        params = servo_params(**truth)
        bag = record_sim_bag(tmp_path / f"bag{trial}", params, str(urdf_path()), step_sequence(dwell_s=2.0),
                             joint_state_hz=100.0, seed=trial)
        streams = load_streams(bag, [COMMAND_TOPIC, STATE_TOPIC])
        result = fit_servo(streams[COMMAND_TOPIC], streams[STATE_TOPIC], ServoFitOptions(max_evaluations=300))
        joint = result.joints[0]
        assert joint.servo["dead_time_s"] == pytest.approx(truth["latency_s"], abs=control_period), truth
        assert joint.servo["max_speed"] == pytest.approx(truth["speed"], rel=0.1), truth
        # The servo model predicts held-out motion better than a linear PD loop can.
        assert joint.holdout_rms_servo < 0.5 * joint.holdout_rms_pd, joint
    out = tmp_path / "servo.yaml"
    version = write_servo_params(result, params, str(bag), out)
    loaded = load_sim_params(out)
    assert loaded.version == version and loaded.actuator.model == "servo"
    assert loaded.actuator.actuation_latency_s == pytest.approx(result.dead_time_s(), abs=1e-5)
    assert loaded.actuator.servo.max_speed.resolve(["joint1"])[0] == pytest.approx(joint.servo["max_speed"], rel=1e-5)
    low, high = loaded.randomization.servo_speed_scale
    assert low < 1.0 < high
    # The fitted file runs in the sim.
    world = SimWorld(loaded, str(urdf_path()), render=False, joints=["joint1"], randomize=True)
    try:
        world.step(10)
    finally:
        world.close()


# ----------------------------------------------------------------------------------------------
# Sample-and-hold readings of a joint that rests between steps (what real_servo_arm_a's q1 does).
def held_servo_streams(seed: int = 0, dead_time: float = 0.19, speed: float = 0.25, accel: float = 3.0,
                       gain: float = 20.0, dwell_s: float = 6.0, levels: tuple[float, ...] = (0.0, 0.5, 0.0, 0.5, 0.0),
                       refresh_s: float = 0.27, topic_s: float = 0.04):
    """Commands and readings (pure numpy, no bag) of a servo (simulate_servo) stepping between levels
    and resting ~4 s after each move: the bus reads the joint every refresh_s (random phase, encoder
    ticks of 1.5 mrad) and the topic repeats the latest reading every topic_s."""
    from sim2real_ros.sysid.servo_fit import simulate_servo
    from sim2real_ros.sysid.signals import JointStream

    rng = np.random.default_rng(seed)
    dt = 0.005
    t = np.arange(int(dwell_s * len(levels) / dt)) * dt
    step_t = np.arange(len(levels)) * dwell_s
    target = np.array(levels)[np.clip(np.searchsorted(step_t + dead_time, t, side="right") - 1, 0, None)]
    x = simulate_servo(target, levels[0], speed, accel, gain)
    reads = np.arange(rng.uniform(0.0, refresh_s), t[-1], refresh_s)
    read_x = np.round(np.interp(reads, t, x) / 0.0015) * 0.0015
    tp = np.arange(0.0, t[-1], topic_s)
    latest = np.searchsorted(reads, tp, side="right") - 1
    y = np.where(latest >= 0, read_x[np.clip(latest, 0, None)], levels[0])
    command = np.array(levels)[np.searchsorted(step_t, tp, side="right") - 1]
    ns = (tp * 1e9).astype(np.int64) + 1_700_000_000 * 10**9
    return (JointStream("/servo/in", "sensor_msgs/msg/JointState", ns, ns, command[:, None], ("j1",)),
            JointStream("/servo/out", "sensor_msgs/msg/JointState", ns + 500_000, ns, y[:, None], ("j1",)))


def test_fresh_times_of_a_resting_joint_stay_within_one_refresh_interval() -> None:
    from sim2real_ros.sysid.servo_response import fresh_times

    t = np.arange(0.0, 6.0, 0.04)
    # Moving for 1.2 s (a new value every 0.28 s, repeated at the topic rate), then resting.
    x = np.minimum(np.floor(t / 0.28), 4.0) * 0.07
    legacy, fresh = fresh_times(t, x), fresh_times(t, x, 0.28)
    moving = t < 1.12
    assert np.array_equal(fresh[moving], legacy[moving])  # a stale repeat: compared where its value appeared
    assert np.all(t - fresh <= 0.28 + 1e-9) and np.all(fresh <= t)
    # At rest the value was re-read every refresh: the readings are not all from the instant it arrived.
    assert np.ptp(legacy[~moving]) == 0.0 and np.ptp(fresh[~moving]) > 4.0


def test_fit_scores_a_resting_joint_at_its_refreshed_readings_not_at_its_arrival() -> None:
    """The flaw behind real_servo_arm_a q1's 0.026 -> 0.032 rad: every reading of a joint resting
    ~4 s was compared with the models at the instant the joint arrived (up to 135 readings at one
    instant), so the fit and the held-out score were a handful of arrival instants."""
    from sim2real_ros.sysid.servo_fit import ServoFitOptions, fit_servo, prepare_joints
    from sim2real_ros.sysid.servo_response import fresh_times

    command, state = held_servo_streams()
    options = ServoFitOptions(max_evaluations=300)
    prepared = prepare_joints(command, state, options)
    ((_, data, lat),) = prepared.joints
    refresh = lat.update_period_s
    assert 0.26 <= refresh <= 0.32
    # The case is there: most held-out readings repeat a value older than one refresh interval (rest).
    age = data.t_read - fresh_times(data.t_read, data.y)
    assert np.mean(age[data.holdout] > refresh) > 0.5
    # ... and each is compared within one refresh interval of its own time, spread over the rest.
    assert np.all(data.t_read - data.t_fresh <= refresh + 1e-9)
    held = data.t_fresh[data.holdout]
    assert len(np.unique(held)) > 0.5 * len(held)
    result = fit_servo(command, state, options)
    joint = result.joints[0]
    assert joint.servo["max_speed"] == pytest.approx(0.25, rel=0.1)
    assert joint.holdout_rms_servo < 0.5 * joint.holdout_rms_pd, joint


@needs_servo_bag
def test_real_servo_bag_fit_compares_every_reading_within_one_refresh() -> None:
    from sim2real_ros.sysid.servo_fit import prepare_joints

    streams = load_streams(SERVO_BAG, ["/servo/in/state", "/servo/out/state"])
    prepared = prepare_joints(streams["/servo/in/state"], streams["/servo/out/state"])
    assert [name for name, _, _ in prepared.joints] == ["q1", "q3"]
    for _, data, lat in prepared.joints:
        assert np.all(data.t_read - data.t_fresh <= lat.update_period_s + 1e-9)
        # q1 rests ~4 s after each step: no instant may carry more readings than one refresh interval holds.
        _, counts = np.unique(data.t_fresh[data.holdout], return_counts=True)
        assert counts.max() <= math.ceil(lat.update_period_s / 0.04) + 1
