"""`sim2real eval-sim --emulate`: a policy's success rate on the emulated SO-101 bring-up.

What runs is the robot graph `sim2real launch robot --robot so101 --emulate` starts: the servo-bus
emulator (the arm's only model: dead time, slew limit, PD, at the bus's byte timing), feetech_driver
speaking the STS protocol to its pty, sim_camera drawing the scene with the arm where the servos say
it is, policy_node (preprocessing the camera itself; the ONNX export beside the checkpoint when there is one),
actuator_node and the supervisor, as processes over DDS, on
the wall clock. Nothing is teleported: between episodes an operator (this process, as a person with a
gamepad and a leader arm would) takes over, brings the arm home through the supervisor's TELEOP
(takeover button, deadman held, a leader trajectory on command/teleop from where the arm is to the
home pose) and hands back with supervisor/arm, under the same rules as on the real arm.

Episode k is the core path's episode k of the same seed (sim_camera's `episodes`: the same target):
sim/start_episode starts it once the arm is home, the policy is armed, and the task's own condition
judges the measured positions (success radius, timeout on the wall clock). The result has eval-sim's
fields (success rate, Wilson interval, per-episode outcomes) plus what the rehearsal adds: how long
homing and arming took, the supervisor's counters and the machine's load.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from ..conversions import diagnostic_values
from ..core.errors import CheckpointError
from ..core.policy.backend import load_policy
from ..core.progress import progress
from ..core.safety.joystick import load_joystick_mapping
from ..core.stats import summary, wilson_interval
from ..evaluation.checkpoint_graph import checkpoint_preprocessing_parameters, lean_policy
from ..graph import GraphArgs, declare_graph
from ..hardware.emulated_arm import rehearsal_pose, start_emulated_arm
from ..nodes.common import EVENTS_QOS, JOINT_STATE_QOS, JOY_QOS, LATCHED_QOS, RELIABLE_LATEST_QOS
from ..paths import config_path
from ..robots import checkpoint_task, robot_description_for, robot_for_checkpoint, sim_params_for_checkpoint
from ..sim.params import load_sim_params
from ..topics import (
    ESTOP,
    JOINT_STATES,
    JOY,
    SERVO_DIAGNOSTICS,
    SIM_EPISODE,
    SIM_START_EPISODE,
    SIM_TARGET,
    SUPERVISOR_STATE,
    TELEOP_COMMAND,
    EpisodeOutcome,
    SupervisorState,
)
from .graph_eval import failure_category
from .graph_log import graph_log
from .launcher import GraphLauncher
from .lifeline import launcher_environment
from .probe import RosProbe, wait_until
from .rehearsal import arm_like_a_human

EMULATED_ROBOT = "so101"  # the robot whose servo bus `sim2real emulate-bus` speaks
# The tasks sim_camera can judge on an arm placed at the measured positions without physics: reach's
# success is where the tool point is; reach_hold needs the tool's speed (zero on a placed arm), the
# picks a cube moved by contacts.
KINEMATIC_TASKS = ("reach",)
HEARTBEAT_TIMEOUT_S = 2.0  # the supervisor's estop_heartbeat_timeout_s [s]: generous for a loaded 2-core machine
HEARTBEAT_PERIOD_S = 0.1  # [s] the operator's `estop` (false) heartbeat
JOY_PERIOD_S = 0.02  # [s] the operator's gamepad and leader-arm messages (50 Hz; teleop_timeout_s is 0.1 s)
HOME_SPEED_RAD_S = 0.6  # [rad/s] the leader trajectory home, on the joint that moves most
HOME_TOLERANCE_RAD = 0.02  # [rad] home reached (sim_camera starts an episode within 0.05 rad)
HOME_TIMEOUT_S = 30.0  # [s] bringing the arm home takes longer than this: the rehearsal fails
START_TIMEOUT_S = 240.0  # [s] the graph up, the policy commanding and the supervisor armable


class Operator:
    """The person at the emulated arm: a gamepad (buttons by role, at 50 Hz), an `estop` heartbeat
    (released), a leader arm on command/teleop, and eyes on joint_states, supervisor/state and
    sim/episode. Publishing runs on a thread of its own."""

    def __init__(self, probe: RosProbe, joints: list[str]) -> None:
        self.probe = probe
        self.joints = joints
        self.mapping = load_joystick_mapping(config_path("joystick.yaml"))
        self.pressed: set[str] = set()
        self.leader: np.ndarray | None = None  # what the leader arm says (None: silent)
        self._lock = threading.Lock()
        self._measured: np.ndarray | None = None
        self._measured_count = 0
        self._measured_at = 0.0  # [s] time.monotonic() of the last joint_states
        node = probe.node
        self._joy = node.create_publisher(Joy, JOY.name, JOY_QOS)
        self._estop = node.create_publisher(Bool, ESTOP.name, LATCHED_QOS)
        self._teleop = node.create_publisher(JointState, TELEOP_COMMAND.name, RELIABLE_LATEST_QOS)
        node.create_subscription(JointState, JOINT_STATES.name, self._on_joint_state, JOINT_STATE_QOS)
        self.episodes_raw = probe.collect(DiagnosticArray, SIM_EPISODE.name, EVENTS_QOS)
        self.targets = probe.collect(PointStamped, SIM_TARGET.name, LATCHED_QOS)
        self.states = probe.collect(DiagnosticArray, SUPERVISOR_STATE.name, LATCHED_QOS)
        self.driver_reports = probe.collect(DiagnosticArray, SERVO_DIAGNOSTICS.name, RELIABLE_LATEST_QOS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_loop, name="operator", daemon=True)
        self._thread.start()

    # -- what the operator sees ----------------------------------------------------------------
    def _on_joint_state(self, msg: JointState) -> None:
        index = {n: i for i, n in enumerate(msg.name)}
        if all(n in index for n in self.joints):
            with self._lock:
                self._measured = np.array([msg.position[index[n]] for n in self.joints])
                self._measured_count += 1
                self._measured_at = time.monotonic()

    def measured(self) -> np.ndarray | None:
        """The arm's last joint_states positions [rad] in `joints` order (None before the first)."""
        with self._lock:
            return None if self._measured is None else self._measured.copy()

    def what_it_saw(self) -> str:
        """One line for an error: joint_states here, the supervisor's view of them, the driver's bus."""
        with self._lock:
            count, at = self._measured_count, self._measured_at
        seen = f"last {time.monotonic() - at:.1f} s ago" if count else "none"
        parts = [f"operator: {count} joint_states ({seen})"]
        state = self.state()
        if state is not None:
            counters = {k: int(state.counters.get(k, 0)) for k in ("rejected_joint_states", "joint_jumps",
                                                                     "watchdog_holds", "clock_stall_holds")}
            parts.append(f"supervisor {state.summary} {counters}"
                         + (f", last rejection: {state.last_rejection}" if state.last_rejection else ""))
        if self.driver_reports:
            values = diagnostic_values(self.driver_reports[-1])
            parts.append("feetech_driver: " + ", ".join(
                f"{k} {values[k]}" for k in ("joint_states_published", "failed_cycles", "bus_timeouts",
                                             "bus_checksum_errors", "overruns", "last_error") if k in values))
        else:
            parts.append("feetech_driver: no diagnostics heard")
        return "; ".join(parts)

    def state(self) -> SupervisorState | None:
        return SupervisorState.from_msg(self.states[-1]) if self.states else None

    def mode(self) -> str:
        state = self.state()
        return state.mode if state is not None else ""

    def reason(self) -> str:
        return self.states[-1].status[0].message if self.states and self.states[-1].status else ""

    @property
    def outcomes(self) -> list[EpisodeOutcome]:
        return [EpisodeOutcome.from_msg(m) for m in list(self.episodes_raw)]

    # -- what the operator does ----------------------------------------------------------------
    def _publish_loop(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set():
            buttons = [0] * (max(self.mapping.buttons.values()) + 1)
            for role in list(self.pressed):
                buttons[self.mapping.button(role)] = 1
            self._joy.publish(Joy(axes=[0.0] * 6, buttons=buttons))
            leader = self.leader
            if leader is not None:
                self._teleop.publish(JointState(name=list(self.joints), position=[float(q) for q in leader]))
            if time.monotonic() >= next_beat:
                self._estop.publish(Bool(data=False))
                next_beat = time.monotonic() + HEARTBEAT_PERIOD_S
            self._stop.wait(JOY_PERIOD_S)

    def take_over(self, timeout_s: float = 30.0) -> bool:
        """Press takeover until the supervisor is in TELEOP; a press is refused while an input is stale
        (a loaded machine), so it is pressed again, as a person would."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.pressed = {"takeover"}
            if wait_until(lambda: self.mode() == "TELEOP", 1.0):
                self.pressed = set()
                return True
            self.pressed = set()
            time.sleep(0.2)
        return False

    def bring_home(self, home: np.ndarray, timeout_s: float = HOME_TIMEOUT_S,
                   check: Callable[[], None] | None = None) -> float:
        """TELEOP with the deadman held: the leader starts where the arm is (aligned: no jump) and
        moves to `home` (n,) [rad] at HOME_SPEED_RAD_S; returns once the arm is within
        HOME_TOLERANCE_RAD of it on every joint, deadman released [s taken]. Raises TimeoutError.
        check: called every step; raises to stop (a graph node that died)."""
        start = time.monotonic()
        q0 = self.measured()
        if q0 is None:
            raise TimeoutError("no joint_states: where the arm is is unknown")
        travel_s = float(np.max(np.abs(home - q0))) / HOME_SPEED_RAD_S
        self.leader = q0
        self.pressed = {"deadman"}
        try:
            while True:
                elapsed = time.monotonic() - start
                s = min(1.0, elapsed / travel_s) if travel_s > 0 else 1.0
                self.leader = q0 + s * (home - q0)
                q = self.measured()
                if s >= 1.0 and q is not None and np.all(np.abs(q - home) <= HOME_TOLERANCE_RAD):
                    return time.monotonic() - start
                if check is not None:
                    check()
                if elapsed > timeout_s:
                    raise TimeoutError(f"the arm did not come home within {timeout_s} s: at {q}, home {home}; "
                                       f"supervisor {self.mode()}: {self.reason()}")
                time.sleep(JOY_PERIOD_S)
        finally:
            self.pressed = set()
            self.leader = None

    def start_episode(self, timeout_s: float = 10.0) -> str:
        """Call sim/start_episode; returns its message. A lost answer is recovered from the target it
        publishes (latched) at the start. Raises RuntimeError when refused."""
        targets_before = len(self.targets)
        try:
            response = self.probe.call(Trigger, SIM_START_EPISODE, timeout_s=timeout_s)
        except TimeoutError:
            if wait_until(lambda: len(self.targets) > targets_before, 2.0):
                return "started (its answer was lost; its target arrived)"
            raise
        if not response.success:
            raise RuntimeError(f"{SIM_START_EPISODE} refused: {response.message}")
        return str(response.message)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)


def evaluate_on_emulator(checkpoint: str | Path, episodes: int, seed: int = 1000, robot: str | None = None,
                         log_file: Path | None = None, echo: bool = False) -> dict[str, Any]:
    """Run `episodes` episodes of the checkpoint's task on the emulated SO-101's robot graph (the module
    docstring). Episode k has the seed and target of eval-sim's episode k with the same `seed`.
    Raises CheckpointError for a checkpoint of another robot, RuntimeError when a node dies or the
    rehearsal cannot go on, TimeoutError when the graph stalls."""
    if episodes <= 0:
        raise ValueError(f"episodes must be > 0, got {episodes}")
    spec = load_policy(checkpoint, warmup=False).spec
    robot = robot_for_checkpoint(robot, spec.joint_names, spec.provenance, str(checkpoint))
    if robot != EMULATED_ROBOT:
        raise CheckpointError(f"{checkpoint}: the emulator speaks an SO-101's servo bus; this checkpoint is for "
                              f"{robot!r}")
    # The sim params it was trained on (a wrist-camera student sees through its wrist camera), as eval-sim's
    # core path and --graph take them.
    sim_params_file, params_from = sim_params_for_checkpoint(robot, None, spec.provenance)
    params = load_sim_params(sim_params_file)
    task = checkpoint_task(spec.provenance) or params.task.name
    if task not in KINEMATIC_TASKS or params.task.name != task:
        raise CheckpointError(
            f"{checkpoint}: its task is {task!r}; eval-sim --emulate judges episodes on the arm the servos "
            f"report, placed without physics (no cube, no contacts, no tool speed), which judges "
            f"{', '.join(KINEMATIC_TASKS)} only: evaluate it with eval-sim (the core path) or eval-sim --graph")
    description = robot_description_for(robot)
    joints, _, _, home_pose = rehearsal_pose(description, sim_params_file)
    home = np.array([home_pose[j] for j in joints])
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sim2real_emulated_eval_") as scratch, \
            graph_log(log_file, "sim2real_emulated_eval_") as log:
        directory = Path(scratch)
        env = launcher_environment(os.getpid(), threading.current_thread() is threading.main_thread())
        arm = start_emulated_arm(description, sim_params_file, directory, env=env, echo=echo)
        launcher: GraphLauncher | None = None
        policy_file = str(checkpoint)
        probe: RosProbe | None = None
        operator: Operator | None = None
        try:
            args = GraphArgs(robot=robot, checkpoint=str(checkpoint), port=arm.port,
                             calibration=str(arm.calibration), sim_camera=True,
                             estop_heartbeat_s=HEARTBEAT_TIMEOUT_S,
                             extra_parameters={"sim_camera": {"episodes": True, "seed": int(seed),
                                                              "sim_params_file": str(sim_params_file)},
                                               **checkpoint_preprocessing_parameters(spec.preprocess, directory)})
            args, _chosen = lean_policy("robot", args)  # its ONNX export beside it, as `launch robot` runs it
            policy_file = args.checkpoint
            launcher = GraphLauncher(declare_graph("robot", args), echo=echo, log_file=log)
            launcher.start()
            probe = RosProbe("sim2real_emulated_operator")
            operator = Operator(probe, joints)
            rows, at_first_arm = _run_episodes(operator, launcher, arm.process, episodes, home,
                                               params.task.timeout_s, log)
            state = operator.state()
            supervisor = dict(state.counters) if state is not None else {}
        finally:
            if operator is not None:
                operator.close()
            if probe is not None:
                probe.close()
            if launcher is not None:
                launcher.shutdown(timeout_s=8.0)
            emulator_code = arm.stop()
    outcomes = [row["outcome"] for row in rows]
    wins = sum(o.success for o in outcomes)
    return {
        "checkpoint": str(checkpoint), "policy_file": policy_file,  # what policy_node ran (its ONNX export?)
        "robot": robot, "mode": "emulator", "seed": int(seed),
        "task": params.task.name, "sim_params_version": params.version,
        "sim_params_file": str(sim_params_file), "sim_params_from": params_from,
        "trained_sim_params_version": spec.sim_params_version,
        "episodes": len(outcomes), "successes": wins, "success_rate": wins / max(len(outcomes), 1),
        "ci95": list(wilson_interval(wins, len(outcomes))),
        "episode_length_s": summary([o.duration_s for o in outcomes]),
        "failures": dict(sorted(Counter(failure_category(o) for o in outcomes).items())),
        "per_episode": [{"episode": o.episode, "seed": o.seed, "success": o.success, "duration_s": o.duration_s,
                         "final_distance_m": o.final_distance_m, "failure": failure_category(o),
                         "home_s": round(row["home_s"], 2), "armed_after_s": round(row["armed_after_s"], 3)}
                        for o, row in zip(outcomes, rows, strict=True)],
        "home_s": summary([row["home_s"] for row in rows]),
        "armed_after_start_s": summary([row["armed_after_s"] for row in rows]),
        # Over the episodes (from the first arming on: the graph's start-up is not the policy's doing; a
        # heartbeat not yet heard there latches an e-stop that the operator resets before arming).
        "supervisor": {k: int(supervisor.get(k, 0)) - int(at_first_arm.get(k, 0))
                       for k in ("watchdog_holds", "clock_stall_holds", "joint_jumps", "estops", "arm_refused")},
        "emulator_exit_code": emulator_code,
        "wall_time_s": round(time.monotonic() - started, 1),
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]}, "cpus": os.cpu_count(),
    }


def _run_episodes(operator: Operator, launcher: GraphLauncher, emulator: subprocess.Popen, episodes: int,
                  home: np.ndarray, episode_timeout_s: float,
                  log: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The operator's loop: take over, home the arm, start episode k, arm, wait for its outcome.
    Returns (per episode {outcome, home_s, armed_after_s}, the supervisor's counters once first armed)."""

    def check_nodes() -> None:
        dead = launcher.check()
        if emulator.poll() is not None:  # the driver then times out on a silent bus and stays up
            dead.append(("emulate-bus", emulator.returncode))
        if dead:
            raise RuntimeError("graph node(s) exited: " + ", ".join(f"{n} (exit code {c})" for n, c in dead)
                               + f"; node output in {log}")

    if not wait_until(lambda: operator.measured() is not None and operator.mode() != "", START_TIMEOUT_S):
        check_nodes()
        raise TimeoutError(f"no joint_states or supervisor/state within {START_TIMEOUT_S} s; node output in {log}")
    # Armed once before the first episode: the first arming waits for the policy's first chunk
    # (minutes on a loaded machine), which must not run on episode 0's clock.
    answer = arm_like_a_human(operator.probe.node, START_TIMEOUT_S, check_nodes)
    if not answer.startswith("accepted"):
        check_nodes()
        raise RuntimeError(f"the supervisor never armed: {answer} ({operator.what_it_saw()}); node output in {log}")
    wait_until(lambda: operator.mode() == "AUTONOMOUS", 5.0)  # its state message after the arming
    state = operator.state()
    at_first_arm = dict(state.counters) if state is not None else {}

    def one_episode(k: int) -> dict[str, Any]:
        if not operator.take_over():
            raise RuntimeError(f"episode {k}: takeover refused: {operator.mode()}: {operator.reason()}")
        home_s = operator.bring_home(home, check=check_nodes)
        message = operator.start_episode()
        t_start = time.monotonic()
        answer = arm_like_a_human(operator.probe.node, 30.0, check_nodes)
        if not answer.startswith("accepted"):
            raise RuntimeError(f"episode {k} ({message}): arming {answer} ({operator.what_it_saw()}); "
                               f"node output in {log}")
        armed_after_s = time.monotonic() - t_start
        deadline = time.monotonic() + episode_timeout_s + 30.0
        while len(operator.episodes_raw) < k + 1:
            check_nodes()
            if time.monotonic() > deadline:
                raise TimeoutError(f"episode {k} ({message}) gave no outcome within {episode_timeout_s + 30.0} s "
                                   f"(supervisor {operator.mode()}: {operator.reason()}); node output in {log}")
            wait_until(lambda n=k + 1: len(operator.episodes_raw) >= n, 1.0)
        return {"outcome": operator.outcomes[k], "home_s": home_s, "armed_after_s": armed_after_s}

    rows: list[dict[str, Any]] = []
    for k in progress(range(episodes), episodes, "[eval emulator] episodes"):
        check_nodes()
        try:
            rows.append(one_episode(k))
        except (RuntimeError, TimeoutError):
            check_nodes()  # a node or the emulator that died is the cause to report, not the step that noticed
            raise
    return rows, at_first_arm
