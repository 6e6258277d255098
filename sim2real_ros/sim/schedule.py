"""sim_node's physics-loop timing without ROS or a simulator: which outputs are due at a sim time,
how many physics steps to the next one, how long to wait to keep pace with the wall clock, and when
to report the real-time factor.

Sim times are integer [ns] of the world's clock; wall times integer [ns] of a steady clock. Both are
passed in; nothing here reads a clock or sleeps.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import ConfigError
from ..core.timebase import NS_PER_S


def period_ns(rate_hz: float) -> int:
    """[ns] between ticks of a rate [Hz] (at least 1 ns)."""
    return max(1, int(round(NS_PER_S / rate_hz)))


def next_tick(tick_ns: int, period: int, now_ns: int) -> int:
    """The first tick of the grid tick_ns + k * period [ns] that lies after now_ns (tick_ns itself
    while now_ns is before it): a late check skips the ticks it missed, the grid does not drift."""
    if now_ns < tick_ns:
        return tick_ns
    return tick_ns + ((now_ns - tick_ns) // period + 1) * period


@dataclass(frozen=True)
class Due:
    """What to publish at one pass of the physics loop."""

    clock: bool
    joint_states: bool
    camera: bool


class MultiRateSchedule:
    """Three grids from `start_ns` [ns] of sim time: clock, joint_states and (camera_period_ns not
    None) camera frames, each with its own period [ns]."""

    def __init__(self, start_ns: int, clock_period_ns: int, joint_state_period_ns: int,
                 camera_period_ns: int | None) -> None:
        for name, value in (("clock_period_ns", clock_period_ns), ("joint_state_period_ns", joint_state_period_ns),
                            ("camera_period_ns", camera_period_ns)):
            if value is not None and value <= 0:
                raise ConfigError("sim schedule", name, value, "must be > 0")
        self.clock_period_ns = clock_period_ns
        self.joint_state_period_ns = joint_state_period_ns
        self.camera_period_ns = camera_period_ns
        self.next_clock_ns = self.next_joint_state_ns = self.next_camera_ns = int(start_ns)

    def due(self, now_ns: int) -> Due:
        """What is due at sim time `now_ns` [ns]; each due grid moves to its first tick after now_ns."""
        clock = now_ns >= self.next_clock_ns
        if clock:
            self.next_clock_ns = next_tick(self.next_clock_ns, self.clock_period_ns, now_ns)
        joint_states = now_ns >= self.next_joint_state_ns
        if joint_states:
            self.next_joint_state_ns = next_tick(self.next_joint_state_ns, self.joint_state_period_ns, now_ns)
        camera = self.camera_period_ns is not None and now_ns >= self.next_camera_ns
        if camera:
            self.next_camera_ns = next_tick(self.next_camera_ns, self.camera_period_ns, now_ns)
        return Due(clock, joint_states, camera)

    def next_event_ns(self) -> int:
        """[ns] sim time of the next output of any grid."""
        events = [self.next_clock_ns, self.next_joint_state_ns]
        if self.camera_period_ns is not None:
            events.append(self.next_camera_ns)
        return min(events)

    def steps(self, now_ns: int, dt_ns: int) -> int:
        """Physics steps of `dt_ns` [ns] from `now_ns` to reach the next output (at least 1)."""
        return max(1, -(-(self.next_event_ns() - now_ns) // dt_ns))


@dataclass(frozen=True)
class Pace:
    """After a physics step: wait `wait_ns` [ns] (> 0: ahead of the wall clock), else run on;
    `lag_reset`: the sim fell behind by more than the allowed lag and pacing restarted from now."""

    wait_ns: int
    lag_reset: bool = False


class RealtimePacer:
    """Realtime pacing: sim time advances at `real_time_factor` x wall time from a base pair (wall,
    sim) [ns]. Behind by more than `max_lag_ns` [ns], it stops catching up and rebases to now."""

    def __init__(self, real_time_factor: float, max_lag_ns: int, wall_ns: int, sim_ns: int) -> None:
        if not real_time_factor > 0:
            raise ConfigError("realtime pacing", "real_time_factor", real_time_factor, "must be > 0")
        self.real_time_factor = float(real_time_factor)
        self.max_lag_ns = int(max_lag_ns)
        self.rebase(wall_ns, sim_ns)

    def rebase(self, wall_ns: int, sim_ns: int) -> None:
        """Pace from here: sim time `sim_ns` corresponds to wall time `wall_ns` [ns]."""
        self.wall0_ns, self.sim0_ns = int(wall_ns), int(sim_ns)

    def due_wall_ns(self, sim_ns: int) -> int:
        """[ns] wall time at which sim time `sim_ns` is due."""
        return self.wall0_ns + int(round((sim_ns - self.sim0_ns) / self.real_time_factor))

    def after_step(self, sim_ns: int, wall_ns: int) -> Pace:
        """The sim reached `sim_ns` at wall time `wall_ns` [ns]: wait, run on, or rebase."""
        delay = self.due_wall_ns(sim_ns) - wall_ns
        if delay > 0:
            return Pace(delay)
        if -delay > self.max_lag_ns:
            self.rebase(wall_ns, sim_ns)
            return Pace(0, lag_reset=True)
        return Pace(0)


@dataclass(frozen=True)
class RateReport:
    """A status report is due: the real-time factor over the last period; `log`: a log line too."""

    real_time_factor: float
    log: bool


class RateReporter:
    """Real-time factor reports every `period_ns` of wall time, a log line every `log_period_ns`."""

    def __init__(self, period_ns: int, log_period_ns: int, wall_ns: int, sim_ns: int) -> None:
        self.period_ns, self.log_period_ns = int(period_ns), int(log_period_ns)
        self._wall_ns, self._sim_ns, self._log_wall_ns = int(wall_ns), int(sim_ns), int(wall_ns)

    def poll(self, wall_ns: int, sim_ns: int) -> RateReport | None:
        """None until a period of wall time passed since the last report; then the factor
        (sim time elapsed / wall time elapsed) and whether a log line is due."""
        elapsed = wall_ns - self._wall_ns
        if elapsed < self.period_ns:
            return None
        rtf = (sim_ns - self._sim_ns) / elapsed
        log = wall_ns - self._log_wall_ns >= self.log_period_ns
        if log:
            self._log_wall_ns = wall_ns
        self._wall_ns, self._sim_ns = wall_ns, sim_ns
        return RateReport(rtf, log)
