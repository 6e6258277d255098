"""Rollout workers: Ray actors, each holding k reach worlds; or the same batches in this process.

`RolloutPool(spec, num_envs, workers)` spreads the run's env slots over `workers` Ray actors
(`workers=0`: in this process, the serial reference). Slot j always plays episodes j, j + N, ...
(N = num_envs), so what a run collects does not depend on the worker count. The pool serves PPO
rollouts (`rollout`: the policy acts in the workers, one call per worker per iteration; `step`: one
call per env step), and whole evaluation episodes (`run_episodes`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .batch import BatchedEnv, EnvSpec, Rollout, StepResult
from .cluster import RayClusterError

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
    """What each rollout worker holds: one BatchedEnv (also run in-process for workers=0).

    shipped: the run's files as data (rl.shipping; a Ray worker reads nothing by path on its disk);
    started: per env, how many episodes its slot already started (a replacement worker continues
    the slot's sequence instead of replaying it)."""

    def __init__(self, spec: EnvSpec, first_slot: int, count: int, shipped: Any = None,
                 started: Sequence[int] | None = None) -> None:
        import dataclasses

        import torch

        torch.set_num_threads(1)  # one core per worker: torch's own threads would fight the sim
        self.refused: Exception | None = None
        self.unpacked = None
        self.batch = None
        try:
            if shipped is not None:
                from .shipping import Unpacked

                self.unpacked = Unpacked(shipped)
                spec = dataclasses.replace(spec, sim_params=self.unpacked.path("sim_params"),
                                           robot_description=self.unpacked.path("robot"))
            self.batch = BatchedEnv(spec, first_slot, count, started)
        except Exception as err:  # noqa: BLE001 - reported by info() as a task error, never retried
            self.refused = err

    def info(self) -> dict[str, Any]:
        import os
        import socket

        if self.refused is not None:
            raise self.refused
        return {"host": socket.gethostname(), "pid": os.getpid(), "node_id": _node_id(),
                "envs": len(self.batch.envs), "obs_dim": self.batch.obs_dim,
                "num_actions": self.batch.num_actions}

    def observations(self) -> np.ndarray:
        return self.batch.observations()

    def step(self, actions: np.ndarray) -> StepResult:
        return self.batch.step(actions)

    def rollout(self, policy: Any, std: np.ndarray, steps: int, noise_key: list[int]) -> Rollout:
        import torch

        with torch.inference_mode():
            return self.batch.rollout(policy, std, steps, noise_key)

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

    def expert_episodes(self, shares: Sequence[Sequence[int]], gamma: float, action_noise: float,
                        expert_kind: str = "timed") -> list[Any]:
        """Play whole episodes with the task's scripted expert of expert_kind (rl/bc.expert_episode):
        env i of this worker plays the indices in shares[i], in order. Returns their ExpertPairs."""
        from .bc import expert_episode

        return [expert_episode(env, int(index), gamma, action_noise, expert_kind)
                for env, indices in zip(self.batch.envs, shares, strict=True) for index in indices]

    def close(self) -> None:
        if self.batch is not None:
            self.batch.close()
        if self.unpacked is not None:
            self.unpacked.close()


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


TASK_TIMEOUT_S = 600.0  # [s] a worker silent for longer on one task is treated as dead
MAX_REPLACEMENTS = 4  # replacement workers one pool may start before it gives up


class WorkerLostError(RayClusterError):
    """A Ray worker died or hung and could not be replaced (or was replaced too often)."""


def lost_reason(err: BaseException) -> str | None:
    """Why a Ray call failed when the worker itself is gone (process killed, node lost); None when
    the task raised (a bug or bad input: reported as it is, never retried)."""
    import ray.exceptions as rex

    lost = tuple(getattr(rex, name) for name in ("RayActorError", "ActorDiedError", "ActorUnavailableError",
                                                   "WorkerCrashedError", "NodeDiedError", "ObjectLostError",
                                                   "OwnerDiedError", "GetTimeoutError") if hasattr(rex, name))
    if isinstance(err, lost):
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def default_log(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


class ActorGroup:
    """`count` Ray actors made by make(i), replaced when one dies or hangs; every wait has a timeout.

    make(i) returns a new actor handle for position i (its arguments may depend on the run's
    progress). info[i]: {"host", "pid", ...} of the actor now at i."""

    def __init__(self, make: Callable[[int], Any], count: int, what: str, timeout_s: float = TASK_TIMEOUT_S,
                 log: Callable[[str], None] = default_log) -> None:
        self.make, self.what, self.timeout_s, self.log = make, what, float(timeout_s), log
        self.replacements = 0
        self.actors: list[Any] = [make(i) for i in range(count)]
        try:
            self.info = self._get([a.info.remote() for a in self.actors], "starting")
        except BaseException:
            self.close()
            raise

    def _get(self, refs: list[Any], doing: str) -> list[Any]:
        import ray

        ready, rest = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        if rest:
            raise WorkerLostError(f"{self.what}: {len(rest)} worker(s) gave no answer within {self.timeout_s:g} s "
                                  f"while {doing}")
        return ray.get(refs, timeout=self.timeout_s)  # all ready: in the order asked

    def name(self, i: int) -> str:
        info = self.info[i] if i < len(getattr(self, "info", [])) else {}
        return f"{self.what} worker {i} (host {info.get('host', '?')}, pid {info.get('pid', '?')})"

    def replace(self, i: int, why: str, work: str) -> None:
        """The actor at i is gone or hung while doing `work`: kill it, start another in its place."""
        import ray

        self.log(f"[ray] {self.name(i)} {why} while {work}; replacing it and running that work again")
        with contextlib.suppress(Exception):  # it may already be gone
            ray.kill(self.actors[i], no_restart=True)
        self.replacements += 1
        if self.replacements > MAX_REPLACEMENTS:
            raise WorkerLostError(f"{self.what}: {self.replacements} workers lost in one run (last: {self.name(i)} "
                                  f"{why} while {work}); giving up")
        self.actors[i] = self.make(i)
        self.info[i] = self._get([self.actors[i].info.remote()], f"starting a replacement for {self.name(i)}")[0]
        self.log(f"[ray] {self.name(i)} replaces it")

    def call_all(self, method: str, args: list[tuple], work: Callable[[int], str],
                 recover: Callable[[int], Any]) -> list[Any]:
        """getattr(actor i, method)(*args[i]) on every actor, in parallel; results in actor order.
        A worker that dies or stays silent past the timeout is replaced and recover(i) gives its result."""
        import time

        import ray

        refs = [getattr(a, method).remote(*arg) for a, arg in zip(self.actors, args, strict=True)]
        deadline = time.monotonic() + self.timeout_s
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        ready_set = set(ready)
        results: list[Any] = [None] * len(refs)
        lost: list[tuple[int, str]] = []
        for i, ref in enumerate(refs):
            if ref not in ready_set:
                lost.append((i, f"gave no answer within {self.timeout_s:g} s (hung)"))
                continue
            try:
                results[i] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except Exception as err:
                reason = lost_reason(err)
                if reason is None:
                    raise
                lost.append((i, f"died ({reason})"))
        for i, why in lost:
            self.replace(i, why, work(i))
            results[i] = recover(i)
        return results

    def call_one(self, i: int, method: str, *args: Any) -> Any:

        return self._get([getattr(self.actors[i], method).remote(*args)], f"{method} on {self.name(i)}")[0]

    def close(self, method: str | None = "close") -> None:
        """Ask every actor to clean up (bounded wait, errors only logged: the run's first error is the
        one that counts), then kill them all. Never raises."""
        import ray

        if method and self.actors:
            try:
                refs = [getattr(a, method).remote() for a in self.actors]
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=min(self.timeout_s, 30.0))
                for ref in ready:
                    try:
                        ray.get(ref, timeout=1.0)
                    except Exception as err:  # noqa: BLE001
                        self.log(f"[ray] {self.what}: a worker failed to close ({lost_reason(err) or err!r})")
            except Exception as err:  # noqa: BLE001
                self.log(f"[ray] {self.what}: closing the workers failed ({err!r})")
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor, no_restart=True)
        self.actors = []


