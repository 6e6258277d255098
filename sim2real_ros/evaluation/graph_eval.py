"""`sim2real eval-sim --graph`: success rate through the full ROS graph (sim node, preprocessing,
policy, actuator, supervisor as processes over DDS), counted from the sim's sim/episode topic."""
from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..graph import GraphArgs
from ..orchestration.graph_session import EpisodeOutcome, SimGraphSession
from ..sim.params import load_sim_params
from ..training.progress import progress
from ..training.stats import summary, wilson_interval


def failure_category(outcome: EpisodeOutcome) -> str:
    """The categories the core evaluation uses, from what sim/episode reports."""
    if outcome.success:
        return "success"
    return "timeout_near" if outcome.final_distance_m < 0.10 else "timeout_far"


def evaluate_in_graph(checkpoint: str | Path, episodes: int, perturb: bool = False,
                      sim_config: str | Path | None = None, robot_description: str | None = None,
                      seed: int = 1000, wall_timeout_s: float | None = None,
                      log_file: Path | None = None) -> dict[str, Any]:
    """Run the sim graph until `episodes` outcomes arrived on sim/episode (the first one after
    arming counts from a fresh reset). Raises RuntimeError if a node dies, TimeoutError if the
    graph stalls."""
    params = load_sim_params(sim_config)
    sim_parameters: dict[str, Any] = {"seed": int(seed), "randomize": bool(perturb),
                                      "sim_params_file": str(params.source)}
    args = GraphArgs(checkpoint=str(checkpoint), extra_parameters={"sim_node": sim_parameters},
                     **({"robot_description": robot_description} if robot_description else {}))
    timeout = wall_timeout_s or 120.0 + episodes * 4.0 * params.task.timeout_s
    with tempfile.TemporaryDirectory(prefix="sim2real_graph_eval_") as tmp:
        log = log_file or Path(tmp) / "graph.log"
        start = time.monotonic()
        with SimGraphSession(args, log) as session:
            if not session.wait_for_mode("AUTONOMOUS", 180.0):
                session.check_nodes()
                raise TimeoutError(f"the supervisor never armed (mode {session.mode()!r}: {session.mode_reason()}); "
                                   f"node output in {log}")
            # The episode running while the graph came up started before the policy could act.
            ok, message = session.call("sim/reset")
            if not ok:
                raise RuntimeError(f"sim/reset refused: {message}")
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
    wins = sum(o.success for o in outcomes)
    steps = np.abs(np.diff(np.stack(commands), axis=0)).max(axis=1) if len(commands) > 1 else np.array([])
    return {
        "checkpoint": str(checkpoint), "perturb": perturb, "sim_params_version": params.version, "mode": "graph",
        "episodes": len(outcomes), "successes": wins, "success_rate": wins / max(len(outcomes), 1),
        "ci95": list(wilson_interval(wins, len(outcomes))),
        "episode_length_s": summary([o.duration_s for o in outcomes]),
        "command_step_rad": summary(steps),
        "failures": dict(sorted(Counter(failure_category(o) for o in outcomes).items())),
        "wall_time_s": round(time.monotonic() - start, 1),
    }
