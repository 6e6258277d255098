"""The driver's logic against the emulated bus: a real serial protocol over a pseudo-terminal
(`sim2real emulate-bus` as a process), no mock (hardware/driver.py, hardware/emulator.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from feetech_support import SO101_MOTORS, SO101_URDF, emulated_bus, so101_calibration

from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.hardware import protocol as p
from sim2real_ros.hardware.bus import BusError, FeetechBus
from sim2real_ros.hardware.calibration import RAD_PER_TICK, CalibrationError, joint_maps, load_calibration
from sim2real_ros.hardware.driver import DriverConfig, FeetechDriver
from sim2real_ros.paths import config_path

# Generous: the test machine is shared; a reply the emulator sends late must not look lost.
SLACK_S = 0.2


def make_driver(port: str, calibration, config: DriverConfig | None = None, timeout_s: float = SLACK_S):
    model = RobotModel.from_file(SO101_URDF)
    limits = model.limits_arrays(list(SO101_MOTORS))
    maps = joint_maps(load_calibration(calibration), SO101_MOTORS, limits["lower"])
    bus = FeetechBus(port, 1_000_000, timeout_s)
    return FeetechDriver(bus, maps, limits["lower"], limits["upper"], config)


def read_until(driver: FeetechDriver, predicate, timeout_s: float = 10.0):
    """Read (ignoring failed reads) until predicate(feedback) holds; returns the last feedback."""
    end = time.monotonic() + timeout_s
    feedback = None
    while time.monotonic() < end:
        try:
            feedback = driver.read()
        except BusError:
            continue
        if predicate(feedback):
            return feedback
        time.sleep(0.005)
    raise AssertionError(f"condition not met in {timeout_s} s; last feedback {feedback}")


def test_positions_round_trip_within_one_tick(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json", homing_offsets={"elbow_flex": -300, "gripper": 120},
                                    drive_modes={"wrist_flex": 1})
    with emulated_bus("--calibration", str(calibration)) as port:
        driver = make_driver(port, calibration)
        try:
            driver.start()
            target = np.array([0.4, -0.3, 0.8, -0.5, 1.2, 0.6])
            sent = driver.command(target)
            assert np.all(np.abs(sent - target) <= RAD_PER_TICK / 2 + 1e-12)
            feedback = read_until(driver, lambda f: np.all(np.abs(f.positions - target) <= RAD_PER_TICK))
            assert np.all(np.abs(feedback.positions - target) <= RAD_PER_TICK)
            # The servos got goals in ticks that the calibration maps back to the command.
            for joint_map, q in zip(driver.maps, sent, strict=True):
                goal = driver.bus.read(joint_map.motor.servo_id, p.GOAL_POSITION)
                assert float(joint_map.to_radians(goal)) == pytest.approx(q)
        finally:
            driver.bus.close()


def test_no_jump_at_start(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    initial = {1: 1500, 2: 2900, 3: 1000, 4: 3000, 5: 400, 6: 2100}
    with emulated_bus("--initial", *[f"{i}:{t}" for i, t in initial.items()]) as port:
        driver = make_driver(port, calibration)
        try:
            before = {i: driver.bus.read(i, p.PRESENT_POSITION) for i in initial}
            assert before == initial
            driver.start()
            for servo_id, ticks in initial.items():
                assert driver.bus.read(servo_id, p.TORQUE_ENABLE) == 1
                assert driver.bus.read(servo_id, p.GOAL_POSITION) == ticks
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                try:
                    feedback = driver.read()
                except BusError:
                    continue
                assert feedback.ticks.tolist() == [initial[i] for i in driver.ids]
        finally:
            driver.bus.close()


def test_commands_outside_the_urdf_limits_are_clamped_and_counted(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus() as port:
        driver = make_driver(port, calibration)
        try:
            driver.start()
            sent = driver.command(np.array([5.0, 0.0, -5.0, 0.0, 0.0, 0.5]))
            assert sent[0] == pytest.approx(driver.upper[0], abs=RAD_PER_TICK)
            assert sent[2] == pytest.approx(driver.lower[2], abs=RAD_PER_TICK)
            assert driver.counters.clamped["shoulder_pan"] == 1
            assert driver.counters.clamped["elbow_flex"] == 1
            assert driver.counters.clamped["gripper"] == 0
            with pytest.raises(ValueError, match="6 finite positions"):
                driver.command(np.array([0.0, np.nan, 0, 0, 0, 0]))
            with pytest.raises(ValueError):
                driver.command(np.zeros(5))
            assert driver.counters.commands_rejected == 2
            assert driver.counters.commands == 1
        finally:
            driver.bus.close()


def test_stop_holds_position_and_releases_torque_only_when_asked(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus() as port:
        driver = make_driver(port, calibration)
        try:
            driver.start()
            driver.command(np.array([0.5, 0.5, 0.5, 0.5, 0.5, 0.5]))
            feedback = read_until(driver, lambda f: np.any(np.abs(f.velocities) > 0.5))  # mid-move
            driver.stop(disable_torque=False)
            for servo_id, ticks in zip(driver.ids, feedback.ticks, strict=True):
                assert driver.bus.read(servo_id, p.GOAL_POSITION) == int(ticks)  # the last measured position
                assert driver.bus.read(servo_id, p.TORQUE_ENABLE) == 1
            driver.stop(disable_torque=True)
            assert [driver.bus.read(i, p.TORQUE_ENABLE) for i in driver.ids] == [0] * 6
        finally:
            driver.bus.close()


def failures_until(driver: FeetechDriver, kind: str, reads: int = 200) -> list[BusError]:
    errors = []
    for _ in range(reads):
        try:
            driver.read()
        except BusError as err:
            errors.append(err)
            if err.kind == kind:
                break
    return errors


def test_a_dropped_reply_is_a_timeout_naming_the_servo_and_reads_go_on(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "drop:2:15") as port:
        driver = make_driver(port, calibration, timeout_s=0.05)
        try:
            driver.start()
            errors = failures_until(driver, "timeout")
            assert any(err.kind == "timeout" and 2 in err.servo_ids for err in errors)
            assert driver.counters.read_failures["timeout"] >= 1
            assert driver.bus.counters.by_servo[2] >= 1
            read_until(driver, lambda f: True)  # the next read succeeds: a lost reply is not a dead servo
        finally:
            driver.bus.close()


def test_a_bus_whose_far_end_went_away_fails_as_a_bus_error_and_the_driver_goes_on(tmp_path):
    """The emulator killed (as a USB adapter pulled out): the pty's tcflush fails with termios.error,
    which is not an OSError, and it used to escape the bus and end the driver's bus loop. Now every
    read and the shutdown hold fail as BusError 'serial', counted, and the driver lives on."""
    calibration = so101_calibration(tmp_path / "cal.json")
    emulator = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--calibration",
                                 str(calibration)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = emulator.stdout.readline().strip()
        driver = make_driver(port, calibration)
        try:
            driver.start()
            read_until(driver, lambda f: True)
            emulator.kill()
            emulator.wait(timeout=10)
            errors = failures_until(driver, "serial", reads=50)
            assert errors and errors[-1].kind == "serial", errors
            assert driver.counters.read_failures["serial"] >= 1
            with pytest.raises(BusError) as stop_error:
                driver.stop(disable_torque=False)
            assert stop_error.value.kind == "serial"
        finally:
            driver.bus.close()
    finally:
        if emulator.poll() is None:
            emulator.kill()
        emulator.communicate()


def test_a_corrupt_checksum_is_reported_as_such(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "corrupt:3:12") as port:
        driver = make_driver(port, calibration, timeout_s=0.05)
        try:
            driver.start()
            errors = failures_until(driver, "checksum")
            assert any(err.kind == "checksum" and 3 in err.servo_ids for err in errors)
            assert driver.bus.counters.checksum_errors >= 1
            read_until(driver, lambda f: True)
        finally:
            driver.bus.close()


def test_a_silent_servo_fails_every_read_after_it_goes(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "silent:4:20") as port:
        driver = make_driver(port, calibration, timeout_s=0.03)
        try:
            driver.start()
            failures_until(driver, "timeout")
            for _ in range(5):
                with pytest.raises(BusError, match=r"timeout") as caught:
                    driver.read()
                assert 4 in caught.value.servo_ids
            assert driver.last_error is not None
        finally:
            driver.bus.close()


def test_an_overheating_servo_raises_the_alarm_after_n_samples(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "overheat:5:10") as port:
        driver = make_driver(port, calibration, DriverConfig(alarm_samples=3))
        try:
            driver.start()
            read_until(driver, lambda f: f.temperatures[4] > 80)
            assert driver.alarms.active["overheat"] in (set(), {"wrist_roll"})
            feedback = read_until(driver, lambda f: "wrist_roll" in driver.alarms.active["overheat"])
            assert feedback.errors[4] & 0x04  # the servo's own overheat bit
            assert driver.alarms.active["overload"] == set()
        finally:
            driver.bus.close()


def test_a_stalled_servo_raises_the_overload_alarm_and_a_normal_move_does_not(tmp_path):
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--faults", "overload:1:400") as port:
        driver = make_driver(port, calibration, DriverConfig(alarm_samples=3))
        try:
            driver.start()
            driver.command(np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0]))  # a fast move: load, but no stall
            read_until(driver, lambda f: np.all(np.abs(f.velocities) < 1e-9) and np.abs(f.positions[0] - 1.0) < 0.01)
            assert driver.alarms.events["overload"] == 0
            feedback = read_until(driver, lambda f: "shoulder_pan" in driver.alarms.active["overload"])
            assert feedback.loads[0] == 1.0 and feedback.errors[0] & 0x20
            assert driver.alarms.events["overload"] == 1
        finally:
            driver.bus.close()


def test_calibration_mismatches_name_the_motor(tmp_path):
    arm = so101_calibration(tmp_path / "arm.json", homing_offsets={"wrist_flex": 250})
    other = so101_calibration(tmp_path / "other.json")
    with emulated_bus("--calibration", str(arm)) as port:
        driver = make_driver(port, other)
        try:
            with pytest.raises(CalibrationError, match="motor 'wrist_flex'.*homing offset is 250"):
                driver.start()
        finally:
            driver.bus.close()
    with emulated_bus("--ids", "1-5") as port:
        driver = make_driver(port, other, timeout_s=0.05)
        try:
            with pytest.raises(CalibrationError, match="motor 'gripper' \\(id 6\\) does not answer"):
                driver.start()
            # Nothing was enabled on the servos that did answer.
            assert driver.bus.read(1, p.TORQUE_ENABLE) == 0
        finally:
            driver.bus.close()


def test_emulator_takes_the_servo_model_of_a_sim_params_file(tmp_path):
    """`--sim-params`: the servo model's per-joint max speed (here shoulder_pan 0.5 rad/s) bounds what
    the present-speed register shows while moving; the other joints keep theirs (4 rad/s)."""
    params = yaml.safe_load(config_path("sim_params.yaml").read_text())
    params["actuator"]["model"] = "servo"
    params["actuator"]["servo"] = {"max_speed": {"default": 4.0, "shoulder_pan": 0.5}, "max_acceleration": 40.0,
                                   "gain": 20.0}
    sim_params = tmp_path / "sim_params_so101.yaml"
    sim_params.write_text(yaml.safe_dump(params))
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--sim-params", str(sim_params)) as port:
        driver = make_driver(port, calibration)
        try:
            driver.start()
            driver.command(np.array([0.8, 0.8, 0.0, 0.0, 0.0, 0.5]))
            peak = np.zeros(6)

            def settled(feedback) -> bool:
                peak[:] = np.maximum(peak, np.abs(feedback.velocities))
                return abs(feedback.positions[0] - 0.8) <= RAD_PER_TICK and not np.any(feedback.velocities)
            read_until(driver, settled, timeout_s=20)
            assert 0.3 < peak[0] <= 0.5 + RAD_PER_TICK  # ticks/s round to whole ticks
            assert peak[1] > 1.0
        finally:
            driver.bus.close()
    bad = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--sim-params",
                          str(config_path("sim_params.yaml"))], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "actuator.model" in bad.stderr


@pytest.mark.parametrize(("baud", "return_delay_us"), [(57_600, 0), (1_000_000, 500)])
def test_the_emulator_never_answers_before_the_bus_could(baud, return_delay_us):
    """A sync read of 6 servos takes at least its bytes at the baud rate (10 bits per byte) plus each
    servo's return delay: a lower bound only, which load cannot break."""
    with emulated_bus("--baud", str(baud), "--return-delay-us", str(return_delay_us)) as port, \
            FeetechBus(port, baud, timeout_s=SLACK_S) as bus:
        ids = list(range(1, 7))
        assert bus.read(1, p.RETURN_DELAY) == return_delay_us // 2
        wire_s = (8 + len(ids) + 6 * (6 + p.FEEDBACK_LENGTH)) * 10 / baud + 6 * return_delay_us * 1e-6
        shortest = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            replies = bus.sync_read(ids, p.FEEDBACK_START, p.FEEDBACK_LENGTH)
            shortest = min(shortest, time.perf_counter() - start)
            assert sorted(replies) == ids
        assert shortest >= wire_s


