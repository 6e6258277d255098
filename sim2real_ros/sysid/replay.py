"""Replay a bag's commands in the PyBullet sim with candidate dynamics (render off, as fast as the CPU
allows) and sample the simulated joint positions at the recorded state times.

The world is sim/world.py's SimWorld itself, so the replay has exactly the sim's actuator model
(latency queue, PD loop, damping, Coulomb friction, effort limits, gravity feed-forward). Only the
task is swapped for one that does nothing: its per-step success check costs time and means nothing
here. No rclpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..sim.params import SimParams
from ..sim.world import SimWorld
from .fit_data import FitData

KINDS = ("kp", "kd", "damping", "friction")


class _NoTask:
    """A task that never ends and shows nothing (the replay only needs the robot)."""

    name = "none"

    def build(self, world: SimWorld) -> None:
        del world

    def reset(self, world: SimWorld, rng: np.random.Generator) -> dict[str, Any]:
        del world, rng
        return {"target": [0.0, 0.0, 0.0]}

    def evaluate(self, world: SimWorld) -> dict[str, Any] | None:
        del world
        return None

    def target_position(self) -> np.ndarray:
        return np.zeros(3)


@dataclass(frozen=True)
class Dynamics:
    """Candidate dynamics of the commanded joints: latency_s [s]; kp, kd, damping, friction (n,)."""

    latency_s: float
    kp: np.ndarray
    kd: np.ndarray
    damping: np.ndarray
    friction: np.ndarray

    def values(self, kind: str) -> np.ndarray:
        return getattr(self, kind)

    def replace_values(self, **changes: Any) -> Dynamics:
        fields = {"latency_s": self.latency_s, **{k: self.values(k).copy() for k in KINDS}}
        fields.update(changes)
        return Dynamics(**fields)

    def to_dict(self, names: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {"actuation_latency_s": float(self.latency_s)}
        for kind in KINDS:
            out[kind] = {n: float(v) for n, v in zip(names, self.values(kind), strict=True)}
        return out


class Replayer:
    """One SimWorld reused for every replay of one bag."""

    def __init__(self, params: SimParams, robot_description: str, data: FitData) -> None:
        self.data = data
        self.world = SimWorld(params, robot_description, seed=0, render=False, joints=list(data.joint_names),
                              task=_NoTask())
        self.dt_s = self.world.dt_ns / 1e9
        client = self.world.client
        index = {client.getJointInfo(self.world.robot, j)[1].decode(): j
                 for j in range(client.getNumJoints(self.world.robot))}
        self._joint_index = index
        self.replays = 0
        self.steps = 0

    def nominal(self) -> Dynamics:
        """The dynamics the loaded sim params give the commanded joints."""
        d = self.world.dynamics()
        return Dynamics(float(d["actuation_latency_s"]), d["kp"], d["kd"], d["damping"], d["friction"])

    def _set_state(self, q: np.ndarray, qd: np.ndarray, others: dict[str, float]) -> None:
        client, robot = self.world.client, self.world.robot
        for name, value in others.items():
            if name in self._joint_index:
                client.resetJointState(robot, self._joint_index[name], float(value), 0.0)
        for name, value, speed in zip(self.data.joint_names, q, qd, strict=True):
            client.resetJointState(robot, self._joint_index[name], float(value), float(speed))

    def run(self, dynamics: Dynamics, end_t: float | None = None) -> np.ndarray:
        """Simulated positions (M', n) [rad] at the state samples up to end_t [s] (default: all),
        replaying from the first state sample with the recorded state there."""
        data, world = self.data, self.world
        end = data.duration_s if end_t is None else end_t
        world.reset()
        # The command in effect at the start goes straight into the PD loop (zero latency for one
        # step), then the candidate latency applies to everything that follows.
        first = np.searchsorted(data.command_t, 0.0, side="right")
        world.set_dynamics(actuation_latency_s=0.0)
        world.set_command(data.commands[max(first - 1, 0)])
        world.step(1)
        world.set_dynamics(kp=dynamics.kp, kd=dynamics.kd, damping=dynamics.damping, friction=dynamics.friction,
                           actuation_latency_s=max(0.0, float(dynamics.latency_s)))
        q0, qd0 = data.state_at(0.0)
        self._set_state(q0, qd0, {name: series[0] for name, series in data.other_states.items()})
        origin_ns = world.time_ns
        dt_ns = world.dt_ns
        # Event times as physics steps from the start: commands act from the first step at or after
        # they arrive; states are read at the step nearest their stamp.
        command_steps = np.ceil(np.maximum(data.command_t, 0.0) / self.dt_s - 1e-9).astype(int)
        sample_steps = np.round(data.state_t[data.state_t <= end + 1e-12] / self.dt_s).astype(int)
        out = np.empty((len(sample_steps), len(data.joint_names)))
        next_command = first
        step = 0
        for i, target_step in enumerate(sample_steps):
            while True:
                pending = command_steps[next_command] if next_command < len(command_steps) else None
                stop = target_step if pending is None else min(target_step, pending)
                if stop > step:
                    world.step(stop - step)
                    step = stop
                if pending is not None and pending <= step:
                    world.set_command(data.commands[next_command])
                    next_command += 1
                    continue
                break
            out[i] = world.joint_positions()
        self.replays += 1
        self.steps += int((world.time_ns - origin_ns) // dt_ns)
        return out

    def close(self) -> None:
        self.world.close()
