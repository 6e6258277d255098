"""The e-stop sources and the stop-source check.

Sources: the `estop` topic true; the joystick's e-stop button pressed, or unreadable (a Joy message too
short to hold it: the stop source is faulty); a silent `estop` heartbeat when
estop_heartbeat_timeout_s > 0; an `estop` publisher whose QoS this subscription cannot hear. Any of
them latches ESTOP (the coordinator; the latch is the ESTOP mode of `modes.TRANSITIONS`), and a reset
is refused while any is active.

With require_stop_source (a robot), a live stop source is one that could stop the arm now: `estop`
messages within estop_heartbeat_timeout_s (when set), or a joystick whose e-stop button was read
within joy_timeout_s. Arming needs one, and losing it while the arm moves latches ESTOP.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from ..timebase import NS_PER_S
from .config import SupervisorConfig
from .watchdogs import fresh


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
        self.topic_active = False
        self.message_ns: int | None = None  # last `estop` message
        self.button_active = ""  # why the joystick's e-stop is active ("" = released)
        self.button_read_ns: int | None = None  # last Joy whose e-stop button could be read
        self.unheard_publishers = 0
        # The heartbeat counts from the first tick (with sim time the clock may start at 0), not from 0.
        self.heartbeat_start_ns: int | None = None

    def on_message(self, active: bool, now_ns: int) -> None:
        """An `estop` message (true = stop) received at now_ns [ns]."""
        self.message_ns = now_ns
        self.topic_active = bool(active)

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

    def set_unheard_publishers(self, count: int) -> None:
        """How many `estop` publishers this subscription cannot hear (incompatible QoS): each is a pressed stop."""
        self.unheard_publishers = int(count)

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
        last = self.message_ns if self.message_ns is not None else self.heartbeat_start_ns
        if last is None:
            return None
        silent = (now_ns - last) / NS_PER_S
        return silent if silent > timeout else None

    def stop_source_missing(self, now_ns: int) -> str:
        """With require_stop_source: why no stop source is live at now_ns ("" when one is, or not required)."""
        cfg = self.config
        if not cfg.require_stop_source:
            return ""
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
        if self.topic_active:
            sources.append("estop topic is true")
        if self.button_active:
            sources.append(self.button_active)
        if self.heartbeat_silent_s(now_ns) is not None:
            sources.append("e-stop heartbeat is silent")
        if self.unheard_publishers > 0:
            sources.append(f"{self.unheard_publishers} estop publisher(s) cannot be heard (QoS must be "
                           "reliable + transient local)")
        missing = self.stop_source_missing(now_ns)
        if missing:
            sources.append(missing)
        return tuple(sources)
