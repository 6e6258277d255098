"""When the supervisor node sends a robot command, and in what order (no ROS, time passed in).

`CommandOrder`: commands are decided and published one at a time, so none is lost or reordered.
`CommandForwarding`: in AUTONOMOUS, whether a policy command goes out as it arrives or waits for
the control timer, and whether a timer tick is the fallback that must run. Times are integer [ns]
on the node's clock.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class CommandOrder:
    """Robot commands are decided and published one at a time, whichever thread decides them.

    The executor thread (ticks, joystick, forwarded policy commands) and the e-stop thread both
    decide; every command is step-limited against the one decided before it, so the robot must
    receive every decided command, in decision order. The decision and its publish therefore share
    one lock (`lock`, also the lock for every other call into the core). An earlier design
    published after releasing the lock and dropped a command that lost the race to the publisher:
    the commands either side of the dropped one were then up to two control periods of travel apart
    (a soak caught 0.042 rad where one period allows 0.035 rad). The price is that the e-stop
    thread may wait for one publish already in progress (tens of microseconds).
    """

    def __init__(self, publish: Callable[[Any], None]) -> None:
        self._publish = publish
        self.lock = threading.Lock()
        self.sent = 0

    def decide(self, decision: Callable[[], Any | None]) -> bool:
        """Run `decision` (a core call returning the message to publish, or None) and publish its
        message before any other decision can run; True if one was published."""
        with self.lock:
            msg = decision()
            if msg is None:
                return False
            self._publish(msg)
            self.sent += 1
            return True


@dataclass
class CommandForwarding:
    """Forward-or-wait for policy commands (the supervisor's `forward_policy_commands`).

    period_ns: the control period [ns]; enabled: forward_policy_commands; min_interval_ns: the
    shortest time between two ticks for policy commands [ns] (None: half a period). In AUTONOMOUS, a
    policy command is sent at once when at least min_interval_ns has passed since the last tick,
    else once it has passed (`deferred`: at most one command per min_interval_ns, none waiting
    longer than that). Commands closer together than a period are safe: the step limiter moves
    each by velocity x the time since the last one (supervision/command_output.py). The control timer is then
    the fallback for when commands stop: its tick runs only when no tick came for 1.5 periods.
    Outside AUTONOMOUS (or disabled) every timer tick runs and no policy command is forwarded.
    """

    period_ns: int
    enabled: bool = True
    min_interval_ns: int | None = None
    last_tick_ns: int | None = field(default=None)  # node clock of the last core tick [ns]

    @property
    def interval_ns(self) -> int:
        """[ns] the shortest time between two ticks for policy commands."""
        return self.period_ns // 2 if self.min_interval_ns is None else self.min_interval_ns

    def ticked(self, now_ns: int) -> None:
        """A core tick ran at `now_ns` [ns]."""
        self.last_tick_ns = now_ns

    def since_tick_ns(self, now_ns: int) -> int:
        """[ns] since the last tick; none yet, or a clock that went backwards (sim restart), counts
        as two periods ago."""
        since = None if self.last_tick_ns is None else now_ns - self.last_tick_ns
        return self.period_ns * 2 if since is None or since < 0 else since

    def forward_now(self, autonomous: bool, now_ns: int) -> bool:
        """A policy command arrived at `now_ns` [ns]: tick (send it) now?"""
        return self.enabled and autonomous and self.since_tick_ns(now_ns) >= self.interval_ns

    def deferred(self, autonomous: bool, now_ns: int) -> bool:
        """A policy command arrived at `now_ns` [ns] too soon after the last tick to go out: send it
        when the interval has passed (at most interval_ns from now), rather than with whatever
        comes next? The actuator's extra command for a new chunk (tick_on_chunk) otherwise waited
        for its next regular one, up to a period: the quiet camera-to-command tail (13 ms p99)."""
        return self.enabled and autonomous and not self.forward_now(autonomous, now_ns)

    def timer_ticks(self, autonomous: bool, now_ns: int) -> bool:
        """The control timer fired at `now_ns` [ns]: tick now? False while commands are forwarded
        as they arrive (a tick within the last 1.5 periods)."""
        return not (self.enabled and autonomous and self.since_tick_ns(now_ns) < self.period_ns * 3 // 2)
