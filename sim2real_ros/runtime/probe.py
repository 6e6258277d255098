"""A node of our own, in its own rclpy context, spun by a background thread.

Used by the demo and graph evaluation to watch and poke a running graph over real DDS, and by the
tests for the same purpose. Every wait is a deadline loop on a condition, never a blind sleep.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.02) -> bool:
    """Poll `predicate` until it is true or `timeout_s` [s] passes; return its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


class RosProbe:
    """A spinning node in a private context: subscribe, publish, call services from plain code."""

    def __init__(self, name: str = "probe", parameter_overrides: list | None = None) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node(name, context=self.context, parameter_overrides=parameter_overrides or [])
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # The context is shut down under the executor at close(); that ends spin() with an error.
        with contextlib.suppress(Exception):
            self.executor.spin()

    def collect(self, msg_type: Any, topic: str, qos: QoSProfile | int = 10,
                stamped: bool = False) -> list:
        """Subscribe; return the list received messages are appended to (as (monotonic time [s],
        msg) pairs when `stamped`)."""
        received: list = []
        if stamped:
            self.node.create_subscription(msg_type, topic, lambda m: received.append((time.monotonic(), m)), qos)
        else:
            self.node.create_subscription(msg_type, topic, received.append, qos)
        return received

    def publisher(self, msg_type: Any, topic: str, qos: QoSProfile | int = 10):
        return self.node.create_publisher(msg_type, topic, qos)

    def wait_for_subscribers(self, publisher, count: int = 1, timeout_s: float = 10.0) -> None:
        if not wait_until(lambda: publisher.get_subscription_count() >= count, timeout_s):
            raise TimeoutError(f"no subscriber on {publisher.topic_name} after {timeout_s} s")

    def wait_for_messages(self, received: list, count: int = 1, timeout_s: float = 10.0) -> list:
        if not wait_until(lambda: len(received) >= count, timeout_s):
            raise TimeoutError(f"got {len(received)} of {count} messages within {timeout_s} s")
        return received

    def call(self, srv_type: Any, name: str, request: Any | None = None, timeout_s: float = 10.0,
             resend_period_s: float | None = None):
        """Call a service and return its response; TimeoutError if it is absent or silent.

        resend_period_s [s]: for a read-only service (parameter queries), send the request again
        when no answer came within this long. wait_for_service only sees the server's request
        reader; a server whose response writer has not yet matched our response reader drops the
        answer ("failed to send response (timeout)" from the rmw), and a query can safely be asked
        again. None: one request (services that act, like arm or reset, are never resent)."""
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout_s):
                raise TimeoutError(f"service {name} not available after {timeout_s} s")
            deadline = time.monotonic() + timeout_s
            while True:
                future = client.call_async(request or srv_type.Request())
                remaining = deadline - time.monotonic()
                wait_s = remaining if resend_period_s is None else min(remaining, resend_period_s)
                if wait_until(future.done, max(wait_s, 0.0)):
                    return future.result()
                client.remove_pending_request(future)
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"service {name} did not answer within {timeout_s} s")
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self._thread.join(timeout=2.0)
