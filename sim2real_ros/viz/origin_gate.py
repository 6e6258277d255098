"""The Foxglove server's front door: a WebSocket upgrade from a web page whose `Origin` is not
allowed is refused with 403 before it reaches the server (docs/viz.md, "Who may connect").

Why: browsers let any web page open a WebSocket to 127.0.0.1 (the same-origin policy does not
apply to WebSockets), so without this check any site open in the robot computer's browser could
watch the camera and the arm. Browsers always send `Origin` and a page cannot forge it; clients
that are not browsers (scripts, the tests' client, `foxglove_bridge`-style tools) send none and
are let in: they run as a local user already.

foxglove-sdk (0.30.3, the pinned version) has no hook for this: `start_server` takes no origin
list, the `ServerListener` has no connect callback and its `Client` carries only an id, and the
SDK's handshake (rust/foxglove/src/websocket/handshake.rs) checks only the subprotocol. So the
SDK server listens on a private loopback port and this gate owns the user's host:port: it reads
the HTTP upgrade request (bounded: 16 KiB, 5 s), decides from its `Origin` header, then relays
the bytes both ways unchanged (one chunk in flight per direction, so a slow viewer still fills
the SDK's per-client queue and the SDK's drop-oldest policy still applies).
"""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# Foxglove's own web app (app.foxglove.dev; studio.foxglove.dev is its earlier address, still redirected).
FOXGLOVE_ORIGINS = ("https://app.foxglove.dev", "https://studio.foxglove.dev")
MAX_REQUEST_HEAD_BYTES = 16 * 1024  # an upgrade request is < 1 KiB; more is not a viewer
REQUEST_HEAD_TIMEOUT_S = 5.0  # a client that opens a socket and says nothing is dropped after this [s]
MAX_CONNECTIONS = 32  # open viewer connections at once; more are refused (503)
RELAY_CHUNK_BYTES = 64 * 1024
DRAIN_TIMEOUT_S = 2.0  # at stop, how long relays may finish passing on what the server sent last [s]
_DEFAULT_PORTS = {"http": 80, "https": 443}


class OriginError(ValueError):
    """An origin in the allowlist is not of the form scheme://host[:port]."""


