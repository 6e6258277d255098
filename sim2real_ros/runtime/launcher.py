"""Start a declared graph as separate processes where launch_ros is not installed.

Each node runs as `python -m sim2real_ros.cli.main node EXECUTABLE --ros-args ...`, the same
arguments `ros2 launch` would pass. Ctrl-C / SIGTERM stop every node (SIGINT first, as ros2 launch
does, then SIGTERM, then SIGKILL); a node that dies is reported with its exit code. A launcher
that is killed outright (SIGKILL, OOM killer) takes its nodes with it: each node gets the
launcher's pid and ties its life to it (lifeline.py: parent-death signal on Linux, a getppid
watchdog everywhere).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..graph import NodeDecl
from ..paths import use_dds_profile
from ..signals import StopRequest
from .lifeline import launcher_environment


def ros_arguments(decl: NodeDecl, namespace: str, overrides_file: Path) -> list[str]:
    """The --ros-args a node gets: name, namespace, params files (declared, then overrides), remaps."""
    out = ["--ros-args", "-r", f"__node:={decl.name}"]
    if namespace:
        out += ["-r", f"__ns:=/{namespace.strip('/')}"]
    for params_file in decl.params_files:
        out += ["--params-file", params_file]
    out += ["--params-file", str(overrides_file)]
    for src, dst in decl.remappings:
        out += ["-r", f"{src}:={dst}"]
    return out


def write_overrides(decl: NodeDecl, directory: Path) -> Path:
    """Write the node's parameter overrides as a ROS params file (wildcard node match)."""
    path = directory / f"{decl.name}.params.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": decl.parameters}}, sort_keys=True))
    return path


# How a node process is started (Popen keyword arguments). A process group of its own keeps the
# terminal's Ctrl-C away from it (the launcher forwards one, in order), but it stays in the
# launcher's session: where the kernel groups processes by session for fair scheduling (autogroup,
# on by default on Ubuntu and here), a node in a session of its own was its own group, and a
# lightly loaded group waited up to 180 ms for a CPU beside two busy processes: the supervisor's
# e-stop without real-time scheduling (SCHED_OTHER), loaded, p99 5.6-77 ms, max 73-182 ms, 6 of 4,000
# over 100 ms; in the launcher's session p99 5.8-8.8 ms, max 7.3-13 ms, none (bench_estop, 2026-12-07,
# docs/benchmarks.md). No terminal input: a node never reads it.
NODE_PROCESS = {"process_group": 0, "stdin": subprocess.DEVNULL}


def node_command(decl: NodeDecl, namespace: str, overrides_file: Path) -> list[str]:
    return [sys.executable, "-m", "sim2real_ros.cli.main", "node", decl.executable] + ros_arguments(
        decl, namespace, overrides_file
    )


@dataclass
class RunningNode:
    decl: NodeDecl
    process: subprocess.Popen
    reported: bool = False


class GraphLauncher:
    """Run NodeDecls as child processes, prefix their output with the node name, stop them all."""

    def __init__(self, decls: list[NodeDecl], namespace: str = "", env: dict[str, str] | None = None,
                 echo: bool = True, log_file: Path | None = None) -> None:
        self._decls = decls
        self._namespace = namespace
        self._env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        use_dds_profile(self._env)
        self._echo = echo
        self._log = open(log_file, "a") if log_file else None  # noqa: SIM115 - closed in shutdown
        self._tmp = tempfile.TemporaryDirectory(prefix="sim2real_launch_")
        self.nodes: list[RunningNode] = []
        self._pumps: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        # The kernel's parent-death signal follows the thread that forks: only ask for it when
        # that thread is the main one, which lives as long as this process (lifeline.py).
        lifeline = launcher_environment(os.getpid(), threading.current_thread() is threading.main_thread())
        env = {**self._env, **lifeline}
        for decl in self._decls:
            overrides = write_overrides(decl, Path(self._tmp.name))
            proc = subprocess.Popen(
                node_command(decl, self._namespace, overrides),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                text=True,
                **NODE_PROCESS,  # our Ctrl-C is forwarded explicitly, once
            )
            self.nodes.append(RunningNode(decl, proc))
            pump = threading.Thread(target=self._pump, args=(decl.name, proc), daemon=True)
            pump.start()
            self._pumps.append(pump)

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._say(f"[{name}] {line.rstrip()}")

    def _say(self, text: str) -> None:
        """A line of the launcher's own, where node output goes (terminal and/or log file)."""
        with self._lock:
            if self._echo:
                print(text, flush=True)
            if self._log:
                self._log.write(text + "\n")
                self._log.flush()

    def check(self) -> list[tuple[str, int]]:
        """Report (once) nodes that exited; return [(name, exit code)] of all exited nodes."""
        exited = []
        for node in self.nodes:
            code = node.process.poll()
            if code is not None:
                exited.append((node.decl.name, code))
                if not node.reported:
                    node.reported = True
                    print(f"[launch] node '{node.decl.name}' exited with code {code}", flush=True)
        return exited

    def spin(self, duration_s: float | None = None, stop_on_exit: bool = False) -> int:
        """Wait until `duration_s` passes, Ctrl-C/SIGTERM/SIGHUP, or (stop_on_exit) any node exits.

        Returns 0, or the first non-zero exit code of a node that died.
        """
        stop = StopRequest()  # not an Event: setting one from a handler can deadlock (signals.py)
        # SIGHUP (the terminal closed) stops the graph in order too, as SIGTERM does (issue 34).
        previous = {sig: signal.signal(sig, stop.handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
        deadline = None if duration_s is None else time.monotonic() + duration_s
        try:
            while not stop:
                exited = self.check()
                if exited and (stop_on_exit or len(exited) == len(self.nodes)):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.1)  # a signal ends the sleep early (its handler runs, the loop checks)
        except KeyboardInterrupt:
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return next((code for _, code in self.check() if code not in (0, None)), 0)

    def shutdown(self, timeout_s: float = 5.0) -> dict[str, int]:
        """Stop every node: SIGINT, then SIGTERM, then SIGKILL. Returns exit codes by node name."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            alive = [n for n in self.nodes if n.process.poll() is None]
            if not alive:
                break
            if sig != signal.SIGINT:  # say who did not stop: a user waiting on Ctrl-C wants to know
                self._say(f"[launch] still running {timeout_s:g} s after the last signal: "
                          f"{', '.join(n.decl.name for n in alive)}; sending {signal.Signals(sig).name}")
            for node in alive:
                with contextlib.suppress(ProcessLookupError):
                    node.process.send_signal(sig)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and any(n.process.poll() is None for n in alive):
                time.sleep(0.05)
        codes = {n.decl.name: n.process.wait() for n in self.nodes}
        # A node's last lines (often the error it exited with) may still be in its pipe: read them
        # all before the log closes. Bounded: a grandchild holding the pipe open must not hang us.
        deadline = time.monotonic() + timeout_s
        for pump in self._pumps:
            pump.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            if self._log:
                self._log.close()
                self._log = None
        self._tmp.cleanup()
        return codes

    def __enter__(self) -> GraphLauncher:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
