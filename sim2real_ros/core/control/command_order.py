"""When the supervisor node sends a robot command, and in what order (no ROS, time passed in).

`CommandOrder`: commands leave in the order they were decided, whichever thread decided them.
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
    """Robot commands leave in the order they were decided, whichever thread decided them.

    The executor thread (ticks, joystick) and the e-stop thread both decide under the core lock and
    publish after releasing it. A command decided before one that is already out is dropped, never
    sent late: a tick decided just before an e-stop cannot overwrite the e-stop's hold on the robot.
    Dropping loses nothing, because the command already out reflects a newer state of the core.
    """

    def __init__(self, publish: Callable[[Any], None]) -> None:
        self._publish = publish
        self._decided = 0
        self._sent = 0
        self._send_lock = threading.Lock()  # makes "newer than the last sent?" and the publish one step
        self.superseded = 0

    def number(self) -> int:
        """Number the next decision; call it under the lock that serializes the decisions."""
        self._decided += 1
        return self._decided

    def send(self, number: int, msg: Any) -> bool:
        """Publish `msg` (decision `number`) unless a later decision is already out; True if sent."""
        with self._send_lock:
            if number <= self._sent:
                self.superseded += 1
                return False
            self._sent = number
            self._publish(msg)
            return True


@dataclass
class CommandForwarding:
    """Forward-or-wait for policy commands (the supervisor's `forward_policy_commands`).

    period_ns: the control period [ns]; enabled: forward_policy_commands. In AUTONOMOUS, a policy
    command is sent at once when at least half a control period has passed since the last tick,
    else once half a period has passed (`deferred`: at most one command per half period, none
    waiting longer than half a period). The control timer is then
    the fallback for when commands stop: its tick runs only when no tick came for 1.5 periods.
    Outside AUTONOMOUS (or disabled) every timer tick runs and no policy command is forwarded.
    """

    period_ns: int
    enabled: bool = True
    last_tick_ns: int | None = field(default=None)  # node clock of the last core tick [ns]

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
        return self.enabled and autonomous and self.since_tick_ns(now_ns) >= self.period_ns // 2

    def deferred(self, autonomous: bool, now_ns: int) -> bool:
        """A policy command arrived at `now_ns` [ns] too soon after the last tick to go out: send it
        when half a period has passed (at most period / 2 from now), rather than with whatever
        comes next? The actuator's extra command for a new chunk (tick_on_chunk) otherwise waited
        for its next regular one, up to a period: the quiet camera-to-command tail (13 ms p99)."""
        return self.enabled and autonomous and not self.forward_now(autonomous, now_ns)

    def timer_ticks(self, autonomous: bool, now_ns: int) -> bool:
        """The control timer fired at `now_ns` [ns]: tick now? False while commands are forwarded
        as they arrive (a tick within the last 1.5 periods)."""
        return not (self.enabled and autonomous and self.since_tick_ns(now_ns) < self.period_ns * 3 // 2)
