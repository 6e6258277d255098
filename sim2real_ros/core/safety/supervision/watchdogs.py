"""Input freshness, the clock watch and the stale-input check.

Every input carries the time it was received (int [ns] on the node's clock). An input is fresh when it
was received within its timeout before now, never when it lies in the future. Time only goes
forward for the watchdogs: a time earlier than one already seen (sim time reset, a bag player
looping, an NTP step) is a clock step back, after which every input counts as stale until it
arrives again (the coordinator forgets the receipt times).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...timebase import NS_PER_S
from .config import SupervisorConfig
from .modes import HUMAN_MODES, POLICY_MODES, Mode


def fresh(stamp_ns: int | None, now_ns: int, timeout_s: float) -> bool:
    """Received within timeout_s [s] before now_ns [ns]; a receipt in the future is not fresh."""
    return stamp_ns is not None and 0 <= now_ns - stamp_ns <= timeout_s * NS_PER_S


def age_text(stamp_ns: int | None, now_ns: int) -> str:
    """How long ago stamp_ns [ns] was, for a reason: "0.123 s", or "ever (nothing received)"."""
    return "ever (nothing received)" if stamp_ns is None else f"{(now_ns - stamp_ns) / NS_PER_S:.3f} s"


@dataclass
class InputTimes:
    """When each watched input was last accepted, int [ns]; None: not since start or the last clock step back."""

    joint_state_ns: int | None = None
    policy_ns: int | None = None
    joy_ns: int | None = None

    def forget(self) -> None:
        """Every input stale until it arrives again (after a clock step back)."""
        self.joint_state_ns = self.policy_ns = self.joy_ns = None


class ClockWatch:
    """The latest time seen [ns]; an earlier one is a clock step back. With a steady time beside it
    (a clock that never stops or jumps), also how long the node's clock has stood still: with
    use_sim_time, input ages stop growing when `/clock` stops, and only a steady clock sees it."""

    def __init__(self) -> None:
        self.latest_ns: int | None = None
        self._still_ns: int | None = None  # the node's time last seen by standing_still_s [ns]
        self._still_since_steady_ns = 0  # steady time [ns] when it last changed
        self.started = False  # the node's time has changed at least once (sim time: /clock arrived)

    def standing_still_s(self, now_ns: int, steady_ns: int) -> float:
        """Seconds [s] of steady time (steady_ns [ns]) since the node's time now_ns [ns] last changed."""
        if self._still_ns is None or now_ns != self._still_ns:
            self.started = self.started or self._still_ns is not None
            self._still_ns, self._still_since_steady_ns = now_ns, steady_ns
            return 0.0
        return (steady_ns - self._still_since_steady_ns) / NS_PER_S

    def observe(self, now_ns: int) -> float | None:
        """Record now_ns [ns]; how far the clock stepped back [s], or None when it did not."""
        latest = self.latest_ns
        self.latest_ns = now_ns
        if latest is None or now_ns >= latest:
            return None
        return (latest - now_ns) / NS_PER_S


def missing_inputs(times: InputTimes, now_ns: int, config: SupervisorConfig) -> list[str]:
    """The inputs a policy mode needs that are not fresh at now_ns (empty: all are)."""
    missing = []
    if not fresh(times.joint_state_ns, now_ns, config.joint_state_timeout_s):
        missing.append("no fresh joint_states")
    if not fresh(times.policy_ns, now_ns, config.policy_timeout_s):
        missing.append("no fresh command/policy")
    return missing


def foreign_publishers_text(count: int) -> str:
    """Why another publisher on the robot command topic blocks arming and holds a moving arm."""
    return f"{count} other publisher(s) on the robot command topic"


def watchdog_problem(times: InputTimes, mode: Mode, foreign_publishers: int, now_ns: int,
                     config: SupervisorConfig) -> str:
    """Why a moving `mode` must hold at now_ns [ns] ("" when nothing is wrong): a stale joint state,
    a stale policy command in a policy mode, a stale joystick in a human mode, another publisher."""
    if not fresh(times.joint_state_ns, now_ns, config.joint_state_timeout_s):
        return (f"joint_states silent for {age_text(times.joint_state_ns, now_ns)} "
                f"(timeout {config.joint_state_timeout_s} s)")
    if mode in POLICY_MODES and not fresh(times.policy_ns, now_ns, config.policy_timeout_s):
        return f"command/policy silent for {age_text(times.policy_ns, now_ns)} (timeout {config.policy_timeout_s} s)"
    if mode in HUMAN_MODES and not fresh(times.joy_ns, now_ns, config.joy_timeout_s):
        return f"joy silent for {age_text(times.joy_ns, now_ns)} (timeout {config.joy_timeout_s} s)"
    if foreign_publishers > 0:
        return foreign_publishers_text(foreign_publishers)
    return ""