class RolloutPool:
    """num_envs reach envs over `workers` Ray actors (0: in this process).

    With Ray, the run's files travel as data (rl.shipping) and a worker that dies or stays silent
    past `timeout_s` [s] is replaced: its slots continue with their next episodes (the episodes it
    was playing end there as time-outs, which PPO bootstraps), and whole-episode calls run again."""

    def __init__(self, spec: EnvSpec, num_envs: int, workers: int, timeout_s: float = TASK_TIMEOUT_S,
                 log: Callable[[str], None] = default_log) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.spec = spec
        self.num_envs = num_envs
        self.workers = workers
        self.layout = split_slots(num_envs, max(1, workers))
        self._started = [0] * num_envs  # per slot: episodes started so far (a built env starts one)
        self._group: ActorGroup | None = None
        if workers == 0:
            self._local = [_Worker(spec, first, count) for first, count in self.layout]
            infos = [w.info() for w in self._local]
        else:
            import ray

            from .shipping import pack

            check_free_cpus(workers)
            actor_class = ray.remote(num_cpus=1, max_restarts=0)(_Worker)
            shipped = ray.put(pack(spec.sim_params, spec.robot_description))
            self._local = []

            def make(i: int) -> Any:
                first, count = self.layout[i]
                actor = actor_class.remote(spec, first, count, shipped, self._started[first:first + count])
                self._count_started(range(first, first + count))  # its envs start their next episode
                return actor

            self._group = ActorGroup(make, len(self.layout), "rollout", timeout_s, log)
            infos = self._group.info
        self.worker_info = infos
        self.obs_dim = infos[0]["obs_dim"]
        self.num_actions = infos[0]["num_actions"]

    def _slots(self, i: int) -> str:
        first, count = self.layout[i]
        return f"slots {first}-{first + count - 1}"

    def _call(self, method: str, *per_worker_args: Sequence[Any], common: tuple = (),
              recover: Callable[[int], Any] | None = None) -> list[Any]:
        """Call `method` on every worker (per-worker arguments zipped), results in worker order."""
        args = list(zip(*per_worker_args, strict=True)) if per_worker_args else [()] * len(self.layout)
        args = [(*a, *common) for a in args]
        if self._group is not None:
            group = self._group
            return group.call_all(method, args, lambda i: f"{method} of {self._slots(i)}",
                                  recover or (lambda i: group.call_one(i, method, *args[i])))
        return [getattr(w, method)(*arg) for w, arg in zip(self._local, args, strict=True)]

    def observations(self) -> np.ndarray:
        return np.concatenate(self._call("observations"))

    def _fresh_start(self, i: int) -> StepResult:
        """What a replacement worker's envs give for the step that was lost: the first observation
        of their next episodes, no reward, the lost episodes ended as time-outs."""
        first, count = self.layout[i]
        obs = self._group.call_one(i, "observations")
        return StepResult(obs, np.zeros(count, dtype=np.float32), np.zeros(count, dtype=bool),
                          np.ones(count, dtype=bool), [], {})

    def _count_started(self, slots: Any) -> None:
        for slot in slots:
            self._started[slot] += 1

    def step(self, actions: np.ndarray) -> StepResult:
        """Step all envs with actions (num_envs, n); one call per worker, run in parallel."""
        actions = np.asarray(actions, dtype=np.float64)
        parts = [actions[first:first + count] for first, count in self.layout]
        results: list[StepResult] = self._call("step", parts, recover=self._fresh_start)
        terms: dict[str, float] = {}
        for r in results:
            for name, value in r.terms.items():
                terms[name] = terms.get(name, 0.0) + value
        episodes = [e for r in results for e in r.episodes]
        self._note_finished(episodes)
        return StepResult(np.concatenate([r.obs for r in results]), np.concatenate([r.rewards for r in results]),
                          np.concatenate([r.terminated for r in results]),
                          np.concatenate([r.truncated for r in results]), episodes, terms)

    def _note_finished(self, episodes: list[dict[str, Any]]) -> None:
        for e in episodes:  # episode m of a slot finished: its env started episode m + 1
            slot, m = (int(e["index"]) - self.spec.episode_base) % self.num_envs, \
                (int(e["index"]) - self.spec.episode_base) // self.num_envs
            self._started[slot] = max(self._started[slot], m + 2)

    def rollout(self, policy: Any, std: np.ndarray, steps: int, noise_key: Sequence[int]) -> Rollout:
        """`steps` steps of every env with the Gaussian policy mean policy(obs) + std * noise, run in
        the workers (one call each, in parallel: no round trip and no wait for the slowest worker per
        step). The noise of slot j is batch.slot_noise(noise_key, j): the rollout does not depend on
        the worker count. A worker lost meanwhile is replaced and its slots' rollout runs again on the
        replacement (their next episodes: the episodes it was playing end unrecorded)."""
        key = [int(k) for k in noise_key]
        parts: list[Rollout] = self._call("rollout", common=(policy, np.asarray(std, dtype=np.float64), int(steps),
                                                            key))
        rollout = Rollout.concatenate(parts)
        self._note_finished(rollout.episodes)
        return rollout

    def run_episodes(self, indices: Sequence[int], policy: Any) -> list[dict[str, Any]]:
        """Whole episodes `indices` with `policy`; results in the order of `indices`.

        Slot j plays indices[j::num_envs], in order, whichever worker holds it: a PyBullet world's
        next episode depends slightly on what it simulated before (its solver keeps state across
        resets), so the assignment is by slot, never by worker, and the results do not depend on
        the worker count. (A replacement worker's worlds are new: the episodes it plays again may
        differ slightly from what the lost worker would have given.)"""
        indices = [int(i) for i in indices]
        per_slot = [indices[j::self.num_envs] for j in range(self.num_envs)]
        shares = [per_slot[first:first + count] for first, count in self.layout]
        results = self._call("run_episodes", shares, common=(policy,))
        by_index = {e["index"]: e for part in results for e in part}
        return [by_index[i] for i in indices]

    def expert_pairs(self, indices: Sequence[int], gamma: float, action_noise: float = 0.0,
                     expert_kind: str = "timed") -> Any:
        """Whole episodes `indices` played by the task's scripted expert of expert_kind ("timed" or
        "reactive", rl/bc.py), assigned to
        slots as run_episodes assigns them; their (observation, expert action, return) pairs, in
        the order of `indices`, as one rl/bc.ExpertPairs."""
        from .bc import ExpertPairs

        indices = [int(i) for i in indices]
        per_slot = [indices[j::self.num_envs] for j in range(self.num_envs)]
        shares = [per_slot[first:first + count] for first, count in self.layout]
        results = self._call("expert_episodes", shares, common=(float(gamma), float(action_noise), str(expert_kind)))
        by_index = {part.episodes[0]["index"]: part for worker in results for part in worker}
        return ExpertPairs.concatenate([by_index[i] for i in indices])

    def close(self) -> None:
        """Release every worker; never raises (an error the run hit first stays the one reported)."""
        if self._group is not None:
            self._group.close()
            self._group = None
        for w in self._local:
            w.close()
        self._local = []
