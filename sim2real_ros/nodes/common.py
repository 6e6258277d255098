"""What every node shares: QoS profiles (topics.py's descriptions as rclpy profiles), parameter
declaration, a clean main()."""
from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterUninitializedException,
)
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
)

from .. import topics
from ..core.errors import ConfigError, Sim2RealError
from .executor import EXECUTOR_ENV, executor_choice, make_executor, node_executor_choice
from .executor import single_threaded_executor as single_threaded_executor  # re-exported
from .realtime import apply_realtime_knobs


def qos_profile(spec: topics.QosSpec) -> QoSProfile:
    """The rclpy QoSProfile of a topics.QosSpec (KEEP_LAST, its depth, reliability, durability)."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=spec.depth,
        reliability=ReliabilityPolicy.RELIABLE if spec.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if spec.transient_local else DurabilityPolicy.VOLATILE,
    )


# The profiles of topics.py (what each is for is said there), as rclpy profiles.
SENSOR_QOS = qos_profile(topics.SENSOR_QOS)
RELIABLE_LATEST_QOS = qos_profile(topics.RELIABLE_LATEST_QOS)
JOINT_STATE_QOS = qos_profile(topics.JOINT_STATE_QOS)
LATCHED_QOS = qos_profile(topics.LATCHED_QOS)
EVENTS_QOS = qos_profile(topics.EVENTS_QOS)
JOY_QOS = qos_profile(topics.JOY_QOS)
CLOCK_QOS = qos_profile(topics.CLOCK_QOS)
SERVO_DIAGNOSTICS_QOS = qos_profile(topics.SERVO_DIAGNOSTICS_QOS)


def declare(node: Node, name: str, default: Any, description: str, read_only: bool = True,
            value_range: tuple[float, float] | None = None, source: str | None = None) -> Any:
    """Declare a parameter with a description (shown by `ros2 param describe`) and return its value.

    value_range: inclusive (low, high) bounds, declared in the descriptor (an IntegerRange for an int
    parameter, else a FloatingPointRange), so `ros2 param describe` and describe_parameters show them
    and rclpy itself refuses a value outside them. A wrongly typed override (`-p period:=1` for a
    float) or one out of range becomes a ConfigError naming the parameter and the value (source:
    what the error names as the origin; default "<node name> parameter"), instead of an rclpy traceback.
    """
    source = source or f"{node.get_name()} parameter"
    descriptor = ParameterDescriptor(description=description, read_only=read_only)
    if value_range is not None:
        low, high = value_range
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise TypeError(f"parameter {name}: a range needs a numeric default, got {default!r}")
        if isinstance(default, int):
            descriptor.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=1)]
        else:
            descriptor.floating_point_range = [FloatingPointRange(from_value=float(low), to_value=float(high),
                                                                  step=0.0)]
    try:
        node.declare_parameter(name, default, descriptor)
    except InvalidParameterTypeException as err:
        raise ConfigError(source, name, None,
                          f"must be a {type(default).__name__} (e.g. {default!r}): {err.args[0]}") from err
    except InvalidParameterValueException as err:
        # rclpy refused the override against the declared range; it keeps the value to itself.
        override = getattr(node, "_parameter_overrides", {}).get(name)
        value = override.value if override is not None else "(out of range)"
        if value_range is None:
            raise ConfigError(source, name, value, str(err)) from err
        what = "an integer" if isinstance(default, int) else "a finite number"
        raise ConfigError(source, name, value, f"must be {what} in [{value_range[0]}, {value_range[1]}]") from err
    return node.get_parameter(name).value


def declare_array(node: Node, name: str, kind: Parameter.Type, description: str) -> list:
    """An array parameter whose default is empty (an empty list has no type in Humble's rclpy, so
    the type is stated); returns [] when it is not set."""
    node.declare_parameter(name, kind, ParameterDescriptor(description=description, read_only=True))
    try:
        return list(node.get_parameter(name).value or [])
    except ParameterUninitializedException:
        return []


def now_ns(node: Node) -> int:
    """The node's clock (sim time when use_sim_time is set) in integer nanoseconds."""
    return node.get_clock().now().nanoseconds


def freeze_startup_objects() -> None:
    """Exempt everything built so far (modules, torch, the node) from garbage collection.

    Why: a full collection traverses every tracked object. With torch, numpy and rclpy loaded that
    is ~170k objects and takes 30-130 ms on this project's machine, a stall that lands in a random
    callback: it set the camera-to-command latency's tail (p99 and max). Messages live and die in
    the young generations; what is frozen at start-up lives as long as the process anyway.
    """
    gc.collect()
    gc.freeze()


