"""Why the camera preprocessor drops an image, decided from the image's fields (no ROS, no text).

`classify_image_layout` checks what conversions.image_to_array checks, in the same order, and names
the first problem as an ImageDropReason; `DropLedger` counts drops by reason and reports the ones
since the last report. Every reason is always reported (zero included) so dashboards can plot it.
"""
from __future__ import annotations

from collections import Counter
from enum import Enum


class ImageDropReason(str, Enum):
    """Why an image was dropped (the value is the diagnostics' `dropped_<value>` key)."""

    NO_CAMERA_INFO = "no_camera_info"  # no valid camera_info received yet: the image's geometry is unknown
    UNKNOWN_ENCODING = "unknown_encoding"
    BAD_STEP = "bad_step"  # step smaller than width * channels
    BAD_DATA_SIZE = "bad_data_size"  # data length != step * height
    EMPTY_IMAGE = "empty_image"
    SIZE_MISMATCH = "size_mismatch"  # image size differs from its camera_info's
    BAD_IMAGE = "bad_image"  # anything else the pipeline refuses (odd width for packed YUV...)


def classify_image_layout(channels: int | None, width: int, height: int, step: int,
                          data_bytes: int) -> ImageDropReason | None:
    """The first layout problem of an image message, or None when its layout is sound.

    channels: channels of its encoding (None: an encoding the stack does not know); width, height
    [px]; step: bytes per row; data_bytes: length of its data. Checked in image_to_array's order:
    encoding, empty, step, data size.
    """
    if channels is None:
        return ImageDropReason.UNKNOWN_ENCODING
    if width == 0 or height == 0:
        return ImageDropReason.EMPTY_IMAGE
    if step < width * channels:
        return ImageDropReason.BAD_STEP
    if data_bytes != step * height:
        return ImageDropReason.BAD_DATA_SIZE
    return None


class DropLedger:
    """Drops by reason, and how many came since the last report."""

    def __init__(self) -> None:
        self._drops: Counter[ImageDropReason] = Counter({reason: 0 for reason in ImageDropReason})
        self._reported = 0

    def add(self, reason: ImageDropReason) -> int:
        """Count a drop; returns the count of its reason so far."""
        self._drops[reason] += 1
        return self._drops[reason]

    def __getitem__(self, reason: ImageDropReason) -> int:
        return self._drops[reason]

    @property
    def total(self) -> int:
        """Drops of every reason so far."""
        return sum(self._drops.values())

    def since_report(self) -> int:
        """Drops since the last call (the report period's), and start the next period."""
        total = self.total
        new, self._reported = total - self._reported, total
        return new

    def values(self) -> dict[str, int]:
        """`dropped` (the total) and `dropped_<reason>` for every reason, in ImageDropReason's order."""
        return {"dropped": self.total, **{f"dropped_{reason.value}": self._drops[reason] for reason in ImageDropReason}}
