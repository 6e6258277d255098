"""`sim2real view BAG`: a bag served to Foxglove at 1x or faster, with pause, speed and seeking.

ReplayClock maps wall time to bag time (pure: every method takes the wall time [ns]). BagReplayer
walks the bag in log-time order and hands each message to the router when the clock reaches it;
a seek restarts the walk and, on the way to the seek point, keeps only the newest joint state,
chunk, supervisor state, target and calibrations (shown at the seek point, so the arm is where it
was), then plays on. Foxglove's playback bar drives it through the server's PlaybackControl
capability (the server is started with the bag's time range).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..bags import BagReader
from ..topics import (
    ACTION_CHUNK,
    CAMERA_IMAGE,
    CAMERA_INFO,
    JOINT_STATES,
    POLICY_CAMERA_INFO,
    POLICY_COMMAND,
    POLICY_IMAGE,
    ROBOT_COMMAND,
    SIM_TARGET,
    SUPERVISOR_STATE,
)
from .router import VizRouter
from .source import BagView, view_messages

NS_PER_S = 1_000_000_000
# Topics whose newest message before a seek point is shown at the seek point (state, not events).
STATE_TOPICS = (JOINT_STATES.name, ACTION_CHUNK.name, SUPERVISOR_STATE.name, SIM_TARGET.name, CAMERA_INFO.name,
                POLICY_CAMERA_INFO.name, ROBOT_COMMAND.name, POLICY_COMMAND.name)


class ReplayClock:
    """Bag time [ns] as a function of wall time [ns]: position = anchor + speed * (wall - wall_anchor)
    while playing, clamped to [start_ns, end_ns]."""

    def __init__(self, start_ns: int, end_ns: int, speed: float = 1.0, playing: bool = True, wall_ns: int = 0):
        if not speed > 0:
            raise ValueError(f"replay speed must be > 0, got {speed}")
        if end_ns < start_ns:
            raise ValueError(f"bag end {end_ns} ns before its start {start_ns} ns")
        self.start_ns, self.end_ns = int(start_ns), int(end_ns)
        self.speed = float(speed)
        self.playing = playing
        self._anchor_ns = self.start_ns
        self._wall_anchor_ns = int(wall_ns)

    def position(self, wall_ns: int) -> int:
        if not self.playing:
            return self._anchor_ns
        pos = self._anchor_ns + int((int(wall_ns) - self._wall_anchor_ns) * self.speed)
        return max(self.start_ns, min(self.end_ns, pos))

    def restart(self, wall_ns: int) -> None:
        """Count from `wall_ns` on, from the position the clock was anchored at (what a replay
        calls when it starts, so the time spent getting ready is not skipped)."""
        self._wall_anchor_ns = int(wall_ns)

    def _reanchor(self, wall_ns: int) -> None:
        self._anchor_ns = self.position(wall_ns)
        self._wall_anchor_ns = int(wall_ns)

    def play(self, wall_ns: int) -> None:
        self._reanchor(wall_ns)
        self.playing = True

    def pause(self, wall_ns: int) -> None:
        self._reanchor(wall_ns)
        self.playing = False

    def set_speed(self, speed: float, wall_ns: int) -> None:
        if not speed > 0:
            raise ValueError(f"replay speed must be > 0, got {speed}")
        self._reanchor(wall_ns)
        self.speed = float(speed)

    def seek(self, bag_ns: int, wall_ns: int) -> None:
        self._anchor_ns = max(self.start_ns, min(self.end_ns, int(bag_ns)))
        self._wall_anchor_ns = int(wall_ns)

    def wall_until(self, bag_ns: int, wall_ns: int) -> float:
        """Seconds of wall time until the clock reaches `bag_ns` (inf while paused)."""
        if not self.playing:
            return float("inf")
        return max(0.0, (int(bag_ns) - self.position(wall_ns)) / self.speed / NS_PER_S)

    def at_end(self, wall_ns: int) -> bool:
        return self.position(wall_ns) >= self.end_ns


@dataclass
class Control:
    """A pending request from a viewer (or the caller): play/pause, speed, seek target [ns]."""

    playing: bool | None = None
    speed: float | None = None
    seek_ns: int | None = None


class BagReplayer:
    """Replays a BagView through a router, paced by a ReplayClock.

    clock_ns: the wall clock [ns] (time.monotonic_ns in use; a test may pass its own).
    on_time: called with the bag time [ns] after each step (the server broadcasts it).
    """

    def __init__(self, view: BagView, router: VizRouter, clock: ReplayClock, clock_ns: Callable[[], int],
                 on_time: Callable[[int], None] | None = None) -> None:
        self.view, self.router, self.clock, self.clock_ns = view, router, clock, clock_ns
        self.on_time = on_time or (lambda _t: None)
        self._lock = threading.Lock()
        self._pending: Control | None = None
        self._wake = threading.Event()
        self.sent = 0

    def request(self, control: Control) -> None:
        """Queue a play/pause/speed/seek request (any thread); the replay loop applies it."""
        with self._lock:
            merged = self._pending or Control()
            self._pending = Control(control.playing if control.playing is not None else merged.playing,
                                    control.speed if control.speed is not None else merged.speed,
                                    control.seek_ns if control.seek_ns is not None else merged.seek_ns)
        self._wake.set()

    def _take(self) -> Control | None:
        with self._lock:
            pending, self._pending = self._pending, None
        return pending

    def _apply(self, control: Control) -> bool:
        """Apply a request; True when it seeks (the walk restarts)."""
        now = self.clock_ns()
        if control.speed is not None:
            self.clock.set_speed(control.speed, now)
        if control.seek_ns is not None:
            self.clock.seek(control.seek_ns, now)
        if control.playing is True:
            self.clock.play(now)
        elif control.playing is False:
            self.clock.pause(now)
        return control.seek_ns is not None

    def run(self, stop: threading.Event, exit_at_end: bool = False) -> None:
        """Replay until `stop` is set (or the end, with exit_at_end); seeking restarts the walk."""
        self.router.publish_robot(self.view.start_ns)
        self.clock.restart(self.clock_ns())
        seek_to: int | None = self.clock.position(self.clock_ns())
        while not stop.is_set():
            restarted = False
            with BagReader(self.view.path) as reader:
                held: dict[str, tuple[int, object]] = {}
                for log_time, topic, msg in view_messages(reader, self.view):
                    if seek_to is not None and log_time < seek_to:
                        if topic in STATE_TOPICS:
                            held[topic] = (log_time, msg)
                        elif topic != CAMERA_IMAGE.name and topic != POLICY_IMAGE.name:
                            self.router.handle(topic, msg, log_time)  # events: all of them
                        continue
                    if seek_to is not None:
                        for held_topic, (held_time, held_msg) in sorted(held.items(), key=lambda kv: kv[1][0]):
                            self.router.handle(held_topic, held_msg, held_time)
                        held, seek_to = {}, None
                    while not stop.is_set():  # wait for the clock to reach the message
                        control = self._take()
                        if control is not None and self._apply(control):
                            seek_to, restarted = self.clock.position(self.clock_ns()), True
                            break
                        wait = self.clock.wall_until(log_time, self.clock_ns())
                        if wait <= 0.0:
                            break
                        self._wake.wait(min(wait, 0.1))
                        self._wake.clear()
                    if restarted or stop.is_set():
                        break
                    self.router.handle(topic, msg, log_time)
                    self.sent += 1
                    self.on_time(log_time)
            if restarted:
                continue
            # The end: hold here (a viewer may seek back) unless told to exit.
            self.clock.seek(self.view.end_ns, self.clock_ns())
            self.on_time(self.view.end_ns)
            if exit_at_end:
                return
            while not stop.is_set():
                control = self._take()
                if control is not None and self._apply(control):
                    seek_to = self.clock.position(self.clock_ns())
                    break
                self._wake.wait(0.1)
                self._wake.clear()
