"""A subscription that is read when its owner needs the data, instead of waking it per message.

Why: the policy node needs the joint state nearest each image stamp, at the observation rate
(10 Hz), but joint_states arrive at 100 Hz. Taking each one in a callback woke the process 100
times a second (on this project's machine a wake costs ~0.7 ms of CPU however little it does), and
those callbacks competed for the GIL with inference. DDS keeps the messages in the reader's
history instead (KEEP_LAST `depth`), and `drain()` takes everything buffered, oldest first.

The subscription lives on a node of its own that no executor spins (so it never joins a wait set),
in the owner's context and namespace. It ignores the process's global arguments (a `__node:=`
remap would give it the owner's name), so the caller passes the topic name the owner resolved:
topic remaps are honoured.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile


class PolledSubscription:
    """owner: the node whose name, namespace and context it borrows. topic: fully resolved name
    (owner.resolve_topic_name(...)). qos: its history depth is how much waits between drains."""

    def __init__(self, owner: Node, msg_type: Any, topic: str, qos: QoSProfile, suffix: str) -> None:
        self._node = Node(f"{owner.get_name()}_{suffix}", namespace=owner.get_namespace(), context=owner.context,
                          use_global_arguments=False, enable_rosout=False, start_parameter_services=False)
        self._subscription = self._node.create_subscription(msg_type, topic, lambda _msg: None, qos)
        self._msg_type = msg_type
        self._lock = threading.Lock()  # drains may come from several threads; each message is taken once

    @property
    def topic_name(self) -> str:
        return self._subscription.topic_name

    def drain(self, handle: Callable[[Any], None]) -> int:
        """Take every buffered message, oldest first, and pass each to `handle`; the number taken."""
        taken = 0
        with self._lock:
            subscription = self._subscription.handle
            with subscription:
                while True:
                    message_and_info = subscription.take_message(self._msg_type, False)
                    if message_and_info is None:
                        return taken
                    handle(message_and_info[0])
                    taken += 1

    def close(self) -> None:
        with self._lock:
            self._node.destroy_node()
