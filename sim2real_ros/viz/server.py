"""Start the Foxglove WebSocket server of a view, with a clear error for a port in use.

Slow clients: the SDK keeps a bounded queue per client (`backlog` messages); when it is full the
oldest data message is dropped, and a client whose control queue fills is disconnected. Logging
never blocks the caller and never queues without bound (docs/viz.md).

Who may connect: the SDK server listens on a private loopback port behind viz/origin_gate.py,
which owns host:port and refuses a browser whose `Origin` is not allowed (Foxglove's app origins
plus `allowed_origins`); clients that send no Origin (not browsers) are let in. The private port
speaks TLS with a certificate made for this run that only the gate trusts.
"""
from __future__ import annotations

import errno
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import foxglove
from foxglove import Context
from foxglove.websocket import Capability, ServerListener, WebSocketServer

from .defaults import DEFAULT_BACKLOG, DEFAULT_HOST, DEFAULT_PORT  # noqa: F401 - re-exported
from .origin_gate import OriginError, OriginGate, make_upstream_tls, origin_allowlist


class ServerStartError(RuntimeError):
    """The server could not start; the message names host and port and why."""


@dataclass
class LatchOnSubscribe:
    """A ServerListener that raises a flag when a client subscribes: the owner then re-sends what
    a ROS late joiner would get from a latched topic (robot model, target, supervisor state).
    Called on the SDK's thread: it only sets the flag."""

    pending: bool = True
    subscriptions: int = 0

    def on_subscribe(self, client, channel) -> None:
        self.subscriptions += 1
        self.pending = True

    def take(self) -> bool:
        pending, self.pending = self.pending, False
        return pending


class VizServer:
    """A started view server: the SDK's WebSocketServer behind its OriginGate. `port` is the
    port viewers connect to; the SDK server's other methods (broadcast_time, ...) pass through."""

    def __init__(self, sdk_server: WebSocketServer, gate: OriginGate, private_port_tls: bool) -> None:
        self.sdk_server = sdk_server
        self.gate = gate
        self.private_port_tls = private_port_tls  # False: no `openssl` command; the private port is plain

    def warnings(self) -> list[str]:
        """What the owner should log at start."""
        if self.private_port_tls:
            return []
        return [f"the `openssl` command is missing: the Foxglove server's private port 127.0.0.1:"
                f"{self.sdk_server.port} runs without TLS, so a web page that finds it skips the Origin "
                f"check (docs/viz.md)"]

    @property
    def port(self) -> int:
        return self.gate.port

    @property
    def allowlist(self) -> frozenset[str]:
        return self.gate.allowlist

    def stop(self) -> None:
        """No new viewers; the SDK server closes its connections (after what it queued), the
        gate passes that on, then closes."""
        self.gate.close_listener()
        self.sdk_server.stop()
        self.gate.stop()

    def __getattr__(self, name: str) -> Any:
        if name == "sdk_server":  # not set yet (half-built object): no recursion
            raise AttributeError(name)
        return getattr(self.sdk_server, name)


def start_viz_server(context: Context, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                     name: str = "sim2real_ros", backlog: int = DEFAULT_BACKLOG,
                     listener: ServerListener | None = None, playback_time_range: tuple[int, int] | None = None,
                     capabilities: list[Capability] | None = None, allowed_origins: Iterable[str] = (),
                     on_refused: Callable[[str, str], None] | None = None) -> VizServer:
    """A Foxglove WebSocket server for `context` on host:port (port 0: any free port; read
    `server.port`). backlog: messages queued per client before the oldest is dropped.
    allowed_origins: browser origins let in besides Foxglove's own (scheme://host[:port]);
    on_refused(origin, reason): called for each refused browser connection."""
    if not 0 <= int(port) <= 65535:
        raise ServerStartError(f"Foxglove server port {port} is not in [0, 65535]")
    if int(backlog) < 1:
        raise ServerStartError(f"Foxglove server backlog {backlog} must be >= 1 message")
    try:
        allowlist = origin_allowlist(allowed_origins)
    except OriginError as err:
        raise ServerStartError(f"Foxglove server allowed origins: {err}") from err
    tls = make_upstream_tls()
    try:
        sdk_server = foxglove.start_server(name=name, host="127.0.0.1", port=0, context=context,
                                           server_listener=listener, message_backlog_size=int(backlog),
                                           playback_time_range=playback_time_range, capabilities=capabilities,
                                           tls_cert=tls.cert_pem if tls else None, tls_key=tls.key_pem if tls else None)
    except RuntimeError as err:
        raise ServerStartError(f"cannot start the Foxglove server on 127.0.0.1 (any free port): {err}") from err
    try:
        gate = OriginGate(host, int(port), sdk_server.port, allowlist, on_refused, upstream_tls=tls)
    except OSError as err:
        sdk_server.stop()
        hint = " (in use: stop the other viewer or pick another port)" if err.errno == errno.EADDRINUSE else ""
        raise ServerStartError(f"cannot start the Foxglove server on {host}:{port}{hint}: {err}") from err
    return VizServer(sdk_server, gate, private_port_tls=tls is not None)
