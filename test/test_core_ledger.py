"""core.policy_ledger: every image accounted for exactly once, and the report's arithmetic, with
hand-made sequences of events and exact expectations."""
from __future__ import annotations

import pytest

from sim2real_ros.core.control.observation_pairing import DropReason
from sim2real_ros.core.policy.ledger import ImageLedger
from sim2real_ros.core.report import Level

D = DropReason


def drops(report) -> dict[str, int]:
    return {k[len("drops_"):]: v for k, v in report.values.items() if k.startswith("drops_")}


def test_an_empty_ledger_reports_zeros_and_nan_statistics():
    report = ImageLedger().report()
    assert report.level is Level.OK and report.message == "0 chunks in the last period"
    assert list(report.values)[:4] == ["images_received", "joint_states_received", "chunks_published",
                                       "observations_waiting"]
    assert [report.values[k] for k in list(report.values)[:4]] == [0, 0, 0, 0]
    assert report.values["inference_ms_p50"] == "nan" and report.values["obs_to_chunk_ms_max"] == "nan"
    assert drops(report) == {reason.value: 0 for reason in DropReason}


def test_a_sequence_of_images_balances_at_every_step():
    ledger: ImageLedger[str] = ImageLedger()
    steps = [
        lambda: ledger.image_throttled(),
        lambda: ledger.image_refused(D.BAD_IMAGE),
        lambda: ledger.image_accepted("a"),
        lambda: ledger.image_accepted("b"),  # supersedes a
        lambda: ledger.start_inference(),  # b in inference
        lambda: ledger.image_accepted("c"),  # pending while b runs: two waiting
        lambda: ledger.chunk_published(1.5, 9.0, 2.0),  # b became a chunk
        lambda: ledger.start_inference(),  # c
        lambda: ledger.inference_dropped(D.UNPAIRED),
        lambda: ledger.input_dropped(D.BAD_JOINT_STATE),  # no image: the balance ignores it
    ]
    waiting = [0, 0, 1, 1, 1, 2, 1, 1, 0, 0]
    for step, expected_waiting in zip(steps, waiting, strict=True):
        step()
        assert ledger.balance() == 0
        assert ledger.observations_waiting == expected_waiting
    values = ledger.report().values
    assert values["images_received"] == 5 and values["chunks_published"] == 1
    assert drops(ledger.report()) == {**{r.value: 0 for r in DropReason}, "throttled": 1, "bad_image": 1,
                                      "superseded": 1, "unpaired": 1, "bad_joint_state": 1}


def test_accepting_returns_whether_it_superseded_and_keeps_the_newest():
    ledger: ImageLedger[int] = ImageLedger()
    assert ledger.image_accepted(1) is False
    assert ledger.image_accepted(2) is True
    assert ledger.pending == 2
    assert ledger.start_inference() == 2 and ledger.pending is None and ledger.in_inference
    with pytest.raises(RuntimeError):
        ledger.start_inference()


def test_report_warns_for_a_period_with_images_but_no_chunk_and_starts_the_next_period():
    ledger: ImageLedger[str] = ImageLedger()
    for _ in range(3):
        ledger.image_throttled()
    first = ledger.report()
    assert first.level is Level.WARN
    assert first.message == "3 images but no chunk in the last period (see drops)"
    assert ledger.report().message == "0 chunks in the last period"  # nothing new: OK
    ledger.image_accepted("x")
    ledger.start_inference()
    ledger.chunk_published(2.0, 10.0, -1.0)
    ledger.image_accepted("y")
    third = ledger.report()
    assert third.level is Level.OK and third.message == "1 chunks in the last period"
    assert third.values["observations_waiting"] == 1  # y, pending


def test_statistics_are_reported_with_three_decimals():
    ledger: ImageLedger[str] = ImageLedger()
    for inference_ms, latency_ms, offset_ms in ((1.0, 10.0, -2.0), (2.0, 20.0, 0.0), (6.0, 30.0, 4.0)):
        ledger.image_accepted("o")
        ledger.start_inference()
        ledger.chunk_published(inference_ms, latency_ms, offset_ms)
    v = ledger.report().values
    assert (v["inference_ms_p50"], v["inference_ms_max"], v["inference_ms_mean"]) == ("2.000", "6.000", "3.000")
    assert v["inference_ms_p99"] == "5.920"  # numpy's linear percentile: 2 + 0.98 * (6 - 2)
    assert (v["obs_to_chunk_ms_p50"], v["pairing_offset_ms_mean"]) == ("20.000", "0.667")
    assert v["joint_states_received"] == 0
    ledger.joint_state_received()
    assert ledger.report().values["joint_states_received"] == 1


def test_the_images_arrival_is_reported_when_the_node_knows_it():
    ledger: ImageLedger[str] = ImageLedger()
    for receipt_ms in (1.0, 3.0, None):
        ledger.image_accepted("o")
        ledger.start_inference()
        ledger.chunk_published(1.0, 10.0, 0.0, receipt_ms)
    v = ledger.report().values
    # Two arrivals known of three chunks: the statistics are theirs alone.
    assert (v["obs_to_receipt_ms_p50"], v["obs_to_receipt_ms_max"]) == ("2.000", "3.000")
    assert v["chunks_published"] == 3
