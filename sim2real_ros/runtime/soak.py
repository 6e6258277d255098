"""`sim2real soak`: the sim graph with the policy driving while faults are injected (issue 34).

The graph is the sim graph of `declare_graph("sim")` with the robot's supervisor settings (no
auto_arm, a stop source required, an `estop` heartbeat with a timeout) and the robot graph's
real-time knobs for the supervisor and the actuator, plus the recorder. The
injector (this process) is the person at the robot: it publishes the e-stop heartbeat, arms after
every stop, and injects one fault at a time from `core.soak.iter_faults(seed)`, each after a random
gap once the graph has recovered from the previous one. Joint states reach the graph through a
relay here (sim_node publishes `soak/joint_states_raw`) so they can be dropped.

After the run the recorder's bag is read back and judged by core.soak's invariant checks; every
process started is checked gone. Times are wall-clock ns (DDS source timestamps in the bag's
publish times, time.time_ns() here): the sim clock is one of the things that gets stepped.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool
from trajectory_msgs.msg import JointTrajectory

from ..bags.info import bag_info
from ..bags.reader import iter_messages, publish_records
from ..conversions import chunk_to_trajectory, ns_to_stamp, stamp_to_ns
from ..core import soak as core
from ..core.control.action_chunk import ActionChunk
from ..core.robot.urdf import RobotModel
from ..core.stats import summary
from ..graph import ROBOT_REALTIME, GraphArgs, NodeDecl, declare_graph
from ..nodes.common import JOINT_STATE_QOS, RELIABLE_LATEST_QOS
from ..paths import default_policy_path
from ..topics import (
    ACTION_CHUNK,
    CLOCK,
    ESTOP,
    JOINT_STATES,
    POLICY_COMMAND,
    ROBOT_COMMAND,
    SUPERVISOR_ARM,
    SUPERVISOR_RESET,
    SUPERVISOR_STATE,
    SupervisorState,
)
from .graph_session import SimGraphSession, recorder_decl
from .launcher import NODE_PROCESS, GraphLauncher, RunningNode, node_command, write_overrides
from .lifeline import launcher_environment

COMMAND_TOPIC = ROBOT_COMMAND.name
RAW_JOINT_STATES = "soak/joint_states_raw"
RECORDED_TOPICS = (COMMAND_TOPIC, JOINT_STATES.name, ESTOP.name, SUPERVISOR_STATE.name, POLICY_COMMAND.name)
# (commands, measured joint states, supervisor modes) of a bag
Recording = tuple[list[core.TimedPositions], list[core.TimedPositions], list[core.ModeSample]]
KILLED_NODES = {"kill_policy_node": "policy_node", "kill_actuator_node": "actuator_node",
                "kill_camera_preprocessor": "camera_preprocessor"}
HOG_MARKER = "sim2real-soak-cpu-hog"


@dataclass(frozen=True)
class SoakConfig:
    """minutes: how long faults are injected [min] (wall). estop_bound_s: an e-stop must be latched
    and the command heading for the hold within this [s] of the press. heartbeat_timeout_s: the
    supervisor's estop heartbeat timeout [s] (the injector beats at heartbeat_rate_hz).
    recovery_timeout_s: the longest wait for AUTONOMOUS after a fault [s]. control_rate_hz: the
    supervisor's command rate [Hz] (its period bounds a step). max_faults: stop after this many (0: no cap).
    stop_source_wait_s: the longest silence of the heartbeat waiting for ESTOP [s] (wall)."""

    out_dir: Path
    minutes: float = 5.0
    seed: int = 0
    checkpoint: Path = field(default_factory=default_policy_path)
    estop_bound_s: float = 0.1
    heartbeat_timeout_s: float = 1.0
    heartbeat_rate_hz: float = 10.0
    recovery_timeout_s: float = 90.0
    startup_timeout_s: float = 240.0
    gap_range_s: tuple[float, float] = (1.0, 4.0)
    control_rate_hz: float = 100.0
    max_faults: int = 0
    stop_source_wait_s: float = 10.0


class SoakLauncher(GraphLauncher):
    """The graph launcher, able to kill one node and start it again with the same command."""

    def __init__(self, decls: list[NodeDecl], **kwargs: Any) -> None:
        super().__init__(decls, **kwargs)
        self.marker = self._tmp.name  # in every node's command line (its params file)

    def node(self, name: str) -> RunningNode:
        return next(n for n in self.nodes if n.decl.name == name)

    def kill(self, name: str) -> None:
        proc = self.node(name).process
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10.0)

    def restart(self, name: str) -> None:
        """Start `name` again (call from the main thread: the parent-death signal follows it)."""
        old = self.node(name)
        env = {**self._env, **launcher_environment(os.getpid(), threading.current_thread() is threading.main_thread())}
        overrides = write_overrides(old.decl, Path(self._tmp.name))
        proc = subprocess.Popen(node_command(old.decl, self._namespace, overrides), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, text=True, **NODE_PROCESS)
        self.nodes[self.nodes.index(old)] = RunningNode(old.decl, proc)
        threading.Thread(target=self._pump, args=(old.decl.name, proc), daemon=True).start()

    def signal_node(self, name: str, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.node(name).process.send_signal(sig)


def soak_decls(args: GraphArgs, bag: Path) -> list[NodeDecl]:
    """The sim graph, sim_node's joint states moved to RAW_JOINT_STATES (relayed by the injector), the recorder."""
    decls = []
    for decl in declare_graph("sim", args):
        if decl.name == "sim_node":
            decl = replace(decl, remappings=(*decl.remappings, (JOINT_STATES.name, RAW_JOINT_STATES)))
        decls.append(decl)
    decls.append(recorder_decl(bag, args.params_file, topics=RECORDED_TOPICS))
    return decls


