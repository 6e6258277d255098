"""The privileged scripted teacher for the reach task (no learning needed).

It knows the true target position, solves inverse kinematics for it with the arm's Jacobian
(core/urdf.py, damped least squares), and labels action chunks: the joint targets it would command
at times t + k*dt (docs/design.md §3) from the current measured joint positions. The labels depend only
on (current joints, target), so DAgger can relabel any state the student reaches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.robot.urdf import RobotModel, damped_least_squares


@dataclass(frozen=True)
class ExpertConfig:
    """speed_rad_s: joint-space speed of the planned motion [rad/s] (largest joint moves at it).
    min_duration_s: shortest planned motion [s] (slow, smooth starts near the goal).
    approach_offset_m: aim this far above the target center [m] so the tool does not hit the table.
    ik_tolerance_m: IK position tolerance [m]. ik_iterations: iteration budget per restart.
    """

    speed_rad_s: float = 1.2
    min_duration_s: float = 0.4
    approach_offset_m: float = 0.01
    ik_tolerance_m: float = 0.002
    ik_iterations: int = 300
    ik_damping: float = 0.02


class ReachExpert:
    """IK teacher: target position [m] (robot base frame) -> joint goal -> chunk labels."""

    def __init__(self, model: RobotModel, joint_names: list[str], ee_link: str, home_q: np.ndarray,
                 config: ExpertConfig | None = None) -> None:
        self.model = model
        self.joint_names = list(joint_names)
        self.ee_link = ee_link
        self.home_q = np.asarray(home_q, dtype=float)
        self.config = config or ExpertConfig()
        limits = model.limits_arrays(self.joint_names)
        # Stay a little inside the limits: the supervisor clamps at them, the teacher should not ask.
        margin = 0.02 * (limits["upper"] - limits["lower"])
        self.lower = limits["lower"] + margin
        self.upper = limits["upper"] - margin
        self._goal_cache: dict[tuple[float, float, float], np.ndarray] = {}

    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """End-effector position (3,) [m] in the base frame for joints q (n,) [rad]."""
        return self.model.forward_kinematics(q, self.ee_link, self.joint_names)[0][:3, 3]

    def solve_ik(self, target_xyz: np.ndarray) -> np.ndarray:
        """Joint goal (n,) [rad] putting the end effector at target + approach offset.

        Deterministic for a given target (always seeded from the home pose, then from perturbed
        seeds if that fails), so the student can learn target -> goal as a function.
        """
        goal_xyz = np.asarray(target_xyz, dtype=float) + np.array([0.0, 0.0, self.config.approach_offset_m])
        key = tuple(np.round(goal_xyz, 5))
        if key in self._goal_cache:
            return self._goal_cache[key]
        rng = np.random.default_rng(0)
        best_q, best_err = self.home_q.copy(), np.inf
        for attempt in range(6):
            q = self.home_q.copy() if attempt == 0 else np.clip(
                self.home_q + rng.normal(0.0, 0.4, self.home_q.shape), self.lower, self.upper)
            for _ in range(self.config.ik_iterations):
                error = goal_xyz - self.ee_position(q)
                if np.linalg.norm(error) < self.config.ik_tolerance_m:
                    break
                jac = self.model.jacobian(q, self.ee_link, self.joint_names)[:3]
                step = damped_least_squares(jac, error, self.config.ik_damping)
                # Limit the step so the linearisation holds.
                scale = min(1.0, 0.3 / max(1e-9, float(np.max(np.abs(step)))))
                q = np.clip(q + scale * step, self.lower, self.upper)
            err = float(np.linalg.norm(goal_xyz - self.ee_position(q)))
            if err < best_err:
                best_q, best_err = q, err
            if best_err < self.config.ik_tolerance_m:
                break
        self._goal_cache[key] = best_q
        return best_q

    def chunk(self, q_now: np.ndarray, target_xyz: np.ndarray, chunk_length: int, dt_s: float) -> np.ndarray:
        """Labels (K, n) [rad]: the targets for times t + k*dt, k = 0..K-1, from measured q_now
        (point 0 is q_now itself: the target for the observation time, docs/design.md §3).

        A straight joint-space line to the IK goal at `speed_rad_s` (largest joint), time-scaled
        so short moves still take `min_duration_s`.
        """
        q_now = np.asarray(q_now, dtype=float)
        goal = self.solve_ik(target_xyz)
        distance = float(np.max(np.abs(goal - q_now)))
        duration = max(self.config.min_duration_s, distance / self.config.speed_rad_s)
        times = np.arange(chunk_length) * dt_s
        fraction = np.clip(times / duration, 0.0, 1.0)[:, None]
        return q_now[None, :] + fraction * (goal - q_now)[None, :]
