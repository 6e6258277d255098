"""Signal handlers that cannot deadlock their own process.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread is:
also inside threading.Event.wait(), holding the event's lock (a Condition over a plain Lock, not
re-entrant). A handler that calls event.set() there waits for a lock its own thread holds, and the
process hangs for good (CI, 2026-12-06: a launcher that never stopped after SIGHUP; reproduced by
signalling a loop of short event waits: the handler blocked in Event.set under Condition.wait).
So a handler here only stores a value (StopRequest) or hands the set to a new thread (set_on_signal).
"""
from __future__ import annotations

import threading
from types import FrameType


class StopRequest:
    """A stop asked for by a signal, for a loop that polls: the handler stores the signal number
    (one attribute store, no lock); `bool(request)` says whether one came."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None


def set_on_signal(event: threading.Event):
    """A signal handler that sets `event` from a new thread (which takes the event's lock the
    ordinary way, once the main thread lets go of it), for code that waits on the event."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=event.set, name=f"signal-{signum}", daemon=True).start()

    return handler
