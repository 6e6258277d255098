"""Start the Foxglove WebSocket server of a view, with a clear error for a port in use.

Slow clients: the SDK keeps a bounded queue per client (`backlog` messages); when it is full the
oldest data message is dropped, and a client whose control queue fills is disconnected. Logging
never blocks the caller and never queues without bound (docs/viz.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import foxglove
from foxglove import Context
from foxglove.websocket import Capability, ServerListener, WebSocketServer

DEFAULT_PORT = 8765
DEFAULT_HOST = "127.0.0.1"
DEFAULT_BACKLOG = 256


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


def start_viz_server(context: Context, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                     name: str = "sim2real_ros", backlog: int = DEFAULT_BACKLOG,
                     listener: ServerListener | None = None, playback_time_range: tuple[int, int] | None = None,
                     capabilities: list[Capability] | None = None) -> WebSocketServer:
    """A Foxglove WebSocket server for `context` on host:port (port 0: any free port; read
    `server.port`). backlog: messages queued per client before the oldest is dropped."""
    if not 0 <= int(port) <= 65535:
        raise ServerStartError(f"Foxglove server port {port} is not in [0, 65535]")
    if int(backlog) < 1:
        raise ServerStartError(f"Foxglove server backlog {backlog} must be >= 1 message")
    try:
        return foxglove.start_server(name=name, host=host, port=int(port), context=context,
                                     server_listener=listener, message_backlog_size=int(backlog),
                                     playback_time_range=playback_time_range, capabilities=capabilities)
    except RuntimeError as err:
        text = str(err)
        hint = " (in use: stop the other viewer or pick another port)" if "in use" in text.lower() else ""
        raise ServerStartError(f"cannot start the Foxglove server on {host}:{port}{hint}: {text}") from err
