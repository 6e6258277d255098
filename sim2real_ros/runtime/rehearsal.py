"""`sim2real launch robot --robot so101 --emulate` as a process, watched from outside: what the
bring-up test (test/test_bringup_emulated.py) and benchmark (benchmarks/bench_bringup_estop.py) run,
and a checkpoint whose policy moves the arm (the trained SO-101 policy is another piece of work)."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..topics import SUPERVISOR_ARM, SUPERVISOR_RESET
from .probe import wait_until

CALIBRATION_LINE = re.compile(r"\[launch\] emulated arm on (\S+), calibration (\S+),")


class EmulatedBringup:
    """The launcher process; its output lines are kept (and written to `log`)."""

    def __init__(self, checkpoint: Path, goal_log: Path, log: Path, *extra: str) -> None:
        self.log = log
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sim2real_ros.cli.main", "launch", "robot", "--robot", "so101", "--emulate",
             "--checkpoint", str(checkpoint), "--emulate-goal-log", str(goal_log), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with open(self.log, "w") as out:
            for line in self.process.stdout:
                self.lines.append(line.rstrip())
                out.write(line)
                out.flush()

    def calibration_file(self) -> str | None:
        """The calibration the launcher generated for the emulated servos (once it said so)."""
        for line in list(self.lines):
            match = CALIBRATION_LINE.search(line)
            if match:
                return match.group(2)
        return None

    def stop(self, timeout_s: float = 30.0) -> int:
        """Ctrl-C, as a user would; the launcher stops its nodes, then the emulator."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        self._thread.join(timeout=5.0)
        return code


def drifting_so101_checkpoint(path: Path, pan_drift_rad: float = 0.03) -> Path:
    """An SO-101 checkpoint that turns the shoulder: `sim2real policy init --robot so101` (an untrained
    network, which holds the arm where it is), its action mean then set to `pan_drift_rad` [rad] on
    shoulder_pan, so every chunk aims that far past the present pan angle and the arm keeps turning
    at the supervisor's velocity limit. A policy that moves, without a trained SO-101 one."""
    import numpy as np

    from ..core.policy.checkpoint import read_checkpoint, save_checkpoint
    from ..core.policy.model import build_model

    subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "policy", "init", "--robot", "so101",
                    "--out", str(path)], check=True, capture_output=True, text=True, timeout=300)
    spec, state, _ = read_checkpoint(path)
    model = build_model(spec.architecture, spec, **spec.hparams)
    model.load_state_dict(state)
    drift = np.zeros(len(spec.joint_names))
    drift[list(spec.joint_names).index("shoulder_pan")] = pan_drift_rad
    model.set_normalization(model.joint_mean.numpy(), model.joint_std.numpy(), drift, model.action_std[0].numpy())
    save_checkpoint(path, model, spec)
    return path


def arm_like_a_human(node, timeout_s: float, check: Callable[[], None] | None = None) -> str:
    """Press arm (supervisor/arm) until accepted, resetting first whenever it answers that an e-stop is
    latched (a silent heartbeat at start-up, or the last e-stop). `node`: a spinning rclpy node.
    check: called before each press; raises to stop pressing (a graph node that died: no answer will
    change). Returns "accepted: ..." or "refused: <last answer>"."""
    from std_srvs.srv import Trigger

    services = {"arm": SUPERVISOR_ARM, "reset": SUPERVISOR_RESET}
    clients = {name: node.create_client(Trigger, service) for name, service in services.items()}
    for name, client in clients.items():
        if not client.wait_for_service(timeout_sec=timeout_s):
            return f"refused: {services[name]} never appeared"
    deadline = time.monotonic() + timeout_s
    message = ""
    while time.monotonic() < deadline:
        if check is not None:
            check()
        future = clients["arm"].call_async(Trigger.Request())
        if wait_until(future.done, 10.0) and future.result() is not None:
            message = future.result().message
            if future.result().success:
                return "accepted: " + message
            if "reset first" in message:
                reset = clients["reset"].call_async(Trigger.Request())
                wait_until(reset.done, 10.0)
        time.sleep(0.5)
    return "refused: " + message
