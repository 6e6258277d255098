"""PolledSubscription over real DDS: messages wait in the reader's history until drained, oldest
first, each exactly once; the node it lives on is never spun and honours the owner's namespace."""
from __future__ import annotations

import rclpy
from rclpy.context import Context
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Int32
from support import wait_until

from sim2real_ros.nodes.polled_subscription import PolledSubscription

RELIABLE_10 = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)


def test_drain_takes_what_arrived_in_order_once_and_keeps_only_the_history(ros):
    context = Context()
    rclpy.init(context=context)
    owner = Node("owner", namespace="robot1", context=context)
    polled = PolledSubscription(owner, Int32, owner.resolve_topic_name("counts"), RELIABLE_10, "counts")
    try:
        assert polled.topic_name == "/robot1/counts"
        publisher = ros.publisher(Int32, "/robot1/counts", RELIABLE_10)
        ros.wait_for_subscribers(publisher)
        assert wait_until(lambda: ("owner_counts", "/robot1") in ros.node.get_node_names_and_namespaces(), 10.0)

        taken: list[int] = []
        for i in range(5):
            publisher.publish(Int32(data=i))
        assert wait_until(lambda: polled.drain(lambda m: taken.append(m.data)) >= 0 and len(taken) == 5, 10.0)
        assert taken == [0, 1, 2, 3, 4]
        assert polled.drain(lambda m: taken.append(m.data)) == 0  # each message once

        # More than the history holds between two drains: the newest 10 are kept. (A second reader
        # in the test's probe tells when the burst has been delivered, before the one drain.)
        heard = ros.collect(Int32, "/robot1/counts", RELIABLE_10)
        ros.wait_for_subscribers(publisher, count=2)
        for i in range(100, 125):
            publisher.publish(Int32(data=i))
        assert wait_until(lambda: heard and heard[-1].data == 124, 10.0)
        later: list[int] = []
        assert wait_until(lambda: polled.drain(lambda m: later.append(m.data)) >= 0 and later[-1:] == [124], 10.0)
        assert later == list(range(115, 125))
    finally:
        polled.close()
        owner.destroy_node()
        rclpy.try_shutdown(context=context)
