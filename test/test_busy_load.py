"""benchmarking.BusyLoad: the load the latency benchmarks switch on beside their trials (issue 36)."""
from __future__ import annotations

import time

import pytest

from sim2real_ros.benchmarking import LOADED, QUIET, BusyLoad, interleaved


def test_loaded_phase_starts_the_asked_number_of_busy_processes_and_quiet_stops_them():
    with BusyLoad(3) as load:
        assert load.phase(True) == LOADED
        children = list(load._children)
        assert len(children) == 3
        assert all(child.poll() is None for child in children)  # still running: busy, not exited
        time.sleep(0.2)  # some jiffies for the phase's CPU share
        assert load.phase(False) == QUIET
        assert not load.on
        assert all(child.poll() is not None for child in children)
        report = load.report()
    assert report["busy_processes"] == 3
    assert report["cpu_busy_loaded"] is not None and 0.0 <= report["cpu_busy_loaded"] <= 1.0


def test_default_is_one_busy_process_per_cpu_and_close_kills_them():
    import os

    load = BusyLoad()
    assert load.processes == (os.cpu_count() or 1)
    load.phase(True)
    children = list(load._children)
    load.close()
    assert all(child.poll() is not None for child in children)


@pytest.mark.parametrize("segments, expected", [(1, [False]), (4, [False, True, False, True])])
def test_interleaved_phases_start_quiet_and_alternate(segments, expected):
    assert interleaved(segments) == expected


@pytest.mark.parametrize("own_sessions", [False, True])
def test_busy_processes_run_in_this_session_or_each_in_its_own(own_sessions):
    import os

    with BusyLoad(2, own_sessions=own_sessions) as load:
        load.phase(True)
        pids = {child.pid for child in load._children}
        sessions = {os.getsid(pid) for pid in pids}
        report = load.report()
    if own_sessions:
        assert sessions == pids  # each leads a session of its own
    else:
        assert sessions == {os.getsid(0)}
    assert report["busy_sessions"] == ("own" if own_sessions else "shared")
