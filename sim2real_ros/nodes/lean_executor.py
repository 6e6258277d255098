"""A single-threaded executor that dispatches with less Python per message than rclpy's own.

Why: on this stack's 2-core target, rclpy's SingleThreadedExecutor rebuilds its wait set in Python
on every wake (entity lists, one context manager per handle, a Task per callback). For a node that
only takes in a 100 Hz JointState that costs about 12% of a core, against 5% for the same message
taken and dispatched directly (measured on the project machine). The graph's nodes wake several
hundred times a second between them, so this overhead, not their own work, loaded the CPU enough
to set the camera-to-command latency tail.

What it does differently: the entities to wait on are collected once and again only when the
nodes' entities change (rclpy wakes the executor through its guard condition on every create and
destroy); each wake adds the same handles to one reused wait set and calls the
callbacks of what is ready directly, in the order rclpy uses (timers, subscriptions, guard
conditions, services, then waitables such as QoS event handlers).

What it supports: plain-function callbacks of subscriptions (with or without MessageInfo), timers
(with a TimerInfo where rclpy passes one: Kilted's rclpy, to a callback with a parameter annotated
TimerInfo; Jazzy's and Humble's call every timer callback with no argument), services, guard
conditions and waitables. Not supported: clients and coroutine callbacks; executor.py gives such
nodes rclpy's SingleThreadedExecutor, and every node on an rclpy without the internals used here
(AVAILABLE, checked by feature at import).
"""
from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any

from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.subscription import Subscription

from ..core.timebase import NS_PER_S

# ---- rclpy internals ---------------------------------------------------------------------------
# Everything this module uses beyond rclpy's public API is in this section. Why not the public
# API: rclpy's own dispatch path (Executor.wait_for_ready_callbacks) is what costs the CPU; taking
# messages and calling timers through the C extension's handles directly, on a wait set built
# once, halves that cost (measured on Kilted, 2 cores: a 100 Hz JointState subscriber 12% -> 5%
# of a core; the graph's figures with each executor are in docs/design.md §7). Each internal is
# checked here by feature, not by version string (AVAILABLE): all are in Jazzy's (7.1) and
# Kilted's (9.1) rclpy, where the suite runs this executor (make test-jazzy, make test); an rclpy
# that lacks one (Humble's is not tested here) gets rclpy's own executor.
#
# - rclpy_implementation: WaitSet (constructor, clear_entities, add_*, wait, get_ready_entities),
#   InvalidHandle, and the handles' call_timer / call_timer_with_info / is_timer_ready /
#   is_timer_canceled / take_message / service_take_request.
# - Executor._guard, Executor._sigint_gc, Executor._is_shutdown, Executor._context (this class is
#   an rclpy SingleThreadedExecutor and keeps rclpy's add_node, wake and shutdown).
# - Node._<kind> lists (entity counts on every wake; the public generators are the fallback).
# - Subscription._callback_type (whether rclpy passes MessageInfo to the callback).
try:
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    _HAS_WAIT_SET = all(hasattr(_rclpy.WaitSet, name) for name in ("clear_entities", "wait", "get_ready_entities"))
    _HAS_HANDLES = all(hasattr(_rclpy.Timer, name) for name in ("call_timer", "is_timer_ready", "is_timer_canceled"))
    InvalidHandle = _rclpy.InvalidHandle  # raised on taking a destroyed entity's handle in use
except (ImportError, AttributeError):  # pragma: no cover - such an rclpy gets the standard executor
    _rclpy = None
    _HAS_WAIT_SET = _HAS_HANDLES = False
    InvalidHandle = RuntimeError

try:  # Kilted's rclpy passes a TimerInfo to a timer callback that asks for one
    from rclpy.timer import TimerInfo
except ImportError:  # Humble's and Jazzy's rclpy: timer callbacks take no argument
    TimerInfo = None
TIMER_INFO = TimerInfo is not None and _rclpy is not None and hasattr(_rclpy.Timer, "call_timer_with_info")

_EXECUTOR_ATTRIBUTES = ("_guard", "_is_shutdown", "_context")
AVAILABLE = _HAS_WAIT_SET and _HAS_HANDLES and hasattr(Subscription, "CallbackType")


def _executor_guards(executor: SingleThreadedExecutor) -> list[Any]:
    """The guard conditions rclpy's executor wakes itself with (entity changes, shutdown, SIGINT)."""
    return [g for g in (executor._guard, getattr(executor, "_sigint_gc", None)) if g is not None]


def _count(node: Node, kind: str) -> int:
    """Number of `kind` entities of `node`: rclpy's own list where it keeps one (cheap, this runs on
    every wake), else by iterating the public property."""
    entities = getattr(node, f"_{kind}", None)
    if isinstance(entities, list):
        return len(entities)
    return sum(1 for _ in getattr(node, kind))


def _wants_message_info(subscription: Any) -> bool:
    kind = getattr(subscription, "_callback_type", None)
    return kind is not None and getattr(kind, "name", "") == "WithMessageInfo"


