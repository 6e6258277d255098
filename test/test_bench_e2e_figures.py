"""bench_e2e's figure at fixed times: which tick and command carry a chunk, and the stage split."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from support import REPO_ROOT
from trajectory_msgs.msg import JointTrajectory

MS = 1_000_000  # [ns]


@pytest.fixture(scope="module")
def bench_e2e():
    spec = importlib.util.spec_from_file_location("bench_e2e_under_test", REPO_ROOT / "benchmarks" / "bench_e2e.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chunk(captured_ns: int) -> JointTrajectory:
    msg = JointTrajectory()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(captured_ns, 1_000_000_000)
    return msg


def test_a_chunk_is_carried_by_the_first_tick_after_it_then_the_first_command_after_that(bench_e2e):
    """Captured at 100 ms, chunk published at 105, ticks at 100 / 106 / 110, robot commands at 100.5 /
    107 / 110.5: the figure is 107 - 100 = 7 ms, split 5 (camera path) + 2 (control path: 1 to the
    tick, 1 to the command); with the policy image published at 101, the camera path splits 1 + 4."""
    ticks = np.array([100, 106, 110], dtype=float) * MS
    commands = np.array([100.5, 107, 110.5]) * MS
    stages: dict[str, list[float]] = {}
    figures = bench_e2e._first_carrier_latencies([(105 * MS, chunk(100 * MS))], ticks, commands, lambda t: t,
                                                 stages, {100 * MS: 101 * MS})
    assert figures == pytest.approx([7.0])
    expected = {"capture_to_chunk": 5.0, "chunk_to_command": 2.0, "chunk_to_tick": 1.0, "tick_to_command": 1.0,
                "capture_to_policy_image": 1.0, "policy_image_to_chunk": 4.0}
    assert {name: values[0] for name, values in stages.items()} == pytest.approx(expected)
    # A chunk after the last tick (or a tick after the last command) has no carrier yet: not counted.
    assert bench_e2e._first_carrier_latencies([(111 * MS, chunk(104 * MS))], ticks, commands, lambda t: t) == []
