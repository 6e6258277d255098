"""Episodes of the vision student on Ray rollout workers (or in this process), seed by seed.

Every episode runs on a freshly built SimWorld (13 ms here): a PyBullet world's next episode depends
slightly on what it simulated before (its solver keeps state across resets), so an episode's result
must depend on its seed alone for the results not to depend on how many workers ran them. The same
pool serves DAgger collection (`sim2real train --workers`) and evaluation (`sim2real eval-sim
--workers`); `rl.pool.RolloutPool` serves the PPO teacher's rollouts.

On Ray, the job's files (sim params, URDF and meshes, teacher checkpoint) and a checkpoint driver
travel to the workers as data (rl.shipping), and episodes are pure functions of their seeds, so a
block of episodes lost with a worker (killed, or silent past the timeout) is played again by a
replacement worker and the run's results equal an undisturbed run's.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.perception.preprocess import ImagePipeline
from ..core.perception.preprocess_config import PreprocessConfig
from ..sim.params import load_sim_params, with_sim_loop_override, with_task
from ..sim.world import SimWorld
from .rollout import Controller, EpisodeRecord, RolloutConfig, run_episode


@dataclass(frozen=True)
class EpisodeJob:
    """What every episode of a run shares (plain values: it crosses to Ray workers).

    sim_params / robot_description: paths; preprocess: PreprocessConfig as a dict; joints: the
    commanded joints; rollout: RolloutConfig.to_dict(); chunk_length (K), dt_s [s]; randomize;
    pushes; teacher: None (the student drives, no labels) | "ik" | "ppo" with teacher_checkpoint |
    "expert" (the task's reactive scripted expert); recovery_teacher: "expert" (with "ppo": the reactive
    expert labels from an episode's first failed grasp on, rl/labeller.RecoveringChunkTeacher) or "";
    record_images: keep the policy images (training data) or not (evaluation); backend: what runs
    a checkpoint-path driver (core/policy_backend.py: auto, torch or onnxruntime); task: the sim
    task to run instead of the sim params' task.name (sim/tasks.py; None: the file's);
    joint_history_s: the lags [s] of the joint history each observation carries (the driven or
    trained student's spec; () for none); sim_loop: a sim loop over the sim params' own
    (sim.params.with_sim_loop_override; None keeps the file's)."""

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
    recovery_teacher: str = ""
    record_images: bool = True
    backend: str = "auto"
    task: str | None = None
    joint_history_s: tuple[float, ...] = ()
    sim_loop: dict[str, Any] | None = None


# A driver: a PolicyModel (DAgger student), a checkpoint path (evaluation), or None (the teacher drives).
Driver = Any


@dataclass(frozen=True)
class ShippedCheckpoint:
    """A checkpoint driver as data (a Ray worker reads nothing by path): file name, bytes, sha256."""

    name: str
    data: bytes
    digest: str

    @classmethod
    def read(cls, path: str) -> ShippedCheckpoint:
        import hashlib
        from pathlib import Path

        from ..core.errors import Sim2RealError

        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise Sim2RealError(f"checkpoint {path}: cannot read it to ship to the Ray workers ({err})") from err
        return cls(Path(path).name, data, hashlib.sha256(data).hexdigest())


class EpisodeRunner:
    """Runs episodes of one job, each on a new world (held by each worker, or in this process)."""

    def __init__(self, job: EpisodeJob, num_threads: int = 1, shipped: Any = None) -> None:
        import dataclasses

        import torch

        torch.set_num_threads(num_threads)
        self.unpacked = None
        if shipped is not None:  # a Ray worker: the job's files are data, written to its own folder
            from ..rl.shipping import Unpacked

            self.unpacked = Unpacked(shipped)
            job = dataclasses.replace(
                job, sim_params=self.unpacked.path("sim_params"), robot_description=self.unpacked.path("robot"),
                teacher_checkpoint=self.unpacked.path("teacher") if job.teacher_checkpoint else None)
        self.job = job
        self.params = with_sim_loop_override(load_sim_params(job.sim_params), job.sim_loop or {}, "episode job")
        if job.task is not None:
            self.params = with_task(self.params, job.task)
        self.pipeline = ImagePipeline(PreprocessConfig.from_dict(job.preprocess, source="episode job preprocess"))
        self.rollout = RolloutConfig.from_dict(job.rollout, "episode job rollout")
        self._teacher = None
        self._policies: dict[str, Any] = {}
        self.labels_made = 0  # chunks the PPO teacher labelled (its rollouts are the costly part)

    def _controller(self, driver: Driver) -> Controller | None:
        if driver is None:
            return None
        if isinstance(driver, ShippedCheckpoint):
            if driver.digest not in self._policies:
                import tempfile
                from pathlib import Path

                from ..core.policy.backend import load_policy

                with tempfile.TemporaryDirectory(prefix="sim2real_driver_") as folder:
                    path = Path(folder) / driver.name
                    path.write_bytes(driver.data)
                    self._policies[driver.digest] = load_policy(str(path), backend=self.job.backend, num_threads=1)
            return self._policies[driver.digest].select_action
        if isinstance(driver, str):
            if driver not in self._policies:
                from ..core.policy.backend import load_policy

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
            teacher = PPOChunkTeacher(self._teacher, world, self.rollout.actuation_latency_s)
            if self.job.recovery_teacher != "expert":
                return teacher
            from ..rl.labeller import RecoveringChunkTeacher

            return RecoveringChunkTeacher(teacher, self._expert_labeller(world))
        if self.job.teacher == "expert":
            return self._expert_labeller(world)
        from .trainer import make_expert

        return make_expert(world)

    def _expert_labeller(self, world: SimWorld) -> Any:
        from ..rl.labeller import EXPERT_ACTION_SCALE_RAD, ScriptedChunkTeacher

        return ScriptedChunkTeacher(world, self.job.dt_s, self.rollout.actuation_latency_s,
                                    EXPERT_ACTION_SCALE_RAD, "training config")

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
                                           record_images=self.job.record_images,
                                           joint_history_s=tuple(self.job.joint_history_s)))
                recovering_since_s = getattr(labeller, "recovering_since_s", None)
                if recovering_since_s is not None:  # recovery_teacher: when the recoverer took over
                    records[-1].outcome["recovery_labels_from_s"] = round(float(recovering_since_s), 3)
            finally:
                self.labels_made += int(getattr(labeller, "labels_made", 0))
                world.close()
        return records


