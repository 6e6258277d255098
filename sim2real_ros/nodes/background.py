"""A node's background thread, written once: sim physics and camera, camera capture, the servo-bus
loops, policy inference, the actuator's wall-clock ticks all run through BackgroundLoop.

What every one of them needs and each used to write by hand: a daemon thread with a name, a stop
event the body checks (and may wait on, so stop() wakes it), the rule that an error raised while
the node shuts down (stop set, or the rclpy context gone under a publish) is expected and dropped
while any other is logged, and a bounded join.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from rclpy.node import Node

from .common import end_node_after_loop_failure


class BackgroundLoop:
    """Run `body(stop)` on a daemon thread named `name` until it returns.

    body: loops while `not stop.is_set()` (waits with `stop.wait(s)` so stop() ends them at once).
    An exception out of body while the node runs is logged ("<name> stopped: ...") and ends the
    node in a node process (common.end_node_after_loop_failure: exit code 1), and is re-raised when
    `reraise` (the thread's excepthook then reports it too); during shutdown it is dropped.
    Errors of one iteration that should not end the loop go through `step_failed`. stop_event: one
    event shared by several loops of a node (stopping one stops them all); default their own.
    """

    def __init__(self, node: Node, name: str, body: Callable[[threading.Event], None], *,
                 join_timeout_s: float = 5.0, reraise: bool = False, stop_event: threading.Event | None = None) -> None:
        self._node = node
        self._body = body
        self._join_timeout_s = join_timeout_s
        self._reraise = reraise
        self.name = name
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> BackgroundLoop:
        """Start the thread (assign the loop first when its body calls step_failed); returns self."""
        self._thread.start()
        return self

    @property
    def stopping(self) -> bool:
        """stop() was called, or the node's context is shut down (publishing would fail)."""
        return self.stop_event.is_set() or not self._node.context.ok()

    def step_failed(self, err: BaseException, what: str, throttle_s: float = 5.0) -> bool:
        """One iteration raised `err`: True when the node is shutting down (end the loop: the error
        is expected), else log "<what>: err" at most every `throttle_s` [s] and return False."""
        if self.stopping:
            return True
        self._node.get_logger().error(f"{what}: {err!r}", throttle_duration_sec=throttle_s)
        return False

    def _run(self) -> None:
        try:
            self._body(self.stop_event)
        except Exception as err:
            if self.stopping:
                return
            self._node.get_logger().error(f"{self.name} stopped: {err!r}")
            end_node_after_loop_failure(f"its {self.name} loop stopped: {err!r}")
            if self._reraise:
                raise

    def stop(self) -> bool:
        """Set the stop event and join the thread (at most join_timeout_s [s]); True when it ended
        (or never started)."""
        self.stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._join_timeout_s)
        return not self._thread.is_alive()
