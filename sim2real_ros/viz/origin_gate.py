"""The Foxglove server's front door: a WebSocket upgrade from a web page whose `Origin` is not
allowed is refused with 403 before it reaches the server (docs/viz.md, "Who may connect").

Why: browsers let any web page open a WebSocket to 127.0.0.1 (the same-origin policy does not
apply to WebSockets), so without this check any site open in the robot computer's browser could
watch the camera and the arm. Browsers always send `Origin` and a page cannot forge it; clients
that are not browsers (scripts, the tests' client) send none and are let in: they run as a
user of this machine already.

foxglove-sdk (0.30.3, the pinned version) has no hook for this: `start_server` takes no origin
list, the `ServerListener` has no connect callback and its `Client` carries only an id, and the
SDK's handshake (rust/foxglove/src/websocket/handshake.rs) checks only the subprotocol. So the
SDK server listens on a private loopback port and this gate owns the user's host:port: it reads
the HTTP upgrade request (bounded: 16 KiB, 5 s), decides from its `Origin` header, then relays
the bytes both ways unchanged, with backpressure (a slow viewer still fills the SDK's per-client
queue and the SDK's drop-oldest policy still applies). The private port speaks TLS with a
certificate made for this run that only the gate trusts (upstream_tls), so a page that finds
that port cannot use it either: a browser refuses the unknown certificate, and plain ws:// gets no
WebSocket. One asyncio loop on one thread serves every connection (a TLS socket must not be read
and written from two threads at once; asyncio does both directions on one).
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

# Foxglove's own web app (app.foxglove.dev; studio.foxglove.dev is its earlier address, still redirected).
FOXGLOVE_ORIGINS = ("https://app.foxglove.dev", "https://studio.foxglove.dev")
MAX_REQUEST_HEAD_BYTES = 16 * 1024  # an upgrade request is < 1 KiB; more is not a viewer
REQUEST_HEAD_TIMEOUT_S = 5.0  # a client that opens a socket and says nothing is dropped after this [s]
MAX_CONNECTIONS = 32  # open viewer connections at once; more are refused (503)
# The private port's certificate is made at each start with a fresh key that never leaves the process;
# valid long enough that a viz_node running for months keeps accepting viewers [days].
CERTIFICATE_DAYS = 3650
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


@dataclass(frozen=True)
class UpstreamTls:
    """The private port's TLS: a self-signed certificate and key (PEM) for 127.0.0.1 made for this
    run (the SDK serves with them) and the client context that trusts only that certificate."""

    cert_pem: bytes
    key_pem: bytes

    def client_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cadata=self.cert_pem.decode())
        return context


def make_upstream_tls() -> UpstreamTls | None:
    """A fresh P-256 key and self-signed certificate for IP 127.0.0.1, made with the `openssl`
    command (every Linux and macOS has it; Python's ssl cannot make certificates). None when it is
    missing or fails: the caller then runs the private port without TLS and says so."""
    with tempfile.TemporaryDirectory(prefix="sim2real_viz_tls_") as folder:
        key, cert = Path(folder) / "key.pem", Path(folder) / "cert.pem"
        try:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-days", str(CERTIFICATE_DAYS), "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                           check=True, capture_output=True, timeout=20)
            return UpstreamTls(cert.read_bytes(), key.read_bytes())
        except (OSError, subprocess.SubprocessError):
            return None


class OriginGate:
    """Listens on host:port and relays allowed WebSocket upgrades to 127.0.0.1:upstream_port (over
    TLS when upstream_tls is given).

    on_refused(origin, reason) is called (on the gate's thread) for each refused connection."""

    def __init__(self, host: str, port: int, upstream_port: int, allowlist: frozenset[str],
                 on_refused: Callable[[str, str], None] | None = None,
                 upstream_tls: UpstreamTls | None = None) -> None:
        self.allowlist = allowlist
        self.counts = GateCounts()
        self._upstream_port = int(upstream_port)
        self._ssl = upstream_tls.client_context() if upstream_tls is not None else None
        self._on_refused = on_refused
        self._active = 0
        self._writers: set[asyncio.StreamWriter] = set()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, int(port)))
        except OSError:
            listener.close()
            raise
        self.port: int = listener.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=listener, limit=MAX_REQUEST_HEAD_BYTES, backlog=16))
        self._thread = threading.Thread(target=self._loop.run_forever, name="foxglove-origin-gate", daemon=True)
        self._thread.start()

    def close_listener(self) -> None:
        """Accept no new connections (relayed ones go on)."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._server.close)

    def stop(self, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Close the listener; give relays up to drain_timeout_s [s] to pass on what the server
        sent before it closed (stop the server first), then close what is left."""
        if not self._loop.is_running():
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(drain_timeout_s), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout=drain_timeout_s + 2.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shutdown(self, drain_timeout_s: float) -> None:
        self._server.close()
        deadline = self._loop.time() + drain_timeout_s
        while self._active and self._loop.time() < deadline:
            await asyncio.sleep(0.01)
        for writer in list(self._writers):
            writer.close()
        await asyncio.sleep(0)

    # ------------------------------------------------------------------------------------------
    async def _refuse(self, writer: asyncio.StreamWriter, status: str, origin: str, reason: str) -> None:
        self.counts.refused[reason] = self.counts.refused.get(reason, 0) + 1
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            writer.write(_response(status, f"Foxglove server: {reason}: {origin!r} (docs/viz.md)"))
            await asyncio.wait_for(writer.drain(), 1.0)
        writer.close()
        if self._on_refused is not None:
            self._on_refused(origin, reason)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._active >= MAX_CONNECTIONS:
            await self._refuse(writer, "503 Service Unavailable", "", "too many viewers connected")
            return
        self._active += 1
        self._writers.add(writer)
        try:
            await self._relay_if_allowed(reader, writer)
        finally:
            self._active -= 1
            self._writers.discard(writer)
            writer.close()

    async def _relay_if_allowed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_HEAD_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            await self._refuse(writer, "400 Bad Request", "", "no complete HTTP request head")
            return
        _, headers = parse_request_head(head)
        decision = decide_origin(headers.get("origin", []), self.allowlist)
        if not decision.allowed:
            await self._refuse(writer, "403 Forbidden", decision.origin, decision.reason)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(
                "127.0.0.1", self._upstream_port, ssl=self._ssl, server_hostname="127.0.0.1" if self._ssl else None,
                limit=RELAY_CHUNK_BYTES), REQUEST_HEAD_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            await self._refuse(writer, "503 Service Unavailable", decision.origin, "server not reachable")
            return
        self.counts.relayed += 1
        self._writers.add(up_writer)
        try:
            up_writer.write(head)  # what the client sent after the head is still in `reader`
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy source -> sink until either side closes, waiting for the sink to drain after each chunk
    (backpressure: nothing piles up here); then close the sink so the other direction ends too."""
    try:
        while chunk := await source.read(RELAY_CHUNK_BYTES):
            sink.write(chunk)
            await sink.drain()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        sink.close()
