"""common.run_node with a node that refuses its configuration half-way through its constructor: the
refusal is one line and exit code 2, and the half-built node's rclpy handles are destroyed while the
context lives (rclpy's destroy_node, not the subclass's), not whenever the object is freed: three CI
runs saw such a node end in SIGSEGV (rc -11) right where the handler dropped the exception."""
from __future__ import annotations

import subprocess
import sys

from support import REPO_ROOT

HALF_BUILT = r'''
import weakref

import rclpy
from rclpy.node import Node
from std_msgs.msg import String

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.nodes.common import run_node

destroyed = []
rclpy_destroy = Node.destroy_node


def recording_destroy(self):
    destroyed.append((self.get_name(), rclpy.ok()))
    return rclpy_destroy(self)


Node.destroy_node = recording_destroy
built = []


class HalfBuilt(Node):
    def __init__(self):
        super().__init__("half_built")
        self.chatter = self.create_publisher(String, "chatter", 10)
        built.append(weakref.ref(self))
        raise ConfigError("test parameters", "field", 1, "refused on purpose")

    def destroy_node(self):
        raise AssertionError("the subclass's destroy_node ran on a half-built node")


code = run_node(HalfBuilt, [])
print("RESULT", code, destroyed)
'''


def test_a_refusing_node_is_destroyed_by_rclpy_while_the_context_lives():
    result = subprocess.run([sys.executable, "-c", HALF_BUILT], capture_output=True, text=True, timeout=60,
                            cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert "[ERROR] test parameters: field 'field' = 1: refused on purpose" in result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    assert lines == ["RESULT 2 [('half_built', True)]"], result.stdout + result.stderr


DYING_LOOP = r'''
import threading

from rclpy.node import Node

from sim2real_ros.nodes.background import BackgroundLoop
from sim2real_ros.nodes.common import run_node

cleaned = []


class DyingLoop(Node):
    """A bus loop that reads three times, then meets an error nobody handles."""

    def __init__(self):
        super().__init__("dying_loop")
        self.reads = 0
        self.loop = BackgroundLoop(self, "bus", self._body, reraise=True).start()

    def _body(self, stop: threading.Event) -> None:
        while not stop.wait(0.05):
            self.reads += 1
            if self.reads == 3:
                raise RuntimeError("dictionary changed size during iteration")

    def destroy_node(self):
        cleaned.append(self.reads)
        super().destroy_node()


code = run_node(DyingLoop, [])
print("RESULT", code, cleaned)
'''


def test_a_node_whose_background_loop_dies_ends_with_exit_code_1_after_its_cleanup():
    """A driver whose bus loop died kept its process alive and published nothing: the launcher saw no
    exit, and `eval-sim --emulate` waited minutes for joint_states. Now the node ends through the usual
    SIGTERM path (its destroy_node runs: a driver holds its arm) and run_node returns 1, naming the loop."""
    result = subprocess.run([sys.executable, "-c", DYING_LOOP], capture_output=True, text=True, timeout=60,
                            cwd=REPO_ROOT)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    assert lines == ["RESULT 1 [3]"], result.stdout + result.stderr
    assert ("[ERROR] the node ended because its bus loop stopped: "
            "RuntimeError('dictionary changed size during iteration')") in result.stderr


# rclpy's signal thread triggers the executors' guard conditions, then shuts the context down: an
# executor that wakes in between finds the context valid and waits again, and nothing wakes it after
# (Jazzy, a CI run under load: rcl_wait for 60 s). Here that thread is emulated as preempted there.
PREEMPTED_SIGTERM = r'''
import os
import signal
import threading
import time

import rclpy

from sim2real_ros.nodes import common

real_kill = os.kill


def preempted_sigterm(pid, sig):
    if sig != signal.SIGTERM or pid != os.getpid():
        return real_kill(pid, sig)
    executor = common._spinning_executor

    def deferred():
        executor._sigint_gc.trigger()  # trigger_guard_conditions()
        time.sleep(0.3)                # preempted here
        handle = rclpy.get_default_context().handle
        with handle:
            handle.shutdown()          # rclpy::shutdown_contexts(): no on_shutdown callbacks, no wake

    threading.Thread(target=deferred, daemon=True).start()


os.kill = preempted_sigterm
''' + DYING_LOOP


def test_a_dying_loop_ends_the_node_even_when_the_signal_thread_wakes_the_executor_too_early():
    result = subprocess.run([sys.executable, "-c", PREEMPTED_SIGTERM], capture_output=True, text=True,
                            timeout=60, cwd=REPO_ROOT)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    assert lines == ["RESULT 1 [3]"], result.stdout + result.stderr


# The same race from an external SIGTERM (or a SIGHUP, which end_on_hangup forwards as one): no loop
# died, so nothing of the node's own knows it is ending; an idle node (no timer) waits with no timeout.
EXTERNAL_SIGTERM_PREEMPTED = r'''
import threading
import time

import rclpy
from rclpy.node import Node

from sim2real_ros.nodes import common
from sim2real_ros.nodes.common import run_node

cleaned = []


class Idle(Node):
    def __init__(self):
        super().__init__("idle")

    def destroy_node(self):
        cleaned.append(self.get_name())
        super().destroy_node()


def rclpy_signal_thread_preempted():
    while common._spinning_executor is None:
        time.sleep(0.01)
    time.sleep(0.5)                            # spinning by now
    common._spinning_executor._sigint_gc.trigger()  # trigger_guard_conditions()
    time.sleep(0.3)                            # preempted here
    handle = rclpy.get_default_context().handle
    with handle:
        handle.shutdown()                      # rclpy::shutdown_contexts(): no wake


threading.Thread(target=rclpy_signal_thread_preempted, daemon=True).start()
code = run_node(Idle, [])
print("RESULT", code, cleaned)
'''


def test_an_idle_node_ends_when_an_external_sigterm_shuts_its_context_down_between_wakes():
    """Before the watchdog covered every shutdown, only a dying loop's SIGTERM started a waker: this
    node (an external SIGTERM's race emulated) stayed in rcl_wait until the 60 s timeout."""
    result = subprocess.run([sys.executable, "-c", EXTERNAL_SIGTERM_PREEMPTED], capture_output=True, text=True,
                            timeout=60, cwd=REPO_ROOT)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    assert lines == ["RESULT 0 ['idle']"], result.stdout + result.stderr
