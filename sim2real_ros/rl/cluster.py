"""Starting or joining Ray: local by default (one worker per core, no dashboard), or a cluster.

`--ray-address HOST:PORT` joins a running cluster (`ray start --head` on the head machine,
`ray start --address HEAD:6379` on the others); `auto` finds one started on this machine. An address
nobody answers fails at once with the address in the message, rather than hanging in ray.init.
"""
from __future__ import annotations

import os
import socket
from typing import Any

from ..core.errors import Sim2RealError

CONNECT_TIMEOUT_S = 3.0  # [s] a TCP connection to the Ray head must open within this


class RayClusterError(Sim2RealError):
    """Ray could not be started or the named cluster could not be joined."""


def default_workers() -> int:
    """One rollout worker per core of this machine."""
    return max(1, os.cpu_count() or 1)


def _check_reachable(address: str) -> None:
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise RayClusterError(f"--ray-address {address!r}: expected HOST:PORT (e.g. 10.0.0.5:6379) or 'auto'")
    try:
        with socket.create_connection((host, int(port_text)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise RayClusterError(f"--ray-address {address}: no Ray head answers there ({err}); start one with "
                              f"`ray start --head --port {port_text}` on {host}, or leave --ray-address out to "
                              f"run locally") from err


def init_ray(workers: int, address: str | None = None) -> dict[str, Any]:
    """Start Ray locally with `workers` CPUs (dashboard off), or join the cluster at `address`.

    Returns {"address", "nodes", "cpus"}. Raises RayClusterError naming the address when it cannot.
    Already initialized: the running instance is used as it is.
    """
    import ray

    if not ray.is_initialized():
        if address:
            if address != "auto":
                _check_reachable(address)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR", configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise RayClusterError(f"--ray-address {address}: cannot join the Ray cluster: {err}") from err
        else:
            if workers < 1:
                raise RayClusterError(f"--workers {workers}: must be >= 1 to start Ray")
            # Ray starts its workers at nice 15 by default; rollouts are the job here, not background.
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     configure_logging=True)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"address": address or "local", "nodes": len(nodes),
            "cpus": int(sum(n.get("Resources", {}).get("CPU", 0) for n in nodes))}


def ray_for_command(workers: int, address: str | None) -> int:
    """What `--workers N [--ray-address A]` mean for a command: 0 = no Ray (in this process);
    otherwise Ray is started (or joined) and the worker count (at least 1) is returned. Raises
    RayClusterError for a negative count or a cluster that cannot be joined."""
    if workers < 0:
        raise RayClusterError(f"--workers {workers}: must be >= 0")
    if not workers and not address:
        return 0
    workers = max(workers, 1)
    init_ray(workers, address)
    return workers


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
