"""The supervisor's settings and the range every numeric setting must lie in."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ConfigError

# Inclusive (low, high) bounds of every numeric SupervisorConfig field, in the field's unit. The node
# declares them as parameter ranges (`ros2 param describe` shows them). Why upper bounds: a timeout
# of 1e9 s switches its watchdog off without a word.
CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "control_period_s": (0.0005, 1.0),
    "policy_timeout_s": (0.001, 2.0),
    "joy_timeout_s": (0.01, 5.0),
    "teleop_timeout_s": (0.001, 2.0),
    "joint_state_timeout_s": (0.001, 2.0),
    "estop_heartbeat_timeout_s": (0.0, 5.0),  # 0 = no heartbeat
    "handover_ramp_s": (0.0, 10.0),
    "handover_max_gap_rad": (0.001, 3.2),
    "max_joint_jump_rad": (0.001, 3.2),
    "shared_authority": (0.0, 1.0),
    "shared_max_offset_rad": (0.0, 1.0),
    "joint_state_limit_margin_rad": (0.0, 1.0),
    "joint_jump_confirm_samples": (2, 50),
}


@dataclass(frozen=True)
class SupervisorConfig:
    """Timing, handover and input-check settings; times in seconds [s], gaps and offsets in [rad].

    estop_heartbeat_timeout_s = 0 disables the heartbeat watchdog on the e-stop topic.
    teleop_timeout_s: a leader arm's command/teleop older than this holds TELEOP.
    require_stop_source: arming needs a live stop source and losing it latches ESTOP (robots).
    joint_state_limit_margin_rad: a measured position beyond the robot's limits by more than this is
    rejected as implausible. joint_jump_confirm_samples: consecutive samples a jump must persist.
    Every numeric field must lie in CONFIG_RANGES.
    """

    control_period_s: float = 0.01
    policy_timeout_s: float = 0.1
    joy_timeout_s: float = 0.5
    teleop_timeout_s: float = 0.1
    joint_state_timeout_s: float = 0.2
    estop_heartbeat_timeout_s: float = 0.0
    auto_arm: bool = False
    require_stop_source: bool = False
    handover_ramp_s: float = 1.0
    handover_max_gap_rad: float = 0.5
    max_joint_jump_rad: float = 0.2
    shared_authority: float = 0.5
    shared_max_offset_rad: float = 0.3
    joint_state_limit_margin_rad: float = 0.5
    joint_jump_confirm_samples: int = 3
    source: str = "parameters"

    def __post_init__(self) -> None:
        for name, (low, high) in CONFIG_RANGES.items():
            value = getattr(self, name)
            integral = isinstance(low, int) and isinstance(high, int)
            kind = (int,) if integral else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) \
                    or not low <= value <= high:
                what = "an integer" if integral else "a finite number"
                raise ConfigError(self.source, name, value, f"must be {what} in [{low}, {high}]")
        for name in ("auto_arm", "require_stop_source"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(self.source, name, getattr(self, name), "must be true or false")
        if self.control_period_s > self.policy_timeout_s:
            raise ConfigError(self.source, "policy_timeout_s", self.policy_timeout_s,
                              f"must be >= the control period {self.control_period_s} s")
