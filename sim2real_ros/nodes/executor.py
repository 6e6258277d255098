"""The one place that chooses how this stack's nodes spin: rclpy's executors or LeanExecutor.

Every node process spins through `make_executor` (via `common.run_node`), the recorder and the
supervisor's e-stop thread through `single_threaded_executor`. Which single-threaded executor they
get is chosen here: by a node's `executor` parameter (config/parameters/realtime.yaml, every node
has it; the graph may set it per node), and where that is `auto` (its default) by the environment
variable SIM2REAL_EXECUTOR (the launcher passes its environment to every node, so one setting
covers a whole graph):

- `auto` (or unset): the measured default, DEFAULT_CHOICE (docs/design.md §7 has the figures).
- `lean`: LeanExecutor (lean_executor.py) for a node it supports, else rclpy's.
- `rclpy`: rclpy's SingleThreadedExecutor.
- `events`: rclpy's EventsExecutor (`rclpy.experimental`, on Kilted and Jazzy): stock, its wait
  loop in C++, for a node it can serve (events_supports: no guard conditions, no callbacks that
  take the MessageInfo; else rclpy's SingleThreadedExecutor);
  `benchmarks/bench_executors.py` measures it against the other two.

LeanExecutor is used only where this rclpy offers every internal it relies on
(`lean_executor.AVAILABLE`, checked by feature, not by version) and the node has no clients or
coroutine callbacks; anywhere else the choice falls back to rclpy's own executor.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable

from rclpy.executors import Executor, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.node import Node

from ..core.errors import ConfigError
from . import lean_executor

EXECUTOR_ENV = "SIM2REAL_EXECUTOR"
CHOICES = ("auto", "lean", "rclpy", "events")
# The lean executor by default, on Kilted and Jazzy alike (the suite runs it on both). Measured on
# 2 shared cores, one run each (docs/design.md §7): e-stop reaction p50 1.4 ms vs 3.0 ms with
# rclpy's (p99 13.6 vs 47.6 ms) on Kilted, 1.5 vs 2.8 ms (p99 6.5 vs 29.9 ms) on Jazzy; the robot
# graph's camera-to-command latency is close (p50 15.9 vs 16.0 ms, p99 32 vs 37 ms), the saturated
# sim graph's is not (p50 27 vs 52 ms).
DEFAULT_CHOICE = "lean"


def executor_choice() -> str:
    """`lean`, `rclpy` or `events`: SIM2REAL_EXECUTOR resolved (`auto` and unset give DEFAULT_CHOICE)."""
    value = os.environ.get(EXECUTOR_ENV, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise ConfigError("environment", EXECUTOR_ENV, value, f"must be one of {', '.join(CHOICES)}")
    return DEFAULT_CHOICE if value == "auto" else value


def node_executor_choice(node: Node) -> str:
    """`lean`, `rclpy` or `events` for this node: its `executor` parameter (config/parameters/
    realtime.yaml) when it names one, else executor_choice() (its `auto`, or a node without it)."""
    if node.has_parameter("executor"):
        value = str(node.get_parameter("executor").value).strip().lower()
        if value not in CHOICES:
            raise ConfigError(f"{node.get_name()} parameter", "executor", value, f"must be one of {', '.join(CHOICES)}")
        if value != "auto":
            return value
    return executor_choice()


def events_supports(node: Node) -> bool:
    """Whether rclpy's EventsExecutor can serve `node`. Checked by feature, on Kilted and Jazzy:
    it refuses guard conditions ("Guard conditions not supported": the supervisor's main node has
    one), and a subscription callback of two arguments (message, MessageInfo) fails inside it
    ("SystemError: null argument to internal routine"): the supervisor's e-stop subscription takes
    the MessageInfo for the publisher's GID, and an e-stop callback that fails is an e-stop unheard.
    A node may also say why not in `events_executor_unsupported` (the supervisor's main node)."""
    if list(node.guards) or getattr(node, "events_executor_unsupported", ""):
        return False
    return all(_positional_arity(sub.callback) == 1 for sub in node.subscriptions)


def _positional_arity(callback: Callable[..., object]) -> int:
    """How many positional arguments `callback` takes (2: it wants the MessageInfo too)."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        return 2  # cannot tell: not for the EventsExecutor
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return 2
    return sum(1 for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty)


def single_threaded_executor(node: Node, choice: str | None = None) -> Executor:
    """A single-threaded executor for `node`, in its context: rclpy's EventsExecutor where `choice`
    (default: executor_choice()) is `events`, a LeanExecutor where it is `lean` and the lean one can
    serve the node, else rclpy's SingleThreadedExecutor."""
    choice = choice or executor_choice()
    if choice == "events" and events_supports(node):
        return EventsExecutor(context=node.context)
    if choice == "lean" and lean_executor.supports(node):
        return lean_executor.LeanExecutor(context=node.context)
    return SingleThreadedExecutor(context=node.context)


def make_executor(node: Node, num_threads: int = 1) -> Executor:
    """The executor a node process spins: single-threaded as above for num_threads=1 (the node's
    own choice: node_executor_choice), else rclpy's MultiThreadedExecutor with that many threads."""
    if num_threads == 1:
        return single_threaded_executor(node, node_executor_choice(node))
    return MultiThreadedExecutor(num_threads, context=node.context)
