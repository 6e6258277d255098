"""A dependency-free progress bar: redraws one line on a terminal, prints every ~10% otherwise."""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], total: int, label: str, stream=None) -> Iterator[T]:
    """Yield from `items`, showing `label [####....] i/total elapsed` as it goes."""
    stream = stream or sys.stderr
    tty = hasattr(stream, "isatty") and stream.isatty()
    start = time.monotonic()
    step = max(1, total // 10)
    for i, item in enumerate(items, 1):
        yield item
        if tty or i % step == 0 or i == total:
            filled = int(30 * i / max(total, 1))
            text = f"{label} [{'#' * filled}{'.' * (30 - filled)}] {i}/{total} {time.monotonic() - start:5.0f} s"
            stream.write(("\r" + text) if tty else (text + "\n"))
            stream.flush()
    if tty:
        stream.write("\n")
