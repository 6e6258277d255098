"""The graph's conditions in the core path: what the ROS graph does to an episode that a plain rollout
does not (docs/graph_gap.md has the measurements behind each item).

A plain rollout (training.rollout, `graph_conditions` unset) observes at the episode's first instant
and every `obs_period_s` after, gets each chunk a fixed `inference_delay_s` later, samples a
ChunkBuffer at every control tick and commands the sim directly. The graph differs in timing only,
and this loop reproduces each difference with the code the nodes run:

- frames exist only on the camera's clock (the sim params' `rates.camera_hz`, at a phase to the
  episode start that varies from episode to episode), and the policy takes the ones its
  ObservationThrottle accepts (the policy node's own class);
- each image is paired with the newest joint state sampled at or before it (`rates.joint_states_hz`
  grid, its own phase), as the policy node pairs them;
- inference takes a random time, drawn per observation from a log-normal through the measured
  `inference_delay_p50_s` and `inference_delay_p99_s`; while it runs, newer observations replace
  the waiting one (the policy node's "superseded"), none queue;
- the actuator is ActuatorCore (chunk switching and crossfades as the node does them), ticking on
  its own phase;
- with `supervisor`, the supervisor core sits between the actuator and the sim as in the graph: it
  starts each episode holding, arms automatically once a fresh command arrives (auto_arm, the sim
  graph's setting) and ramps in over the handover ramp, and every command is step-limited.

Sim time throughout; no rclpy, no threads. Seeded from the episode seed: the same episode replays.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..core.control.action_chunk import ActionChunk
from ..core.control.actuator import ActuatorConfig, ActuatorCore
from ..core.control.joint_history import JointTrack
from ..core.control.observation_pairing import ObservationThrottle
from ..core.errors import ConfigError
from ..core.safety.joystick import load_joystick_mapping
from ..core.safety.limits import limits_from_urdf
from ..core.safety.supervisor import Supervisor, SupervisorConfig
from ..core.safety.teleop import Jogger
from ..core.timebase import NS_PER_S
from ..paths import config_path
from ..sim.world import SimWorld

Z99 = 2.3263478740408408  # standard normal 99th percentile


@dataclass(frozen=True)
class GraphConditions:
    """camera_hz, joint_state_hz [Hz]: 0 = the sim params' rates (what the sim node publishes).
    inference_delay_p50_s, inference_delay_p99_s [s]: observation -> chunk at the actuator, as the
    policy node reports it (obs_to_chunk_ms) on a loaded machine; p99 >= p50 > 0.
    supervisor: run the supervisor core between the actuator and the sim (start-of-episode hold,
    auto-arm, handover ramp, step limits). handover_ramp_s [s], handover_max_gap_rad [rad]: its
    settings (the supervisor node's defaults)."""

    camera_hz: float = 0.0
    joint_state_hz: float = 0.0
    inference_delay_p50_s: float = 0.02
    inference_delay_p99_s: float = 0.05
    supervisor: bool = True
    handover_ramp_s: float = 1.0
    handover_max_gap_rad: float = 0.5
    source: str = "graph_conditions"

    def __post_init__(self) -> None:
        for name in ("camera_hz", "joint_state_hz"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(self.source, name, value, "must be >= 0 [Hz] (0: the sim params' rate)")
        p50, p99 = self.inference_delay_p50_s, self.inference_delay_p99_s
        if not (math.isfinite(p50) and math.isfinite(p99) and 0 < p50 <= p99 < 1.0):
            raise ConfigError(self.source, "inference_delay_p99_s", p99,
                              f"need 0 < inference_delay_p50_s ({p50}) <= inference_delay_p99_s < 1 [s]")
        # The supervisor's own ranges (SupervisorConfig checks them with names the user can find).
        SupervisorConfig(handover_ramp_s=self.handover_ramp_s, handover_max_gap_rad=self.handover_max_gap_rad,
                         source=self.source)

    @classmethod
    def from_value(cls, value: Any, source: str = "graph_conditions") -> GraphConditions | None:
        """From YAML: null/false = off, true = defaults, a mapping = these fields."""
        if value is None or value is False:
            return None
        if value is True:
            return cls(source=source)
        if isinstance(value, GraphConditions):
            return value
        if not isinstance(value, dict):
            raise ConfigError(source, "graph_conditions", value, "expected true/false or a mapping")
        known = {f.name for f in fields(cls)} - {"source"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(source, f"graph_conditions.{unknown[0]}", value[unknown[0]],
                              f"unknown field (known: {sorted(known)})")
        return cls(**value, source=source)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source"}

    def draw_delay_ns(self, rng: np.random.Generator) -> int:
        """One inference delay [ns] from the log-normal through (p50, p99)."""
        mu = math.log(self.inference_delay_p50_s)
        sigma = max(math.log(self.inference_delay_p99_s / self.inference_delay_p50_s) / Z99, 1e-9)
        return int(round(math.exp(rng.normal(mu, sigma)) * NS_PER_S))


def make_supervisor(world: SimWorld, conditions: GraphConditions, control_rate_hz: float) -> Supervisor:
    """The supervisor core as the sim graph runs it: the URDF's limits, auto_arm, the node's defaults."""
    limits = limits_from_urdf(world.model, world.joint_names, source=conditions.source)
    config = SupervisorConfig(control_period_s=1.0 / control_rate_hz, auto_arm=True,
                              handover_ramp_s=conditions.handover_ramp_s,
                              handover_max_gap_rad=conditions.handover_max_gap_rad, source=conditions.source)
    mapping = load_joystick_mapping(config_path("joystick.yaml"))
    return Supervisor(config, limits, Jogger(mapping, limits, world.model, world.ee_link))


class _Grid:
    """Event times k * period_ns + phase_ns [ns] on the sim clock."""

    def __init__(self, start_ns: int, period_ns: int, phase_ns: int) -> None:
        self.period_ns = period_ns
        self.next_ns = start_ns + phase_ns

    def due(self, now_ns: int) -> bool:
        if now_ns < self.next_ns:
            return False
        self.next_ns += self.period_ns * ((now_ns - self.next_ns) // self.period_ns + 1)
        return True


# (policy image (H, W, 3) uint8, paired joint positions (n,) [rad], their history (H, n) [rad] or
# None) -> chunk (K, n) [rad]: the rollout's observe step (it records the observation and asks the
# controller or the expert).
Observe = Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]


@dataclass
class GraphLoopStats:
    """What the loop saw in one episode (sim time): observations used and superseded, the first
    chunk's arrival and the arming time after the episode start [s] (None if never)."""

    observations: int = 0
    superseded: int = 0
    first_chunk_s: float | None = None
    armed_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_graph_loop(world: SimWorld, conditions: GraphConditions, observe: Observe, render: Callable[[], np.ndarray],
                   chunk_times_s: np.ndarray, obs_period_s: float, control_rate_hz: float,
                   actuation_latency_s: float, interpolation: str, blending: str,
                   limit_ns: int | None, seed: int, joint_history_s: tuple[float, ...] = ()) -> GraphLoopStats:
    """Run the episode `world` was just reset to, under the graph's conditions, until it ends (or
    limit_ns [ns] of sim time). `observe` gets each accepted observation and returns the chunk;
    with joint_history_s (lags [s]) each observation carries the joint states' history at the
    image stamp, sampled from the published joint states as the policy node samples it."""
    rng = np.random.default_rng([int(seed), 24])
    params = world.params
    camera_hz = conditions.camera_hz or params.rates.camera_hz
    js_hz = conditions.joint_state_hz or params.rates.joint_states_hz
    start = world.time_ns
    periods = {name: int(round(NS_PER_S / hz)) for name, hz in
               (("camera", camera_hz), ("joint_states", js_hz), ("control", control_rate_hz))}
    grids = {name: _Grid(start, period, int(rng.integers(0, period))) for name, period in periods.items()}
    throttle = ObservationThrottle(obs_period_s)
    actuator = ActuatorCore(ActuatorConfig(joints=tuple(world.joint_names), control_rate_hz=control_rate_hz,
                                           actuation_latency_s=actuation_latency_s, interpolation=interpolation,
                                           blending=blending, estimate_latency=False))
    supervisor = make_supervisor(world, conditions, control_rate_hz) if conditions.supervisor else None
    names = list(world.joint_names)
    samples: deque[tuple[int, np.ndarray]] = deque(maxlen=64)  # joint states (stamp, q)
    track = JointTrack(max(joint_history_s, default=0.0))  # the same joint states, for histories
    in_flight: list[tuple[int, ActionChunk]] = []  # (arrival [ns], chunk), arrival order
    busy_until = start  # inference is running until then
    # the observation queued behind it: (stamp, image, q, history)
    waiting: tuple[int, np.ndarray, np.ndarray, np.ndarray | None] | None = None
    stats = GraphLoopStats()

    def infer(now: int, stamp: int, image: np.ndarray, q: np.ndarray, history: np.ndarray | None) -> None:
        nonlocal busy_until
        action = observe(image, q, history)
        busy_until = now + conditions.draw_delay_ns(rng)
        in_flight.append((busy_until, ActionChunk(tuple(names), stamp, chunk_times_s, action)))
        stats.observations += 1

    while world.episode_outcome() is None and (limit_ns is None or world.time_ns < limit_ns):
        now = world.time_ns
        if grids["joint_states"].due(now):
            q_now = world.joint_positions()
            samples.append((now, q_now))
            if joint_history_s:
                track.add(now, q_now)
            if supervisor is not None:
                supervisor.on_joint_state(names, q_now, now, now)
        if grids["camera"].due(now) and throttle.accept(now) and samples:
            image, q_paired = render(), samples[-1][1]
            history = track.history(now, joint_history_s) if joint_history_s else None
            if now >= busy_until:
                infer(now, now, image, q_paired, history)
            else:
                stats.superseded += waiting is not None
                waiting = (now, image, q_paired, history)
        if waiting is not None and now >= busy_until:
            stamp, image, q_paired, history = waiting
            waiting = None
            infer(now, stamp, image, q_paired, history)
        while in_flight and in_flight[0][0] <= now:
            actuator.on_chunk(in_flight.pop(0)[1], now)
            if stats.first_chunk_s is None:
                stats.first_chunk_s = (now - start) / NS_PER_S
        if grids["control"].due(now):
            sample = actuator.tick(now)
            if supervisor is None:
                if sample is not None:
                    world.set_command(sample.positions)
            else:
                if sample is not None:
                    supervisor.on_policy_command(names, sample.positions, now)
                sent = supervisor.tick(now)
                if sent is not None:
                    world.set_command(sent.positions)
                    if stats.armed_s is None and not sent.hold:
                        stats.armed_s = (now - start) / NS_PER_S
        next_ns = min([g.next_ns for g in grids.values()]
                      + ([in_flight[0][0]] if in_flight else []) + ([busy_until] if waiting is not None else []))
        world.step(max(1, -(-(next_ns - world.time_ns) // world.dt_ns)))
    return stats
