"""Record "real" teleoperation bags through the graph: the scripted operator on the sim graph.

The sim graph runs with a sim variant that stands in for a real robot (e.g.
config/sim_params_real_b.yaml) and records every topic, exactly as on a robot. The scripted
operator (runtime.scripted_operator) acts only through the joystick topic and the supervisor:

- demonstration episodes: it takes over (TELEOP) and jogs the joints to the target with the
  deadman held;
- intervention episodes: the policy drives first (AUTONOMOUS) for `policy_s`, then the operator
  takes over and finishes the episode; at the next episode it hands back (arm).

The session bag is then cut into one bag per episode (episodes.episode_split), so the episodes can
be held out one by one. `episodes.json` in the output folder lists them.
Command line: `sim2real teleop-record` (cli/teleop_record_cmd.py).
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..conversions import stamp_to_ns
from ..core.errors import ConfigError
from ..core.robot.urdf import RobotModel
from ..core.timebase import NS_PER_S
from ..episodes.episode_split import split_by_episode
from ..graph import GraphArgs
from ..paths import config_path, default_policy_path, urdf_path
from ..sim.params import load_sim_params
from ..topics import SIM_RESET
from .graph_session import EpisodeOutcome, SimGraphSession
from .scripted_operator import SOURCE, ScriptedTeleoperator, TeleopPlan, operator_joystick_config, wait_for

__all__ = ["MANIFEST", "TeleopPlan", "operator_joystick_config", "record_teleop_episodes", "split_by_episode"]

MANIFEST = "episodes.json"
SESSION_BAG = "session_bag"


def _sim_parameters(sim_params: Path, seed: int, plan: TeleopPlan) -> dict[str, Any]:
    params: dict[str, Any] = {"sim_params_file": str(sim_params), "seed": int(seed), "randomize": False}
    if plan.camera_rate_hz:
        params["camera_rate_hz"] = float(plan.camera_rate_hz)
    if plan.clock_rate_hz:
        params["clock_rate_hz"] = float(plan.clock_rate_hz)
    if plan.real_time_factor:
        params["real_time_factor"] = float(plan.real_time_factor)
    return params


def record_teleop_episodes(out_dir: str | Path, episodes: int, sim_params: str | Path | None = None,
                           checkpoint: str | Path | None = None, seed: int = 0, plan: TeleopPlan | None = None,
                           robot_description: str | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Record `episodes` teleoperated episodes of the sim graph (sim variant `sim_params`, default
    config/sim_params_real_a.yaml; the policy `checkpoint` drives before interventions) and return
    one bag folder per episode (out_dir/episode_000, ...). out_dir must not exist or be empty.
    Raises RuntimeError when a node dies, TimeoutError when the graph stalls."""
    if episodes <= 0:
        raise ConfigError(SOURCE, "episodes", episodes, "must be > 0")
    plan = plan or TeleopPlan()
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(SOURCE, "out_dir", str(out), "exists and is not empty; recordings are never overwritten")
    out.mkdir(parents=True, exist_ok=True)
    sim_file = Path(sim_params) if sim_params else config_path("sim_params_real_a.yaml")
    params = load_sim_params(sim_file)
    ckpt = Path(checkpoint) if checkpoint else default_policy_path()
    joints = len(RobotModel.from_description(robot_description or str(urdf_path())).joint_names)
    joystick = operator_joystick_config(out, plan, joints)
    graph_args = GraphArgs(checkpoint=str(ckpt),
                           extra_parameters={"sim_node": _sim_parameters(sim_file, seed, plan),
                                             "supervisor": {"joystick_config": str(joystick)}},
                           **({"robot_description": robot_description} if robot_description else {}))
    session_bag = out / SESSION_BAG
    log(f"[teleop] recording {episodes} episode(s) in {sim_file.name} with {ckpt.name}; node output in "
        f"{out / 'graph.log'}")
    with SimGraphSession(graph_args, out / "graph.log", record_to=session_bag) as session:
        operator = ScriptedTeleoperator(session, graph_args.description(), params, plan, joystick)
        try:
            start_stamp_ns, records = _record(session, operator, plan, episodes, log, out / "graph.log")
            operator.hold_stick((), periods=3)
        finally:
            operator.close()
    bags = split_by_episode(session_bag, out, start_stamp_ns, [r.pop("outcome_stamp_ns") for r in records])
    for record, bag in zip(records, bags, strict=True):
        record["bag"] = bag.name
    manifest = {"sim_params": str(sim_file), "sim_params_version": params.version, "checkpoint": str(ckpt),
                "seed": seed, "plan": asdict(plan), "episodes": records}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(session_bag, ignore_errors=True)
    wins = sum(bool(r["success"]) for r in records)
    log(f"[teleop] {len(bags)} episode bag(s) in {out} ({wins} successes)")
    return bags


