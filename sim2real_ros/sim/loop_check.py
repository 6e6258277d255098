"""How closely the fast sim loop (physics.loop: fast) follows the reference loop: both worlds get the
same joint command sequence (a step or a chirp, sent at a decision rate as a policy does), and the
joint positions are compared at every instant both loops have a physics step (sim time only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.timebase import NS_PER_S
from .params import SimParams, with_sim_loop
from .world import SimWorld

COMMANDS = ("step", "chirp")


@dataclass(frozen=True)
class LoopBound:
    """The fast loop's physics step for one robot [s] and how far its response may be from the
    reference loop's on the step and chirp commands (nominal and randomized): the largest joint
    difference max_abs_rad [rad], the RMS over joints and instants rms_rad [rad], and the largest
    tool point distance tool_m [m]. Measured figures: docs/benchmarks.md, "The sim loop"."""

    fast_dt_s: float
    max_abs_rad: float
    rms_rad: float
    tool_m: float

    def holds(self, error: ResponseError) -> bool:
        return (error.max_abs_rad <= self.max_abs_rad and error.rms_rad <= self.rms_rad
                and error.max_tool_m <= self.tool_m)


# arm6: 160 Hz (8 physics steps per 20 Hz decision); its worst joint is the wrist roll (joint6, 92 g cm^2)
# in the first 50 ms of a step. SO-101: 200 Hz; at 160 Hz its jaw and wrist roll (16 and 58 g cm^2)
# part from the reference by 0.4 rad (the per-joint implicit PD ignores their coupling).
STATED_BOUNDS: dict[str, LoopBound] = {
    "arm6": LoopBound(fast_dt_s=0.00625, max_abs_rad=0.08, rms_rad=0.016, tool_m=0.015),
    "so101": LoopBound(fast_dt_s=0.005, max_abs_rad=0.03, rms_rad=0.01, tool_m=0.005),
}


@dataclass(frozen=True)
class ResponseError:
    """Where two loops' joint positions differ most on one command sequence: max_abs_rad [rad] over
    all joints and compared instants, rms_rad [rad], the worst joint, max_abs_by_joint [rad],
    max_tool_m [m]: the largest tool point (ee_link) distance between them, and the command's size [rad]."""

    command: str
    max_abs_rad: float
    rms_rad: float
    worst_joint: str
    max_abs_by_joint: dict[str, float]
    max_tool_m: float
    amplitude_rad: float

    def summary(self) -> dict[str, Any]:
        return {"command": self.command, "max_abs_rad": round(self.max_abs_rad, 5), "rms_rad": round(self.rms_rad, 5),
                "worst_joint": self.worst_joint,
                "max_abs_by_joint": {k: round(v, 5) for k, v in self.max_abs_by_joint.items()},
                "max_tool_m": round(self.max_tool_m, 5), "amplitude_rad": self.amplitude_rad}


def command_sequence(kind: str, home: np.ndarray, lower: np.ndarray, upper: np.ndarray, decision_s: float,
                     duration_s: float, amplitude_rad: float) -> np.ndarray:
    """Joint targets (K, n) [rad], one per decision of decision_s [s] over duration_s [s]: 'step' holds
    home for 0.2 s, then home + amplitude on every joint (alternating sign); 'chirp' is a sine around
    home whose frequency sweeps 0.3 -> 3 Hz. Clipped to the joint limits."""
    if kind not in COMMANDS:
        raise ValueError(f"unknown command {kind!r} (known: {COMMANDS})")
    times = np.arange(int(round(duration_s / decision_s))) * decision_s
    signs = np.where(np.arange(len(home)) % 2 == 0, 1.0, -1.0)
    if kind == "step":
        shape = (times >= 0.2).astype(float)
    else:
        f0, f1 = 0.3, 3.0
        shape = np.sin(2.0 * np.pi * (f0 * times + 0.5 * (f1 - f0) / duration_s * times ** 2))
    return np.clip(home + amplitude_rad * shape[:, None] * signs, lower, upper)


def run_commands(world: SimWorld, commands: np.ndarray,
                 decision_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Send each command at its decision time and record the commanded joints and the tool point after
    every physics step; returns (times [ns] (S,), positions [rad] (S, n), tool [m] (S, 3)) from the
    world's episode start."""
    per_decision = max(1, int(round(decision_s * NS_PER_S / world.dt_ns)))
    times, positions, tool = [], [], []
    start = world.time_ns
    for target in commands:
        world.set_command(target)
        for _ in range(per_decision):
            world.step(1)
            times.append(world.time_ns - start)
            positions.append(world.joint_positions())
            tool.append(world.ee_position())
    return np.asarray(times), np.asarray(positions), np.asarray(tool)


def response_error(params: SimParams, robot_description: str, kind: str, fast_dt_s: float = 0.005,
                   decision_s: float = 0.05, duration_s: float = 2.0, amplitude_rad: float = 0.3,
                   randomized_seed: int | None = None, loop: str = "fast") -> ResponseError:
    """Joint-position difference between `params` run with the reference loop at its dt_s and with
    `loop` (default the fast loop) at fast_dt_s [s], on one command kind: nominal dynamics, or
    (randomized_seed) the episode of that seed drawn from the randomization ranges (the same draw in
    both loops). No pushes."""
    reference = with_sim_loop(params, "reference", params.physics.dt_s)
    fast = with_sim_loop(params, loop, fast_dt_s)
    recorded = []
    for variant in (reference, fast):
        world = SimWorld(variant, robot_description, seed=0, render=False)
        try:
            if randomized_seed is not None:
                world.reset(randomize=True, seed=randomized_seed)
            home = world.joint_positions()
            commands = command_sequence(kind, home, world.lower, world.upper, decision_s, duration_s, amplitude_rad)
            recorded.append(run_commands(world, commands, decision_s))
            names = list(world.joint_names)
        finally:
            world.close()
    (t_ref, q_ref, tool_ref), (t_fast, q_fast, tool_fast) = recorded
    common, at_ref, at_fast = np.intersect1d(t_ref, t_fast, return_indices=True)
    if len(common) == 0:
        raise ValueError(f"the loops share no physics instant (dt {params.physics.dt_s} s and {fast_dt_s} s)")
    diff = q_fast[at_fast] - q_ref[at_ref]
    by_joint = np.abs(diff).max(axis=0)
    tool = np.linalg.norm(tool_fast[at_fast] - tool_ref[at_ref], axis=1)
    return ResponseError(command=kind, max_abs_rad=float(by_joint.max()), rms_rad=float(np.sqrt(np.mean(diff ** 2))),
                         worst_joint=names[int(np.argmax(by_joint))],
                         max_abs_by_joint={n: float(v) for n, v in zip(names, by_joint, strict=True)},
                         max_tool_m=float(tool.max()), amplitude_rad=amplitude_rad)