class SoakSession(SimGraphSession):
    """SimGraphSession on a SoakLauncher, plus the injector's own topics: the joint-state relay, the
    e-stop heartbeat, a foreign policy-command publisher and a second clock source."""

    def __init__(self, args: GraphArgs, log_file: Path, bag: Path, heartbeat_rate_hz: float) -> None:
        self.args = args
        self.launcher = SoakLauncher(soak_decls(args, bag), namespace=args.namespace, echo=False, log_file=log_file)
        self.probe = None
        self.drop_joint_states = threading.Event()
        self.heartbeat_paused = threading.Event()
        self.estop_pressed = threading.Event()
        self._stop_heartbeat = threading.Event()
        self._estop_lock = threading.Lock()
        self._heartbeat_period_s = 1.0 / heartbeat_rate_hz
        self.events: list[dict[str, Any]] = []  # {kind, t_ns} requests the injector made (arm, reset, ...)

    def __enter__(self) -> SoakSession:
        super().__enter__()
        p = self.probe
        assert p is not None
        relay = p.publisher(JointState, JOINT_STATES.name, JOINT_STATE_QOS)
        p.node.create_subscription(JointState, RAW_JOINT_STATES,
                                   lambda m: None if self.drop_joint_states.is_set() else relay.publish(m),
                                   JOINT_STATE_QOS)
        self.foreign_command_pub = p.publisher(JointState, POLICY_COMMAND.name, RELIABLE_LATEST_QOS)
        self.foreign_chunk_pub = p.publisher(JointTrajectory, ACTION_CHUNK.name, RELIABLE_LATEST_QOS)
        self.clock_pub = p.publisher(Clock, CLOCK.absolute, 1)
        self._heartbeat = threading.Thread(target=self._beat, name="soak_estop_heartbeat", daemon=True)
        self._heartbeat.start()
        return self

    def _beat(self) -> None:
        while not self._stop_heartbeat.wait(self._heartbeat_period_s):
            with self._estop_lock:
                if not self.heartbeat_paused.is_set():
                    self.estop_pub.publish(Bool(data=self.estop_pressed.is_set()))

    def set_estop(self, pressed: bool) -> None:
        """Press or release the e-stop now; the heartbeat repeats it (never a stale value after it)."""
        with self._estop_lock:
            if pressed:
                self.estop_pressed.set()
            else:
                self.estop_pressed.clear()
            self.press_estop(pressed)

    def close(self) -> dict[str, int]:
        self._stop_heartbeat.set()
        if getattr(self, "_heartbeat", None) is not None:
            self._heartbeat.join(timeout=2.0)
        return super().close()

    def request(self, service: str) -> bool:
        self.events.append({"kind": service, "t_ns": time.time_ns()})
        try:
            ok, _ = self.call(service, timeout_s=5.0)
        except TimeoutError:
            return False
        return ok


