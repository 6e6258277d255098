"""A Foxglove WebSocket client for tests: the Foxglove WebSocket protocol over a real socket
(`websockets`), decoding protobuf messages with the schemas the server advertises."""
from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time

from websockets.sync.client import connect

# foxglove-sdk 0.30 speaks the Foxglove WebSocket protocol under this subprotocol name (older servers and
# the protocol spec: foxglove.websocket.v1; same messages).
SUBPROTOCOL = "foxglove.sdk.v1"
OP_MESSAGE_DATA = 0x01


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def protobuf_class(schema_name: str, schema_b64: str):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(schema_b64))
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(schema_name))


class FoxgloveClient:
    """Connects, records advertised channels and received messages (topic -> [(log time [ns],
    receive monotonic [s], payload)]) in a reader thread."""

    def __init__(self, url: str, timeout_s: float = 20.0, origin: str | None = None) -> None:
        """origin: the Origin header a browser page at that origin would send (None: none, as a
        non-browser client)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.ws = connect(url, subprotocols=[SUBPROTOCOL], max_size=None, open_timeout=5, origin=origin)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert self.ws.subprotocol == SUBPROTOCOL
        self.server_info: dict = {}
        self.channels: dict[int, dict] = {}
        self.messages: dict[str, list] = {}
        self._subs: dict[int, str] = {}
        self._next_sub = 1
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for frame in self.ws:
                if isinstance(frame, str):
                    op = json.loads(frame)
                    if op["op"] == "serverInfo":
                        self.server_info = op
                    elif op["op"] == "advertise":
                        with self._lock:
                            self.channels.update({c["id"]: c for c in op["channels"]})
                    elif op["op"] == "unadvertise":
                        with self._lock:
                            for cid in op["channelIds"]:
                                self.channels.pop(cid, None)
                elif frame[0] == OP_MESSAGE_DATA:
                    sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
                    topic = self._subs.get(sub_id)
                    if topic is not None:
                        self.messages.setdefault(topic, []).append((log_time, time.monotonic(), bytes(frame[13:])))
        except Exception:  # noqa: BLE001 - connection closed
            return

    def topics(self) -> dict[str, dict]:
        with self._lock:
            return {c["topic"]: c for c in self.channels.values()}

    def subscribe(self, topics: list[str]) -> None:
        by_topic = self.topics()
        subs = []
        for topic in topics:
            sub_id = self._next_sub
            self._next_sub += 1
            self._subs[sub_id] = topic
            subs.append({"id": sub_id, "channelId": by_topic[topic]["id"]})
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))

    def decoder(self, topic: str):
        channel = self.topics()[topic]
        if channel["encoding"] == "json":
            return lambda data: json.loads(data)
        assert channel["encoding"] == "protobuf", channel
        return protobuf_class(channel["schemaName"], channel["schema"]).FromString

    def decoded(self, topic: str) -> list:
        decode = self.decoder(topic)
        return [(t, recv, decode(p)) for t, recv, p in list(self.messages.get(topic, []))]

    def close(self) -> None:
        self.ws.close()


class StalledClient:
    """Subscribes to every channel, then never reads: its socket and the server's queue for it fill."""

    def __init__(self, url: str) -> None:
        self.ws = connect(url, subprotocols=[SUBPROTOCOL], max_size=None, max_queue=1, open_timeout=5)
        channels: dict[int, dict] = {}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(channels) < 10:
            frame = self.ws.recv(timeout=5)
            if isinstance(frame, str) and json.loads(frame)["op"] == "advertise":
                channels.update({c["id"]: c for c in json.loads(frame)["channels"]})
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": i + 1, "channelId": cid} for i, cid in enumerate(channels)]}))
        self.channel_count = len(channels)

    def close(self) -> None:
        self.ws.close()
