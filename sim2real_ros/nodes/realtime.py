"""Real-time knobs applied to a node process at start-up (the OS side of core.realtime).

Every node gets them through common.run_node, with no code of its own: the parameters of
parameters.REALTIME are declared on the built node, core.realtime.plan_knobs decides what this
process may apply, and this module applies it to every thread the process has (the executor's,
the middleware's, a node's own control thread; threads started later inherit it from their
creator). What was applied, or one warning saying what was not, goes to the log and to the latched
`~/realtime` topic (diagnostic_msgs/DiagnosticArray), which `sim2real topics` shows.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import sys
import threading
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray

from ..core.control.realtime import (
    CAP_IPC_LOCK_BIT,
    CAP_SYS_NICE_BIT,
    UNLIMITED,
    Permissions,
    RealtimePlan,
    RealtimeReport,
    RealtimeRequest,
    parse_cap_bits,
    plan_knobs,
)

REALTIME_TOPIC = "~/realtime"
_MCL_CURRENT, _MCL_FUTURE = 1, 2
_POLICY_CONSTANTS = {"other": os.SCHED_OTHER, "fifo": os.SCHED_FIFO, "rr": os.SCHED_RR}
_POLICY_NAMES = {value: name for name, value in _POLICY_CONSTANTS.items()}


def _limit(kind: int) -> int:
    soft, _hard = resource.getrlimit(kind)
    return UNLIMITED if soft == resource.RLIM_INFINITY else int(soft)


def read_permissions() -> Permissions:
    """This process's uid, capabilities, rlimits and CPUs."""
    try:
        caps = parse_cap_bits(Path("/proc/self/status").read_text())
    except OSError:
        caps = 0
    return Permissions(is_root=os.geteuid() == 0, cap_sys_nice=bool(caps >> CAP_SYS_NICE_BIT & 1),
                       rtprio_limit=_limit(resource.RLIMIT_RTPRIO), cap_ipc_lock=bool(caps >> CAP_IPC_LOCK_BIT & 1),
                       memlock_limit_bytes=_limit(resource.RLIMIT_MEMLOCK),
                       cpus=tuple(sorted(os.sched_getaffinity(0))), nice_limit=_limit(resource.RLIMIT_NICE))


def _thread_ids() -> list[int]:
    """Every thread of this process (Linux: /proc/self/task), the calling one first."""
    try:
        tids = [int(entry) for entry in os.listdir("/proc/self/task")]
    except OSError:
        tids = []
    current = threading.get_native_id()
    return [current] + [tid for tid in tids if tid != current]


def apply_plan(request: RealtimeRequest, plan: RealtimePlan) -> RealtimeReport:
    """Apply `plan` to every thread of this process; an OS refusal becomes a refused entry."""
    refused = list(plan.refused)
    tids = _thread_ids()
    # The memory lock first, while the process still runs at its old policy: mlockall(MCL_CURRENT)
    # faults in every page the process has mapped (0.5 s of CPU for the supervisor on this project's
    # 2-core VM), and at SCHED_FIFO that took a core from everything below it, the kernel's tty
    # workers included: the driver's servo replies waited and it logged a bus timeout at start-up.
    locked = False
    if plan.lock_memory:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        if libc.mlockall(_MCL_CURRENT | _MCL_FUTURE) == 0:
            locked = True
        else:
            refused.append(f"lock_memory: mlockall failed: {os.strerror(ctypes.get_errno())}")
    if plan.cpu_affinity:
        try:
            for tid in tids:
                _ignore_gone(os.sched_setaffinity, tid, set(plan.cpu_affinity))
        except OSError as err:
            refused.append(f"cpu_affinity {list(plan.cpu_affinity)}: {err.strerror}")
    if plan.policy is not None:
        try:
            for tid in tids:
                _ignore_gone(os.sched_setscheduler, tid, _POLICY_CONSTANTS[plan.policy],
                             os.sched_param(plan.priority))
        except OSError as err:
            refused.append(f"sched_policy {plan.policy} priority {plan.priority}: {err.strerror} "
                           "(docs/deployment.md: limits.conf rtprio)")
    if plan.nice is not None:
        try:
            for tid in tids:  # Linux: a thread id to setpriority sets that thread's nice value
                _ignore_gone(os.setpriority, os.PRIO_PROCESS, tid, plan.nice)
        except OSError as err:
            refused.append(f"nice {plan.nice}: {err.strerror} (docs/deployment.md: limits.conf nice)")
    if plan.gil_switch_interval_s is not None:
        sys.setswitchinterval(plan.gil_switch_interval_s)
    policy = os.sched_getscheduler(0)
    return RealtimeReport(request=request, policy=_POLICY_NAMES.get(policy & 0xFF, str(policy)),
                          priority=os.sched_getparam(0).sched_priority,
                          cpu_affinity=tuple(sorted(os.sched_getaffinity(0))), memory_locked=locked,
                          refused=tuple(refused), nice=os.getpriority(os.PRIO_PROCESS, 0),
                          gil_switch_interval_s=sys.getswitchinterval())


def _ignore_gone(call, tid: int, *args) -> None:
    """A thread that ended between listing and the call is no error."""
    with contextlib.suppress(ProcessLookupError):
        call(tid, *args)


def apply_realtime_knobs(node) -> RealtimeReport:
    """Declare parameters.REALTIME on `node`, apply what this process may, log one line (info when
    applied, one warning when anything was refused) and publish the latched `~/realtime` report.
    A bad value (an unknown policy name, a priority out of range) raises ConfigError naming it."""
    from .. import conversions as msgconv
    from ..core.report import Level
    from .common import LATCHED_QOS, now_ns
    from .parameters import REALTIME, declare_table

    values = declare_table(node, REALTIME)
    request = RealtimeRequest.from_values(values, f"{node.get_name()} parameter")
    if request.asks_anything:
        report = apply_plan(request, plan_knobs(request, read_permissions()))
    else:
        report = apply_plan(request, RealtimePlan())
    if report.refused:
        node.get_logger().warning(report.warning())
    elif request.asks_anything:
        node.get_logger().info(f"real-time knobs applied: {report.policy} priority {report.priority}, nice "
                               f"{report.nice}, CPUs {list(report.cpu_affinity)}, memory locked "
                               f"{report.memory_locked}, GIL switch interval {report.gil_switch_interval_s * 1e3:g} ms")
    publisher = node.create_publisher(DiagnosticArray, REALTIME_TOPIC, LATCHED_QOS)
    publisher.publish(msgconv.diagnostic_array(
        f"{node.get_name()}: realtime", report.values(), now_ns(node),
        level=Level.WARN if report.refused else Level.OK, message=report.warning() or "as requested",
        hardware_id=node.get_fully_qualified_name()))
    node.realtime_report = report  # the node (and tests) can read what was applied
    node._realtime_publisher = publisher  # kept alive: the latched message lives as long as it does
    return report
