"""The e-stop sources and the stop-source check.

Sources: the `estop` topic true from any of its publishers; the joystick's e-stop button pressed, or
unreadable (a Joy message too short to hold it: the stop source is faulty); a silent `estop`
heartbeat when estop_heartbeat_timeout_s > 0; a faulty `estop` publisher: one whose QoS this
subscription cannot hear, or one of another message type (its stops could never be read); a node
clock that stopped advancing while a heartbeat is required (it could not be checked). Any of them
latches ESTOP (the coordinator; the latch is the ESTOP mode of `modes.TRANSITIONS`), and a reset is
refused while any is active.

The topic's state is kept per publisher (its GID, from the message info): the topic is released
only when every publisher that pressed has released, so one button's "released" never cancels
another's "pressed". A publisher that leaves the graph while pressed stays pressed until a reset
(it can no longer release; the reset clears it, as the operator's decision).

With require_stop_source (a robot), a live stop source is one that could stop the arm now: `estop`
messages within estop_heartbeat_timeout_s (when set), or a joystick whose e-stop button was read
within joy_timeout_s. Arming needs one, and losing it while the arm moves latches ESTOP.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

from ...errors import ConfigError
from ...timebase import NS_PER_S
from .config import SupervisorConfig
from .watchdogs import fresh

ABSENT_POLLS = 3
"""Graph polls in a row a pressed `estop` publisher must be missing from to count as gone."""


class EStopSources:
    """What each e-stop source says, with the times it last spoke int [ns].

    estop_button: the joystick's e-stop button index (-1: the mapping has none).
    """

    def __init__(self, config: SupervisorConfig, estop_button: int) -> None:
        if config.require_stop_source and config.estop_heartbeat_timeout_s <= 0 and estop_button < 0:
            raise ConfigError(config.source, "require_stop_source", True,
                              "needs a stop source: estop_heartbeat_timeout_s > 0 or a joystick e-stop button")
        self.config = config
        self.estop_button = estop_button
        # Publisher key -> pressed; keys in `_vanished` left the graph while pressed.
        self._pressed: set[str] = set()
        self._vanished: set[str] = set()
        self._absent_polls: dict[str, int] = {}  # pressed publisher -> graph polls in a row without it
        # `estop` publishers in the graph at the last poll (None before the first). Where messages
        # carry no publisher GID (rclpy 7, Jazzy), a release cannot be told from another publisher's:
        # an anonymous release counts only while at most one publisher is on the topic.
        self._live_count: int | None = None
        self.faulty_publishers: tuple[str, ...] = ()  # why each faulty `estop` publisher is a pressed stop
        self.clock_stalled = ""  # why the heartbeat cannot be checked ("" = the clock advances)
        self.message_ns: int | None = None  # last `estop` message
        self.button_active = ""  # why the joystick's e-stop is active ("" = released)
        self.button_read_ns: int | None = None  # last Joy whose e-stop button could be read
        # The heartbeat counts from the first tick (with sim time the clock may start at 0), not from 0.
        self.heartbeat_start_ns: int | None = None

    @property
    def topic_active(self) -> bool:
        """Some `estop` publisher pressed and has not released (a vanished one until a reset)."""
        return bool(self._pressed)

    @property
    def pressed_publishers(self) -> tuple[str, ...]:
        """The keys of the `estop` publishers pressing now, sorted (vanished ones included)."""
        return tuple(sorted(self._pressed))

    def on_message(self, active: bool, now_ns: int, publisher: str = "", publishers_now: int | None = None) -> None:
        """An `estop` message (true = stop) from `publisher` (its GID as text; "" when unknown),
        received at now_ns [ns]. Only that publisher's own "released" releases its "pressed".
        publishers_now: how many publishers the graph shows on the topic as the message arrives.

        Without GIDs (rclpy on Jazzy gives MessageInfo none) a "released" releases only while
        neither the last poll nor the count now shows more than one publisher: a publisher that
        just joined is in the count before the next poll, so its release cannot lift another's
        press (seen in CI: button B's release let a reset through while A still pressed)."""
        self.message_ns = now_ns
        if active:
            self._pressed.add(publisher)
        elif not publisher and max(self._live_count or 0, publishers_now or 0) > 1:
            return  # anonymous, with several publishers: it may not be the one that pressed
        else:
            self._pressed.discard(publisher)
            self._vanished.discard(publisher)
            self._absent_polls.pop(publisher, None)

    def set_live_publishers(self, live: Collection[str]) -> None:
        """The `estop` publishers (keys as on_message's) now in the graph, polled. A pressed one absent
        from ABSENT_POLLS polls in a row left while pressed: it stays pressed, marked vanished, until
        clear_vanished (a reset). Several polls, not one: the graph may show a new publisher after
        its first message has arrived. An unknown publisher ("") never counts as gone."""
        live = set(live)
        self._live_count = len(live)
        for key in self._pressed - self._vanished:
            if not key or key in live:
                self._absent_polls.pop(key, None)
                continue
            self._absent_polls[key] = self._absent_polls.get(key, 0) + 1
            if self._absent_polls[key] >= ABSENT_POLLS:
                self._vanished.add(key)
                del self._absent_polls[key]

    def clear_vanished(self) -> None:
        """A reset: publishers that left while pressed no longer count (they cannot release)."""
        self._pressed -= self._vanished
        self._vanished.clear()

    def set_faulty_publishers(self, faults: Sequence[str]) -> None:
        """Why each faulty `estop` publisher (unheard QoS, wrong type) counts as a pressed stop."""
        self.faulty_publishers = tuple(faults)

    def read_button(self, buttons: Sequence[int], now_ns: int) -> None:
        """Set the joystick e-stop state from the raw buttons, whatever else the Joy message holds."""
        index = self.estop_button
        if index < 0:
            return
        try:
            pressed = bool(buttons[index]) if len(buttons) > index else None
        except Exception:  # noqa: BLE001 - an unreadable button is a fault of the stop source
            pressed = None
        if pressed is None:
            self.button_active = (f"joystick e-stop button {index} unreadable (the Joy message has "
                                  f"{len(buttons)} buttons): a stop source that cannot be read")
            return
        self.button_read_ns = now_ns
        self.button_active = "joystick e-stop button is pressed" if pressed else ""

    def start_heartbeat(self, now_ns: int) -> None:
        """The first tick starts the heartbeat count (later calls change nothing)."""
        if self.heartbeat_start_ns is None:
            self.heartbeat_start_ns = now_ns

    def restart_after_clock_step(self, now_ns: int) -> None:
        """After a clock step back: no source counts as live until it speaks again, and the heartbeat
        counts from now_ns [ns] (a 30 s step back must not silence the watchdog for 30 s)."""
        self.message_ns = self.button_read_ns = None
        self.heartbeat_start_ns = now_ns

    def heartbeat_silent_s(self, now_ns: int) -> float | None:
        """Seconds [s] of `estop` silence when the heartbeat is configured and exceeded, else None."""
        timeout = self.config.estop_heartbeat_timeout_s
        if timeout <= 0:
            return None
        # Silence counts from the start at the earliest: a message received before the count began
        # (sim time at 0 before /clock arrived) does not make it older.
        known = [t for t in (self.message_ns, self.heartbeat_start_ns) if t is not None]
        if not known:
            return None
        last = max(known)
        silent = (now_ns - last) / NS_PER_S
        return silent if silent > timeout else None

    def stop_source_missing(self, now_ns: int) -> str:
        """With require_stop_source: why no stop source is live at now_ns ("" when one is, or not required)."""
        cfg = self.config
        if not cfg.require_stop_source:
            return ""
        if self.clock_stalled:
            return f"no live stop source can be confirmed: {self.clock_stalled}"
        heartbeat = cfg.estop_heartbeat_timeout_s
        if heartbeat > 0 and fresh(self.message_ns, now_ns, heartbeat):
            return ""
        if self.estop_button >= 0 and fresh(self.button_read_ns, now_ns, cfg.joy_timeout_s):
            return ""
        sources = []
        if heartbeat > 0:
            sources.append(f"estop messages within {heartbeat} s")
        if self.estop_button >= 0:
            sources.append(f"a joystick (e-stop button {self.estop_button}) within {cfg.joy_timeout_s} s")
        return "no live stop source (require_stop_source: needs " + " or ".join(sources) + ")"

    def active(self, now_ns: int) -> tuple[str, ...]:
        """The e-stop sources active at now_ns [ns], each said in words (a reset is refused while any is)."""
        sources = []
        if self._pressed - self._vanished:
            sources.append("estop topic is true" + self._publisher_text(self._pressed - self._vanished))
        if self.button_active:
            sources.append(self.button_active)
        if self.heartbeat_silent_s(now_ns) is not None:
            sources.append("e-stop heartbeat is silent")
        sources.extend(self.faulty_publishers)
        if self.clock_stalled and self.config.estop_heartbeat_timeout_s > 0:
            sources.append(f"e-stop heartbeat cannot be checked: {self.clock_stalled}")
        missing = self.stop_source_missing(now_ns)
        if missing:
            sources.append(missing)
        return tuple(sources)

    def vanished_text(self) -> str:
        """The publishers that left the graph while pressed ("" when none); a reset clears them."""
        if not self._vanished:
            return ""
        return f"{len(self._vanished)} estop publisher(s) left while pressed{self._publisher_text(self._vanished)}"

    def _publisher_text(self, keys: set[str]) -> str:
        named = sorted(k for k in keys if k)
        if "" in keys and (self._live_count or 0) > 1:
            named.append(f"unidentified, one of {self._live_count}: messages carry no publisher GID here, so it "
                         "is released by a release once a single publisher remains")
        return f" (publisher {', '.join(named)})" if named else ""
