"""Where the graph's episodes spend their time, read from a bag `eval-sim --graph --record DIR` wrote.

The core path (training.rollout) observes at the episode's first instant, gets each chunk a fixed
inference delay later and commands the sim directly at every control tick. The graph does none of
that exactly: frames exist only on the camera's clock, a chunk arrives when the policy node's
process got the CPU, the actuator's and the supervisor's ticks come when /clock and the scheduler
let them, and after an episode reset the supervisor holds until a plan for the new episode arrives
and then ramps to it. This module measures each of those per episode, in sim time (the time base of
every node), from what the recorder received:

- `start_to_first_chunk_ms`: episode start -> the first chunk observed after it reaches the graph;
- `first_observation_ms`: episode start -> that chunk's observation (camera phase + throttling);
- `start_to_armed_ms`: episode start -> the supervisor in AUTONOMOUS again;
- `obs_to_chunk_ms`: observation stamp -> chunk received (inference + transport), per chunk;
- `observation_period_ms`: between the observations of consecutive chunks (100 = none skipped);
- `command_period_ms`: between the commands the sim received (10 = no control tick missed);
- `stale_chunks`: chunks received during the episode but observed before it started;
- `not_autonomous_ms`: how long the episode ran with the supervisor holding or ramping in.

No ROS is needed: bags are read with bags.reader.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bags.reader import BagReader
from ..core.stats import summary
from ..core.timebase import NS_PER_S
from ..topics import ACTION_CHUNK, ROBOT_COMMAND, SIM_EPISODE, SUPERVISOR_STATE, EpisodeOutcome, SupervisorState

NS_PER_MS = 1_000_000

EPISODE_TOPIC = SIM_EPISODE.absolute
CHUNK_TOPIC = ACTION_CHUNK.absolute
COMMAND_TOPIC = ROBOT_COMMAND.absolute
STATE_TOPIC = SUPERVISOR_STATE.absolute


def _stamp_ns(header: Any) -> int:
    return int(header.stamp.sec) * NS_PER_S + int(header.stamp.nanosec)


@dataclass
class GraphTrace:
    """What the recorder received, in sim time [ns]: episodes (start, end, outcome), chunks
    (observation stamp, receive time), command receive times, supervisor modes (stamp, mode)."""

    episodes: list[tuple[int, int, EpisodeOutcome]] = field(default_factory=list)
    chunk_stamps: list[int] = field(default_factory=list)
    chunk_received: list[int] = field(default_factory=list)
    commands: list[int] = field(default_factory=list)
    modes: list[tuple[int, str]] = field(default_factory=list)


def read_trace(bag: str | Path) -> GraphTrace:
    """One pass over the bag's timing topics (a bag without them gives an empty trace)."""
    trace = GraphTrace()
    with BagReader(bag) as reader:
        for m in reader.messages([EPISODE_TOPIC, CHUNK_TOPIC, COMMAND_TOPIC, STATE_TOPIC]):
            if m.topic == EPISODE_TOPIC:
                outcome = EpisodeOutcome.from_msg(m.msg)
                end = _stamp_ns(m.msg.header)
                start = end - int(round(outcome.duration_s * NS_PER_S))
                trace.episodes.append((start, end, outcome))
            elif m.topic == CHUNK_TOPIC:
                trace.chunk_stamps.append(_stamp_ns(m.msg.header))
                trace.chunk_received.append(m.log_time_ns)
            elif m.topic == COMMAND_TOPIC:
                trace.commands.append(m.log_time_ns)
            elif m.topic == STATE_TOPIC:
                state = SupervisorState.from_msg(m.msg)
                trace.modes.append((_stamp_ns(m.msg.header), state.mode if state is not None else ""))
    trace.commands.sort()
    trace.modes.sort()
    return trace