def test_emulate_bus_link_and_bad_faults(tmp_path):
    link = tmp_path / "ttySO101"
    with emulated_bus("--link", str(link)) as port:
        assert os.path.realpath(link) == port
        with FeetechBus(str(link), timeout_s=SLACK_S) as bus:
            assert bus.ping(3) == 0
            assert bus.read(3, p.MODEL_NUMBER) == p.STS3215_MODEL_NUMBER
            assert bus.scan(list(range(1, 9))) == {i: 0 for i in range(1, 7)}  # ids 7, 8 are not there
    bad = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--faults", "melt:1:2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "melt:1:2" in bad.stderr


def test_emulator_realtime_priority_is_applied_or_refused_in_one_line():
    """--realtime-priority N puts the emulator at SCHED_FIFO N where the process may (real servos never
    wait for the host's CPU), else one warning line and it runs as started; out of range is refused."""
    from sim2real_ros.core.control.realtime import RealtimeRequest, plan_knobs
    from sim2real_ros.nodes.realtime import read_permissions

    allowed = not plan_knobs(RealtimeRequest(policy="fifo", priority=70), read_permissions()).refused
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--ids", "1",
                             "--realtime-priority", "70"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("/dev/"), proc.stderr.read()
        assert proc.stdout.readline().startswith("emulating servos")
        said = proc.stdout.readline().strip()
        if allowed:
            assert said == "emulator at SCHED_FIFO priority 70"
            assert os.sched_getscheduler(proc.pid) == os.SCHED_FIFO
            assert os.sched_getparam(proc.pid).sched_priority == 70
        else:
            assert said.startswith("[WARN] emulate-bus: real-time knobs not applied") and "priority 70" in said
            assert os.sched_getscheduler(proc.pid) == os.SCHED_OTHER
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    bad = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--realtime-priority", "100"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--realtime-priority 100: must be in 0..99" in bad.stderr


