"""Episodes of the vision student on Ray rollout workers (or in this process), seed by seed.

Every episode runs on a freshly built SimWorld (13 ms here): a PyBullet world's next episode depends
slightly on what it simulated before (its solver keeps state across resets), so an episode's result
must depend on its seed alone for the results not to depend on how many workers ran them. The same
pool serves DAgger collection (`sim2real train --workers`) and evaluation (`sim2real eval-sim
--workers`); `rl.pool.RolloutPool` serves the PPO teacher's rollouts.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.preprocess import ImagePipeline
from ..core.preprocess_config import PreprocessConfig
from ..sim.params import load_sim_params
from ..sim.world import SimWorld
from .rollout import EpisodeRecord, RolloutConfig, run_episode


@dataclass(frozen=True)
class EpisodeJob:
    """What every episode of a run shares (plain values: it crosses to Ray workers).

    sim_params / robot_description: paths; preprocess: PreprocessConfig as a dict; joints: the
    commanded joints; rollout: RolloutConfig.to_dict(); chunk_length (K), dt_s [s]; randomize;
    pushes; teacher: None (the student drives, no labels) | "ik" | "ppo" with teacher_checkpoint;
    record_images: keep the policy images (training data) or not (evaluation); backend: what runs
    a checkpoint-path driver (core/policy_backend.py: auto, torch or onnxruntime)."""

    sim_params: str
    robot_description: str
    preprocess: dict[str, Any]
    joints: list[str] | None
    rollout: dict[str, Any]
    chunk_length: int
    dt_s: float
    pushes: bool = False
    teacher: str | None = None
    teacher_checkpoint: str | None = None
    record_images: bool = True
    backend: str = "auto"


# A driver: a PolicyModel (DAgger student), a checkpoint path (evaluation), or None (the teacher drives).
Driver = Any


class EpisodeRunner:
    """Runs episodes of one job, each on a new world (held by each worker, or in this process)."""

    def __init__(self, job: EpisodeJob, num_threads: int = 1) -> None:
        import torch

        torch.set_num_threads(num_threads)
        self.job = job
        self.params = load_sim_params(job.sim_params)
        self.pipeline = ImagePipeline(PreprocessConfig.from_dict(job.preprocess, source="episode job preprocess"))
        self.rollout = RolloutConfig.from_dict(job.rollout, "episode job rollout")
        self._teacher = None
        self._policies: dict[str, Any] = {}
        self.labels_made = 0  # chunks the PPO teacher labelled (its rollouts are the costly part)

    def _controller(self, driver: Driver) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
        if driver is None:
            return None
        if isinstance(driver, str):
            if driver not in self._policies:
                from ..core.policy_backend import load_policy

                self._policies[driver] = load_policy(driver, backend=self.job.backend, num_threads=1)
            return self._policies[driver].select_action
        from .trainer import student_controller

        return student_controller(driver)

    def _labeller(self, world: SimWorld) -> Any:
        if self.job.teacher is None:
            return None
        if self.job.teacher == "ppo":
            from ..rl.labeller import PPOChunkTeacher
            from ..rl.teacher_checkpoint import load_teacher

            if self._teacher is None:
                self._teacher = load_teacher(self.job.teacher_checkpoint)
            return PPOChunkTeacher(self._teacher, world, self.rollout.actuation_latency_s)
        from .trainer import make_expert

        return make_expert(world)

    def run(self, seeds: Sequence[int], driver: Driver, randomize: bool) -> list[EpisodeRecord]:
        """One episode per seed, in order (randomize: the sim params' domain randomization)."""
        controller = self._controller(driver)
        records = []
        for seed in seeds:
            world = SimWorld(self.params, self.job.robot_description, seed=int(seed), render=True,
                             joints=self.job.joints, pushes=self.job.pushes)
            labeller = self._labeller(world)
            try:
                records.append(run_episode(world, self.pipeline, labeller, controller,
                                           self.job.chunk_length, self.job.dt_s, self.rollout,
                                           randomize=randomize, seed=int(seed),
                                           record_images=self.job.record_images))
            finally:
                self.labels_made += int(getattr(labeller, "labels_made", 0))
                world.close()
        return records


class EpisodePool:
    """`workers` Ray actors each holding an EpisodeRunner (0: one runner in this process)."""

    def __init__(self, job: EpisodeJob, workers: int = 0, num_threads: int = 1) -> None:
        self.workers = workers
        if workers:
            import ray

            from ..rl.pool import check_free_cpus

            check_free_cpus(workers)
            actor = ray.remote(num_cpus=1)(EpisodeRunner)
            self._actors = [actor.remote(job, 1) for _ in range(workers)]
            self._local = None
        else:
            self._actors = []
            self._local = EpisodeRunner(job, num_threads)

    def run(self, seeds: Sequence[int], driver: Driver, randomize: bool,
            on_done: Callable[[int], None] | None = None, block: int = 4) -> list[EpisodeRecord]:
        """Episodes for `seeds` (results in seed order); `on_done(n)` after each block of n episodes."""
        seeds = [int(s) for s in seeds]
        blocks = [seeds[i:i + block] for i in range(0, len(seeds), block)]
        if not self._actors:
            out = []
            for part in blocks:
                out += self._local.run(part, driver, randomize)
                if on_done:
                    on_done(len(part))
            return out
        import ray

        driver_ref = ray.put(driver)
        pending = {}
        free = list(self._actors)
        results: dict[int, list[EpisodeRecord]] = {}
        next_block = 0
        while next_block < len(blocks) or pending:
            while free and next_block < len(blocks):
                actor = free.pop()
                pending[actor.run.remote(blocks[next_block], driver_ref, randomize)] = (next_block, actor)
                next_block += 1
            done, _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(done[0])
            results[index] = ray.get(done[0])
            free.append(actor)
            if on_done:
                on_done(len(blocks[index]))
        return [r for i in range(len(blocks)) for r in results[i]]

    def labels_made(self) -> int:
        """Chunks a PPO teacher labelled so far, over every worker."""
        if not self._actors:
            return self._local.labels_made
        import ray

        return int(sum(ray.get([a.__ray_call__.remote(lambda runner: runner.labels_made) for a in self._actors])))

    def close(self) -> None:
        if self._actors:
            import ray

            for actor in self._actors:
                ray.kill(actor)
            self._actors = []


def counting_progress(total: int, label: str) -> Callable[[int], None]:
    """An on_done callback that advances a progress bar (core.progress) by n episodes."""
    from ..core.progress import progress

    bar = progress(range(total), total, label)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        for _ in range(n):
            next(bar, None)
        done += n
        if done >= total:
            next(bar, None)  # the bar prints its last line when asked for one more

    return advance
