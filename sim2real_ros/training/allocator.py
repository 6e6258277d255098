"""Keep freed memory in the process while a student trains (glibc's malloc; elsewhere a no-op).

A minibatch of 64 images at 96x96 allocates activation tensors of several MB each (the first conv's
output: 64 x 16 x 48 x 48 floats, 9.4 MB). glibc serves such blocks with mmap, or from the heap top
that it trims back to the kernel once enough is free; either way every minibatch gets fresh pages
and pays a page fault per 4 KiB on first touch. On this project's 2-core VM that was 20-25 % of a
training step (`benchmarks/bench_train_step.py`). PyTorch's CPU performance guide suggests
jemalloc or tcmalloc for the same reason; those need a system package and LD_PRELOAD, while
mallopt(3) needs nothing: raise the mmap threshold and the trim threshold so that the blocks are
reused from the heap. The memory kept is the largest working set of a step (tens of MB), not more.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt(3) parameter numbers (glibc malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's own ceiling for its dynamic threshold (64-bit)
TRIM_THRESHOLD_BYTES = 512 * 1024 * 1024  # free heap top kept before it goes back to the kernel

# The environment variables glibc reads at start-up: a user's own setting wins.
_ENVIRONMENT_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory(mmap_threshold_bytes: int = MMAP_THRESHOLD_BYTES,
                      trim_threshold_bytes: int = TRIM_THRESHOLD_BYTES) -> str:
    """Set glibc's mmap and trim thresholds for this process. Returns what happened, for the log:
    "set", "left to the environment" (the user set glibc's own variables) or "not glibc" (another
    libc or platform: nothing to do). Never raises."""
    if any(os.environ.get(name) for name in _ENVIRONMENT_SETTINGS):
        return "left to the environment"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "not glibc"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on error (a value out of range).
    if mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold_bytes)) != 1:
        return "refused"
    if mallopt(_M_TRIM_THRESHOLD, int(trim_threshold_bytes)) != 1:
        return "refused"
    return "set"