def _record(session: SimGraphSession, operator: ScriptedTeleoperator, plan: TeleopPlan, episodes: int,
            log: Callable[[str], None], log_file: Path) -> tuple[int, list[dict[str, Any]]]:
    """Arm, start a fresh episode, run `episodes` of them. Returns (stamp of the first episode's
    start [ns], one record per episode)."""
    if not session.wait_for_mode("AUTONOMOUS", plan.startup_timeout_s):
        session.check_nodes()
        raise TimeoutError(f"the supervisor never armed (mode {session.mode()!r}: {session.mode_reason()}); "
                           f"node output in {log_file}")
    targets_before = len(session.targets)
    ok, message = session.call(SIM_RESET)
    if not ok:
        raise RuntimeError(f"sim/reset refused: {message}")
    if not wait_for(lambda: len(session.targets) > targets_before, 10.0):
        raise TimeoutError("no sim/target after sim/reset")
    # The episode starts at the reset: sim/target is published with the new episode's stamp.
    start_stamp_ns = stamp_to_ns(session.targets[-1][1].header.stamp)
    skip = len(session.outcomes)
    records = []
    for index in range(episodes):
        record = _run_episode(session, operator, plan, plan.kind(index), skip + index, log)
        records.append({"index": index, **record})
        session.check_nodes()
    return start_stamp_ns, records


def _run_episode(session: SimGraphSession, operator: ScriptedTeleoperator, plan: TeleopPlan, kind: str,
                 outcomes_before: int, log: Callable[[str], None]) -> dict[str, Any]:
    """One episode of `kind`; returns what happened (outcome, who drove)."""
    finished = lambda: len(session.episodes_raw) > outcomes_before  # noqa: E731
    driven_by = kind
    took_over_after_s: float | None = None
    if kind == "intervention":
        if operator.hand_back():
            start_ns = operator.sim_time_ns()
            end_ns = start_ns + int(plan.policy_s * NS_PER_S)
            wait_for(lambda: finished() or operator.sim_time_ns() >= end_ns, plan.episode_wall_timeout_s)
            took_over_after_s = round((operator.sim_time_ns() - start_ns) / NS_PER_S, 2)
            if finished():
                driven_by = "policy"
        else:
            log(f"[teleop] hand-back refused ({session.mode_reason()}); the operator demonstrates this episode")
            driven_by = "demonstration"
    if not finished():
        if not operator.take_over():
            session.check_nodes()
            raise RuntimeError(f"takeover refused: mode {session.mode()!r}: {session.mode_reason()}")
        if not operator.jog_until(finished, plan.episode_wall_timeout_s):
            session.check_nodes()
            raise TimeoutError(f"episode did not end within {plan.episode_wall_timeout_s} s of jogging")
    outcome_msg = session.episodes_raw[outcomes_before]
    outcome = EpisodeOutcome.from_msg(outcome_msg)
    if session.mode() == "TELEOP":
        operator.release_after_reset(stamp_to_ns(outcome_msg.header.stamp))
    log(f"[teleop] episode {outcome.episode} ({driven_by}): {'success' if outcome.success else outcome.reason} "
        f"in {outcome.duration_s:.1f} s")
    return {"kind": driven_by, "planned": kind, "outcome_stamp_ns": stamp_to_ns(outcome_msg.header.stamp),
            "success": outcome.success, "reason": outcome.reason, "duration_s": outcome.duration_s,
            "final_distance_m": outcome.final_distance_m,
            "sim_episode": outcome.episode, "policy_drove_s": took_over_after_s}
