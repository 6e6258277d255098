"""Who may connect to the Foxglove server (issue 34 part 6): a web page of a foreign Origin is
refused before the SDK sees it; Foxglove's app, origins added by the user and clients that send no
Origin get in and receive data. Real sockets, the real SDK server, a real WebSocket client."""
from __future__ import annotations

import ssl
import subprocess
import sys
import time

import foxglove
import pytest
from foxglove_client import SUBPROTOCOL, FoxgloveClient, free_port
from support import REPO_ROOT
from viz_bags import write_bag
from websockets.exceptions import InvalidMessage, InvalidStatus
from websockets.sync.client import connect

from sim2real_ros.viz.origin_gate import (
    FOXGLOVE_ORIGINS,
    OriginError,
    decide_origin,
    normalize_origin,
    origin_allowlist,
)
from sim2real_ros.viz.server import ServerStartError, start_viz_server


def test_origins_normalized_and_decided():
    assert normalize_origin("HTTPS://App.Foxglove.dev:443/") == "https://app.foxglove.dev"
    assert normalize_origin("http://localhost:8080") == "http://localhost:8080"
    for bad in ("null", "file://", "app.foxglove.dev", "https://app.foxglove.dev/path", "ftp://x", "https://:1"):
        with pytest.raises(OriginError, match="origin"):
            normalize_origin(bad)
    allow = origin_allowlist(["http://localhost:3000"])
    assert set(FOXGLOVE_ORIGINS) < allow
    assert decide_origin([], allow).allowed  # not a browser
    assert decide_origin(["https://app.foxglove.dev"], allow).allowed
    assert decide_origin(["http://localhost:3000"], allow).allowed
    for refused in (["https://evil.example"], ["null"], ["http://localhost:3001"], ["https://app.foxglove.dev.evil.io"],
                    ["http://app.foxglove.dev"], ["https://app.foxglove.dev", "https://evil.example"]):
        assert not decide_origin(refused, allow).allowed, refused


def _wait(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_foreign_origin_refused_foxglove_and_no_origin_served():
    context = foxglove.Context()
    channel = foxglove.Channel("/probe", message_encoding="json", context=context)
    refused: list[tuple[str, str]] = []
    server = start_viz_server(context, port=0, allowed_origins=["http://localhost:3000"],
                              on_refused=lambda origin, reason: refused.append((origin, reason)))
    url = f"ws://127.0.0.1:{server.port}"
    try:
        for origin in ("https://evil.example", "http://localhost:3001", "null"):
            with pytest.raises(InvalidStatus) as info:
                connect(url, subprotocols=[SUBPROTOCOL], origin=origin, open_timeout=5)
            assert info.value.response.status_code == 403 and origin.encode() in info.value.response.body
        with pytest.raises(InvalidStatus) as info:  # two Origin headers: refused, not guessed
            connect(url, subprotocols=[SUBPROTOCOL], open_timeout=5,
                    additional_headers=[("Origin", "https://app.foxglove.dev"), ("Origin", "https://evil.example")])
        assert info.value.response.status_code == 403
        # The SDK's private port: a page that found it gets no WebSocket, plain or over TLS (unknown certificate).
        assert server.private_port_tls
        private = server.sdk_server.port
        with pytest.raises(InvalidMessage):
            connect(f"ws://127.0.0.1:{private}", subprotocols=[SUBPROTOCOL], origin="https://evil.example",
                    open_timeout=5)
        with pytest.raises(ssl.SSLCertVerificationError):
            connect(f"wss://127.0.0.1:{private}", subprotocols=[SUBPROTOCOL], origin="https://evil.example",
                    open_timeout=5)
        assert [o for o, _ in refused[:3]] == ["https://evil.example", "http://localhost:3001", "null"]
        assert server.gate.counts.refused == {"origin not allowed": 3, "more than one Origin header": 1}

        clients = [FoxgloveClient(url, origin=o) for o in (None, "https://app.foxglove.dev", "http://localhost:3000")]
        try:
            assert all(_wait(lambda c=c: "/probe" in c.topics()) for c in clients)
            assert all(c.server_info.get("name") == "sim2real_ros" for c in clients)
            for client in clients:
                client.subscribe(["/probe"])
            time.sleep(0.3)  # the subscriptions reach the server
            for i in range(5):
                channel.log({"i": i})
            assert all(_wait(lambda c=c: len(c.messages.get("/probe", [])) == 5) for c in clients)
            assert server.gate.counts.relayed == 3
        finally:
            for client in clients:
                client.close()
    finally:
        server.stop()
    with pytest.raises(ServerStartError, match="allowed origins: origin 'app.foxglove.dev'"):
        start_viz_server(foxglove.Context(), port=0, allowed_origins=["app.foxglove.dev"])


def test_view_cli_allow_origin_checked(tmp_path):
    bag = tmp_path / "run"
    write_bag(bag)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "view", str(bag), "--port", str(port),
                             "--allow-origin", "http://localhost:3000", "--duration", "30"], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = FoxgloveClient(f"ws://127.0.0.1:{port}", origin="http://localhost:3000")  # waits for the server
        assert _wait(lambda: "/tf" in client.topics(), 20.0), client.topics()
        client.close()
        with pytest.raises(InvalidStatus) as info:
            connect(f"ws://127.0.0.1:{port}", subprotocols=[SUBPROTOCOL], origin="https://evil.example", open_timeout=5)
        assert info.value.response.status_code == 403
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "[view] refused a connection: origin not allowed: 'https://evil.example' (--allow-origin" in err, err
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "view", str(bag), "--port", "0",
                             "--allow-origin", "https://example.com/page"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "must be scheme://host[:port] only" in result.stderr, result.stderr
