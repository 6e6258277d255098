"""A running sim graph plus an operator node watching it over DDS.

Shared by the demo (`sim2real demo`), graph evaluation (`sim2real eval-sim --graph`) and the
scripted-teleoperator recordings: start the declared graph as processes, follow episodes and the
supervisor's mode from their topics, press the joystick and the e-stop like a person would.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from sensor_msgs.msg import JointState, Joy
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger

from ..conversions import diagnostic_values
from ..graph import GraphArgs, NodeDecl, declare_graph
from ..nodes.common import EVENTS_QOS, JOINT_STATE_QOS, JOY_QOS, LATCHED_QOS
from .launcher import GraphLauncher
from .probe import RosProbe, wait_until


@dataclass(frozen=True)
class EpisodeOutcome:
    """One sim/episode message: index, success, reason, duration [s], final distance [m], the
    episode's seed (-1 when the message has none), the pushes that started (-1: pushes were off)."""

    episode: int
    success: bool
    reason: str
    duration_s: float
    final_distance_m: float
    seed: int = -1
    pushes_applied: int = -1

    @classmethod
    def from_message(cls, msg: DiagnosticArray) -> EpisodeOutcome:
        v = diagnostic_values(msg)
        return cls(int(v.get("episode", -1)), v.get("success", "false") == "true", v.get("reason", ""),
                   float(v.get("duration_s", "nan")), float(v.get("final_distance_m", "nan")),
                   int(v.get("seed", "-1")), int(v.get("pushes_applied", "-1")))


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
        self.episodes_raw = p.collect(DiagnosticArray, "sim/episode", EVENTS_QOS)
        self.states = p.collect(DiagnosticArray, "supervisor/state", LATCHED_QOS, stamped=True)
        self.interventions = p.collect(DiagnosticArray, "supervisor/interventions", EVENTS_QOS)
        self.targets = p.collect(PointStamped, "sim/target", LATCHED_QOS, stamped=True)
        self.joint_states = p.collect(JointState, "joint_states", JOINT_STATE_QOS)
        self.commands = p.collect(Float64MultiArray, "forward_position_controller/commands", 100, stamped=True)
        self.joy_pub = p.publisher(Joy, "joy", JOY_QOS)
        self.estop_pub = p.publisher(Bool, "estop", LATCHED_QOS)
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
        return [EpisodeOutcome.from_message(m) for m in list(self.episodes_raw)]

    def mode(self) -> str:
        return diagnostic_values(self.states[-1][1]).get("mode", "") if self.states else ""

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
