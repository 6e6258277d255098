"""`sim2real eval-sim --graph`: success rate through the full ROS graph (sim node, preprocessing,
policy, actuator, supervisor as processes over DDS), counted from the sim's sim/episode topic.

Sim time is the time base of every node, so the sim may run slower than real time. It should on a
machine that also runs the whole graph: on a robot the policy has its own computer, and what the
policy must cope with is the latency of that computer, in sim time here. With the sim at real
time on 2 shared cores, rendering, preprocessing and inference of five processes stretch the
observation-to-chunk latency to 100+ ms of sim time, and the sim itself falls behind (real-time
factor 0.3-0.8, unevenly). `real_time_factor` (default DEFAULT_GRAPH_RTF) slows the sim so the
pipeline's sim-time latency stays near what the policy was trained for; the result reports the
latency the policy node measured (sim time) and the sim's achieved real-time factor, so the figure
can be judged against the machine it ran on.
"""
from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray

from ..conversions import diagnostic_values
from ..core.policy.backend import load_policy
from ..core.progress import progress
from ..core.stats import summary, wilson_interval
from ..evaluation.checkpoint_graph import checkpoint_preprocessing_parameters
from ..graph import GraphArgs
from ..nodes.common import LATCHED_QOS
from ..provenance import sim_params_mismatch
from ..robots import checkpoint_task, robot_for_checkpoint, sim_params_for_checkpoint
from ..sim.params import load_sim_params, trained_loop_note, with_task
from ..topics import (
    ACTION_CHUNK,
    CAMERA_INFO,
    JOINT_STATES,
    POLICY_COMMAND,
    ROBOT_COMMAND,
    SIM_EPISODE,
    SIM_RESTART,
    SIM_STATUS,
    SIM_TARGET,
    SUPERVISOR_STATE,
    SimStatus,
    node_diagnostics,
)
from .graph_log import graph_log
from .graph_session import EpisodeOutcome, SimGraphSession

# [-] the sim's real-time factor during graph evaluation; see the module docstring.
DEFAULT_GRAPH_RTF = 0.3
ARM_TIMEOUT_S = 180.0  # [s] wall time for the graph to come up and the supervisor to arm
# What `record_to` records: every message that shows when the graph observed, planned and commanded
# (images left out: they would load the machine being measured).
RECORDED_TOPICS = (JOINT_STATES.name, ACTION_CHUNK.name, POLICY_COMMAND.name, ROBOT_COMMAND.name,
                   SUPERVISOR_STATE.name, SIM_EPISODE.name, SIM_TARGET.name, node_diagnostics("policy_node"),
                   node_diagnostics("actuator_node"), CAMERA_INFO.name)


def failure_category(outcome: EpisodeOutcome) -> str:
    """The categories the core evaluation uses, from what sim/episode reports: the task's own
    (the sim node sends it: missed_grasp, dropped, ...), else from the final distance."""
    if outcome.success:
        return "success"
    if outcome.failure:
        return outcome.failure
    return "timeout_near" if outcome.final_distance_m < 0.10 else "timeout_far"


