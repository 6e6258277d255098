"""Where a graph's node output goes when the caller names no file: kept when the run fails.

`eval-sim --graph` and `--emulate` start a graph whose nodes write to one log; their errors name it
("node output in PATH"). A log in the run's scratch folder was gone by the time anyone read that
message, so the default log lives beside it in the system's temp folder instead, and is removed only
when the run succeeds.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def graph_log(log_file: Path | None, prefix: str) -> Iterator[Path]:
    """Yield the log path: `log_file` as given (always kept), or a new file named `prefix`XXXX.log in
    the temp folder that is removed when the block finishes without an exception and kept otherwise."""
    if log_file is not None:
        yield Path(log_file)
        return
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(fd)
    path = Path(name)
    yield path  # an exception in the block propagates from here and leaves the file for the error to name
    path.unlink(missing_ok=True)