class EpisodePool:
    """`workers` Ray actors each holding an EpisodeRunner (0: one runner in this process).

    timeout_s [s]: the longest one block of episodes may take on a worker; past it the worker is
    treated as dead (killed, replaced, the block played again). log: where lost workers are named."""

    def __init__(self, job: EpisodeJob, workers: int = 0, num_threads: int = 1,
                 timeout_s: float | None = None, log: Callable[[str], None] | None = None) -> None:
        from ..rl.pool import TASK_TIMEOUT_S, ActorGroup, default_log

        self.workers = workers
        self.log = log or default_log
        self.timeout_s = TASK_TIMEOUT_S if timeout_s is None else float(timeout_s)
        self._group: ActorGroup | None = None
        self._local = None
        if workers:
            import ray

            from ..rl.pool import check_free_cpus
            from ..rl.shipping import pack

            check_free_cpus(workers)
            shipped = ray.put(pack(job.sim_params, job.robot_description, {"teacher": job.teacher_checkpoint}))
            actor = ray.remote(num_cpus=1, max_restarts=0)(_EpisodeWorker)
            self._group = ActorGroup(lambda i: actor.remote(job, 1, shipped), workers, "episode",
                                     self.timeout_s, self.log)
            self.worker_info = self._group.info
        else:
            self._local = EpisodeRunner(job, num_threads)
            self.worker_info = []

    def run(self, seeds: Sequence[int], driver: Driver, randomize: bool,
            on_done: Callable[[int], None] | None = None, block: int = 4) -> list[EpisodeRecord]:
        """Episodes for `seeds` (results in seed order); `on_done(n)` after each block of n episodes."""
        seeds = [int(s) for s in seeds]
        blocks = [seeds[i:i + block] for i in range(0, len(seeds), block)]
        if self._group is None:
            out = []
            for part in blocks:
                out += self._local.run(part, driver, randomize)
                if on_done:
                    on_done(len(part))
            return out
        import time
        from collections import deque

        import ray

        from ..rl.pool import lost_reason

        group = self._group
        driver_ref = ray.put(ShippedCheckpoint.read(driver) if isinstance(driver, str) else driver)
        pending: dict[Any, tuple[int, int, float]] = {}  # ref -> (block, worker, submitted at [s])
        free = list(range(len(group.actors)))
        todo = deque(range(len(blocks)))
        results: dict[int, list[EpisodeRecord]] = {}

        def lost(worker: int, index: int, why: str) -> None:
            group.replace(worker, why, f"playing episodes with seeds {blocks[index]}")
            todo.appendleft(index)  # the block again: its episodes depend on their seeds only
            free.append(worker)

        while todo or pending:
            while free and todo:
                worker, index = free.pop(), todo.popleft()
                ref = group.actors[worker].run.remote(blocks[index], driver_ref, randomize)
                pending[ref] = (index, worker, time.monotonic())
            oldest = min(t for _, _, t in pending.values())
            wait_s = max(0.1, oldest + self.timeout_s - time.monotonic())
            done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            if not done:  # the oldest block ran past the timeout: its worker is hung
                now = time.monotonic()
                for ref, (index, worker, t) in list(pending.items()):
                    if now - t >= self.timeout_s:
                        del pending[ref]
                        lost(worker, index, f"gave no answer within {self.timeout_s:g} s (hung)")
                continue
            index, worker, _ = pending.pop(done[0])
            try:
                results[index] = ray.get(done[0], timeout=self.timeout_s)
            except Exception as err:
                reason = lost_reason(err)
                if reason is None:
                    raise
                lost(worker, index, f"died ({reason})")
                continue
            free.append(worker)
            if on_done:
                on_done(len(blocks[index]))
        return [r for i in range(len(blocks)) for r in results[i]]

    def labels_made(self) -> int:
        """Chunks a PPO teacher labelled so far, over every worker (a lost worker's count is lost)."""
        if self._group is None:
            return self._local.labels_made
        return int(sum(self._group.call_all("labels", [()] * len(self._group.actors), lambda i: "counting labels",
                                            lambda i: 0)))

    def close(self) -> None:
        """Release every worker; never raises (an error the run hit first stays the one reported)."""
        if self._group is not None:
            self._group.close()
            self._group = None


class _EpisodeWorker(EpisodeRunner):
    """An EpisodeRunner as a Ray actor: its files come as data; info() says where it runs and
    reports a refused start-up (version mismatch, bad file) as the task error it is."""

    def __init__(self, job: EpisodeJob, num_threads: int, shipped: Any) -> None:
        self.refused: Exception | None = None
        try:
            super().__init__(job, num_threads, shipped)
        except Exception as err:  # noqa: BLE001 - raised by info(), never retried
            self.refused = err

    def info(self) -> dict[str, Any]:
        import os
        import socket

        if self.refused is not None:
            raise self.refused
        return {"host": socket.gethostname(), "pid": os.getpid()}

    def labels(self) -> int:
        return self.labels_made

    def close(self) -> None:
        if getattr(self, "unpacked", None) is not None:
            self.unpacked.close()


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
