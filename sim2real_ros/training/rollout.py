"""Run episodes in the sim through the same core the nodes run (no rclpy).

Each observation goes through the robot's preprocessing (core/preprocess.ImagePipeline); each
chunk goes through the actuator's ChunkBuffer, sampled at tick + actuation latency (docs/design.md §3),
with the chunk arriving an inference delay after its observation. So what the student learns and
how it is evaluated is what the graph will do, minus DDS.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.control.action_chunk import ActionChunk
from ..core.control.chunk_buffer import ChunkBuffer, ChunkBufferConfig
from ..core.control.joint_history import JointTrack
from ..core.perception.preprocess import ImagePipeline
from ..core.timebase import NS_PER_S
from ..sim.expert import ReachExpert
from ..sim.world import SimWorld
from .graph_conditions import GraphConditions, run_graph_loop

# (policy image (H, W, 3) uint8, joint positions (n,) [rad], their history (H, n) [rad] or None)
# -> chunk (K, n) absolute targets [rad]
Controller = Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]


@dataclass(frozen=True)
class RolloutConfig:
    """obs_period_s: time between observations (policy rate) [s].
    control_rate_hz: actuator tick rate [Hz]. actuation_latency_s: latency the actuator compensates [s].
    inference_delay_s: observation -> chunk available [s] (the compute latency of the real graph).
    max_episode_s: cut episodes short for data collection [s] (None: the task's own timeout).
    interpolation / blending: the actuator's ChunkBuffer settings.
    graph_conditions: the ROS graph's timing (training.graph_conditions: camera clock, throttled
    observations, random inference delays, the actuator and supervisor cores); None: the plain loop
    (observe every obs_period_s from the episode start, fixed inference_delay_s, no supervisor).
    """

    obs_period_s: float = 0.1
    control_rate_hz: float = 100.0
    actuation_latency_s: float = 0.02
    inference_delay_s: float = 0.02
    max_episode_s: float | None = None
    interpolation: str = "cubic"
    blending: str = "crossfade"
    graph_conditions: GraphConditions | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "rollout") -> RolloutConfig:
        values = dict(data)
        if "graph_conditions" in values:
            values["graph_conditions"] = GraphConditions.from_value(values["graph_conditions"], source)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (what checkpoints keep in their provenance)."""
        data = dict(self.__dict__)
        data["graph_conditions"] = None if self.graph_conditions is None else self.graph_conditions.to_dict()
        return data


@dataclass
class EpisodeRecord:
    """What one episode produced: frames (policy images, joint positions, their histories (H, n) at
    the run's lags, teacher labels), the commands sent, and the outcome dict of the sim (success,
    reason, duration_s, ...)."""

    images: list[np.ndarray] = field(default_factory=list)
    joints: list[np.ndarray] = field(default_factory=list)
    histories: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)


def target_in_base(world: SimWorld) -> np.ndarray:
    """The privileged target (3,) [m] in the robot base frame (what the IK teacher works in)."""
    base = world.link_pose(world._root_link_name())  # noqa: SLF001 - the world's own root frame
    return np.linalg.solve(base, np.append(world.target_position(), 1.0))[:3]


def classify_failure(world: SimWorld, outcome: dict[str, Any]) -> str:
    """Failure category of a finished (or cut) episode, as the world's task names them
    (sim/tasks.py; reach: success | timeout_near | timeout_far | joint_limit | table_contact)."""
    return world.task.classify_failure(world, outcome)


def run_episode(world: SimWorld, pipeline: ImagePipeline, expert: ReachExpert | None, controller: Controller | None,
                chunk_length: int, dt_s: float, config: RolloutConfig, randomize: bool,
                seed: int | None = None, record_images: bool = True,
                joint_history_s: tuple[float, ...] = ()) -> EpisodeRecord:
    """One episode. `controller` drives (None: the expert drives); the expert, when given, labels
    every observation (DAgger: labels for the states the driver reaches). joint_history_s: the lags
    [s] of the joint history each observation carries (the student's spec; () for none): sampled
    from the joint states the graph would publish (core/control/joint_history.py)."""
    if controller is None and expert is None:
        raise ValueError("run_episode needs a controller or an expert")
    info = world.reset(randomize=randomize, seed=seed)
    target = target_in_base(world) if expert is not None else None
    buffer = ChunkBuffer(world.joint_names, ChunkBufferConfig(interpolation=config.interpolation,
                                                              blending=config.blending))
    times = np.arange(chunk_length) * dt_s
    physics_per_tick = max(1, int(round(1.0 / (config.control_rate_hz * world.params.physics.dt_s))))
    tick_ns = physics_per_tick * world.dt_ns
    obs_ns = int(round(config.obs_period_s * NS_PER_S))
    delay_ns = int(round(config.inference_delay_s * NS_PER_S))
    limit_ns = None if config.max_episode_s is None else world.time_ns + int(config.max_episode_s * NS_PER_S)
    record = EpisodeRecord()

    def observe(image: np.ndarray, q: np.ndarray, history: np.ndarray | None) -> np.ndarray:
        """Record the observation (and the teacher's label); the driver's chunk (K, n) [rad]."""
        label = expert.chunk(q, target, chunk_length, dt_s) if expert is not None else None
        action = label if controller is None else controller(image, q, history)
        if record_images:
            record.images.append(image)
        record.joints.append(q)
        if history is not None:
            record.histories.append(history)
        if label is not None:
            record.labels.append(label)
        record.actions.append(action)
        return action

    if config.graph_conditions is not None:
        stats = run_graph_loop(world, config.graph_conditions, observe,
                               lambda: pipeline.process(world.render(), "rgb8", world.camera), times,
                               config.obs_period_s, config.control_rate_hz, config.actuation_latency_s,
                               config.interpolation, config.blending, limit_ns, int(info["seed"]),
                               joint_history_s)
        _finish(world, record)
        record.outcome["graph"] = stats.to_dict()
        return record
    next_obs_ns = world.time_ns
    pending: list[tuple[int, ActionChunk]] = []
    track = JointTrack(max(joint_history_s, default=0.0))  # measured at every control tick
    while world.episode_outcome() is None and (limit_ns is None or world.time_ns < limit_ns):
        now = world.time_ns
        if joint_history_s:
            track.add(now, world.joint_positions())
        if now >= next_obs_ns:
            image = pipeline.process(world.render(), "rgb8", world.camera)
            q = world.joint_positions()
            action = observe(image, q, track.history(now, joint_history_s) if joint_history_s else None)
            pending.append((now + delay_ns, ActionChunk(tuple(world.joint_names), now, times, action)))
            next_obs_ns += obs_ns
        while pending and pending[0][0] <= now:
            buffer.add(pending.pop(0)[1], received_ns=now)
        sample = buffer.sample(now, config.actuation_latency_s)
        if sample is not None:
            world.set_command(sample.positions)
        world.step(physics_per_tick)
        assert tick_ns > 0
    return _finish(world, record)


def _finish(world: SimWorld, record: EpisodeRecord) -> EpisodeRecord:
    """The episode's outcome (a cut-short one too) with its failure category, into the record."""
    outcome = world.episode_outcome()
    if outcome is None:  # cut short for data collection
        distance = float(np.linalg.norm(world.ee_position() - world.target_position()))
        outcome = {"success": False, "reason": "cut", "duration_s": world.episode_elapsed_s(),
                   "final_distance_m": distance}
    outcome["failure"] = classify_failure(world, outcome)
    record.outcome = outcome
    return record
