"""Shared pieces of the Feetech tests: the SO-101's joints, a calibration file, an emulated bus process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from sim2real_ros.hardware.calibration import MotorCalibration, write_calibration
from sim2real_ros.hardware.emulated_arm import EMULATOR_PRIORITY
from sim2real_ros.paths import urdf_path

SO101_URDF = urdf_path("so101/so101_new_calib.urdf")
# LeRobot's SO-101 motor names, ids 1..6 (= the URDF's joint names).
SO101_MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def so101_calibration(path: Path, homing_offsets: dict[str, int] | None = None,
                      drive_modes: dict[str, int] | None = None, drop: str = "") -> Path:
    """A LeRobot-format calibration file like a real SO-101's (ranges around mid-turn)."""
    offsets = homing_offsets or {}
    modes = drive_modes or {}
    ranges = {"shoulder_pan": (820, 3250), "shoulder_lift": (850, 3200), "elbow_flex": (900, 3150),
              "wrist_flex": (880, 3180), "wrist_roll": (130, 3960), "gripper": (2030, 3500)}
    motors = [MotorCalibration(name, k + 1, modes.get(name, 0), offsets.get(name, 0), *ranges[name])
              for k, name in enumerate(SO101_MOTORS) if name != drop]
    write_calibration(path, motors)
    return path


@contextmanager
def emulated_bus(*args: str, timeout_s: float = 30.0, realtime_priority: int = EMULATOR_PRIORITY):
    """`sim2real emulate-bus ARGS` as a process; yields the pty path from its first line.

    realtime_priority: its SCHED_FIFO priority (emulate-bus --realtime-priority; 0: as started), by
    default the rehearsal's: the emulator stands for servos, which never wait for the host's CPU; at
    SCHED_OTHER it could miss the driver's start-up pings while a graph's processes started."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    priority = ["--realtime-priority", str(realtime_priority)] if realtime_priority else []
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", *args, *priority],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        path = proc.stdout.readline().strip()
        if not path:
            raise RuntimeError(f"emulate-bus printed no path: {proc.stderr.read()}")
        yield path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