@functools.lru_cache(maxsize=256)
def _cached_timer_info_argument(callback: Callable) -> str | None:
    return _timer_info_argument_of(callback)


def _timer_info_argument_of(callback: Callable) -> str | None:
    """The parameter rclpy fills with a TimerInfo: the first one annotated TimerInfo (compared as
    rclpy does, so a callback gets the same arguments from either executor)."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return None
    return next((p.name for p in parameters if p.annotation == TimerInfo), None)


def _timer_info_argument(callback: Callable | None) -> str | None:
    if callback is None or not TIMER_INFO:
        return None
    try:
        return _cached_timer_info_argument(callback)
    except TypeError:  # an unhashable callable
        return _timer_info_argument_of(callback)


def _call_timer(timer: Any) -> None:
    """Run `timer`'s callback if it is due, as rclpy's executor does (TimerInfo where this rclpy
    passes one); a timer cancelled after the wait returned is skipped."""
    handle = timer.handle
    if not handle.is_timer_ready():
        return
    callback = timer.callback
    argument = _timer_info_argument(callback)
    try:
        info = handle.call_timer() if argument is None else handle.call_timer_with_info()
    except Exception:  # noqa: BLE001 - rclpy raises TimerCancelledError for a cancelled timer
        if handle.is_timer_canceled():
            return
        raise
    if callback is None:
        return
    if argument is None:
        callback()
    else:
        callback(**{argument: TimerInfo(expected_call_time=info["expected_call_time"],
                                        actual_call_time=info["actual_call_time"],
                                        clock_type=timer.clock.clock_type)})


def _take_message(sub: Any, with_info: bool) -> tuple | None:
    taken = sub.handle.take_message(sub.msg_type, sub.raw)
    if taken is None:
        return None
    return taken if with_info else (taken[0],)


def _take_request(service: Any) -> tuple[Any, Any]:
    return service.handle.service_take_request(service.srv_type.Request)
# ---- end of rclpy internals --------------------------------------------------------------------


class _Plan:
    """The entities of the executor's nodes at one moment, and a wait set sized for them.

    The plan holds each entity's handle in use (as rclpy's executors do for the length of one wait)
    until close(): an entity destroyed meanwhile, from any thread, is freed only once the plan lets
    go of it, never under a wait.
    """

    def __init__(self, executor: LeanExecutor, nodes: list[Node]) -> None:
        self.signature = _signature(nodes)
        self._in_use = ExitStack()
        held = self._hold
        self.subscriptions = held(s for n in nodes for s in n.subscriptions)
        self.timers = held(t for n in nodes for t in n.timers)
        self.services = held(s for n in nodes for s in n.services)
        self.node_guards = held(g for n in nodes for g in n.guards)
        self.waitables = held((w for n in nodes for w in n.waitables), waitable=True)
        self.guards = self.node_guards + held(_executor_guards(executor))
        self.with_info = {id(s): _wants_message_info(s) for s in self.subscriptions}
        events = sum(w.get_num_entities().num_events for w in self.waitables)
        extra = [w.get_num_entities() for w in self.waitables]
        with executor.context.handle:
            self.wait_set = _rclpy.WaitSet(
                len(self.subscriptions) + sum(e.num_subscriptions for e in extra),
                len(self.guards) + sum(e.num_guard_conditions for e in extra),
                len(self.timers) + sum(e.num_timers for e in extra),
                sum(e.num_clients for e in extra),
                len(self.services) + sum(e.num_services for e in extra),
                events,
                executor.context.handle,
            )

    def _hold(self, entities: Iterable[Any], waitable: bool = False) -> list[Any]:
        """The entities whose handle could be taken in use (a destroyed one is left out)."""
        kept = []
        for entity in entities:
            try:
                self._in_use.enter_context(entity if waitable else entity.handle)
            except InvalidHandle:
                continue
            kept.append(entity)
        return kept

    def close(self) -> None:
        self._in_use.close()


_ENTITY_KINDS = ("subscriptions", "timers", "services", "clients", "guards", "waitables")


def _signature(nodes: list[Node]) -> tuple:
    """Changes whenever an entity is added to or removed from any of the nodes."""
    return tuple((id(n), *(_count(n, kind) for kind in _ENTITY_KINDS)) for n in nodes)


def _is_plain(callback: Any) -> bool:
    return callback is None or not inspect.iscoroutinefunction(callback)


def supports(node: Node) -> bool:
    """True if `node` can be spun by LeanExecutor (no clients, no coroutine callbacks)."""
    if not AVAILABLE or _count(node, "clients"):
        return False
    entities = [*node.subscriptions, *node.timers, *node.services, *node.guards]
    return all(_is_plain(getattr(e, "callback", None)) for e in entities)


class LeanExecutor(SingleThreadedExecutor):
    """Single-threaded executor with a cached entity plan and direct dispatch (module docstring).

    Node management, wake-up and shutdown are rclpy's (this is a SingleThreadedExecutor); only the
    wait-and-dispatch step differs. Exceptions raised by callbacks propagate out of spin, as with
    rclpy's executors.
    """

    def __init__(self, *, context=None) -> None:
        if not AVAILABLE:
            raise RuntimeError("this rclpy lacks the internals LeanExecutor uses; use SingleThreadedExecutor")
        super().__init__(context=context)
        missing = [name for name in _EXECUTOR_ATTRIBUTES if not hasattr(self, name)]
        if missing:
            raise RuntimeError(f"this rclpy's executor has no {', '.join(missing)}; use SingleThreadedExecutor")
        self._plan: _Plan | None = None
        self._plan_lock = threading.RLock()  # reentrant: a callback may shut its own executor down
        # rclpy triggers the executor's guard condition whenever a node creates or destroys an entity
        # (and on add_node, wake, shutdown): the plan is rebuilt after such a wake, which catches a
        # destroy-and-create between two wakes that the entity counts alone would miss.
        self._plan_stale = False

    @property
    def context(self):
        return self._context

    def _current_plan(self) -> _Plan:
        nodes = self.get_nodes()
        plan = self._plan
        if plan is None or self._plan_stale or plan.signature != _signature(nodes):
            self._plan_stale = False
            for node in nodes:
                if not supports(node):
                    raise RuntimeError(f"node '{node.get_name()}' has clients or coroutine callbacks: "
                                       "spin it with rclpy's SingleThreadedExecutor")
            if plan is not None:
                plan.close()
            plan = self._plan = _Plan(self, nodes)
        return plan

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        """rclpy's shutdown (it wakes a waiting spin_once), then let go of the nodes' entities once
        no wait uses them: here if the spinning thread is done within the timeout, else that thread
        does it when it sees the shutdown."""
        done = super().shutdown(timeout_sec)
        wait = -1 if timeout_sec is None or timeout_sec < 0 else timeout_sec
        if self._plan_lock.acquire(timeout=wait):
            try:
                self._release_plan()
            finally:
                self._plan_lock.release()
        return done

    def _release_plan(self) -> None:
        if self._plan is not None:
            self._plan.close()
            self._plan = None

    def spin_once(self, timeout_sec: float | None = None) -> None:
        # The plan lock spans the wait: shutdown() must not free a handle the wait set holds.
        with self._plan_lock:
            if self._is_shutdown:
                self._release_plan()
                return
            self._wait_and_dispatch(timeout_sec)

    def _wait_and_dispatch(self, timeout_sec: float | None) -> None:
        plan = self._current_plan()
        wait_set = plan.wait_set
        wait_set.clear_entities()
        for sub in plan.subscriptions:
            wait_set.add_subscription(sub.handle)
        for guard in plan.guards:
            wait_set.add_guard_condition(guard.handle)
        for timer in plan.timers:
            wait_set.add_timer(timer.handle)
        for service in plan.services:
            wait_set.add_service(service.handle)
        for waitable in plan.waitables:
            waitable.add_to_wait_set(wait_set)
        timeout_ns = -1 if timeout_sec is None or timeout_sec < 0 else int(timeout_sec * NS_PER_S)
        wait_set.wait(timeout_ns)
        if self._is_shutdown:
            self._release_plan()
            return
        if not self._context.ok():
            raise ExternalShutdownException()

        ready_waitables = [w for w in plan.waitables if w.is_ready(wait_set)]
        timers_ready = wait_set.get_ready_entities("timer")
        subs_ready = wait_set.get_ready_entities("subscription")
        guards_ready = wait_set.get_ready_entities("guard_condition")
        services_ready = wait_set.get_ready_entities("service")
        if guards_ready and self._guard is not None and self._guard.handle.pointer in guards_ready:
            self._plan_stale = True
        if timers_ready:
            for timer in plan.timers:
                if timer.handle.pointer in timers_ready:
                    self._run_timer(timer)
        if subs_ready:
            for sub in plan.subscriptions:
                if sub.handle.pointer in subs_ready:
                    self._run_subscription(sub, plan.with_info[id(sub)])
        if guards_ready:
            for guard in plan.node_guards:
                if guard.handle.pointer in guards_ready and guard.callback is not None:
                    guard.callback()
        if services_ready:
            for service in plan.services:
                if service.handle.pointer in services_ready:
                    self._run_service(service)
        for waitable in ready_waitables:
            _run_coroutine(waitable.execute(waitable.take_data()))

    @staticmethod
    def _run_timer(timer: Any) -> None:
        _call_timer(timer)

    @staticmethod
    def _run_subscription(sub: Any, with_info: bool) -> None:
        taken = _take_message(sub, with_info)
        if taken is not None:
            sub.callback(*taken)

    @staticmethod
    def _run_service(service: Any) -> None:
        request, header = _take_request(service)
        if header is None:
            return
        response = service.callback(request, service.srv_type.Response())
        service.send_response(response, header)


def _run_coroutine(coroutine: Any) -> None:
    """Run a waitable's execute() coroutine to completion (QoS event handlers never suspend)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise RuntimeError("a waitable's execute() suspended; LeanExecutor runs only handlers that complete at once")