def test_start_waits_for_late_replies_and_the_cyclic_reads_keep_their_timeout(tmp_path):
    """While a graph's processes start, the host (or a USB adapter) can answer late. The driver's
    start-up transactions wait START_TIMEOUT_S for a reply, so the first replies of servo 1 coming
    50 ms late (emulator fault late:1:3) do not end the start with 'does not answer' (a bus timeout of
    20 ms failed all 3 tries before); the cyclic reads afterwards keep the bus's own 20 ms."""
    from sim2real_ros.hardware.driver import START_TIMEOUT_S
    from sim2real_ros.hardware.emulator import LATE_S

    assert START_TIMEOUT_S > LATE_S + 0.02
    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--calibration", str(calibration), "--faults", "late:1:3") as port:
        driver = make_driver(port, calibration, timeout_s=0.02)
        try:
            driver.start()
            assert driver.bus.timeout_s == 0.02
            feedback = read_until(driver, lambda f: True)
            assert feedback.positions.shape == (6,)
        finally:
            driver.bus.close()
    with emulated_bus("--calibration", str(calibration), "--faults", "late:1:1000") as port:
        driver = make_driver(port, calibration, timeout_s=0.02)
        try:
            driver.start()  # every reply of servo 1 late: the start waits for them
            # The cyclic reads do not. One read can still see its late reply: a process descheduled
            # past the reply (CI at -n 2) finds it waiting when select() returns. A start timeout
            # kept by the cyclic reads would let every one of them through.
            assert driver.bus.timeout_s == 0.02
            errors = failures_until(driver, "timeout", reads=20)
            assert errors and errors[-1].kind == "timeout", errors
        finally:
            driver.bus.close()


