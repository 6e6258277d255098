"""Helpers for tests over real DDS: a spinning probe node and graph processes.

No sleeps-and-hope: every wait is a deadline loop on a condition.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile

from sim2real_ros.cli.launcher import GraphLauncher
from sim2real_ros.graph import NodeDecl

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_BAGS = REPO_ROOT.parent / "shared" / "data" / "bags"


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.02) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passes; return its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


class RosProbe:
    """A node of the test's own, in its own context, spun by a background executor thread."""

    def __init__(self, name: str = "test_probe") -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # The context is shut down under the executor at close(); that ends spin() with an error.
        with contextlib.suppress(Exception):
            self.executor.spin()

    def collect(self, msg_type: Any, topic: str, qos: QoSProfile | int = 10) -> list:
        """Subscribe and return the list that received messages are appended to."""
        received: list = []
        self.node.create_subscription(msg_type, topic, received.append, qos)
        return received

    def publisher(self, msg_type: Any, topic: str, qos: QoSProfile | int = 10):
        return self.node.create_publisher(msg_type, topic, qos)

    def wait_for_subscribers(self, publisher, count: int = 1, timeout_s: float = 10.0) -> None:
        assert wait_until(lambda: publisher.get_subscription_count() >= count, timeout_s), (
            f"no subscriber on {publisher.topic_name} after {timeout_s} s"
        )

    def wait_for_messages(self, received: list, count: int = 1, timeout_s: float = 10.0) -> list:
        assert wait_until(lambda: len(received) >= count, timeout_s), (
            f"got {len(received)} of {count} messages within {timeout_s} s"
        )
        return received

    def call(self, srv_type: Any, name: str, request: Any | None = None, timeout_s: float = 10.0):
        client = self.node.create_client(srv_type, name)
        try:
            assert client.wait_for_service(timeout_sec=timeout_s), f"service {name} not available"
            future = client.call_async(request or srv_type.Request())
            assert wait_until(future.done, timeout_s), f"service {name} did not answer"
            return future.result()
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self._thread.join(timeout=2.0)


@contextmanager
def running_nodes(decls: list[NodeDecl], log_dir: Path, namespace: str = ""):
    """Start nodes as processes (the same launcher `sim2real launch` uses); stop them at the end.

    Output goes to log_dir/graph.log and is printed if the test fails.
    """
    log = log_dir / "graph.log"
    launcher = GraphLauncher(decls, namespace=namespace, echo=False, log_file=log)
    launcher.start()
    try:
        yield launcher
    except BaseException:
        print(log.read_text() if log.exists() else "(no node output)")
        raise
    finally:
        launcher.shutdown()


def node_decl(executable: str, parameters: dict[str, Any] | None = None,
              remappings: tuple[tuple[str, str], ...] = (), name: str | None = None) -> NodeDecl:
    """A single node declaration for tests (no params file: node defaults + these overrides)."""
    return NodeDecl(executable, name or executable, dict(parameters or {}), remappings, ())