def normalize_origin(text: str) -> str:
    """`text` as a browser serializes an Origin: lower-case scheme and host, the port only when it
    is not the scheme's default, no path. Raises OriginError naming the text when it is not an
    http(s) origin."""
    raw = text.strip()
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as err:
        raise OriginError(f"origin {text!r}: {err}") from err
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        raise OriginError(f"origin {text!r} must be http(s)://host[:port] (e.g. https://app.foxglove.dev)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise OriginError(f"origin {text!r} must be scheme://host[:port] only, with no path or query")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" if port in (None, _DEFAULT_PORTS[scheme]) else f"{scheme}://{host}:{port}"


def origin_allowlist(extra: Iterable[str] = ()) -> frozenset[str]:
    """Foxglove's app origins plus `extra` (each checked; OriginError names a malformed one)."""
    return frozenset(normalize_origin(o) for o in (*FOXGLOVE_ORIGINS, *extra) if o.strip())


@dataclass(frozen=True)
class OriginDecision:
    """allowed; origin: the request's Origin value ('' when it had none); reason: why refused."""

    allowed: bool
    origin: str
    reason: str = ""


def decide_origin(origins: list[str], allowlist: frozenset[str]) -> OriginDecision:
    """The decision for the `Origin` header values of one request (none: not a browser)."""
    if not origins:
        return OriginDecision(True, "")
    if len(origins) > 1:
        return OriginDecision(False, ", ".join(origins), "more than one Origin header")
    value = origins[0].strip()
    try:
        normalized = normalize_origin(value)
    except OriginError:
        return OriginDecision(False, value, "origin not allowed")  # "null" (file://, sandboxed pages), junk
    if normalized in allowlist:
        return OriginDecision(True, value)
    return OriginDecision(False, value, "origin not allowed")


def parse_request_head(head: bytes) -> tuple[str, dict[str, list[str]]]:
    """(request line, {lower-case header name: [values]}) of an HTTP/1.1 request head."""
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers.setdefault(name.strip().lower(), []).append(value.strip())
    return lines[0], headers


def _response(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


@dataclass
class GateCounts:
    """Connections relayed and refused (by reason), for the log and the tests."""

    relayed: int = 0
    refused: dict[str, int] = field(default_factory=dict)


class OriginGate:
    """Listens on host:port and relays allowed WebSocket upgrades to 127.0.0.1:upstream_port.

    on_refused(origin, reason) is called (on the gate's thread) for each refused browser."""

    def __init__(self, host: str, port: int, upstream_port: int, allowlist: frozenset[str],
                 on_refused: Callable[[str, str], None] | None = None) -> None:
        self.allowlist = allowlist
        self.counts = GateCounts()
        self._upstream = ("127.0.0.1", int(upstream_port))
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stopped = threading.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, int(port)))
            self._listener.listen(16)
        except OSError:
            self._listener.close()
            raise
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="foxglove-origin-gate", daemon=True)
        self._thread.start()

    def close_listener(self) -> None:
        """Accept no new connections (relayed ones go on)."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=2.0)

    def stop(self, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Close the listener; give relays up to drain_timeout_s [s] to pass on what the server
        sent before it closed (stop the server first), then close what is left."""
        self.close_listener()
        deadline = time.monotonic() + drain_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._open:
                    break
            time.sleep(0.01)
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            _close(sock)

    # ------------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                busy = len(self._open) >= 2 * MAX_CONNECTIONS  # two sockets per relayed connection
                if not busy:
                    self._open.add(client)
            if busy:
                _send_and_close(client, _response("503 Service Unavailable", "too many viewers connected"))
                continue
            threading.Thread(target=self._serve, args=(client,), name="foxglove-origin-gate-conn",
                             daemon=True).start()

    def _refuse(self, client: socket.socket, status: str, origin: str, reason: str) -> None:
        with self._lock:
            self.counts.refused[reason] = self.counts.refused.get(reason, 0) + 1
            self._open.discard(client)
        _send_and_close(client, _response(status, f"Foxglove server: {reason}: {origin!r} (docs/viz.md)"))
        if self._on_refused is not None:
            self._on_refused(origin, reason)

    def _serve(self, client: socket.socket) -> None:
        head = _read_head(client)
        if head is None:
            self._refuse(client, "400 Bad Request", "", "no complete HTTP request head")
            return
        _, headers = parse_request_head(head[0])
        decision = decide_origin(headers.get("origin", []), self.allowlist)
        if not decision.allowed:
            self._refuse(client, "403 Forbidden", decision.origin, decision.reason)
            return
        try:
            upstream = socket.create_connection(self._upstream, timeout=REQUEST_HEAD_TIMEOUT_S)
        except OSError:
            self._refuse(client, "503 Service Unavailable", decision.origin, "server not reachable")
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self._lock:
            self._open.add(upstream)
            self.counts.relayed += 1
        try:
            upstream.sendall(head[0] + head[1])
        except OSError:
            self._close_pair(client, upstream)
            return
        back = threading.Thread(target=self._relay, args=(upstream, client), name="foxglove-origin-gate-down",
                                daemon=True)
        back.start()
        self._relay(client, upstream)
        back.join()
        self._close_pair(client, upstream)

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy source -> sink until either side closes; then half-close the sink so the other
        direction ends too."""
        try:
            while True:
                chunk = source.recv(RELAY_CHUNK_BYTES)
                if not chunk:
                    break
                sink.sendall(chunk)
        except OSError:
            pass
        for sock in (sink, source):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _close_pair(self, *sockets: socket.socket) -> None:
        with self._lock:
            for sock in sockets:
                self._open.discard(sock)
        for sock in sockets:
            _close(sock)


def _read_head(client: socket.socket) -> tuple[bytes, bytes] | None:
    """(request head up to and including the blank line, bytes read after it), or None when the
    client sent no complete head within the size and time bounds."""
    client.settimeout(REQUEST_HEAD_TIMEOUT_S)
    data = b""
    try:
        while len(data) <= MAX_REQUEST_HEAD_BYTES:
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                return data[:end + 4], data[end + 4:]
            chunk = client.recv(4096)
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    return None


def _send_and_close(sock: socket.socket, payload: bytes) -> None:
    try:
        sock.settimeout(1.0)
        sock.sendall(payload)
    except OSError:
        pass
    _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
