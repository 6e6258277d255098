"""Exact snapshots of a SimWorld within an episode (SimWorld.save_state / restore_state).

A WorldState holds what determines the world's future apart from the episode's draws: PyBullet's
physics state (kept on the physics server under `bullet_state_id`, see SimWorld.discard_state),
sim time, the episode start, the outcome, the last motor torques, the latency queue, the servo
loop, the push schedule's progress, the task's target and color, and the image noise generator.
The episode's randomization, dynamics (set_dynamics overrides included) and push schedule do not
change within an episode and are not copied: a snapshot is valid only in the episode it was taken
in, on the world that took it (restore_state refuses others).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class WorldState:
    """One snapshot (treat as opaque; arrays are private copies).

    world_serial / episode_serial: which world and which reset of it the snapshot belongs to.
    bullet_state_id: PyBullet's in-memory state (client.saveState), removed by SimWorld.discard_state
    or when the WorldState is garbage collected.
    time_ns, episode_start_ns [ns]: sim time and the episode's start.
    outcome: the episode outcome dict, None while running. last_effort (n_all,) [N*m].
    queue_active (n,) [rad] and queue_pending ((due_ns, target (n,) [rad]), ...): the latency queue.
    sent ((time_ns, target (n,) [rad]), ...): the latest commands set, oldest first.
    servo_reference (n_all,) [rad], servo_speed (n_all,) [rad/s]: the servo loop (None with the pd model).
    push_first, pushes_started: the push schedule's progress.
    target (3,) [m], target_rgba: the task's goal and its color (None if the task has none).
    image_rng_state: the bit generator state of the camera noise.
    task_state: the task's own progress (Task.state(): hold timers, grasp flags), None if it keeps none.
    """

    world_serial: int
    episode_serial: int
    bullet_state_id: int
    time_ns: int
    episode_start_ns: int
    outcome: dict[str, Any] | None
    last_effort: np.ndarray
    queue_active: np.ndarray
    queue_pending: tuple[tuple[int, np.ndarray], ...]
    servo_reference: np.ndarray | None
    servo_speed: np.ndarray | None
    push_first: int
    pushes_started: int
    target: np.ndarray
    target_rgba: tuple[float, ...] | None
    image_rng_state: dict[str, Any]
    task_state: Any = None
    sent: tuple[tuple[int, np.ndarray], ...] = ()
