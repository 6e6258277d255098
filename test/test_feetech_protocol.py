"""Feetech STS codec and LeRobot calibration, without a bus (hardware/protocol.py, hardware/calibration.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from feetech_support import SO101_MOTORS, SO101_URDF, so101_calibration
from hypothesis import given
from hypothesis import strategies as st

from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.hardware import protocol as p
from sim2real_ros.hardware.calibration import RAD_PER_TICK, CalibrationError, joint_maps, load_calibration


def test_ping_packet_matches_the_documented_bytes():
    # FF FF 01 02 01 FB: ping servo 1, checksum ~(1 + 2 + 1) & 0xFF = 0xFB.
    assert p.build_instruction(1, p.PING) == bytes.fromhex("ffff010201fb")


@given(st.integers(0, p.BROADCAST_ID), st.integers(0, 255), st.binary(max_size=40))
def test_packets_round_trip_through_the_reader(servo_id, code, params):
    packet = p.build_status(servo_id, code, params)
    reader = p.PacketReader()
    # Split anywhere: a serial read returns whatever has arrived.
    cut = len(packet) // 2
    got = reader.feed(packet[:cut]) + reader.feed(packet[cut:])
    assert got == [p.Packet(servo_id, code, params)]
    assert reader.checksum_errors == 0


def test_a_bad_checksum_is_dropped_counted_and_the_next_packet_still_parsed():
    bad = bytearray(p.build_status(3, 0, b"\x10\x20"))
    bad[-1] ^= 0xFF
    good = p.build_status(4, 0, b"\x30")
    reader = p.PacketReader()
    assert reader.feed(b"\x00\x13" + bytes(bad) + good) == [p.Packet(4, 0, b"\x30")]
    assert reader.checksum_errors == 1
    assert reader.skipped_bytes > 0


@given(st.lists(st.binary(max_size=600), max_size=20))
def test_the_reader_survives_any_bytes_with_bounded_memory(chunks):
    reader = p.PacketReader()
    for chunk in chunks:
        for packet in reader.feed(chunk):
            assert 0 <= packet.servo_id <= 0xFE and len(packet.params) <= 253
        assert reader.pending() <= 4 + 255


@pytest.mark.parametrize(("register", "value"), [(p.PRESENT_SPEED, -1234), (p.PRESENT_SPEED, 1234),
                                                 (p.PRESENT_LOAD, -1000), (p.PRESENT_LOAD, 1000),
                                                 (p.HOMING_OFFSET, -2047), (p.GOAL_POSITION, 4095)])
def test_sign_magnitude_round_trip(register, value):
    data = p.encode_value(register, value)
    assert p.decode_value(register, data) == value
    if value < 0:
        assert int.from_bytes(data, "little") & (1 << register.sign_bit)


def test_values_that_do_not_fit_are_refused():
    with pytest.raises(p.ProtocolError, match="homing_offset"):
        p.encode_value(p.HOMING_OFFSET, 2048)
    with pytest.raises(p.ProtocolError, match="torque_enable"):
        p.encode_value(p.TORQUE_ENABLE, 256)


def test_status_error_bits_are_named():
    assert p.error_names(0x24) == ["overheat", "overload"]
    assert p.error_names(0) == []


def test_sync_write_params_layout():
    assert p.sync_write_params(p.GOAL_POSITION, {1: 2048, 2: 100}) == bytes((42, 2, 1, 0x00, 0x08, 2, 100, 0))


def _maps(path, drive_modes=None):
    model = RobotModel.from_file(SO101_URDF)
    limits = model.limits_arrays(list(SO101_MOTORS))
    return joint_maps(load_calibration(so101_calibration(path, drive_modes=drive_modes)), SO101_MOTORS,
                      limits["lower"]), limits


@pytest.mark.parametrize("drive_mode", [0, 1])
def test_ticks_radians_round_trip_within_a_tick(tmp_path, drive_mode):
    maps, limits = _maps(tmp_path / "cal.json", {name: drive_mode for name in SO101_MOTORS})
    for joint_map, low, high in zip(maps, limits["lower"], limits["upper"], strict=True):
        motor = joint_map.motor
        for q in np.linspace(low, high, 9):
            ticks = joint_map.to_ticks(q)
            if motor.range_min < ticks < motor.range_max:
                assert abs(float(joint_map.to_radians(ticks)) - q) <= RAD_PER_TICK / 2 + 1e-12


def test_mid_range_is_zero_and_the_gripper_closed_end_is_its_lower_limit(tmp_path):
    maps, limits = _maps(tmp_path / "cal.json")
    by_name = {m.joint: m for m in maps}
    pan = by_name["shoulder_pan"].motor
    assert float(by_name["shoulder_pan"].to_radians((pan.range_min + pan.range_max) / 2)) == 0.0
    gripper = by_name["gripper"]
    assert float(gripper.to_radians(gripper.motor.range_min)) == pytest.approx(limits["lower"][-1])
    # drive_mode 1 flips the direction.
    flipped, _ = _maps(tmp_path / "flip.json", {"shoulder_pan": 1})
    assert float(flipped[0].to_radians(pan.range_max)) == -float(by_name["shoulder_pan"].to_radians(pan.range_max))


def test_calibration_errors_name_file_and_motor(tmp_path):
    with pytest.raises(CalibrationError, match="not found"):
        load_calibration(tmp_path / "absent.json")
    path = so101_calibration(tmp_path / "no_gripper.json", drop="gripper")
    model = RobotModel.from_file(SO101_URDF)
    with pytest.raises(CalibrationError, match="motor 'gripper'"):
        joint_maps(load_calibration(path), SO101_MOTORS, model.limits_arrays(list(SO101_MOTORS))["lower"], str(path))
    data = json.loads(so101_calibration(tmp_path / "c.json").read_text())
    for field_name, value, message in [("range_min", 4000, "motor 'elbow_flex'.*range_min"),
                                       ("drive_mode", 2, "motor 'elbow_flex'.*drive_mode"),
                                       ("id", "3", "motor 'elbow_flex'.*'id'"),
                                       ("id", 1, "motor 'elbow_flex'.*also motor 'shoulder_pan'")]:
        broken = json.loads(json.dumps(data))
        broken["elbow_flex"][field_name] = value
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(broken))
        with pytest.raises(CalibrationError, match=message):
            load_calibration(bad)
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\xff\x00{")
    with pytest.raises(CalibrationError, match="garbage.json"):
        load_calibration(garbage)