def test_replies_waiting_when_the_reader_comes_back_late_are_no_timeout(tmp_path, monkeypatch):
    """A driver thread that loses the CPU (or the GIL) between sending a request and reading the
    reply comes back past its deadline: the servos answered meanwhile and their replies wait in the
    port's buffer. They are taken, not reported as a bus timeout (hardware/bus.py: one look without
    waiting past the deadline). A reply that is not there by then still is a timeout."""
    from sim2real_ros.hardware import bus as bus_module

    class AwayAfterSending:
        """time for bus.py whose second monotonic() of a transaction (its first look for replies)
        comes back `away_s` later, as after a thread that was descheduled there."""

        def __init__(self, away_s: float):
            self.away_s, self.calls = away_s, 0

        def monotonic(self) -> float:
            self.calls += 1
            if self.calls == 2:
                time.sleep(self.away_s)
            return time.monotonic()

    calibration = so101_calibration(tmp_path / "cal.json")
    with emulated_bus("--calibration", str(calibration)) as port:
        bus = FeetechBus(port, 1_000_000, SLACK_S)
        try:
            bus.read(1, p.PRESENT_POSITION)  # the port open and the emulator answering (it may be slow at first)
            bus.timeout_s = 0.02
            monkeypatch.setattr(bus_module, "time", AwayAfterSending(0.1))
            assert 0 <= bus.read(1, p.PRESENT_POSITION) < 4096
            assert bus.counters.timeouts == 0
            monkeypatch.setattr(bus_module, "time", AwayAfterSending(0.1))
            with pytest.raises(BusError, match="no reply within 20.0 ms"):
                bus.read(42, p.PRESENT_POSITION)  # no such servo: nothing comes, late or not
        finally:
            bus.close()