def evaluate_in_graph(checkpoint: str | Path, episodes: int, perturb: bool = False,
                      sim_config: str | Path | None = None, robot_description: str | None = None,
                      seed: int = 1000, wall_timeout_s: float | None = None,
                      log_file: Path | None = None, real_time_factor: float = DEFAULT_GRAPH_RTF,
                      record_to: Path | None = None, pushes: bool = False,
                      robot: str | None = None) -> dict[str, Any]:
    """Run the sim graph until `episodes` outcomes arrived on sim/episode. Once the supervisor has
    armed, the sim restarts at episode 0 of `seed`: graph episode k has the core path's episode k
    seed (training.evaluation.evaluate_in_sim), so the two compare episode by episode.
    real_time_factor: the sim's pace (sim s per wall s). record_to: also record the topics that
    show the timing (RECORDED_TOPICS, no images) to this bag folder (evaluation.graph_gap reads it).
    pushes: random pushes on the arm (the sim node's `pushes` parameter), counted per episode.
    robot: robots.ROBOTS name (None: the checkpoint's; one trained for another robot raises
    CheckpointError naming both). Raises RuntimeError if a node dies, TimeoutError if the graph stalls."""
    if not 0 < real_time_factor <= 10:
        raise ValueError(f"real_time_factor must be in (0, 10], got {real_time_factor}")
    spec = load_policy(checkpoint, warmup=False).spec
    robot = robot_for_checkpoint(robot, spec.joint_names, spec.provenance, str(checkpoint))
    params_file, params_from = sim_params_for_checkpoint(robot, sim_config, spec.provenance)
    params = load_sim_params(params_file)
    # The task the checkpoint was trained on (students since issue 32 record it), as the core path takes it.
    task = checkpoint_task(spec.provenance) or params.task.name
    params = with_task(params, task, f"{checkpoint}: provenance task")
    sim_parameters: dict[str, Any] = {"seed": int(seed), "randomize": bool(perturb), "task": task,
                                      "sim_params_file": str(params.source),
                                      "real_time_factor": float(real_time_factor), "pushes": bool(pushes)}
    timeout = wall_timeout_s or 120.0 + episodes * 4.0 * params.task.timeout_s / min(real_time_factor, 1.0)
    with graph_log(log_file, "sim2real_graph_eval_") as log, \
            tempfile.TemporaryDirectory(prefix="sim2real_graph_eval_") as scratch:
        # The policy node is given the sim node's sim params file (graph.declare_graph) and warns when the
        # checkpoint was trained on another version; the graph preprocesses as the checkpoint was trained.
        extra = {"sim_node": sim_parameters, **checkpoint_preprocessing_parameters(spec.preprocess, Path(scratch))}
        args = GraphArgs(checkpoint=str(checkpoint), robot=robot, extra_parameters=extra,
                         **({"robot_description": robot_description} if robot_description else {}))
        start = time.monotonic()
        with SimGraphSession(args, log, record_to=record_to, record_topics=RECORDED_TOPICS) as session:
            policy_reports = session.probe.collect(DiagnosticArray, node_diagnostics("policy_node"), LATCHED_QOS)
            sim_reports = session.probe.collect(DiagnosticArray, SIM_STATUS.name, 10)
            armed = False
            while not armed and time.monotonic() - start < ARM_TIMEOUT_S:
                session.check_nodes()  # a node that refused its start (a checkpoint it cannot run) ends the wait
                armed = session.wait_for_mode("AUTONOMOUS", 1.0)
            if not armed:
                session.check_nodes()
                raise TimeoutError(f"the supervisor never armed (mode {session.mode()!r}: {session.mode_reason()}); "
                                   f"node output in {log}")
            # The episode running while the graph came up started before the policy could act: start
            # over at episode 0 of the seed, so graph episode k is the core path's episode k.
            ok, message = session.call(SIM_RESTART)
            if not ok:
                raise RuntimeError(f"sim/restart refused: {message}")
            skip = len(session.outcomes)
            for done in progress(range(episodes), episodes, "[eval graph] episodes"):
                while len(session.outcomes) < skip + done + 1:
                    session.check_nodes()
                    if time.monotonic() - start > timeout:
                        raise TimeoutError(f"only {len(session.outcomes) - skip} of {episodes} episodes finished in "
                                           f"{timeout:.0f} s; node output in {log}")
                    session.wait_for_outcomes(skip + done + 1, 2.0)
            outcomes = session.outcomes[skip:skip + episodes]
            commands = [np.asarray(m.data) for _, m in list(session.commands)]
            state = session.state()
            supervisor = dict(state.counters) if state is not None else {}
    policy = diagnostic_values(policy_reports[-1]) if policy_reports else {}
    achieved_rtf = [SimStatus.from_msg(m).real_time_factor for m in sim_reports[2:]]
    wins = sum(o.success for o in outcomes)
    loop_note = trained_loop_note(spec.provenance, spec.sim_params_version, params, str(checkpoint))
    steps = np.abs(np.diff(np.stack(commands), axis=0)).max(axis=1) if len(commands) > 1 else np.array([])
    return {
        "checkpoint": str(checkpoint), "robot": robot, "task": task, "perturb": perturb, "pushes": bool(pushes),
        **({"pushes_applied_total": sum(max(o.pushes_applied, 0) for o in outcomes)} if pushes else {}),
        "sim_params_file": str(params.source), "sim_params_from": params_from,
        "sim_params_version": params.version, "trained_sim_params_version": spec.sim_params_version,
        "sim_params_warning": None if loop_note else sim_params_mismatch(
            spec.sim_params_version, params.version, str(checkpoint), str(params.source)),
        "sim_loop_note": loop_note,
        "mode": "graph",
        "episodes": len(outcomes), "successes": wins, "success_rate": wins / max(len(outcomes), 1),
        "ci95": list(wilson_interval(wins, len(outcomes))),
        "episode_length_s": summary([o.duration_s for o in outcomes]),
        "command_step_rad": summary(steps),
        "failures": dict(sorted(Counter(failure_category(o) for o in outcomes).items())),
        "per_episode": [{"episode": o.episode, "seed": o.seed, "success": o.success, "duration_s": o.duration_s,
                         "final_distance_m": o.final_distance_m, "failure": failure_category(o),
                         **({"pushes_applied": o.pushes_applied} if o.pushes_applied >= 0 else {})}
                        for o in outcomes],
        "wall_time_s": round(time.monotonic() - start, 1),
        "real_time_factor": {"requested": real_time_factor, **summary(achieved_rtf)},
        # Sim time, as the nodes measure it: what the policy had to cope with.
        "obs_to_chunk_ms": {k: float(policy.get(f"obs_to_chunk_ms_{k}", "nan")) for k in ("p50", "p99", "max")},
        "supervisor": {k: int(supervisor.get(k, 0))
                       for k in ("watchdog_holds", "clock_stall_holds", "joint_jumps", "estops", "arm_refused")},
    }
