"""Signal handlers that cannot deadlock (sim2real_ros/signals.py): a handler runs in the main thread
wherever it is, also holding an Event's lock inside Event.wait(); Event.set() there never returns."""
import signal
import threading

from sim2real_ros.signals import StopRequest, set_on_signal


def _call_holding_the_events_lock(event: threading.Event, handler) -> threading.Thread:
    """Run handler(SIGHUP) in a thread that holds the event's own lock, as the main thread does
    inside Event.wait(); the thread (alive after a join means the handler blocked for good)."""

    def holder() -> None:
        with event._cond:  # noqa: SLF001 - the lock Event.wait() holds around its wait
            handler(signal.SIGHUP, None)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    thread.join(timeout=5.0)
    return thread


def test_a_direct_event_set_in_a_handler_blocks_where_set_on_signal_does_not():
    blocked = threading.Event()
    stuck = _call_holding_the_events_lock(blocked, lambda *_: blocked.set())
    assert stuck.is_alive()  # the mechanism: the set waits for the lock its own thread holds
    event = threading.Event()
    thread = _call_holding_the_events_lock(event, set_on_signal(event))
    assert not thread.is_alive()
    assert event.wait(5.0)


def test_stop_request_records_the_signal():
    request = StopRequest()
    assert not request
    request.handler(signal.SIGTERM, None)
    assert request and request.signum == signal.SIGTERM
