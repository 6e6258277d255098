"""Starting or joining Ray: local by default (one worker per core, no dashboard), or a cluster.

A local run is bound to this machine: every Ray process of the run (GCS, raylet, object manager,
workers) registers 127.0.0.1 and listens on loopback only. Ray does that when it is built without
cluster support (its macOS/Windows mode, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0); `ray.init(
_node_ip_address="127.0.0.1")` does not (Ray turns loopback back into the routable address and
its servers bind every interface). The address is checked after start-up: not loopback, no run.

`--ray-address HOST:PORT` joins a running cluster (`ray start --head` on the head machine,
`ray start --address HEAD:6379` on the others); `auto` finds one started on this machine. That is
the explicit choice to open ports, and it requires Ray's token authentication (RAY_AUTH_MODE=token
with a token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token; docs/learning.md). An
address nobody answers fails at once with the address in the message, rather than hanging.
"""
from __future__ import annotations

import os
import socket
from typing import Any

from ..core.errors import Sim2RealError

CONNECT_TIMEOUT_S = 3.0  # [s] a TCP connection to the Ray head must open within this
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's single-machine mode (loopback only)
AUTH_MODE_ENV = "RAY_AUTH_MODE"


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


def bind_to_loopback(local: bool) -> None:
    """local: make the next Ray start listen on 127.0.0.1 only (this process and the processes it
    starts, which inherit the environment); not local: undo that, for joining a cluster."""
    import sys

    if local:
        os.environ[LOCAL_ONLY_ENV] = "0"
    elif os.environ.get(LOCAL_ONLY_ENV) == "0":
        del os.environ[LOCAL_ONLY_ENV]
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # ray was imported before: the flag was read then, so set it too
        constants.ENABLE_RAY_CLUSTER = not local


def _is_loopback(ip: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return ip == "localhost"


def _require_token_auth(address: str) -> None:
    """Joining a cluster sends code and data over the network: Ray's token authentication is on."""
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is not None and mode.lower() != "token":
        raise RayClusterError(f"--ray-address {address}: {AUTH_MODE_ENV}={mode}; a cluster run needs Ray's "
                              f"token authentication ({AUTH_MODE_ENV}=token, docs/learning.md)")
    enable_token_auth()
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if not os.environ.get("RAY_AUTH_TOKEN") and not os.path.isfile(token_path):
        raise RayClusterError(f"--ray-address {address}: no Ray auth token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                              f"or {token_path}); make one with `ray get-auth-token --generate` and give the "
                              f"same token to every machine of the cluster (docs/learning.md)")


def enable_token_auth() -> None:
    """Ray token authentication on for this process and the Ray processes it starts."""
    import sys

    os.environ[AUTH_MODE_ENV] = "token"
    if "ray" in sys.modules:
        _reread_ray_auth()


def _reread_ray_auth() -> None:
    """Ray reads its auth mode and token once, at import: read them again from the environment now
    (as Ray's own token set-up does), so a run started after a change of RAY_AUTH_* sees it."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def init_ray(workers: int, address: str | None = None) -> dict[str, Any]:
    """Start Ray locally with `workers` CPUs (dashboard off, loopback only), or join the cluster at
    `address` (token authentication required).

    Returns {"address", "nodes", "cpus", "node_ip"}. Raises RayClusterError naming the address when
    it cannot. Already initialized: the running instance is used as it is.
    """
    if address:
        _require_token_auth(address)
    if not _ray_running():
        bind_to_loopback(local=not address)
    import ray

    if not ray.is_initialized():
        _reread_ray_auth()

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
            # address="local": a new instance of our own, never a cluster someone started on this
            # machine with `ray start` (Ray's default joins /tmp/ray/ray_current_cluster if alive).
            ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR", configure_logging=True)
            node_ip = ray.util.get_node_ip_address()
            if not _is_loopback(node_ip):
                ray.shutdown()
                raise RayClusterError(f"local Ray registered {node_ip}, not loopback: refusing to run a local "
                                      f"job reachable from the network ({LOCAL_ONLY_ENV} had no effect)")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {"address": address or "local", "nodes": len(nodes), "node_ip": ray.util.get_node_ip_address(),
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


def _ray_running() -> bool:
    import sys

    return "ray" in sys.modules and sys.modules["ray"].is_initialized()