def end_on_hangup() -> bool:
    """Make SIGHUP (the node's terminal closed) end the node like SIGTERM, in order: rclpy's handlers
    cover SIGINT and SIGTERM only, and SIGHUP's default action kills the process on the spot (no
    hold handed over, nothing destroyed). Call from the main thread after rclpy.init.

    How: a Python handler keeps SIGHUP from killing the process, and its C-level part writes the
    signal number to a wakeup pipe at once; a thread waiting on that pipe sends SIGTERM to this
    process, which rclpy's handler turns into the usual shutdown. (A Python handler alone would run
    only when the executor's wait returns, which an idle node may never do.) Returns False where
    the wakeup fd is already taken (then only the Python handler's late SIGTERM remains).
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def forward(*_: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGHUP in data:
                forward()
                return

    if signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False) != -1:
        signal.set_wakeup_fd(-1)  # someone else's: leave it
        os.close(read_fd)
        os.close(write_fd)
        signal.signal(signal.SIGHUP, forward)
        return False
    signal.signal(signal.SIGHUP, lambda *_: None)
    threading.Thread(target=watch, name="sighup-watch", daemon=True).start()
    return True


def _destroy_half_built_node(err: BaseException) -> None:
    """Destroy the rclpy handles of the node whose constructor raised `err`, now, while the context
    lives. Why: the half-built node is reachable only from the traceback's frames (`self`), and it
    was freed when the handler dropped `err`, its publishers, services and node handle destroyed in
    whatever order the object's dict gave: three CI runs saw a node that had printed its refusal end
    in SIGSEGV (rc -11) right there, the faulthandler stack at the `except ... as err` block's end
    (sim_node 2026-12-06; feetech_driver and the camera path earlier). rclpy's own destroy_node
    takes them down in order; the subclass's is not called (its resources may not exist yet)."""
    outermost: Node | None = None
    tb = err.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Node) and outermost is None:
            outermost = candidate
        tb = tb.tb_next
    if outermost is None:
        return
    # Built too little to destroy (raised inside Node.__init__): nothing of rclpy's to take down.
    with contextlib.suppress(Exception):
        Node.destroy_node(outermost)


# Set by run_node: this process is a node's own, so a background loop that dies may end it.
_node_process = threading.Event()
_loop_failures: list[str] = []
# The executor run_node spins (None before it is built), set when spin has returned (the watchdog
# stops waking it there: executor.shutdown destroys the guard it triggers), and when run_node's
# cleanup is over.
_spinning_executor: Executor | None = None
_spin_returned = threading.Event()
_node_done = threading.Event()
# How often the shutdown watchdog looks at the context and, once it is shut down, wakes the executor
# [s]; how long a node whose context is shut down may take to return from spin and clean up [s]
# before the process ends without it (exit code 1, every stack printed).
END_WAKE_PERIOD_S = 0.1
END_DEADLINE_S = 30.0


def end_node_after_loop_failure(why: str) -> bool:
    """A background loop the node cannot work without (a bus loop, physics, capture, inference)
    died: in a node process (run_node) end the node the usual way (SIGTERM: rclpy shuts down, the
    node's cleanup runs, a driver holds its arm) with exit code 1, so that the launcher sees a node
    exit and stops the graph instead of a live process that publishes nothing. Elsewhere (a node
    built inside a test or a tool) nothing is ended. Returns whether the node is being ended.
    (run_node's shutdown watchdog makes sure the SIGTERM does end the spin.)"""
    if not _node_process.is_set():
        return False
    _loop_failures.append(why)
    os.kill(os.getpid(), signal.SIGTERM)
    return True


