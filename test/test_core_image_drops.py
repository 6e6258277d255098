"""core.image_drops: drop reasons from an image's fields (not its error text), and the drop ledger."""
from __future__ import annotations

import pytest
from sensor_msgs.msg import Image

from sim2real_ros import conversions as msgconv
from sim2real_ros.core.perception.image_drops import DropLedger, ImageDropReason, classify_image_layout

R = ImageDropReason


@pytest.mark.parametrize(("channels", "width", "height", "step", "data", "expected"), [
    (3, 4, 2, 12, 24, None),  # rgb8 4x2, tight rows
    (3, 4, 2, 16, 32, None),  # padded rows
    (None, 4, 2, 12, 24, R.UNKNOWN_ENCODING),
    (None, 0, 0, 0, 0, R.UNKNOWN_ENCODING),  # the encoding is checked first
    (3, 0, 2, 0, 0, R.EMPTY_IMAGE),
    (3, 4, 0, 12, 0, R.EMPTY_IMAGE),
    (3, 4, 2, 11, 22, R.BAD_STEP),
    (3, 4, 2, 11, 7, R.BAD_STEP),  # step before data size
    (3, 4, 2, 12, 23, R.BAD_DATA_SIZE),
    (2, 4, 2, 8, 17, R.BAD_DATA_SIZE),
])
def test_first_layout_problem_is_named(channels, width, height, step, data, expected):
    assert classify_image_layout(channels, width, height, step, data) is expected


@pytest.mark.parametrize(("encoding", "width", "height", "step", "data", "expected"), [
    ("bayer_rggb8", 4, 2, 4, 8, R.UNKNOWN_ENCODING),
    ("rgb8", 0, 2, 0, 0, R.EMPTY_IMAGE),
    ("RGB8", 4, 2, 10, 20, R.BAD_STEP),
    ("mono8", 4, 2, 4, 9, R.BAD_DATA_SIZE),
])
def test_every_layout_image_to_array_refuses_has_its_reason(encoding, width, height, step, data, expected):
    msg = Image(encoding=encoding, width=width, height=height, step=step, data=bytes(data))
    with pytest.raises(msgconv.MessageError):
        msgconv.image_to_array(msg)
    channels = msgconv.ENCODING_CHANNELS.get(encoding.lower())
    assert classify_image_layout(channels, width, height, step, data) is expected


def test_reason_values_are_the_diagnostics_keys():
    assert [r.value for r in ImageDropReason] == [
        "no_camera_info", "unknown_encoding", "bad_step", "bad_data_size", "empty_image", "size_mismatch",
        "bad_image"]


def test_ledger_counts_by_reason_and_since_the_last_report():
    ledger = DropLedger()
    assert ledger.values() == {"dropped": 0, **{f"dropped_{r.value}": 0 for r in ImageDropReason}}
    assert ledger.add(R.BAD_STEP) == 1
    assert ledger.add(R.BAD_STEP) == 2
    assert ledger.add(R.NO_CAMERA_INFO) == 1
    assert ledger.since_report() == 3
    assert ledger.since_report() == 0
    ledger.add(R.SIZE_MISMATCH)
    assert ledger.since_report() == 1
    values = ledger.values()
    assert values["dropped"] == 4 and ledger.total == 4
    assert values["dropped_bad_step"] == 2 and values["dropped_no_camera_info"] == 1
    assert values["dropped_size_mismatch"] == 1 and values["dropped_bad_image"] == 0
    assert list(values)[0] == "dropped"
    assert ledger[R.BAD_STEP] == 2
