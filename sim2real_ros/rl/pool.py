"""Rollout workers: Ray actors, each holding k reach worlds; or the same batches in this process.

`RolloutPool(spec, num_envs, workers)` spreads the run's env slots over `workers` Ray actors
(`workers=0`: in this process, the serial reference). Slot j always plays episodes j, j + N, ...
(N = num_envs), so what a run collects does not depend on the worker count. The pool serves PPO
rollouts (`step`) and whole evaluation episodes (`run_episodes`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .batch import BatchedEnv, EnvSpec, StepResult

# observations (k, obs_dim) float32 -> actions (k, n) in [-1, 1]
ActionFn = Callable[[np.ndarray], np.ndarray]


def split_slots(num_envs: int, workers: int) -> list[tuple[int, int]]:
    """(first slot, count) per worker: contiguous, sizes differing by at most one."""
    base, extra = divmod(num_envs, workers)
    out, first = [], 0
    for w in range(workers):
        count = base + (1 if w < extra else 0)
        if count:
            out.append((first, count))
        first += count
    return out


class _Worker:
    """What each rollout worker holds: one BatchedEnv (also run in-process for workers=0)."""

    def __init__(self, spec: EnvSpec, first_slot: int, count: int) -> None:
        import torch

        torch.set_num_threads(1)  # one core per worker: torch's own threads would fight the sim
        self.batch = BatchedEnv(spec, first_slot, count)

    def info(self) -> dict[str, Any]:
        import socket

        return {"host": socket.gethostname(), "node_id": _node_id(), "envs": len(self.batch.envs),
                "obs_dim": self.batch.obs_dim, "num_actions": self.batch.num_actions}

    def observations(self) -> np.ndarray:
        return self.batch.observations()

    def step(self, actions: np.ndarray) -> StepResult:
        return self.batch.step(actions)

    def run_episodes(self, shares: Sequence[Sequence[int]], policy: Any) -> list[dict[str, Any]]:
        """Play whole episodes with `policy` (a torch module: obs -> mean action): env i of this
        worker plays the indices in shares[i], in order. Returns their episode info."""
        import torch

        out = []
        for env, indices in zip(self.batch.envs, shares, strict=True):
            for index in indices:
                obs = env.reset(index=int(index))
                while True:
                    with torch.inference_mode():
                        action = policy(torch.from_numpy(obs)[None])[0].numpy()
                    obs, _, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        out.append(info["episode"])
                        break
        return out

    def close(self) -> None:
        self.batch.close()


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - only informative
        return None


def check_free_cpus(workers: int) -> None:
    """Fail at once when Ray cannot place `workers` one-CPU actors (it would wait for ever)."""
    import time

    import ray

    from .cluster import RayClusterError

    total = int(ray.cluster_resources().get("CPU", 0))
    if workers > total:
        raise RayClusterError(f"{workers} rollout workers need {workers} CPUs; the Ray cluster has {total}")
    # Actors just killed give their CPUs back within moments; wait for them briefly.
    deadline = time.monotonic() + 10.0
    while int(ray.available_resources().get("CPU", 0)) < workers and time.monotonic() < deadline:
        time.sleep(0.1)
    free = int(ray.available_resources().get("CPU", 0))
    if free < workers:
        raise RayClusterError(f"{workers} rollout workers need {workers} free CPUs; {free} of the Ray "
                              f"cluster's {total} are free (another pool still holds the rest)")


class RolloutPool:
    """num_envs reach envs over `workers` Ray actors (0: in this process)."""

    def __init__(self, spec: EnvSpec, num_envs: int, workers: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.spec = spec
        self.num_envs = num_envs
        self.workers = workers
        self.layout = split_slots(num_envs, max(1, workers))
        if workers == 0:
            self._local = [_Worker(spec, first, count) for first, count in self.layout]
            self._actors: list[Any] = []
        else:
            import ray

            check_free_cpus(workers)
            actor_class = ray.remote(num_cpus=1)(_Worker)
            self._local = []
            self._actors = [actor_class.remote(spec, first, count) for first, count in self.layout]
        infos = self._call("info")
        self.worker_info = infos
        self.obs_dim = infos[0]["obs_dim"]
        self.num_actions = infos[0]["num_actions"]

    def _call(self, method: str, *per_worker_args: Sequence[Any], common: tuple = ()) -> list[Any]:
        """Call `method` on every worker (per-worker arguments zipped), results in worker order."""
        args = list(zip(*per_worker_args, strict=True)) if per_worker_args else [()] * len(self.layout)
        if self._actors:
            import ray

            return ray.get([getattr(a, method).remote(*arg, *common) for a, arg in
                            zip(self._actors, args, strict=True)])
        return [getattr(w, method)(*arg, *common) for w, arg in zip(self._local, args, strict=True)]

    def observations(self) -> np.ndarray:
        return np.concatenate(self._call("observations"))

    def step(self, actions: np.ndarray) -> StepResult:
        """Step all envs with actions (num_envs, n); one call per worker, run in parallel."""
        actions = np.asarray(actions, dtype=np.float64)
        parts = [actions[first:first + count] for first, count in self.layout]
        results: list[StepResult] = self._call("step", parts)
        terms: dict[str, float] = {}
        for r in results:
            for name, value in r.terms.items():
                terms[name] = terms.get(name, 0.0) + value
        return StepResult(np.concatenate([r.obs for r in results]), np.concatenate([r.rewards for r in results]),
                          np.concatenate([r.terminated for r in results]),
                          np.concatenate([r.truncated for r in results]),
                          [e for r in results for e in r.episodes], terms)

    def run_episodes(self, indices: Sequence[int], policy: Any) -> list[dict[str, Any]]:
        """Whole episodes `indices` with `policy`; results in the order of `indices`.

        Slot j plays indices[j::num_envs], in order, whichever worker holds it: a PyBullet world's
        next episode depends slightly on what it simulated before (its solver keeps state across
        resets), so the assignment is by slot, never by worker, and the results do not depend on
        the worker count."""
        indices = [int(i) for i in indices]
        per_slot = [indices[j::self.num_envs] for j in range(self.num_envs)]
        shares = [per_slot[first:first + count] for first, count in self.layout]
        results = self._call("run_episodes", shares, common=(policy,))
        by_index = {e["index"]: e for part in results for e in part}
        return [by_index[i] for i in indices]

    def close(self) -> None:
        if self._actors:
            import ray

            ray.get([a.close.remote() for a in self._actors])
            for a in self._actors:
                ray.kill(a)
            self._actors = []
        for w in self._local:
            w.close()
        self._local = []
