"""A running sim graph plus an operator node watching it over DDS.

Shared by the demo (`sim2real demo`), graph evaluation (`sim2real eval-sim --graph`) and the
scripted-teleoperator recordings: start the declared graph as processes, follow episodes and the
supervisor's mode from their topics, press the joystick and the e-stop like a person would.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger

from ..graph import GraphArgs, NodeDecl, declare_graph
from ..nodes.common import EVENTS_QOS, JOINT_STATE_QOS, JOY_QOS, LATCHED_QOS
from ..topics import (
    ESTOP,
    INTERVENTIONS,
    JOINT_STATES,
    JOY,
    ROBOT_COMMAND,
    SIM_EPISODE,
    SIM_TARGET,
    SUPERVISOR_STATE,
    SupervisorState,
)
from ..topics import EpisodeOutcome as EpisodeOutcome  # re-exported: graph_eval, teleop_recording
from .launcher import GraphLauncher
from .probe import RosProbe, wait_until


def recorder_decl(output: Path, params_file: str, use_sim_time: bool = True,
                  topics: tuple[str, ...] = ()) -> NodeDecl:
    """The recorder as one more node of the graph (MCAP; `topics`, or every topic when empty)."""
    parameters: dict[str, Any] = {"use_sim_time": use_sim_time, "output": str(output)}
    if topics:
        parameters["topics"] = list(topics)
    return NodeDecl("recorder", "recorder", parameters, (), (params_file,) if params_file else ())


class SimGraphSession:
    """Start the sim graph (+ recorder) and watch it. Use as a context manager."""

    def __init__(self, args: GraphArgs, log_file: Path, record_to: Path | None = None,
                 echo: bool = False, record_topics: tuple[str, ...] = ()) -> None:
        self.args = args
        decls = declare_graph("sim", args)
        if record_to is not None:
            decls.append(recorder_decl(record_to, args.params_file, topics=record_topics))
        self.launcher = GraphLauncher(decls, namespace=args.namespace, echo=echo, log_file=log_file)
        self.probe: RosProbe | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> SimGraphSession:
        self.launcher.start()
        self.probe = RosProbe("sim2real_operator")
        p = self.probe
        self.episodes_raw = p.collect(DiagnosticArray, SIM_EPISODE.name, EVENTS_QOS)
        self.states = p.collect(DiagnosticArray, SUPERVISOR_STATE.name, LATCHED_QOS, stamped=True)
        self.interventions = p.collect(DiagnosticArray, INTERVENTIONS.name, EVENTS_QOS)
        self.targets = p.collect(PointStamped, SIM_TARGET.name, LATCHED_QOS, stamped=True)
        self.joint_states = p.collect(JointState, JOINT_STATES.name, JOINT_STATE_QOS)
        self.commands = p.collect(Float64MultiArray, ROBOT_COMMAND.name, 100, stamped=True)
        self.joy_pub = p.publisher(Joy, JOY.name, JOY_QOS)
        self.estop_pub = p.publisher(Bool, ESTOP.name, LATCHED_QOS)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> dict[str, int]:
        if self.probe is not None:
            self.probe.close()
            self.probe = None
        return self.launcher.shutdown(timeout_s=8.0)

    # -- what the graph says --------------------------------------------------------------------
    @property
    def outcomes(self) -> list[EpisodeOutcome]:
        return [EpisodeOutcome.from_msg(m) for m in list(self.episodes_raw)]

    def state(self) -> SupervisorState | None:
        """The latest supervisor/state (None before the first)."""
        return SupervisorState.from_msg(self.states[-1][1]) if self.states else None

    def mode(self) -> str:
        state = self.state()
        return state.mode if state is not None else ""

    def mode_reason(self) -> str:
        return self.states[-1][1].status[0].message if self.states and self.states[-1][1].status else ""

    def wait_for_mode(self, modes: str | tuple[str, ...], timeout_s: float) -> bool:
        wanted = (modes,) if isinstance(modes, str) else modes
        return wait_until(lambda: self.mode() in wanted, timeout_s, poll_s=0.01)

    def wait_for_outcomes(self, count: int, timeout_s: float) -> bool:
        return wait_until(lambda: len(self.episodes_raw) >= count, timeout_s, poll_s=0.05)

    def check_nodes(self) -> None:
        """Raise RuntimeError naming any node that died (with its exit code)."""
        dead = [(name, code) for name, code in self.launcher.check() if name != "recorder" or code != 0]
        if dead:
            raise RuntimeError("graph node(s) exited: " + ", ".join(f"{n} (exit code {c})" for n, c in dead))

    def target_position(self) -> np.ndarray | None:
        if not self.targets:
            return None
        point = self.targets[-1][1].point
        return np.array([point.x, point.y, point.z])

    def latest_joint_positions(self, names: list[str]) -> np.ndarray | None:
        if not self.joint_states:
            return None
        msg = self.joint_states[-1]
        index = {n: i for i, n in enumerate(msg.name)}
        return np.array([msg.position[index[n]] for n in names])

    # -- what a person does ---------------------------------------------------------------------
    def publish_joy(self, msg: Joy) -> None:
        self.joy_pub.publish(msg)

    def press_estop(self, active: bool) -> float:
        """Publish the e-stop topic; returns the monotonic time [s] of publication."""
        t = time.monotonic()
        self.estop_pub.publish(Bool(data=active))
        return t

    def call(self, service: str, timeout_s: float = 10.0) -> tuple[bool, str]:
        assert self.probe is not None
        response = self.probe.call(Trigger, service, timeout_s=timeout_s)
        return bool(response.success), str(response.message)