class Soak:
    """One soak run: start the graph, arm, inject faults until `minutes` pass, judge the bag."""

    def __init__(self, config: SoakConfig, log=print) -> None:
        self.config = config
        self.log = log
        # The robot graph's real-time knobs too (graph.ROBOT_REALTIME: applied where the process
        # may, else one warning): the e-stop bound is a robot's, and without them a restarted policy
        # node importing torch beside the CPU hogs kept the whole supervisor off the CPU for 184 ms.
        # command_history_depth: the recorder must see every command the supervisor sent to check
        # each step; with depth 1 a recorder stalled by the load lost some and a step across the
        # gap read as too large (CI, 2026-12-04: 0.054 > 0.030 rad after 117 ms without a sample).
        supervisor = {**ROBOT_REALTIME["supervisor"], "auto_arm": False, "require_stop_source": True,
                      "command_history_depth": 500,
                      "estop_heartbeat_timeout_s": config.heartbeat_timeout_s,
                      "control_rate_hz": config.control_rate_hz}
        self.args = GraphArgs(checkpoint=str(config.checkpoint),
                              extra_parameters={"sim_node": {"seed": config.seed}, "supervisor": supervisor,
                                                "actuator_node": dict(ROBOT_REALTIME["actuator_node"])})
        self.model = RobotModel.from_description(self.args.description())
        self.joint_names = self.model.joint_names
        self.recovery = core.RecoveryLog()
        self.injected: list[dict[str, Any]] = []
        self.presses: list[core.EstopPress] = []
        self.losses: list[tuple[int, int]] = []  # (heartbeat silent from, heard again) [ns]
        self.hogs: list[subprocess.Popen] = []
        self.marker = ""  # the launcher's temp folder, set when the graph is declared

    # -- recovery: what a person does after a fault ---------------------------------------------
    def _recover(self, s: SoakSession, timeout_s: float, stable_s: float = 2.0, rearmed_s: float = 0.5) -> float | None:
        """Reset a released e-stop, arm from HOLD, until AUTONOMOUS holds; seconds [s] from the call
        until that AUTONOMOUS period began, None on timeout.

        A fault that never took the supervisor out of AUTONOMOUS is recovered once AUTONOMOUS held
        for `stable_s` from the call (the mode seen just after a fault may be from before its
        watchdog fired). Once any other mode was seen, an AUTONOMOUS period of `rearmed_s` is
        enough: the sim resets its episode every few seconds and the supervisor holds on the reset's
        jump, so waiting for a long undisturbed period would measure episode lengths, not recovery.
        """
        start = time.monotonic()
        last_try = -1e9
        autonomous_since: float | None = None
        disturbed = False
        while time.monotonic() - start < timeout_s:
            mode = s.mode()
            if mode == "AUTONOMOUS":
                autonomous_since = autonomous_since if autonomous_since is not None else time.monotonic()
                if time.monotonic() - autonomous_since >= (rearmed_s if disturbed else stable_s):
                    return autonomous_since - start
                time.sleep(0.02)
                continue
            disturbed = True
            autonomous_since = None
            if time.monotonic() - last_try >= 0.5:
                last_try = time.monotonic()
                if mode == "ESTOP":
                    s.request(SUPERVISOR_RESET)
                elif mode in ("HOLD", "TELEOP", "SHARED"):
                    s.request(SUPERVISOR_ARM)
            time.sleep(0.02)
        return None

    # -- faults ---------------------------------------------------------------------------------
    def _inject(self, s: SoakSession, fault: core.Fault) -> None:
        kind, duration = fault.kind, fault.duration_s
        if kind in KILLED_NODES:
            s.launcher.kill(KILLED_NODES[kind])
            time.sleep(duration)
            s.launcher.restart(KILLED_NODES[kind])
        elif kind == "camera_freeze":
            s.launcher.signal_node("camera_preprocessor", signal.SIGSTOP)
            try:
                time.sleep(duration)
            finally:
                s.launcher.signal_node("camera_preprocessor", signal.SIGCONT)
        elif kind == "joint_states_drop":
            s.drop_joint_states.set()
            time.sleep(duration)
            s.drop_joint_states.clear()
        elif kind == "foreign_command_burst":
            self._burst(s, duration, fault.magnitude, fault.index)
        elif kind == "clock_step":
            self._clock_step(s, fault.magnitude, duration)
        elif kind == "cpu_hog":
            self._hog(int(fault.magnitude), duration)
        elif kind == "estop":
            pressed = time.time_ns()
            s.set_estop(True)
            time.sleep(duration)
            released = time.time_ns()
            s.set_estop(False)
            self.presses.append(core.EstopPress(pressed, released))
        elif kind == "stop_source_lost":
            # The heartbeat timeout runs on the supervisor's clock (sim time, slower than the wall
            # here): stay silent until ESTOP latches (or, not moving, long enough), then duration_s.
            silent_from = time.time_ns()
            s.heartbeat_paused.set()
            try:
                s.wait_for_mode("ESTOP", self.config.stop_source_wait_s)
                time.sleep(duration)
            finally:
                s.heartbeat_paused.clear()
            self.losses.append((silent_from, time.time_ns()))
        else:  # pragma: no cover - FAULT_KINDS and this table are kept together
            raise ValueError(f"unknown fault kind {kind!r}")

    def _burst(self, s: SoakSession, duration_s: float, beyond_rad: float, seed: int) -> None:
        """Out-of-range policy commands (and a NaN) and action chunks from a publisher nobody knows."""
        rng = np.random.default_rng(seed)
        limits = self.model.limits_arrays(self.joint_names)
        end = time.monotonic() + duration_s
        k = 0
        while time.monotonic() < end:
            side = rng.choice([-1.0, 1.0], size=len(self.joint_names))
            q = np.where(side > 0, limits["upper"] + beyond_rad, limits["lower"] - beyond_rad)
            if k % 7 == 3:
                q[0] = float("nan")
            stamp_ns = stamp_to_ns(s.joint_states[-1].header.stamp) if s.joint_states else 0
            msg = JointState(name=list(self.joint_names), position=q.tolist(), velocity=[0.0] * len(q))
            msg.header.stamp = ns_to_stamp(stamp_ns)
            s.foreign_command_pub.publish(msg)
            if np.all(np.isfinite(q)):  # the actuator's input too: a chunk of 10 out-of-range points
                times = np.arange(10) * 0.05
                s.foreign_chunk_pub.publish(chunk_to_trajectory(
                    ActionChunk(tuple(self.joint_names), stamp_ns, times, np.tile(q, (len(times), 1)))))
            k += 1
            time.sleep(0.01)

    def _clock_step(self, s: SoakSession, back_s: float, duration_s: float) -> None:
        """A second clock source publishing sim time `back_s` [s] behind, for `duration_s` [s]."""
        if not s.joint_states:
            return
        stamp = s.joint_states[-1].header.stamp
        base_ns = stamp.sec * core.NS_PER_S + stamp.nanosec - int(back_s * core.NS_PER_S)
        start = time.monotonic()
        while time.monotonic() - start < duration_s:
            t = max(0, base_ns + int((time.monotonic() - start) * core.NS_PER_S))
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(t, core.NS_PER_S)
            s.clock_pub.publish(msg)
            time.sleep(0.01)

    def _hog(self, processes: int, duration_s: float) -> None:
        code = f"import time\nend = time.monotonic() + {duration_s!r}\nwhile time.monotonic() < end: pass"
        # The launcher's marker in the hog's command line too: left_behind finds this run's hogs only.
        hogs = [subprocess.Popen([sys.executable, "-c", code, HOG_MARKER, self.marker], start_new_session=True)
                for _ in range(max(1, processes))]
        self.hogs += hogs
        for hog in hogs:
            try:
                hog.wait(timeout=duration_s + 10.0)
            except subprocess.TimeoutExpired:
                hog.kill()
                hog.wait()

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.config
        c.out_dir.mkdir(parents=True, exist_ok=True)
        bag = c.out_dir / "bag"
        if bag.exists():
            raise FileExistsError(f"{bag} exists: give an empty --out folder")
        load_start = os.getloadavg()
        started = time.monotonic()
        faults = core.iter_faults(c.seed, c.gap_range_s)
        startup_s: float | None = None
        graph_error = ""
        session = SoakSession(self.args, c.out_dir / "graph.log", bag, c.heartbeat_rate_hz)
        self.marker = session.launcher.marker
        try:
            with session as s:
                startup_s = self._recover(s, c.startup_timeout_s)
                if startup_s is None:
                    raise TimeoutError(f"the graph never armed (mode {s.mode()!r}: {s.mode_reason()})")
                self.log(f"[soak] armed after {startup_s:.1f} s; injecting faults for {c.minutes} min (seed {c.seed})")
                deadline = time.monotonic() + c.minutes * 60.0
                while time.monotonic() < deadline and (not c.max_faults or len(self.injected) < c.max_faults):
                    fault = next(faults)
                    time.sleep(fault.gap_s)
                    start_ns = time.time_ns()
                    self._inject(s, fault)
                    end_ns = time.time_ns()
                    recovered = self._recover(s, c.recovery_timeout_s)
                    self.recovery.add(fault.kind, recovered)
                    self.injected.append({"index": fault.index, "kind": fault.kind, "start_ns": start_ns,
                                          "end_ns": end_ns, "duration_s": round(fault.duration_s, 3),
                                          "magnitude": round(fault.magnitude, 3),
                                          "recovery_s": None if recovered is None else round(recovered, 3)})
                    self.log(f"[soak] {fault.index}: {fault.kind} ({fault.duration_s:.2f} s) -> "
                             f"{'not recovered' if recovered is None else f'AUTONOMOUS after {recovered:.2f} s'}")
                    dead = [(n, code) for n, code in s.launcher.check() if n != "recorder"]
                    if dead:
                        raise RuntimeError("graph node(s) exited: " + ", ".join(f"{n} ({code})" for n, code in dead))
        except (TimeoutError, RuntimeError) as err:
            graph_error = str(err)
            self.log(f"[soak] stopped early: {err}")
        finally:
            session.close()
            for hog in self.hogs:
                if hog.poll() is None:
                    hog.kill()
                    hog.wait()
        left = left_behind(session.launcher.marker)
        report = self._judge(bag, session.events, left)
        report.update({"minutes": c.minutes, "seed": c.seed, "startup_s": startup_s, "error": graph_error,
                       "wall_s": round(time.monotonic() - started, 1),
                       "load_average_1min": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
                       "cpu_count": os.cpu_count(), "faults": self.injected})
        (c.out_dir / "soak.json").write_text(json.dumps(finite_or_none(report), indent=2))
        return report

    # -- judging the recording ------------------------------------------------------------------
    def _judge(self, bag: Path, events: list[dict[str, Any]], left: list[str]) -> dict[str, Any]:
        c = self.config
        violations: list[core.Violation] = []
        limits = self.model.limits_arrays(self.joint_names)
        bag_report: dict[str, Any] = {"path": str(bag)}
        verdicts: list[core.EstopVerdict] = []
        try:
            info = bag_info(bag)
            bag_report.update(messages={t.name: t.count for t in info.topics}, problems=list(info.problems))
            recorded = read_recording(bag, self.joint_names, self.args.namespace)
        except Exception as err:  # noqa: BLE001 - an unreadable bag is a finding, reported as such
            violations.append(core.Violation("bag_unreadable", time.time_ns(), f"{type(err).__name__}: {err}"))
            recorded = None
        if recorded is not None:
            commands, measured, modes = recorded
            bag_report["commands"] = len(commands)
            # Sent by the supervisor but not in the bag (the recorder stalled past its queue).
            bag_report["commands_missed"] = core.missed_commands(commands)
            if not commands:
                violations.append(core.Violation("bag_unreadable", 0, f"no {COMMAND_TOPIC} message in {bag}"))
            check_limits = core.CommandLimits.from_limits(limits["lower"], limits["upper"], limits["velocity"],
                                                          1.0 / c.control_rate_hz)
            violations += core.check_commands(commands, check_limits)
            verdicts, estop_violations = core.check_estops(self.presses, commands, measured, modes, c.estop_bound_s)
            violations += estop_violations
            arms = [e["t_ns"] for e in events if e["kind"] == SUPERVISOR_ARM]
            violations += core.check_no_auto_arm(modes, arms)
            violations += core.check_stop_source_losses(self.losses, modes)
        violations += [core.Violation("node_left_behind", time.time_ns(), who) for who in left]
        honoured = [v for v in verdicts if v.honoured]
        return {
            "faults_injected": core.count_by_kind([f["kind"] for f in self.injected], core.FAULT_KINDS),
            "violations": core.count_by_kind([v.kind for v in violations], core.VIOLATION_KINDS),
            "violation_details": [v.__dict__ for v in violations[:50]],
            "estops": {"pressed": len(verdicts), "honoured": len(honoured), "bound_ms": c.estop_bound_s * 1e3,
                       "latch_ms": summary([v.latch_ms for v in verdicts if np.isfinite(v.latch_ms)]),
                       "reaction_ms": summary([v.reaction_ms for v in verdicts if np.isfinite(v.reaction_ms)]),
                       "problems": [v.problem for v in verdicts if v.problem]},
            "recovery_s": self.recovery.summary(),
            "bag": bag_report,
            "nodes_left_behind": left,
        }


