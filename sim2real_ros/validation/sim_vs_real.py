"""Sim vs real: episode outcomes recorded in real bags, and the failure-mode comparison.

Real episodes come from sim/episode outcomes in the bags where present (a test rig or a sim
standing in for the robot reports them); who drove each one comes from supervisor/state. Only
episodes the policy started count for the policy's success rate: a person taking over ends the
policy's attempt ("taken_over"), and demonstrations (a person from the start) say nothing about it.

Failure modes: when the same policy fails in real in ways it never fails in sim, the difference is
in what the sim models, not in the policy: a sensing gap (the policy does not head for the target:
camera pose, calibration, lighting) or an actuation gap (it gets there but cannot settle or
overshoots: latency, gains, friction).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..bags import BagReader
from ..conversions import stamp_to_ns
from ..core.stats import summary, wilson_interval
from ..core.timebase import NS_PER_S
from ..episodes.dataset import episode_kind
from ..episodes.options import HUMAN_MODES
from ..episodes.topics import resolve_topic
from ..topics import SIM_EPISODE, SUPERVISOR_STATE, EpisodeOutcome, SupervisorState

NEAR_M = 0.10  # [m] a timeout closer than this is "near" (as the sim evaluations count it)
# Failure category -> the gap it points to when it appears in real but not in sim.
GAP_OF_FAILURE = {
    "timeout_far": ("sensing", "the policy does not head for the target: it sees it elsewhere (camera pose, "
                    "calibration, lighting, image noise)"),
    "timeout_near": ("actuation", "the policy gets close but cannot settle (latency, gains, friction)"),
    "joint_limit": ("actuation", "the arm overshoots into a joint limit (gains, latency)"),
    "table_contact": ("actuation", "the arm overshoots into the table (gains, latency, gravity compensation)"),
    "estop": ("actuation", "an e-stop latched during the episode (unsafe motion or a watchdog)"),
    # the tasks' own categories (sim/tasks.py, sim/task_pick_lift.py, sim/task_pick_place.py)
    "timeout": ("actuation", "the policy gets there but never completes the task in time (gains, latency, "
                "servo limits)"),
    "collision": ("actuation", "an arm link hits the table (overshoot: gains, latency, gravity compensation)"),
    "unsteady": ("actuation", "the tool reaches the target but cannot stay still there (latency, gains, friction)"),
    "missed_grasp": ("sensing", "the jaws close beside the cube: the policy sees it elsewhere (camera pose, "
                     "calibration, lighting)"),
    "dropped": ("actuation", "the cube slips out of the jaws in the lift (grip torque, friction, the gripper "
                "servo's limits)"),
    "knocked_off_table": ("actuation", "the arm sweeps the cube off the table (overshoot: gains, latency)"),
    "misplaced": ("sensing", "the cube is put down outside the zone: the policy sees the zone elsewhere "
                  "(camera pose, calibration)"),
}
NOT_COMPARABLE = ("success", "taken_over")


@dataclass(frozen=True)
class RealEpisode:
    """One recorded episode: bag, driver (policy | intervention | demonstration), outcome and its
    failure category (success | estop | taken_over | demonstration | the task's category that the
    sim node recorded, e.g. missed_grasp; timeout_near | timeout_far from the final distance in
    bags recorded before episodes carried it)."""

    bag: str
    episode: str
    driver: str
    success: bool
    reason: str
    duration_s: float
    final_distance_m: float
    category: str


def read_real_episodes(bag: str | Path, human_modes: tuple[str, ...] = HUMAN_MODES) -> list[RealEpisode]:
    """Episodes with outcomes (sim/episode) in a bag; [] when it records none."""
    bag = Path(bag)
    outcomes: list[tuple[int, EpisodeOutcome]] = []
    mode_times: list[int] = []
    modes: list[str] = []
    with BagReader(bag) as reader:
        available = reader.topic_types()
        episode_topic, _ = resolve_topic(SIM_EPISODE.name, available)
        state_topic, _ = resolve_topic(SUPERVISOR_STATE.name, available)
        if episode_topic is None:
            return []
        for message in reader.messages([t for t in (episode_topic, state_topic) if t]):
            stamp = stamp_to_ns(message.msg.header.stamp) or message.log_time_ns
            if message.topic == episode_topic:
                outcomes.append((stamp, EpisodeOutcome.from_msg(message.msg)))
            elif (state := SupervisorState.from_msg(message.msg)) is not None:
                mode_times.append(stamp)
                modes.append(state.mode)
    order = np.argsort(np.asarray(mode_times, dtype=np.int64), kind="stable")
    times = np.asarray(mode_times, dtype=np.int64)[order]
    modes_sorted = tuple(modes[i] for i in order)
    episodes = []
    for end, outcome in outcomes:
        duration = outcome.duration_s
        start = end - int(round(duration * NS_PER_S)) if np.isfinite(duration) else end
        kind = episode_kind(times, modes_sorted, human_modes, start, end) if len(times) else "autonomous"
        estop = any(m == "ESTOP" for t, m in zip(times.tolist(), modes_sorted, strict=True) if start < t <= end)
        success = outcome.success
        distance = outcome.final_distance_m
        driver = {"autonomous": "policy"}.get(kind, kind)
        if driver == "demonstration":
            category = "demonstration"
        elif driver == "intervention":
            category = "taken_over"
        elif estop:
            category = "estop"
        elif success:
            category = "success"
        elif outcome.failure and outcome.failure != "success":
            category = outcome.failure
        else:
            category = "timeout_near" if distance < NEAR_M else "timeout_far"
        episode = str(outcome.episode) if outcome.episode >= 0 else ""
        episodes.append(RealEpisode(str(bag), episode, driver, success and driver == "policy", outcome.reason,
                                    duration, distance, category))
    return episodes


def real_outcomes(episodes: list[RealEpisode]) -> dict[str, Any]:
    """The real column: the policy's success rate (Wilson 95%) over the episodes it started,
    episode length, failure categories; demonstrations counted apart."""
    policy = [e for e in episodes if e.driver in ("policy", "intervention")]
    demos = [e for e in episodes if e.driver == "demonstration"]
    wins = sum(e.success for e in policy)
    return {
        "present": bool(episodes),
        "episodes": len(policy), "successes": wins,
        "success_rate": wins / len(policy) if policy else None,
        "ci95": list(wilson_interval(wins, len(policy))) if policy else None,
        "episode_length_s": summary([e.duration_s for e in policy]),
        "failures": dict(sorted(Counter(e.category for e in policy).items())),
        "demonstrations": {"episodes": len(demos), "successes": sum(e.reason == "success" for e in demos),
                           "episode_length_s": summary([e.duration_s for e in demos])},
        "episode_list": [asdict(e) for e in episodes],
    }


def compare_failure_modes(sim_failures: dict[str, int], real_failures: dict[str, int]) -> dict[str, Any]:
    """Do sim and real fail in the same ways? Compares the kinds of failure (categories with at
    least one episode, success and take-overs aside) and the most frequent one."""
    sim_kinds = {k for k, v in sim_failures.items() if v and k not in NOT_COMPARABLE}
    real_kinds = {k for k, v in real_failures.items() if v and k not in NOT_COMPARABLE}
    only_real, only_sim = sorted(real_kinds - sim_kinds), sorted(sim_kinds - real_kinds)

    def dominant(failures: dict[str, int], kinds: set[str]) -> str | None:
        return max(sorted(kinds), key=lambda k: failures[k]) if kinds else None

    top_sim, top_real = dominant(sim_failures, sim_kinds), dominant(real_failures, real_kinds)
    differ = bool(only_real) or (top_sim is not None and top_real is not None and top_sim != top_real)
    gaps = sorted({GAP_OF_FAILURE[k][0] for k in (only_real or ([top_real] if differ and top_real else []))
                   if k in GAP_OF_FAILURE})
    if differ:
        reasons = "; ".join(f"{k}: {GAP_OF_FAILURE[k][1]}" for k in (only_real or [top_real]) if k in GAP_OF_FAILURE)
        message = (f"Failure modes differ in kind between sim and real (only in real: {only_real or 'none'}; only in "
                   f"sim: {only_sim or 'none'}; most frequent: sim {top_sim}, real {top_real}). The same policy "
                   f"failing differently points to {' and '.join(gaps) or 'a sim'} gap(s) rather than a policy gap "
                   f"({reasons}): close it with system identification / observation matching before more training.")
    elif real_kinds:
        message = ("Failure modes agree in kind between sim and real: the remaining gap is the policy's "
                   "(more data, fine-tuning on real demonstrations).")
    else:
        message = "No policy failure recorded in real to compare with."
    taken = int(real_failures.get("taken_over", 0))
    if taken:
        message += f" A person took over in {taken} real episode(s); what the policy would have done there is unknown."
    return {"differ_in_kind": differ, "only_in_real": only_real, "only_in_sim": only_sim,
            "most_frequent": {"sim": top_sim, "real": top_real}, "gap": gaps, "message": message}


def chunk_magnitudes(targets: np.ndarray, observed_q: np.ndarray) -> np.ndarray:
    """Per chunk: the largest |target - joint position at the observation| over points and joints
    [rad] (the definition the sim evaluation uses for action_magnitude_rad). targets (N, K, n),
    observed_q (N, n) -> (N,), NaN rows dropped."""
    if len(targets) == 0:
        return np.zeros(0)
    magnitude = np.abs(np.asarray(targets) - np.asarray(observed_q)[:, None, :])
    per_chunk = np.max(magnitude.reshape(len(magnitude), -1), axis=1)
    return per_chunk[np.isfinite(per_chunk)]
