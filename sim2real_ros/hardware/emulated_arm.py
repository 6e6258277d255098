"""An emulated SO-101 for a bring-up rehearsal: `sim2real emulate-bus` as a child process.

`sim2real launch robot --robot so101 --emulate` (and robot.launch.py with emulate:=true) start it
before the graph: a calibration file is generated for the emulated servos (ranges covering the URDF
limits, as LeRobot's calibration would find them on an arm whose end stops lie just past them), the
servos start at the sim's home pose (where the policy's episodes start), and the emulator's pty
becomes the driver's port. Everything after that is what runs on the real arm: the driver speaks
the STS protocol to the pty, at the bus's byte timing.
"""
from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import Sim2RealError
from ..core.robot.urdf import RobotModel
from ..sim.params import load_sim_params
from .calibration import calibration_covering, joint_maps, write_calibration

CALIBRATION_FILE = "emulated_arm_calibration.json"
START_TIMEOUT_S = 30.0  # the emulator prints its pty path within this, or the rehearsal fails [s]
# The emulator's SCHED_FIFO priority (emulate-bus --realtime-priority), above every node of the robot
# graph (graph.ROBOT_REALTIME: supervisor 60): real servos answer from their own microcontrollers,
# whatever the host's load, so the emulator's replies must not queue behind the graph's processes,
# or the rehearsal's bus timing measures the emulator's scheduling instead of the driver's. Its work
# per instruction is bounded and it sleeps in select() between them. Refused with one warning where
# the process may not (the emulator then runs as started).
EMULATOR_PRIORITY = 70


@dataclass
class EmulatedArm:
    """A running emulator: `port` (its pty), `calibration` (the generated file), `goal_log` (or None)."""

    process: subprocess.Popen
    port: str
    calibration: Path
    initial_ticks: dict[int, int]
    goal_log: Path | None = None
    _pump: threading.Thread | None = field(default=None, repr=False)

    def stop(self, timeout_s: float = 5.0) -> int:
        """SIGINT, then SIGTERM, then SIGKILL; returns the exit code."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout_s)
        code = self.process.wait()
        if self._pump is not None:
            self._pump.join(timeout=1.0)
        return code


def rehearsal_pose(robot_description: str, sim_params_file: str) -> tuple[list[str], list[float], list[float],
                                                                          dict[str, float]]:
    """(joints, lower, upper [rad], home {joint: rad}) of the arm: URDF limits, sim params home pose."""
    model = RobotModel.from_description(robot_description)
    joints = list(model.joint_names)
    limits = model.limits_arrays(joints)
    listed = load_sim_params(sim_params_file).home_pose(joints)
    home = {j: min(max(float(listed.get(j, 0.0)), float(lo)), float(hi))
            for j, lo, hi in zip(joints, limits["lower"], limits["upper"], strict=True)}
    return joints, [float(v) for v in limits["lower"]], [float(v) for v in limits["upper"]], home


def start_emulated_arm(robot_description: str, sim_params_file: str, directory: Path,
                       env: dict[str, str] | None = None, goal_log: Path | None = None,
                       faults: tuple[str, ...] = (), echo: bool = True,
                       realtime_priority: int = EMULATOR_PRIORITY) -> EmulatedArm:
    """Write the calibration into `directory`, start the emulator, wait for its pty path.

    realtime_priority: the emulator's SCHED_FIFO priority (EMULATOR_PRIORITY; 0: as started).

    Raises Sim2RealError (with the emulator's own error line) when it does not start."""
    joints, lower, upper, home = rehearsal_pose(robot_description, sim_params_file)
    motors = calibration_covering(joints, lower, upper)
    calibration = Path(directory) / CALIBRATION_FILE
    write_calibration(calibration, motors)
    maps = joint_maps({m.name: m for m in motors}, joints, lower, str(calibration))
    initial = {m.motor.servo_id: m.to_ticks(home[m.joint]) for m in maps}
    command = [sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus",
               "--ids", ",".join(str(i) for i in sorted(initial)), "--calibration", str(calibration),
               "--initial", *(f"{i}:{t}" for i, t in sorted(initial.items())),
               "--realtime-priority", str(int(realtime_priority))]
    if goal_log is not None:
        command += ["--goal-log", str(goal_log)]
    if faults:
        command += ["--faults", *faults]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    assert process.stdout is not None
    first = _first_line(process, START_TIMEOUT_S)
    if not first.startswith("/dev/"):
        rest = first + (process.stdout.read() if process.poll() is not None else "")
        arm = EmulatedArm(process, "", calibration, initial)
        arm.stop()
        raise Sim2RealError(f"the servo-bus emulator did not start: {rest.strip() or 'no output'}")

    def pump() -> None:
        for line in process.stdout:
            if echo:
                print(f"[emulate-bus] {line.rstrip()}", flush=True)

    if echo:
        print(f"[emulate-bus] {first}", flush=True)
    thread = threading.Thread(target=pump, name="emulate-bus-output", daemon=True)
    thread.start()
    return EmulatedArm(process, first, calibration, initial, goal_log, thread)


def _first_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The process's first stdout line, or '' when it exits or says nothing within timeout_s [s]."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if selector.select(timeout=0.1):
                return process.stdout.readline().strip()
            if process.poll() is not None:
                return ""
    return ""


@dataclass(frozen=True)
class GoalWrite:
    """One instruction's goal positions as the emulator logged them (emulator.py, goal log)."""

    t_ns: int  # time.monotonic_ns when the instruction was read from the pty [ns]
    goals: dict[int, int]  # servo id -> goal [ticks]
    present: dict[int, int]  # servo id -> present position then [ticks]


def read_goal_log(path: str | Path) -> list[GoalWrite]:
    """The goal log's instructions in order (lines of one instruction share t_ns); a torn last line
    (the emulator still writing) is left out."""
    writes: list[GoalWrite] = []
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if len(fields) != 4 or not all(f.lstrip("-").isdigit() for f in fields):
            continue
        t_ns, servo_id, goal, present = (int(f) for f in fields)
        if not writes or writes[-1].t_ns != t_ns:
            writes.append(GoalWrite(t_ns, {}, {}))
        writes[-1].goals[servo_id] = goal
        writes[-1].present[servo_id] = present
    return writes
