"""Random pushes: external forces on the arm's links at random times (randomization.pushes).

A push schedule is drawn once per episode (sim.world.SimWorld.reset, from the generator
np.random.default_rng([episode_seed, 2]), so no other draw of the episode changes) and applied by
SimWorld.step. Times are counted in physics steps from the episode start, so a schedule is exact:
a push is active during the physics steps start_step <= k < start_step + n_steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ConfigError
from ..core.robot.urdf import RobotModel
from ..core.timebase import NS_PER_S
from .params import PushParams


@dataclass(frozen=True)
class ScheduledPush:
    """One push: link (name and PyBullet link index), force (3,) [N] in the world frame, applied at the
    link's center of mass during physics steps [start_step, start_step + n_steps) of the episode
    (each step dt_ns long)."""

    link: str
    link_index: int
    force_n: tuple[float, float, float]
    start_step: int
    n_steps: int
    dt_ns: int

    @property
    def end_step(self) -> int:
        """First physics step (from the episode start) the push no longer acts on."""
        return self.start_step + self.n_steps

    @property
    def start_s(self) -> float:
        """Start [s] after the episode start."""
        return self.start_step * self.dt_ns / NS_PER_S

    @property
    def duration_s(self) -> float:
        """How long the force acts [s] (a whole number of physics steps, at least one)."""
        return self.n_steps * self.dt_ns / NS_PER_S

    def summary(self) -> dict[str, Any]:
        """{start_s [s], link, force_n [fx, fy, fz] [N], duration_s [s]} (episode info)."""
        return {"start_s": self.start_s, "link": self.link, "force_n": list(self.force_n),
                "duration_s": self.duration_s}


def push_links(model: RobotModel, link_index: dict[str, int], params: PushParams, source: str) -> list[tuple[str, int]]:
    """(name, PyBullet link index) of the links pushes may act on: params.links, or (empty) every link
    that is the child of a movable joint. Raises ConfigError naming randomization.pushes.links for a
    link that is not in the URDF or that no movable joint moves (the base and what is fixed to it)."""
    moved = [j.child for j in model.joints if j.movable]
    movable = {j.child for j in model.joints if j.child in link_index
               and any(k.movable for k in model.chain(j.child))}
    names = list(params.links) or moved
    bad = [n for n in names if n not in movable]
    if bad:
        raise ConfigError(source, "randomization.pushes.links", list(params.links),
                          f"{bad} not links a movable joint of {model.source} moves (those are: {sorted(movable)})")
    return [(n, link_index[n]) for n in names]


def draw_push_schedule(params: PushParams, rng: np.random.Generator, links: list[tuple[str, int]],
                       horizon_s: float, dt_ns: int) -> list[ScheduledPush]:
    """The pushes of one episode, in start order: starts at cumulative intervals (interval_s from the
    episode start, then from the previous push's start) before horizon_s [s]; each on a link drawn
    uniformly from `links`, with a direction uniform on the sphere, a magnitude uniform in force_n [N]
    and a duration uniform in duration_s [s]. Start and duration are rounded to the physics step
    (start up, duration to the nearest, at least one step)."""
    if not links:
        return []
    schedule = []
    t = 0.0
    while True:
        t += float(rng.uniform(*params.interval_s))
        if t >= horizon_s:
            return schedule
        name, index = links[int(rng.integers(len(links)))]
        direction = rng.normal(size=3)
        norm = float(np.linalg.norm(direction))
        direction = direction / norm if norm > 0 else np.array([1.0, 0.0, 0.0])
        magnitude = float(rng.uniform(*params.force_n))
        duration = float(rng.uniform(*params.duration_s))
        force = tuple(float(v) for v in magnitude * direction)
        start_step = math.ceil(round(t * NS_PER_S) / dt_ns)
        n_steps = max(1, round(duration * NS_PER_S / dt_ns))
        schedule.append(ScheduledPush(name, index, force, start_step, n_steps, dt_ns))