def _not_autonomous_ns(modes: list[tuple[int, str]], start: int, end: int) -> tuple[int, int | None]:
    """Time within [start, end] the supervisor was not AUTONOMOUS, and when it (re)entered AUTONOMOUS
    first after `start` (None if it never did)."""
    times = [t for t, _ in modes]
    i = bisect_right(times, start) - 1
    mode = modes[i][1] if i >= 0 else ""
    t, held, armed_at = start, 0, None
    for when, new in modes[i + 1:]:
        if when > end:
            break
        if mode != "AUTONOMOUS":
            held += when - t
        if new == "AUTONOMOUS" and mode != "AUTONOMOUS" and armed_at is None:
            armed_at = when
        mode, t = new, when
    if mode != "AUTONOMOUS":
        held += end - t
    elif armed_at is None and i >= 0 and modes[i][1] == "AUTONOMOUS":
        armed_at = start  # armed through the whole episode
    return held, armed_at


def episode_timing(trace: GraphTrace) -> list[dict[str, Any]]:
    """Per episode: outcome, seed and the timing figures of the module docstring (sim time)."""
    rows = []
    order = np.argsort(trace.chunk_received, kind="stable")
    received = np.asarray(trace.chunk_received, dtype=np.int64)[order]
    stamps = np.asarray(trace.chunk_stamps, dtype=np.int64)[order]
    for start, end, outcome in trace.episodes:
        lo, hi = bisect_left(received.tolist(), start), bisect_right(received.tolist(), end)
        got, seen = received[lo:hi], stamps[lo:hi]
        fresh = seen >= start
        first = int(np.argmax(fresh)) if fresh.any() else None
        commands = trace.commands[bisect_left(trace.commands, start):bisect_right(trace.commands, end)]
        held, armed_at = _not_autonomous_ns(trace.modes, start, end)
        own = np.sort(seen[fresh])
        rows.append({
            "episode": outcome.episode, "seed": outcome.seed,
            "success": outcome.success, "duration_s": (end - start) / NS_PER_S,
            "final_distance_m": outcome.final_distance_m,
            "start_to_first_chunk_ms": None if first is None else (int(got[first]) - start) / NS_PER_MS,
            "first_observation_ms": None if first is None else (int(seen[first]) - start) / NS_PER_MS,
            "start_to_armed_ms": None if armed_at is None else (armed_at - start) / NS_PER_MS,
            "not_autonomous_ms": held / NS_PER_MS,
            "stale_chunks": int((~fresh).sum()),
            "obs_to_chunk_ms": summary((got[fresh] - seen[fresh]) / NS_PER_MS),
            "observation_period_ms": summary(np.diff(own) / NS_PER_MS),
            "command_period_ms": summary(np.diff(np.asarray(commands, dtype=np.int64)) / NS_PER_MS),
        })
    return rows


def timing_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-episode figures pooled (median and spread over episodes), successes and failures apart."""
    def pooled(subset: list[dict[str, Any]]) -> dict[str, Any]:
        def over(key: str, stat: str | None = None) -> dict[str, float]:
            values = [r[key] if stat is None else r[key].get(stat) for r in subset]
            return summary([v for v in values if v is not None and np.isfinite(v)])

        return {"episodes": len(subset),
                "start_to_first_chunk_ms": over("start_to_first_chunk_ms"),
                "first_observation_ms": over("first_observation_ms"),
                "start_to_armed_ms": over("start_to_armed_ms"), "not_autonomous_ms": over("not_autonomous_ms"),
                "stale_chunks": over("stale_chunks"),
                "obs_to_chunk_p99_ms": over("obs_to_chunk_ms", "p99"),
                "observation_period_max_ms": over("observation_period_ms", "max"),
                "command_period_p99_ms": over("command_period_ms", "p99"),
                "command_period_max_ms": over("command_period_ms", "max")}

    return {"all": pooled(rows), "successes": pooled([r for r in rows if r["success"]]),
            "failures": pooled([r for r in rows if not r["success"]])}
