"""Nodes die with their launcher (docs/design.md §4): the node side of GraphLauncher's contract.

A launcher that is killed outright (SIGKILL, the OOM killer, a closed terminal) runs no cleanup,
so its nodes must notice by themselves; otherwise the supervisor keeps commanding the robot.
GraphLauncher puts its pid in each node's environment (LAUNCHER_PID_ENV), and `sim2real node`
calls `die_with_launcher()` before it imports the node:

* Linux: prctl(PR_SET_PDEATHSIG, SIGTERM) makes the kernel send SIGTERM the moment the launcher
  dies; SIGTERM lets the node clean up (rclpy shuts down, the recorder closes its bag). The kernel
  fires it when the *thread* that started the node exits, so the launcher asks for it
  (PDEATHSIG_ENV) only for nodes it started from its main thread: a worker thread may end while
  the launcher lives on, and the nodes must not die with it.
* Every platform: a watchdog thread polls getppid() every WATCH_PERIOD_S. Once the launcher is
  gone it sends SIGTERM itself where the kernel did not (no prctl outside Linux, nodes started
  from a worker thread), and SIGKILL after GRACE_S if the node is still there (a cleanup that
  hangs, a handler that ignores SIGTERM).
* The launcher may die before prctl runs, and then no signal ever comes: after prctl the parent
  pid is compared with the launcher's, and a node whose launcher is already gone does not start.
* A Python thread cannot kill a process whose interpreter is finalizing (daemon threads stop
  there), and a node's exit can hang there (a DDS or extension destructor). So the watchdog, once
  it notices, and `sim2real node` as its node's main returns (`bound_exit`) also arm a kernel
  timer (ITIMER_REAL): SIGALRM with its default action ends the process without the interpreter.

Nodes started otherwise (`ros2 run`, `ros2 launch`) have no LAUNCHER_PID_ENV and are left alone.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import MutableMapping

LAUNCHER_PID_ENV = "SIM2REAL_LAUNCHER_PID"
PDEATHSIG_ENV = "SIM2REAL_PDEATHSIG"
WATCH_PERIOD_S = 0.25  # [s] how late an orphan notices without the kernel's signal
GRACE_S = 5.0  # [s] from the launcher's death to SIGKILL; the launcher's own shutdown waits as long per signal
ALARM_SLACK_S = 1.0  # [s] the kernel timer's lag behind the watchdog's own SIGKILL, which it only backs up
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def launcher_environment(launcher_pid: int, from_main_thread: bool) -> dict[str, str]:
    """Environment entries for a node started by `launcher_pid`; `from_main_thread`: the process is
    started from the launcher's main thread (which lives as long as the launcher)."""
    env = {LAUNCHER_PID_ENV: str(launcher_pid)}
    if from_main_thread:
        env[PDEATHSIG_ENV] = "1"
    return env


def arm_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the Linux kernel for `sig` when the parent (thread) dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_launcher(environ: MutableMapping[str, str] | None = None, grace_s: float = GRACE_S,
                      period_s: float = WATCH_PERIOD_S) -> bool:
    """Tie this process's life to the launcher named in `environ` (default os.environ).

    Returns False when the launcher is already gone (the caller must not start the node), True
    otherwise, including when no launcher is named. The entries are removed from `environ` so that
    processes this one starts do not take it for their own launcher. grace_s, period_s: [s].
    """
    environ = os.environ if environ is None else environ
    named = environ.pop(LAUNCHER_PID_ENV, None)
    wants_pdeathsig = environ.pop(PDEATHSIG_ENV, None) == "1"
    if not named:
        return True
    launcher_pid = int(named)
    kernel_signals = wants_pdeathsig and arm_parent_death_signal(signal.SIGTERM)
    # Checked after prctl: a launcher that died before it will never send the signal.
    if os.getppid() != launcher_pid:
        return False
    threading.Thread(target=_watch, args=(launcher_pid, kernel_signals, grace_s, period_s),
                     name="sim2real-lifeline", daemon=True).start()
    return True


def bound_exit(deadline_s: float = GRACE_S) -> bool:
    """From now on this process has `deadline_s` [s] to end: a kernel timer then ends it with
    SIGALRM's default action, which needs no Python (a hung interpreter finalization included).
    A deadline already armed that comes sooner is kept.

    Call from the main thread; returns False where no timer can be armed (no setitimer)."""
    if not hasattr(signal, "setitimer"):
        return False
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    _arm_alarm_no_later_than(deadline_s)
    return True


_ALARM_LOCK = threading.RLock()  # re-entrant: bound_exit may run in a signal handler on the main thread


def _arm_alarm_no_later_than(deadline_s: float) -> None:
    """Arm ITIMER_REAL to fire within `deadline_s` [s], keeping a sooner one already armed. The
    watchdog thread and the main thread's bound_exit both arm it, in either order: without this,
    the watchdog noticing late (a loaded machine) replaced bound_exit's short deadline by its own
    grace, and a hung exit lived that long."""
    with _ALARM_LOCK:
        remaining_s, _ = signal.getitimer(signal.ITIMER_REAL)
        if remaining_s <= 0.0 or deadline_s < remaining_s:
            signal.setitimer(signal.ITIMER_REAL, deadline_s)


def _arm_alarm_from_thread(deadline_s: float) -> None:
    """bound_exit for a worker thread: signal.signal is main-thread only, so the timer is armed
    only where SIGALRM still has its default action (nobody installed a handler)."""
    if hasattr(signal, "setitimer") and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL:
        _arm_alarm_no_later_than(deadline_s)


def _watch(launcher_pid: int, kernel_signals: bool, grace_s: float, period_s: float) -> None:
    """Poll for the launcher's death; then SIGTERM (unless the kernel sent it), SIGKILL after grace_s [s]."""
    while os.getppid() == launcher_pid:
        time.sleep(period_s)
    # Before anything else: the SIGTERM below (or the kernel's) may start an interpreter
    # finalization that stops this thread for good before its SIGKILL.
    _arm_alarm_from_thread(grace_s + ALARM_SLACK_S)
    if not kernel_signals:
        # A second SIGTERM after the kernel's could cut a cleanup short (the recorder restores the
        # default handler while it closes its bag), so only where the kernel sent none.
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)  # a node that exits in time takes this daemon thread with it
    os.kill(os.getpid(), signal.SIGKILL)
