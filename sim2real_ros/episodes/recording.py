"""What a bag recorded besides the images: joint states, the actions to compare with, supervisor modes.

Pure (no rclpy): fed with deserialized bag messages (rosbags objects, duck-typed like ROS messages).

Time base: every time here is in the stamp clock of the observations (header.stamp of images and
joint states). Robot commands (Float64MultiArray) carry no stamp, so their send time is the bag's
log time; when the recorder ran on another clock than the stamps (wall time vs sim time), the
offset between the two is estimated from the joint states and taken off.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..conversions import MessageError, joint_state_to_sample, position_command_to_array, reorder, stamp_to_ns
from ..core.timebase import NS_PER_S
from ..topics import DatasetEpisodeEvent, SupervisorState

# |log time - stamp| above this means the recorder's clock is not the stamps' clock [ns].
CLOCK_MISMATCH_NS = NS_PER_S // 2
FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
JOINT_STATE = "sensor_msgs/msg/JointState"
ACTION_TYPES = (FLOAT_ARRAY, JOINT_STATE)


@dataclass(frozen=True)
class ClockOffset:
    """offset_ns: median of (log time - stamp) over joint states [ns]; applied: whether log times are
    shifted by it (only when the recorder's clock differs from the stamps' clock)."""

    offset_ns: int
    applied: bool
    samples: int

    def to_stamp_time(self, log_ns: int) -> int:
        return log_ns - self.offset_ns if self.applied else log_ns


@dataclass(frozen=True)
class Recording:
    """The recorded series, in the stamp time base, sorted by time.

    joint_stamps_ns (J,), joint_positions (J, n) [rad]: measured joints in the policy's order.
    action_send_ns (M,), action_values (M, n) [rad]: recorded commands and when they were sent.
    action_human (M,) bool: sent in a human mode (all True without mode filter).
    mode_times_ns (S,), modes (S,): supervisor mode changes.
    """

    joint_names: tuple[str, ...]
    joint_stamps_ns: np.ndarray
    joint_positions: np.ndarray
    action_send_ns: np.ndarray
    action_values: np.ndarray
    action_human: np.ndarray
    mode_times_ns: np.ndarray
    modes: tuple[str, ...]
    clock: ClockOffset
    problems: Counter = field(default_factory=Counter)

    def mode_durations_s(self, end_ns: int) -> dict[str, float]:
        """Time spent in each supervisor mode [s] up to `end_ns`."""
        out: Counter[str] = Counter()
        for i, mode in enumerate(self.modes):
            stop = self.mode_times_ns[i + 1] if i + 1 < len(self.modes) else max(end_ns, self.mode_times_ns[i])
            out[mode] += (stop - self.mode_times_ns[i]) / NS_PER_S
        return {mode: round(seconds, 3) for mode, seconds in out.items()}

    def joint_positions_at(self, stamps_ns: np.ndarray, tolerance_ns: int) -> np.ndarray:
        """Measured positions (N, n) nearest each stamp within tolerance, NaN where none."""
        n = len(self.joint_names)
        out = np.full((len(stamps_ns), n), np.nan)
        if len(self.joint_stamps_ns) == 0:
            return out
        right = np.clip(np.searchsorted(self.joint_stamps_ns, stamps_ns), 1, len(self.joint_stamps_ns) - 1)
        left = right - 1
        if len(self.joint_stamps_ns) == 1:
            left = right = np.zeros_like(right)
        nearest = np.where(np.abs(self.joint_stamps_ns[left] - stamps_ns) <= np.abs(self.joint_stamps_ns[right]
                                                                                     - stamps_ns), left, right)
        ok = np.abs(self.joint_stamps_ns[nearest] - stamps_ns) <= tolerance_ns
        out[ok] = self.joint_positions[nearest[ok]]
        return out


class RecordingCollector:
    """Collects joint states, actions and supervisor states message by message, then `finish()`es.

    joint_names: the policy's joint order. action_type: the action topic's message type.
    action_joints: joint order of Float64MultiArray actions. human_modes: modes whose commands
    count (empty: all).
    """

    def __init__(self, joint_names: tuple[str, ...], action_type: str, action_joints: tuple[str, ...],
                 human_modes: tuple[str, ...]) -> None:
        if action_type not in ACTION_TYPES:
            raise ValueError(f"action topic type {action_type} is not supported (use one of {ACTION_TYPES})")
        self.joint_names = tuple(joint_names)
        self.action_type = action_type
        self.action_joints = tuple(action_joints) or self.joint_names
        missing = [j for j in self.joint_names if j not in self.action_joints]
        if missing:
            raise ValueError(f"action_joints {list(self.action_joints)} lack the policy's joints {missing}")
        self._action_index = [self.action_joints.index(j) for j in self.joint_names]
        self.human_modes = tuple(human_modes)
        self.problems: Counter[str] = Counter()
        self._joints: list[tuple[int, np.ndarray]] = []
        self._log_offsets: list[int] = []
        # Actions: (time [ns], whether it is a log time needing the clock offset, values).
        self._actions: list[tuple[int, bool, np.ndarray]] = []
        self._modes: list[tuple[int, bool, str]] = []

    # ------------------------------------------------------------------ messages
    def add_joint_state(self, msg, log_ns: int) -> np.ndarray | None:
        """Add one JointState; returns its positions in the policy's order, None when malformed."""
        try:
            sample = joint_state_to_sample(msg, use_velocities=False)  # positions only, as policy_node
            positions = np.array(reorder(sample, self.joint_names), dtype=float)
        except MessageError:
            self.problems["bad_joint_state"] += 1
            return None
        if sample.stamp_ns > 0:
            self._log_offsets.append(log_ns - sample.stamp_ns)
            stamp = sample.stamp_ns
        else:
            self.problems["joint_state_without_stamp"] += 1
            stamp = log_ns  # a driver that leaves the stamp at zero: reception is the best we have
        self._joints.append((stamp, positions))
        return positions

    def add_action(self, msg, log_ns: int) -> None:
        try:
            if self.action_type == FLOAT_ARRAY:
                values = position_command_to_array(msg, len(self.action_joints))[self._action_index]
                self._actions.append((log_ns, True, values))
                return
            sample = joint_state_to_sample(msg, use_velocities=False)
            values = np.array(reorder(sample, self.joint_names), dtype=float)
        except MessageError:
            self.problems["bad_action"] += 1
            return
        if sample.stamp_ns > 0:
            self._actions.append((sample.stamp_ns, False, values))
        else:
            self._actions.append((log_ns, True, values))

    def add_supervisor_state(self, msg, log_ns: int) -> None:
        state = SupervisorState.from_msg(msg)
        if state is None:
            self.problems["state_without_mode"] += 1
            return
        self._add_mode(state.mode, stamp_to_ns(msg.header.stamp), log_ns)

    def add_operator_label(self, msg, log_ns: int) -> None:
        """A dataset/episode event (an imported LeRobot bag): its operator label puts the mode that
        operator works in in force at a labelled start, HOLD at the end (topics.DatasetEpisodeEvent).
        An unlabelled start (a bag imported before the label) changes nothing."""
        mode = DatasetEpisodeEvent.from_msg(msg).operator_mode
        if mode is not None:
            self._add_mode(mode, stamp_to_ns(msg.header.stamp), log_ns)

    def _add_mode(self, mode: str, stamp_ns: int, log_ns: int) -> None:
        self._modes.append((stamp_ns, False, mode) if stamp_ns > 0 else (log_ns, True, mode))

    # ------------------------------------------------------------------ result
    def clock_offset(self) -> ClockOffset:
        if not self._log_offsets:
            return ClockOffset(0, False, 0)
        # Integer median: a float median of ~1e18 ns wall-clock offsets would lose ~100 ns.
        ordered = np.sort(np.asarray(self._log_offsets, dtype=np.int64))
        offset = int(ordered[(len(ordered) - 1) // 2])
        return ClockOffset(offset, abs(offset) > CLOCK_MISMATCH_NS, len(self._log_offsets))

    def finish(self) -> Recording:
        clock = self.clock_offset()
        n = len(self.joint_names)
        joints = sorted(self._joints, key=lambda item: item[0])
        joint_stamps = np.array([t for t, _ in joints], dtype=np.int64)
        joint_positions = np.array([q for _, q in joints], dtype=float).reshape(-1, n)

        modes = sorted(((clock.to_stamp_time(t) if is_log else t, m) for t, is_log, m in self._modes),
                       key=lambda item: item[0])
        mode_times = np.array([t for t, _ in modes], dtype=np.int64)
        mode_names = tuple(m for _, m in modes)

        actions = sorted(((clock.to_stamp_time(t) if is_log else t, v) for t, is_log, v in self._actions),
                         key=lambda item: item[0])
        send = np.array([t for t, _ in actions], dtype=np.int64)
        values = np.array([v for _, v in actions], dtype=float).reshape(-1, n)
        if self.human_modes:
            human = np.array([mode in self.human_modes for mode in modes_at(mode_times, mode_names, send)], dtype=bool)
        else:
            human = np.ones(len(send), dtype=bool)
        return Recording(self.joint_names, joint_stamps, joint_positions, send, values, human, mode_times,
                         mode_names, clock, Counter(self.problems))


def modes_at(mode_times_ns: np.ndarray, modes: tuple[str, ...], times_ns: np.ndarray) -> list[str]:
    """The supervisor mode in force at each of `times_ns` ("UNKNOWN" before the first state)."""
    index = np.searchsorted(mode_times_ns, times_ns, side="right") - 1
    return [modes[i] if i >= 0 else "UNKNOWN" for i in index]