def _watch_shutdown() -> None:
    """run_node's shutdown watchdog: once the context is shut down, wake the executor every
    END_WAKE_PERIOD_S until its spin returns.

    Why: SIGTERM (external, SIGHUP forwarded by end_on_hangup, or a dying loop's) can leave the node
    spinning forever. rclpy's signal thread triggers the executors' guard conditions first and shuts
    the context down after (Jazzy's signal_handler.cpp), so an executor that wakes in between finds
    the context still valid, waits again with no timeout, and nothing wakes it once the context is
    down (a CI run on Jazzy under load: the main thread in rcl_wait for 60 s, the context shut
    down). A wake after the shutdown ends the spin. Last resort: a node that has not returned from
    spin and cleaned up within END_DEADLINE_S of the shutdown prints every thread's stack and ends
    with exit code 1 at once (os._exit) rather than live on publishing nothing: the launcher must
    see it exit. While the context is up this only reads a flag every END_WAKE_PERIOD_S."""
    deadline: float | None = None
    while not _node_done.wait(END_WAKE_PERIOD_S):
        if rclpy.ok():
            continue
        if deadline is None:
            deadline = time.monotonic() + END_DEADLINE_S
        elif time.monotonic() > deadline:
            why = "; ".join(_loop_failures) or "its shutdown"
            print(f"[ERROR] the node did not end within {END_DEADLINE_S:g} s of {why}: exiting without its "
                  "cleanup", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(all_threads=True)
            os._exit(1)
        executor = _spinning_executor
        if executor is not None and not _spin_returned.is_set():
            # Racing run_node's executor.shutdown (the guard destroyed under us) is harmless.
            with contextlib.suppress(Exception):
                executor.wake()


# A node's method that run_node calls once, after the start-up collection and the real-time knobs,
# just before spinning: where a thread that must keep time (a servo bus loop) starts. Started in the
# constructor, it ran beside mlockall (which holds the process's memory map while it faults in every
# page, 0.1-0.5 s here) and gc.collect (which holds the GIL for 30-130 ms), and a driver's first reads
# timed out at start-up although the servos had answered.
START_TIMED_WORK = "start_timed_work"


# How long an exception out of spin waits for rclpy's signal thread to shut the context down [s].
SIGNAL_SHUTDOWN_GRACE_S = 0.5


def _shutting_down() -> bool:
    """Whether the context is shut down, or is within SIGNAL_SHUTDOWN_GRACE_S.

    Why wait: on SIGINT rclpy's C handler wakes its signal thread, which shuts the context down,
    and the interpreter raises KeyboardInterrupt in the main thread at once. Raised inside a message's
    conversion to Python (rclpy's take), the KeyboardInterrupt comes out as pybind11's RuntimeError
    ("Unable to convert call argument '0' to Python object") while rclpy.ok() can still be true: a
    sim_camera stopped by the launcher exited 1 with that traceback (1 of 9 stops, under load)."""
    deadline = time.monotonic() + SIGNAL_SHUTDOWN_GRACE_S
    while rclpy.ok():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def run_node(factory: Callable[[], Node], args: list[str] | None = None, num_threads: int = 2) -> int:
    """Start rclpy, build the node, spin it, and always clean up (Humble has no `with rclpy.init()`).

    A Sim2RealError raised while building the node (bad parameters, bad config file) is printed
    as one clear line and gives exit code 2. Ctrl-C, SIGTERM and SIGHUP (end_on_hangup) end the node
    with exit code 0.
    num_threads=1 spins one thread on the executor that executor.py chooses (SIM2REAL_EXECUTOR).
    """
    global _spinning_executor
    # A crash in C (SIGSEGV, SIGABRT) prints every thread's Python stack to stderr, which the
    # launcher puts in the graph's log: a node that once exited -11 left nothing to go on.
    faulthandler.enable()
    _node_process.set()
    rclpy.init(args=args)
    end_on_hangup()
    node = None
    executor: Executor | None = None
    code = 0
    try:
        node = factory()
        # The start-up collection before the knobs: at SCHED_FIFO its 30-130 ms of CPU took a core
        # from every process below (a supervisor's and an actuator's at once took both cores, and the
        # servo driver's reads timed out at start-up).
        freeze_startup_objects()
        apply_realtime_knobs(node)  # every node's scheduling, affinity, memory lock (nodes/realtime.py)
        executor = make_executor(node, num_threads)
        executor.add_node(node)
        _spinning_executor = executor  # the shutdown watchdog wakes it
        threading.Thread(target=_watch_shutdown, name="node-end", daemon=True).start()
        node.get_logger().info(f"spinning on {type(executor).__name__} (executor {node_executor_choice(node)}; "
                               f"{EXECUTOR_ENV}={executor_choice()})")
        start_timed_work = getattr(node, START_TIMED_WORK, None)
        if callable(start_timed_work):
            start_timed_work()
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Sim2RealError as err:
        print(f"[ERROR] {err}", file=sys.stderr, flush=True)
        if node is None:
            _destroy_half_built_node(err)
        code = 2
    except Exception:
        # Ctrl-C shuts the context down under the executor, and building its next wait set can
        # lose that race (RCLError: context is not valid). Only an error while still running counts.
        if not _shutting_down():
            raise
    finally:
        _spin_returned.set()
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    if _loop_failures:
        print(f"[ERROR] the node ended because {'; '.join(_loop_failures)}", file=sys.stderr, flush=True)
        code = 1
    _node_done.set()
    return code
