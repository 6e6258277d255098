"""Real-time knobs (issue 36): validation and plan at fixed permissions (core.realtime), and the
knobs applied to, or refused by, a real node process (nodes/realtime.py through common.run_node)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from support import REPO_ROOT, wait_until

from sim2real_ros import conversions as cv
from sim2real_ros.cli.topics_cmd import format_realtime, measure_graph
from sim2real_ros.core.control.realtime import UNLIMITED, Permissions, RealtimeRequest, plan_knobs
from sim2real_ros.core.errors import ConfigError
from sim2real_ros.nodes.common import LATCHED_QOS
from sim2real_ros.nodes.realtime import read_permissions

UNPRIVILEGED = Permissions(is_root=False, cap_sys_nice=False, rtprio_limit=0, cap_ipc_lock=False,
                           memlock_limit_bytes=8 << 20, cpus=(0, 1))


# ----------------------------------------------------------------------------------------------
# core: validation and plan
@pytest.mark.parametrize("values, field", [
    ({"sched_policy": "deadline"}, "sched_policy"),
    ({"sched_policy": "fifo", "sched_priority": 0}, "sched_priority"),
    ({"sched_policy": "rr", "sched_priority": 100}, "sched_priority"),
    ({"sched_policy": "other", "sched_priority": 10}, "sched_priority"),
    ({"cpu_affinity": [0, 0]}, "cpu_affinity"),
    ({"cpu_affinity": [-1]}, "cpu_affinity"),
    ({"nice": -21}, "nice"),
    ({"nice": 20}, "nice"),
    ({"sched_policy": "fifo", "sched_priority": 10, "nice": -5}, "nice"),  # nice is SCHED_OTHER's weight
    ({"gil_switch_interval_s": -0.001}, "gil_switch_interval_s"),
    ({"gil_switch_interval_s": 0.5}, "gil_switch_interval_s"),
])
def test_bad_values_name_the_field(values, field):
    with pytest.raises(ConfigError) as err:
        RealtimeRequest.from_values(values, "actuator_node parameter")
    assert err.value.field == field
    assert "actuator_node parameter" in str(err.value)


def test_policy_names_as_chrt_spells_them():
    assert RealtimeRequest.from_values({"sched_policy": "SCHED_FIFO", "sched_priority": 5}, "x").policy == "fifo"
    assert not RealtimeRequest.from_values({}, "x").asks_anything


def test_the_switch_interval_needs_no_privilege_and_zero_leaves_it():
    request = RealtimeRequest.from_values({"gil_switch_interval_s": 0.0005}, "x")
    assert request.asks_anything
    assert plan_knobs(request, UNPRIVILEGED).gil_switch_interval_s == 0.0005
    assert not plan_knobs(request, UNPRIVILEGED).refused
    assert plan_knobs(RealtimeRequest(), UNPRIVILEGED).gil_switch_interval_s is None


def test_plan_refuses_what_the_process_may_not_and_keeps_the_rest():
    request = RealtimeRequest("fifo", 50, (1,), True)
    plan = plan_knobs(request, UNPRIVILEGED)
    assert plan.policy is None and plan.priority == 0 and not plan.lock_memory
    assert plan.cpu_affinity == (1,)  # affinity needs no privilege
    assert len(plan.refused) == 2
    assert "RLIMIT_RTPRIO" in plan.refused[0] and "memlock" in plan.refused[1]


def test_plan_with_an_rtprio_limit_allows_priorities_up_to_it():
    limited = Permissions(False, False, 40, False, UNLIMITED, (0, 1))
    assert plan_knobs(RealtimeRequest("rr", 40), limited).policy == "rr"
    assert plan_knobs(RealtimeRequest("rr", 41), limited).policy is None
    assert plan_knobs(RealtimeRequest(lock_memory=True), limited).lock_memory  # unlimited memlock


def test_plan_lowers_the_nice_value_only_where_the_process_may():
    assert plan_knobs(RealtimeRequest(nice=5), UNPRIVILEGED).nice == 5  # raising it needs nothing
    refused = plan_knobs(RealtimeRequest(nice=-10), UNPRIVILEGED)
    assert refused.nice is None and "nice -10" in refused.refused[0] and "RLIMIT_NICE" in refused.refused[0]
    limited = Permissions(False, False, 0, False, UNLIMITED, (0, 1), nice_limit=25)  # down to 20 - 25 = -5
    assert plan_knobs(RealtimeRequest(nice=-5), limited).nice == -5
    assert plan_knobs(RealtimeRequest(nice=-6), limited).nice is None
    capable = Permissions(False, True, 0, False, UNLIMITED, (0, 1))
    assert plan_knobs(RealtimeRequest(nice=-10), capable).nice == -10
    assert RealtimeRequest(nice=-10).asks_anything


def test_plan_refuses_a_cpu_that_is_not_there():
    plan = plan_knobs(RealtimeRequest(cpu_affinity=(0, 7)), UNPRIVILEGED)
    assert plan.cpu_affinity == () and "[7]" in plan.refused[0]


# ----------------------------------------------------------------------------------------------
# a real node process
def _start_actuator(tmp_path: Path, params: dict[str, str], prefix: list[str] = ()) -> subprocess.Popen:
    args = [*prefix, sys.executable, "-m", "sim2real_ros.nodes.actuator_node", "--ros-args"]
    for name, value in params.items():
        args += ["-p", f"{name}:={value}"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "ROS_LOG_DIR": str(tmp_path)}
    return subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=open(tmp_path / "out.log", "w"),
                            stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _realtime_report(ros, proc, tmp_path) -> dict[str, str]:
    received = ros.collect(DiagnosticArray, "actuator_node/realtime", LATCHED_QOS)
    if not wait_until(lambda: bool(received) or proc.poll() is not None, 60.0):
        raise AssertionError("no realtime report: " + (tmp_path / "out.log").read_text())
    assert received, (tmp_path / "out.log").read_text()
    return cv.diagnostic_values(received[-1])


def _thread_policies(pid: int) -> set[int]:
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def test_knobs_applied_in_a_node_process(ros, tmp_path):
    permissions = read_permissions()
    proc = _start_actuator(tmp_path, {"cpu_affinity": "[0]", "sched_policy": "fifo", "sched_priority": "10",
                                      "gil_switch_interval_s": "0.0005"})
    try:
        values = _realtime_report(ros, proc, tmp_path)
        # The interpreter's switch interval, read back in the node process itself.
        assert values["gil_switch_interval_s_requested"] == "0.0005" and values["gil_switch_interval_s"] == "0.0005"
        # Affinity needs no privilege: every thread of the child is on CPU 0.
        assert values["cpu_affinity"] == "0"
        assert all(os.sched_getaffinity(int(tid)) == {0} for tid in os.listdir(f"/proc/{proc.pid}/task"))
        if permissions.may_set_priority(10):
            assert values["sched_policy"] == "fifo" and values["sched_priority"] == "10"
            assert values["refused"] == ""
            assert _thread_policies(proc.pid) == {os.SCHED_FIFO}  # the control thread too
        else:
            assert values["sched_policy"] == "other" and "RLIMIT_RTPRIO" in values["refused"]
            assert _thread_policies(proc.pid) == {os.SCHED_OTHER}
        assert values["nice"] == "0" and values["nice_requested"] == "0"
        # `sim2real topics` shows the same report.
        realtime: dict = {}
        for discovery_s in (2.0, 5.0, 10.0):  # discovery of a new probe node is slow on a loaded machine
            _rows, realtime = measure_graph(duration_s=0.3, discovery_s=discovery_s)
            if "/actuator_node" in realtime:
                break
        assert realtime["/actuator_node"]["cpu_affinity"] == "0"
        assert "/actuator_node" in format_realtime(realtime)
    finally:
        _stop(proc)


def test_a_lower_nice_value_applied_to_every_thread_of_a_node(ros, tmp_path):
    """The camera path's knob (the robot graph gives it nice -10): every thread of the process, or
    one refusal naming RLIMIT_NICE where the process may not."""
    proc = _start_actuator(tmp_path, {"nice": "-5"})
    try:
        values = _realtime_report(ros, proc, tmp_path)
        assert values["nice_requested"] == "-5" and values["sched_policy"] == "other"
        nices = {os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{proc.pid}/task")}
        if read_permissions().may_set_nice(-5):
            assert values["nice"] == "-5" and values["refused"] == "" and nices == {-5}, (values, nices)
        else:
            assert values["nice"] == "0" and "RLIMIT_NICE" in values["refused"] and nices == {0}
    finally:
        _stop(proc)


def test_knobs_refused_without_the_capability_and_the_node_runs_on(ros, tmp_path):
    if not (shutil.which("setpriv") and shutil.which("prlimit")):
        pytest.skip("setpriv and prlimit (util-linux) are needed to drop CAP_SYS_NICE and the limits")
    # Whoever runs the test: no CAP_SYS_NICE / CAP_IPC_LOCK, RLIMIT_RTPRIO 0, a small memlock limit.
    prefix = ["prlimit", "--rtprio=0", "--memlock=65536", "--",
              "setpriv", "--inh-caps=-sys_nice,-ipc_lock", "--bounding-set=-sys_nice,-ipc_lock"]
    proc = _start_actuator(tmp_path, {"sched_policy": "fifo", "sched_priority": "10", "lock_memory": "true"},
                           prefix)
    try:
        values = _realtime_report(ros, proc, tmp_path)
        assert values["sched_policy"] == "other" and values["memory_locked"] == "false"
        assert "sched_policy fifo" in values["refused"] and "lock_memory" in values["refused"]
        assert _thread_policies(proc.pid) == {os.SCHED_OTHER}
        assert proc.poll() is None  # runs on
        deadline = time.monotonic() + 10
        while "real-time knobs not applied" not in (tmp_path / "out.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = (tmp_path / "out.log").read_text()
        assert log.count("real-time knobs not applied") == 1, log  # one warning
    finally:
        _stop(proc)


def test_bad_policy_name_fails_at_start_naming_it(tmp_path):
    proc = _start_actuator(tmp_path, {"sched_policy": "fast"})
    assert proc.wait(timeout=60) == 2
    log = (tmp_path / "out.log").read_text()
    assert "sched_policy" in log and "'fast'" in log
