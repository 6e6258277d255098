"""conversions.diagnostic_array / diagnostic_values / diagnostic_level: one way to build and read
the DiagnosticArray every state, event and report topic carries."""
from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from sim2real_ros import conversions as msgconv
from sim2real_ros.core.report import Level


def test_one_status_with_values_in_order_as_text_and_the_stamp():
    msg = msgconv.diagnostic_array("sim", {"b": 2, "a": "x", "f": 0.5}, 3_000_000_007, level=Level.WARN,
                                   message="rtf 0.50", hardware_id="sim_node")
    assert msg.header.stamp.sec == 3 and msg.header.stamp.nanosec == 7
    (status,) = msg.status
    assert (status.name, status.message, status.hardware_id) == ("sim", "rtf 0.50", "sim_node")
    assert status.level == DiagnosticStatus.WARN
    assert [(kv.key, kv.value) for kv in status.values] == [("b", "2"), ("a", "x"), ("f", "0.5")]
    assert msgconv.diagnostic_values(msg) == {"b": "2", "a": "x", "f": "0.5"}
    assert msgconv.diagnostic_level(msg) is Level.WARN


@pytest.mark.parametrize(("level", "byte"), [
    (Level.OK, DiagnosticStatus.OK), ("warn", DiagnosticStatus.WARN), ("error", DiagnosticStatus.ERROR),
    (Level.STALE, DiagnosticStatus.STALE)])
def test_levels(level, byte):
    msg = msgconv.diagnostic_array("x", {}, 0, level=level)
    assert msg.status[0].level == byte
    assert msgconv.diagnostic_level(msg) is Level(level)


def test_unknown_level_is_refused():
    with pytest.raises(ValueError):
        msgconv.diagnostic_array("x", {}, 0, level="fine")


def test_values_of_a_missing_status_are_empty():
    assert msgconv.diagnostic_values(None) == {}
    assert msgconv.diagnostic_values(DiagnosticArray()) == {}
    assert msgconv.diagnostic_values(msgconv.diagnostic_array("x", {"k": 1}, 0), index=1) == {}
