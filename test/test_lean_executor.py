"""LeanExecutor (sim2real_ros/nodes/lean_executor.py) over real DDS: every kind of entity the
stack's nodes use is dispatched, timer callbacks get what rclpy's executor gives them (a TimerInfo
on Kilted), entities come and go while it spins, errors surface as with rclpy's executors, and
nodes it cannot serve get rclpy's own executor. The choice of executor (nodes/executor.py,
SIM2REAL_EXECUTOR) is tested at the end. The suite runs on Kilted and Jazzy (make test-jazzy)."""
from __future__ import annotations

import threading
import time

import pytest
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from support import wait_until

try:
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import SubscriptionEventCallbacks

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.nodes import lean_executor
from sim2real_ros.nodes.common import single_threaded_executor
from sim2real_ros.nodes.executor import DEFAULT_CHOICE, EXECUTOR_ENV, executor_choice, make_executor
from sim2real_ros.nodes.lean_executor import LeanExecutor, supports

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


class Spinning:
    """A node in a context of its own, spun by a LeanExecutor in a thread; `error` holds what
    ended spin() with an exception."""

    def __init__(self, name: str) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node(name, context=self.context)
        self.executor = LeanExecutor(context=self.context)
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            self.error = err

    @property
    def spinning(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


@pytest.fixture
def spinning():
    made: list[Spinning] = []

    def make(name: str = "lean_node") -> Spinning:
        made.append(Spinning(name))
        return made[-1]

    yield make
    for item in made:
        item.close()


def test_dispatches_subscriptions_timers_services_and_guard_conditions(ros, spinning):
    lean = spinning()
    node = lean.node
    plain: list[str] = []
    with_info: list[tuple[str, int]] = []
    ticks: list[float] = []
    guard_calls: list[int] = []
    node.create_subscription(String, "lean/plain", lambda m: plain.append(m.data), RELIABLE)
    node.create_subscription(String, "lean/info", lambda m, info: with_info.append((m.data, info["source_timestamp"])),
                             RELIABLE)
    node.create_timer(0.02, lambda: ticks.append(time.monotonic()))
    guard = node.create_guard_condition(lambda: guard_calls.append(1))

    def on_trigger(_request, response):
        response.success, response.message = True, f"{len(plain)} heard"
        return response

    node.create_service(Trigger, "lean/trigger", on_trigger)
    lean.start()

    plain_pub = ros.publisher(String, "lean/plain", RELIABLE)
    info_pub = ros.publisher(String, "lean/info", RELIABLE)
    ros.wait_for_subscribers(plain_pub)
    ros.wait_for_subscribers(info_pub)
    for i in range(5):
        plain_pub.publish(String(data=f"m{i}"))
        info_pub.publish(String(data=f"i{i}"))
    assert wait_until(lambda: len(plain) == 5 and len(with_info) == 5, 10.0), (plain, with_info)
    assert plain == [f"m{i}" for i in range(5)]
    assert [data for data, _ in with_info] == [f"i{i}" for i in range(5)]
    assert all(stamp > 0 for _, stamp in with_info)  # MessageInfo reached the callback

    assert wait_until(lambda: len(ticks) >= 10, 10.0)  # its period: test_a_timer_keeps_its_period (timing)

    response = ros.call(Trigger, "lean/trigger")
    assert response.success and response.message == "5 heard"

    guard.trigger()
    assert wait_until(lambda: len(guard_calls) == 1, 5.0)
    assert lean.spinning and lean.error is None


@pytest.mark.timing
def test_a_timer_keeps_its_period(spinning):
    """A 20 ms timer under the lean executor ticks every 20 ms (median; wall clock: `make test-timing`)."""
    lean = spinning()
    ticks: list[float] = []
    lean.node.create_timer(0.02, lambda: ticks.append(time.monotonic()))
    lean.start()
    assert wait_until(lambda: len(ticks) >= 20, 10.0)
    periods = [later - earlier for earlier, later in zip(ticks[:-1], ticks[1:], strict=True)]
    assert 0.015 < sorted(periods)[len(periods) // 2] < 0.03, periods


def test_entities_added_and_destroyed_while_spinning(ros, spinning):
    lean = spinning()
    node = lean.node
    first: list[str] = []
    sub = node.create_subscription(String, "lean/first", lambda m: first.append(m.data), RELIABLE)
    lean.start()
    first_pub = ros.publisher(String, "lean/first", RELIABLE)
    ros.wait_for_subscribers(first_pub)
    first_pub.publish(String(data="a"))
    assert wait_until(lambda: first == ["a"], 10.0)

    # Added from another thread while the executor waits: picked up without another message.
    second: list[str] = []
    node.create_subscription(String, "lean/second", lambda m: second.append(m.data), RELIABLE)
    second_pub = ros.publisher(String, "lean/second", RELIABLE)
    ros.wait_for_subscribers(second_pub)
    second_pub.publish(String(data="b"))
    assert wait_until(lambda: second == ["b"], 10.0)

    # Destroyed from another thread while the executor waits on it: no crash, nothing more to it.
    node.destroy_subscription(sub)
    assert wait_until(lambda: first_pub.get_subscription_count() == 0, 10.0)
    first_pub.publish(String(data="late"))
    second_pub.publish(String(data="c"))
    assert wait_until(lambda: second == ["b", "c"], 10.0)
    assert first == ["a"]
    assert lean.spinning and lean.error is None


def test_qos_event_handlers_run(ros, spinning):
    """Waitables: the incompatible-QoS event of a reliable subscription facing a best-effort
    publisher reaches its handler (how a QoS mismatch gets reported)."""
    lean = spinning()
    events: list[int] = []
    callbacks = SubscriptionEventCallbacks(incompatible_qos=lambda event: events.append(event.total_count))
    lean.node.create_subscription(Float64MultiArray, "lean/qos", lambda m: None, RELIABLE,
                                  event_callbacks=callbacks)
    lean.start()
    ros.publisher(Float64MultiArray, "lean/qos", BEST_EFFORT)
    assert wait_until(lambda: len(events) >= 1, 10.0)
    assert events[-1] >= 1
    assert lean.spinning and lean.error is None


def test_a_failing_callback_ends_spin_with_its_error(ros, spinning):
    lean = spinning()

    def fail(_msg):
        raise ValueError("bad message in callback")

    lean.node.create_subscription(String, "lean/fail", fail, RELIABLE)
    lean.start()
    pub = ros.publisher(String, "lean/fail", RELIABLE)
    ros.wait_for_subscribers(pub)
    pub.publish(String(data="x"))
    assert wait_until(lambda: not lean.spinning, 10.0)
    assert isinstance(lean.error, ValueError) and "bad message" in str(lean.error)


def test_shutdown_from_another_thread_ends_spin(spinning):
    lean = spinning()
    lean.node.create_timer(10.0, lambda: None)  # nothing will wake it but the shutdown
    lean.start()
    time.sleep(0.2)
    assert lean.spinning
    lean.executor.shutdown(timeout_sec=2.0)
    assert wait_until(lambda: not lean.spinning, 5.0)
    assert lean.error is None


def test_nodes_it_cannot_serve_get_rclpys_executor(spinning):
    lean = spinning("lean_with_client")
    node = lean.node
    assert supports(node)
    assert isinstance(single_threaded_executor(node, "lean"), LeanExecutor)

    async def coroutine_callback(_msg):
        return None

    node.create_subscription(String, "lean/async", coroutine_callback, RELIABLE)
    assert not supports(node)
    assert type(single_threaded_executor(node, "lean")) is SingleThreadedExecutor

    other = spinning("lean_client_only")
    other.node.create_client(Trigger, "lean/nobody")
    assert not supports(other.node)
    other.executor.add_node(other.node)
    with pytest.raises(RuntimeError, match="clients or coroutine callbacks"):
        other.executor.spin_once(timeout_sec=0.1)


def _timer_arguments(executor_kind, callback_of) -> list:
    """What one timer callback built by callback_of(record) receives in its first three calls
    when spun by executor_kind, in a context of its own."""
    context = Context()
    rclpy.init(context=context)
    node = Node("lean_timer_args", context=context)
    calls: list = []
    node.create_timer(0.01, callback_of(calls))
    executor = executor_kind(context=context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + 10.0
        while len(calls) < 3 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    return calls[:3]


def test_timer_callbacks_get_no_argument_unless_they_ask_for_timer_info():
    def plain(calls):
        return lambda *args, **kwargs: calls.append((args, kwargs))

    for kind in (SingleThreadedExecutor, LeanExecutor):
        assert _timer_arguments(kind, plain) == [((), {})] * 3, kind


@pytest.mark.skipif(not lean_executor.TIMER_INFO,
                    reason="this rclpy (Jazzy's, Humble's) has no TimerInfo: timer callbacks take no argument")
def test_timer_info_reaches_a_callback_that_asks_for_it_as_with_rclpys_executor():
    TimerInfo = lean_executor.TimerInfo  # noqa: N806 - the class

    def asking(calls):
        def on_timer(info) -> None:
            calls.append(info)

        # `info: TimerInfo` as evaluated (rclpy compares the annotation object; this file's
        # `from __future__ import annotations` would leave the string "TimerInfo").
        on_timer.__annotations__["info"] = TimerInfo
        return on_timer

    for kind in (SingleThreadedExecutor, LeanExecutor):
        infos = _timer_arguments(kind, asking)
        assert len(infos) == 3 and all(isinstance(info, TimerInfo) for info in infos), kind
        expected = [info.expected_call_time.nanoseconds for info in infos]
        assert all(later - earlier >= 5_000_000 for earlier, later in zip(expected, expected[1:], strict=False)), kind
        assert all(info.actual_call_time.nanoseconds >= info.expected_call_time.nanoseconds for info in infos), kind


def test_the_executor_choice(monkeypatch, spinning):
    node = spinning("lean_choice").node
    monkeypatch.setenv(EXECUTOR_ENV, "rclpy")
    assert executor_choice() == "rclpy"
    assert type(single_threaded_executor(node)) is SingleThreadedExecutor
    monkeypatch.setenv(EXECUTOR_ENV, "lean")
    assert isinstance(make_executor(node), LeanExecutor)
    # auto, unset and empty all give the measured default, and a node gets that executor
    assert DEFAULT_CHOICE == "lean"  # docs/design.md §7; change both together
    for value in ("auto", " AUTO ", ""):
        monkeypatch.setenv(EXECUTOR_ENV, value)
        assert executor_choice() == DEFAULT_CHOICE, value
    monkeypatch.delenv(EXECUTOR_ENV)
    assert executor_choice() == DEFAULT_CHOICE
    assert isinstance(make_executor(node), LeanExecutor)
    monkeypatch.setenv(EXECUTOR_ENV, "fast")
    with pytest.raises(ConfigError, match=EXECUTOR_ENV):
        single_threaded_executor(node)


def test_an_exception_while_the_signal_thread_shuts_down_is_no_crash():
    """run_node calls an exception out of spin a crash only if the context is still up
    SIGNAL_SHUTDOWN_GRACE_S later: on SIGINT the KeyboardInterrupt (surfacing inside rclpy's take
    as pybind11's RuntimeError) can come before rclpy's signal thread has shut the context down.
    In a process of its own: it uses rclpy's default context."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import threading, time
        import rclpy
        from sim2real_ros.nodes.common import SIGNAL_SHUTDOWN_GRACE_S, _shutting_down
        rclpy.init()
        threading.Timer(0.1, rclpy.shutdown).start()
        start = time.monotonic()
        print(_shutting_down(), round(time.monotonic() - start, 2) < SIGNAL_SHUTDOWN_GRACE_S)
        rclpy.init()
        start = time.monotonic()
        print(_shutting_down(), round(time.monotonic() - start, 2) >= SIGNAL_SHUTDOWN_GRACE_S)
        rclpy.shutdown()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["True True", "False True"], proc.stdout