def absolute(topic: str, namespace: str = "") -> str:
    """The bag's name of a relative topic in `namespace` ("joint_states" -> "/joint_states")."""
    return "/" + "/".join(part.strip("/") for part in (namespace, topic) if part.strip("/"))


def read_recording(bag: Path, joint_names: list[str], namespace: str = "") -> Recording:
    """Commands, measured joint states and supervisor modes from the bag, each at its publish time
    [ns] (the publisher's wall clock); ValueError if the bag lacks publish times."""
    topics = tuple(absolute(t, namespace) for t in (COMMAND_TOPIC, JOINT_STATES.name, SUPERVISOR_STATE.name))
    command_topic, joint_topic, state_topic = topics
    published = publish_records(bag, topics)
    by_topic: dict[str, list[Any]] = {t: [] for t in topics}
    for m in iter_messages(bag, topics):
        by_topic[m.topic].append(m)
    timed: dict[str, list[tuple[int, Any]]] = {}
    for topic in topics:
        messages = sorted(by_topic[topic], key=lambda m: m.log_time_ns)
        pairs = published[topic]
        if len(pairs) != len(messages) or any(int(p[0]) != m.log_time_ns for p, m in zip(pairs, messages, strict=True)):
            raise ValueError(f"{bag}: publish times of {topic} do not match its messages")
        timed[topic] = sorted(((int(p[1]), m.msg, int(p[2])) for p, m in zip(pairs, messages, strict=True)),
                              key=lambda pm: pm[0])
    commands = [core.TimedPositions(t, np.asarray(msg.data, dtype=float), seq) for t, msg, seq in timed[command_topic]]
    measured = []
    for t, msg, _seq in timed[joint_topic]:
        index = {n: i for i, n in enumerate(msg.name)}
        if all(n in index for n in joint_names):
            measured.append(core.TimedPositions(t, np.array([msg.position[index[n]] for n in joint_names])))
    modes = []
    for t, msg, _seq in timed[state_topic]:
        state = SupervisorState.from_msg(msg)
        reason = msg.status[0].message if msg.status else ""
        modes.append(core.ModeSample(t, state.mode if state is not None else "", reason))
    return commands, measured, modes


def left_behind(marker: str) -> list[str]:
    """Processes still alive that the soak started: a command line naming the launcher's temp
    folder `marker` (every node's params file, restarted nodes included, and the CPU hogs). (Not
    by pid: an exited node's pid may already belong to someone else; not by HOG_MARKER alone: a
    soak running beside this one has hogs of its own.)"""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue  # a zombie has exited; its parent reaps it
        if marker in cmdline:
            found.append(f"pid {entry.name}: {cmdline.strip()[:200]}")
    return found


def finite_or_none(value: Any) -> Any:
    """`value` with every NaN/Inf float replaced by None (strict JSON)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value
