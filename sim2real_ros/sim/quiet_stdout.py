"""Keep C-level prints off stdout: `with stdout_to_stderr(): ...` points file descriptor 1 at
stderr for the duration.

PyBullet writes with C's printf, below Python's sys.stdout: `argv[0]=` on every connect, and
b3Warning/b3Error lines while loading a URDF (no inertia, a missing mesh, a missing file). A
command that prints JSON on stdout (`validate --json`, `eval-sim`) must print nothing else there,
so every PyBullet call that can print runs inside this context (sim/world.py).

Python's and C's stdout buffers are flushed on the way in (what was printed before still goes to
stdout, in order) and on the way out (what was printed inside goes to stderr, not to stdout later).
Nested and concurrent uses in one process share one redirection: the first to enter saves fd 1,
the last to leave restores it (a thread printing to stdout meanwhile lands on stderr too).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_saved_fd: int | None = None
_libc: ctypes.CDLL | None = None


def _flush_c_stdio() -> None:
    """fflush(NULL): every C stdio output stream, so PyBullet's buffered printf leaves now."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except (OSError, AttributeError):  # no C library to reach (not on Linux/macOS): nothing to flush
        pass


def _flush_python() -> None:
    for stream in (sys.stdout, sys.__stdout__):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Within the block, whatever is written to fd 1 (C or Python) goes to fd 2."""
    global _depth, _saved_fd
    with _lock:
        if _depth == 0:
            _flush_python()
            _flush_c_stdio()
            try:
                _saved_fd = os.dup(1)
                os.dup2(2, 1)
            except OSError:  # no fd 1 or 2 (a daemon with closed descriptors): nothing to protect
                _saved_fd = None
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved_fd is not None:
                _flush_python()
                _flush_c_stdio()
                os.dup2(_saved_fd, 1)
                os.close(_saved_fd)
                _saved_fd = None
