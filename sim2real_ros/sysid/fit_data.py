"""Commanded and measured joint positions of one bag on one clock, split into fit and held-out parts.

The time base is the clock of the measured joint_states' header stamps (the robot's, or the sim's
own sim time), because that is the clock the dynamics run on: a sim paced slower than wall time, or
a robot clock offset from the recorder's, would otherwise stretch or shift the trajectories.
Commands (Float64MultiArray has no header) carry only the recorder's log time; they are put on the
state clock through the state messages' own (log time, stamp) pairs: the offset between the two
clocks is followed with a rolling median (drift, pacing) and lowered to the smallest transport
delay seen (its 5th percentile), so a command's time is when it reached the recorder minus the
state's quickest delivery. Stamped commands (a JointState command topic, e.g. the actuator's
command/policy, stamped with its control tick) keep their own stamps when those lie on the state
clock: a stamp is when the command was sent, which no receive time can tell as well (a loaded
recorder logs commands tens of ms late and in bursts). When the state stamps are unusable, both
topics use the log time.
Pure numpy/scipy, no rclpy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.ndimage import median_filter

from .latency import SysidError
from .signals import NS_PER_S, JointStream

# Rolling window of the clock offset [state samples]; centred, so drift is followed without lag.
OFFSET_WINDOW = 21
# Fraction of non-increasing stamps tolerated before the state clock is not trusted.
MAX_BACKWARD_FRACTION = 0.01
# Command stamps count as state-clock times when the median of (receive time on the state clock -
# stamp) lies in this range [s]: a little negative for the clock map's own error, up to the
# largest delivery delay a recording plausibly has. Outside it they are on some other clock.
COMMAND_STAMP_LEAD_S = -0.1
COMMAND_STAMP_AGE_S = 2.0


@dataclass(frozen=True)
class FitData:
    """One bag, ready to replay.

    joint_names (n,): commanded joints (command column order). command_t (K,) [s], commands (K, n)
    [rad]: commands on the state clock, relative to the first state sample. state_t (M,) [s],
    states (M, n) [rad]: the measured positions of the same joints. other_states: measured positions
    of joints that are not commanded, by name (M,) [rad]. split_t [s]: the first held-out time.
    time_source: 'header' or 'log'; origin_ns: the state clock value of t = 0. command_time_source:
    'header' (the commands' own stamps) or 'log' (receive times moved onto the time base).
    """

    joint_names: tuple[str, ...]
    command_t: np.ndarray
    commands: np.ndarray
    state_t: np.ndarray
    states: np.ndarray
    other_states: dict[str, np.ndarray]
    split_t: float
    time_source: str
    time_source_reason: str
    origin_ns: int
    transport_delay_s: float
    dropped: dict[str, int]
    command_time_source: str = "log"

    @property
    def duration_s(self) -> float:
        return float(self.state_t[-1])

    def train_mask(self, warmup_s: float = 0.0) -> np.ndarray:
        """State samples used for fitting: after warmup_s, before the split."""
        return (self.state_t >= warmup_s) & (self.state_t < self.split_t)

    def holdout_mask(self) -> np.ndarray:
        return self.state_t >= self.split_t

    def state_at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Measured (positions (n,) [rad], velocities (n,) [rad/s]) at time t [s] (interpolated)."""
        q = np.array([np.interp(t, self.state_t, self.states[:, j]) for j in range(self.states.shape[1])])
        i = int(np.clip(np.searchsorted(self.state_t, t), 1, len(self.state_t) - 1))
        span = self.state_t[i] - self.state_t[i - 1]
        qd = (self.states[i] - self.states[i - 1]) / span if span > 0 else np.zeros_like(q)
        return q, qd


def stamps_usable(stream: JointStream) -> tuple[bool, str]:
    """Whether header stamps make a clock: present and increasing (sim time may start at 0 and be
    far from the recorder's wall clock; only monotonicity matters here)."""
    if stream.stamp_ns is None:
        return False, f"{stream.topic} has no header stamps"
    if len(stream) < 10:
        return False, f"{stream.topic} has fewer than 10 messages"
    steps = np.diff(stream.stamp_ns)
    backward = float(np.mean(steps <= 0))
    if backward > MAX_BACKWARD_FRACTION:
        return False, f"{stream.topic} header stamps do not increase ({backward:.1%} of steps)"
    return True, f"{stream.topic} header stamps increase: the state clock is the time base"


def command_stamps_on_state_clock(command: JointStream, received_ns: np.ndarray) -> tuple[bool, str]:
    """Whether a command stream's header stamps are send times on the state clock: present,
    increasing, and consistent with received_ns (K,) [ns], the commands' receive times on that clock."""
    usable, reason = stamps_usable(command)
    if not usable:
        return False, reason
    assert command.stamp_ns is not None  # stamps_usable checked it
    age_s = float(np.median(received_ns - command.stamp_ns.astype(float))) / NS_PER_S
    if not COMMAND_STAMP_LEAD_S <= age_s <= COMMAND_STAMP_AGE_S:
        return False, (f"{command.topic} header stamps are {age_s:.3f} s before their receive time on the state "
                       f"clock (expected {COMMAND_STAMP_LEAD_S} .. {COMMAND_STAMP_AGE_S} s): another clock")
    return True, f"{command.topic} header stamps are on the state clock: they are the command times"


def log_to_state_clock(state: JointStream) -> tuple[np.ndarray, np.ndarray, float]:
    """(log_ns (M,), state-clock value at each log time (M,) [ns], transport delay [s]): the map
    from recorder log time to the state clock, sampled at the state messages."""
    offset = (state.log_ns - state.stamp_ns).astype(float)
    window = min(OFFSET_WINDOW, len(offset) - (1 - len(offset) % 2))
    trend = median_filter(offset, size=max(1, window), mode="nearest")
    # The quickest deliveries lie closest to the true clock offset; jitter only adds delay.
    lowest = float(np.percentile(offset - trend, 5))
    envelope = trend + lowest
    return state.log_ns.astype(float), state.log_ns - envelope, float(np.median(offset - envelope)) / NS_PER_S


def regular_times(t: np.ndarray, window: int = 25) -> tuple[np.ndarray, bool]:
    """Command times (K,) [s] re-estimated for a fixed-rate command stream, and whether it is one.

    A fixed-rate controller (the supervisor, the excitation player) sends one command per period,
    but a loaded recorder logs them in bursts: tens of ms late, then several at once. Over a window
    of commands the rate is steady, so each time is re-estimated as the median of its neighbours'
    times moved by whole periods. Streams that are not fixed-rate (long-run rate varying by more than
    10 %) are returned unchanged."""
    if len(t) < 4 * window:
        return t, False
    period = float(np.median(np.diff(t)))
    span = 2 * window
    rates = (t[span:] - t[:-span]) / span
    if period <= 0 or np.mean(np.abs(rates / np.median(rates) - 1.0) < 0.1) < 0.9:
        return t, False
    period = float(np.median(rates))
    # A pause in the commands (not a recorder stall) starts a new segment.
    breaks = np.flatnonzero(np.diff(t) > 20 * period) + 1
    out = t.copy()
    for segment in np.split(np.arange(len(t)), breaks):
        times = t[segment]
        for i in range(len(segment)):
            lo, hi = max(0, i - window), min(len(segment), i + window + 1)
            out[segment[i]] = float(np.median(times[lo:hi] - period * (np.arange(lo, hi) - i)))
    return out, True


def align(command: JointStream, state: JointStream, joint_names: list[str], holdout_fraction: float) -> FitData:
    """Put a command stream (columns = joint_names) and a JointState stream on one clock.

    Raises SysidError when the joints do not match, the streams do not overlap, or there is too
    little data."""
    if not 0.05 <= holdout_fraction <= 0.8:
        raise SysidError(f"holdout fraction must be in [0.05, 0.8], got {holdout_fraction}")
    n = len(joint_names)
    if command.n_joints != n:
        raise SysidError(f"{command.topic} carries {command.n_joints} positions per message but {n} joints were "
                         f"named ({joint_names}); pass the command joint order with --joints")
    if state.names:
        missing = [j for j in joint_names if j not in state.names]
        if missing:
            raise SysidError(f"{state.topic} has no joints {missing} (it has {list(state.names)})")
        columns = [state.names.index(j) for j in joint_names]
    elif state.n_joints == n:
        columns = list(range(n))
    else:
        raise SysidError(f"{state.topic} has no joint names and {state.n_joints} != {n} positions")
    usable, reason = stamps_usable(state)
    command_source = "log"
    if usable:
        log_ns, clock_ns, delay_s = log_to_state_clock(state)
        state_ns = state.stamp_ns.astype(float)
        command_ns = np.interp(command.log_ns.astype(float), log_ns, clock_ns)
        source = "header"
        if command.stamp_ns is not None:
            stamped, why = command_stamps_on_state_clock(command, command_ns)
            reason += f"; {why}"
            if stamped:
                command_ns, command_source = command.stamp_ns.astype(float), "header"
    else:
        state_ns = state.log_ns.astype(float)
        command_ns = command.log_ns.astype(float)
        source, delay_s = "log", 0.0
    order = np.argsort(state_ns, kind="stable")
    state_ns, positions = state_ns[order], state.positions[order]
    keep = np.concatenate([[True], np.diff(state_ns) > 0])
    state_ns, positions = state_ns[keep], positions[keep]
    if command_source == "log":
        # Receive times only: a fixed-rate stream's send times are better told by its rate.
        command_ns, regular = regular_times(command_ns / NS_PER_S)
        command_ns = command_ns * NS_PER_S
        if regular:
            reason += "; fixed-rate commands: times re-estimated from their rate (recorder log times come in bursts)"
    # Replay starts at the first state sample that has a command in effect.
    start = max(state_ns[0], command_ns[0])
    in_range = state_ns >= start
    if np.count_nonzero(in_range) < 50 or (state_ns[-1] - start) / NS_PER_S < 2.0:
        raise SysidError(f"{command.topic} and {state.topic} overlap for less than 2 s / 50 states: nothing to fit")
    state_ns, positions = state_ns[in_range], positions[in_range]
    origin = float(state_ns[0])
    state_t = (state_ns - origin) / NS_PER_S
    command_t = (command_ns - origin) / NS_PER_S
    split_t = float(state_t[-1] * (1.0 - holdout_fraction))
    others = {name: positions[:, i] for i, name in enumerate(state.names) if i not in columns}
    return FitData(
        joint_names=tuple(joint_names), command_t=command_t, commands=command.positions.copy(),
        state_t=state_t, states=positions[:, columns], other_states=others, split_t=split_t,
        time_source=source, time_source_reason=reason, origin_ns=int(origin), transport_delay_s=delay_s,
        dropped={command.topic: command.dropped, state.topic: state.dropped}, command_time_source=command_source,
    )
