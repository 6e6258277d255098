"""`sim2real emulate-bus`: an emulated Feetech STS servo bus on a pseudo-terminal (docs/so101.md).

Prints the pty's path on its first line (and, with --link, makes PATH a symlink to it), then serves
until Ctrl-C or SIGTERM. Any serial client opens that path as it would /dev/ttyACM0.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

from ..core.errors import Sim2RealError

# LeRobot's SO-101 motors by id (= the joint names of urdf/so101/so101_new_calib.urdf).
SO101_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def parse_ids(text: str) -> list[int]:
    """'1-6' or '1,2,5' or '1-3,7' -> ids."""
    ids: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                low, high = (int(v) for v in part.split("-", 1))
                ids.extend(range(low, high + 1))
            else:
                ids.append(int(part))
    except ValueError as err:
        raise Sim2RealError(f"--ids {text!r}: expected ids like 1-6 or 1,2,5") from err
    return ids


def parse_pairs(values: list[str], what: str) -> dict[int, int]:
    """['1:2048', ...] -> {1: 2048}."""
    out = {}
    for value in values:
        try:
            key, number = value.split(":")
            out[int(key)] = int(number)
        except ValueError as err:
            raise Sim2RealError(f"{what} {value!r}: expected ID:TICKS") from err
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--link", type=Path, help="make this path a symlink to the pty (replaced if it is a symlink)")
    parser.add_argument("--ids", default="1-6", help="servo ids on the bus (default 1-6, an SO-101)")
    parser.add_argument("--baud", type=int, default=1_000_000, help="bus baud rate, for reply timing [bit/s]")
    parser.add_argument("--faults", nargs="*", default=[], metavar="KIND:ID:N",
                        help="drop:ID:N (every Nth reply lost), corrupt:ID:N (every Nth reply bad checksum), "
                             "silent:ID:N (no reply after N), overheat:ID:N (85 degC after N replies), "
                             "overload:ID:N (100 % load after N replies), late:ID:N (the first N replies 50 ms late)")
    parser.add_argument("--calibration", type=Path,
                        help="a LeRobot calibration JSON: servos get its homing offsets and start mid-range")
    parser.add_argument("--initial", nargs="*", default=[], metavar="ID:TICKS",
                        help="start position of a servo [ticks] (overrides --calibration's mid-range)")
    parser.add_argument("--hand", nargs="*", default=[], metavar="ID:TICKS:AT_S",
                        help="a hand moves servo ID to TICKS from AT_S seconds after start, while its torque is off "
                             "(a person moving a leader arm)")
    parser.add_argument("--return-delay-us", type=int, default=0,
                        help="every servo's return delay [us] (register 7, 2 us units; LeRobot sets 0)")
    parser.add_argument("--dead-time", type=float, default=None, help="servo dead time [s]")
    parser.add_argument("--sim-params", type=Path,
                        help="a sim params YAML with the servo actuator model (as `sim2real sysid fit` writes): "
                             "dead time, max speed, acceleration and gain per joint; servo ids map to the "
                             "SO-101 joints (1 = shoulder_pan ... 6 = gripper) or to --calibration's motors")
    parser.add_argument("--goal-log", type=Path,
                        help="append a line per goal position written on the bus to this file: "
                             "'t_ns id ticks present' (t_ns: time.monotonic_ns when it was read; for tests and "
                             "benchmarks)")
    parser.add_argument("--realtime-priority", type=int, default=0, metavar="N",
                        help="run the emulator at SCHED_FIFO priority N (1-99; 0, the default: as started). Real "
                             "servos answer from their own microcontrollers, never waiting for the host's CPU: "
                             "a priority above the graph's keeps the host's load out of the bus timing measured "
                             "against the emulator. Refused with one warning where the process may not")


def _apply_priority(priority: int) -> str:
    """SCHED_FIFO at `priority` for this process where it may; returns the line saying what happened."""
    from ..core.control.realtime import RealtimeRequest, plan_knobs
    from ..nodes.realtime import apply_plan, read_permissions

    request = RealtimeRequest(policy="fifo", priority=priority, source="emulate-bus --realtime-priority")
    report = apply_plan(request, plan_knobs(request, read_permissions()))
    if report.refused:
        return f"[WARN] emulate-bus: {report.warning()}"
    return f"emulator at SCHED_FIFO priority {report.priority}"


def run(args: argparse.Namespace) -> int:
    from ..hardware import protocol as p
    from ..runtime.lifeline import LAUNCHER_PID_ENV, bound_exit, die_with_launcher

    # Started by `sim2real launch robot --emulate`: die with that launcher, as its nodes do.
    launched = LAUNCHER_PID_ENV in os.environ
    if not die_with_launcher():
        print("[ERROR] emulate-bus: the launcher that started it is gone; not starting", file=sys.stderr)
        return 1
    from ..hardware.calibration import load_calibration
    from ..hardware.emulator import BusEmulator, Fault, HandMove, ServoDynamics, dynamics_from_sim_params

    try:
        ids = parse_ids(args.ids)
        faults = [Fault.parse(text) for text in args.faults]
        initial: dict[int, int] = {}
        offsets: dict[int, int] = {}
        motor_names: dict[int, str] = {}
        if args.calibration is not None:
            for motor in load_calibration(args.calibration).values():
                motor_names[motor.servo_id] = motor.name
                offsets[motor.servo_id] = motor.homing_offset
                initial[motor.servo_id] = (motor.range_min + motor.range_max) // 2
        initial.update(parse_pairs(args.initial, "--initial"))
        if not 0 <= args.realtime_priority <= 99:
            raise Sim2RealError(f"--realtime-priority {args.realtime_priority}: must be in 0..99 (0: as started)")
        if not 0 <= args.return_delay_us <= 510:
            raise Sim2RealError(f"--return-delay-us {args.return_delay_us}: must be in 0..510")
        dynamics: ServoDynamics | dict[int, ServoDynamics]
        if args.sim_params is not None:
            names = dict(enumerate(SO101_JOINTS, start=1))
            names.update(motor_names)
            unnamed = [i for i in ids if i not in names]
            if unnamed:
                raise Sim2RealError(f"--sim-params: no joint name for servos {unnamed} (give --calibration)")
            dynamics = dynamics_from_sim_params(str(args.sim_params), {i: names[i] for i in ids})
            if args.dead_time is not None:
                dynamics = {i: replace(d, dead_time_s=args.dead_time) for i, d in dynamics.items()}
        else:
            dynamics = ServoDynamics() if args.dead_time is None else ServoDynamics(dead_time_s=args.dead_time)
        hand = [HandMove.parse(text) for text in args.hand]
        emulator = BusEmulator(ids, args.baud, dynamics, faults, initial, offsets, hand)
    except Sim2RealError as err:
        print(f"[ERROR] {err}", file=sys.stderr)
        return 2
    for servo in emulator.servos.values():
        servo.memory[p.RETURN_DELAY.address] = args.return_delay_us // 2
    if args.goal_log is not None:
        try:
            emulator.goal_log = open(args.goal_log, "a")  # noqa: SIM115 - closed below
        except OSError as err:
            print(f"[ERROR] --goal-log {args.goal_log}: {err.strerror}", file=sys.stderr)
            emulator.close()
            return 2
    if args.link is not None:
        if args.link.is_symlink():
            args.link.unlink()
        elif args.link.exists():
            print(f"[ERROR] --link {args.link}: exists and is not a symlink; not replacing it", file=sys.stderr)
            return 2
        os.symlink(emulator.path, args.link)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:  # from the first line on, Ctrl-C / SIGTERM end in the same orderly close
        print(emulator.path, flush=True)
        print(f"emulating servos {ids} at {args.baud} baud" + (f", faults {args.faults}" if args.faults else ""),
              flush=True)
        if args.realtime_priority:
            # After the first line: whoever reads the pty path from it gets that line first.
            print(_apply_priority(args.realtime_priority), flush=True)
        emulator.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.close()
        if emulator.goal_log is not None:
            emulator.goal_log.close()
        if args.link is not None and args.link.is_symlink():
            args.link.unlink()
        if launched:
            bound_exit()  # as `sim2real node` does: the interpreter's exit may not hang past the grace
    return 0
