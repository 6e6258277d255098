"""The supervisor's state machine: the only thing that decides what the robot is commanded.

Pure numpy, no rclpy; every input carries the time it was received (`now_ns` [ns]) so every
transition and watchdog is tested at fixed times (DESIGN.md §4, §6).

Modes and how they are entered
------------------------------
- HOLD (start-up state): hold at a fixed target. Left by arming.
- AUTONOMOUS: the policy's command, clamped. Entered by an arm request (the `arm` joystick button,
  the `supervisor/arm` service, or automatically with `auto_arm` once joint states and policy
  commands are fresh and the user has not disarmed). Arming checks fresh joint states, a fresh policy
  command, no other publisher on the robot command topic, and a gap between the policy's command
  and the measured position <= handover_max_gap_rad; then it ramps from the measured position to the
  policy's command, over handover_ramp_s for a gap of handover_max_gap_rad and proportionally faster
  for a smaller one (a policy already where the arm is takes over at once rather than lagging for
  the full ramp). A refused arm stays where it was and says why; `arm_refused` counts refusals (a
  failed check), not auto_arm waiting for its inputs to arrive.
- SHARED: the policy's command plus the human's correction (an offset integrated from the jog
  velocity times shared_authority while the deadman is held). `shared` button toggles it with
  AUTONOMOUS; leaving it is a hand-back (ramped, gap-checked).
- TELEOP: the human jogs (joint space or Cartesian) while the deadman is held; releasing it holds
  immediately. Entered with the `takeover` button from HOLD, AUTONOMOUS or SHARED.
- ESTOP (latched): any e-stop source (`estop` topic true, the joystick e-stop button, a silent
  e-stop heartbeat when configured, an `estop` publisher whose QoS cannot be heard) latches it
  from any mode; every other input is ignored until a reset request arrives while no source is
  active. A reset goes to HOLD.

A takeover (entering TELEOP or SHARED from a mode without the human) and the hand-back (leaving
them) are intervention events with start and end times. After a takeover the supervisor stays
disarmed for auto_arm: only an explicit arm request returns control to the policy.

Holds are stop category 2: the target is the measured position at the moment of the stop (the last
sent command if the measurement is stale), clamped to the position limits, and is not updated by
later measurements, with one exception: a measured jump.

Every command is step-limited, holds included (`clamp_command`): position limits, and a step of at
most velocity x the time since the last command sent (capped at one control period), so the velocity
limits hold however often `tick` is called and no single input moves the command by more than one
step. A hold therefore converges on its target at the velocity limits instead of jumping there. The
first command ever sent is step-limited from the measured position.

A measured jump is a change of the measured position faster than the velocity limits allow (2 x
velocity x the time between the stamps, plus max_joint_jump_rad) that persists over
joint_jump_confirm_samples consecutive samples (core.joint_jump): a re-homed encoder, a restarted
driver or a teleported sim robot (a sim episode reset). Until confirmed the new samples are held
back; a sample that comes back makes them outliers, rejected and counted, never used. A confirmed
jump re-captures the hold at the new measured position (reached through the step limit):
AUTONOMOUS and SHARED go to HOLD (auto_arm re-arms with the usual gap check and ramp, on a policy
command received after the jump: the last one before it was planned for the old position), TELEOP holds
until the deadman is pressed again, HOLD holds where the arm now is. While ESTOP is latched a jump
never moves the hold; the reset re-captures it at the measured position.

Inputs that are not physical are rejected and counted: joint states beyond the robot's (URDF) limits
by more than joint_state_limit_margin_rad, commands beyond them by more than COMMAND_MARGIN_RAD.
A stop request is honoured whenever the e-stop button can be read, whatever else is wrong with the
Joy message; a Joy message too short to hold the button is itself a pressed e-stop.

Time only goes forward for the watchdogs: when `now_ns` is earlier than a time already seen (sim time
reset, a bag player looping, an NTP step), every input counts as stale until it arrives again (the
ages are re-anchored at the new time, the e-stop heartbeat included), a moving mode holds, and
`clock_steps_back` counts it.

With require_stop_source (a robot), arming needs a live stop source: e-stop messages within
estop_heartbeat_timeout_s (when set) or a joystick whose e-stop button was read within joy_timeout_s.
Losing it while the arm moves latches ESTOP, and the reset waits for a live one.

No input raises out of the supervisor: an unexpected error latches ESTOP at the last command sent and
counts `internal_errors` (a callback that raises would end the node, and the hold with it).
"""
from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError
from .joint_jump import JointJumpConfig, JointJumpDetector
from .joystick import JoyMessageError, JoySample, decode_joy
from .safety import InvalidInputError, SafetyLimits, clamp_command, clamp_position, order_positions
from .teleop import Jogger
from .timebase import NS_PER_S


class Mode(str, enum.Enum):
    ESTOP = "ESTOP"
    HOLD = "HOLD"
    AUTONOMOUS = "AUTONOMOUS"
    SHARED = "SHARED"
    TELEOP = "TELEOP"


HUMAN_MODES = frozenset({Mode.SHARED, Mode.TELEOP})
POLICY_MODES = frozenset({Mode.AUTONOMOUS, Mode.SHARED})
MOVING_MODES = frozenset({Mode.AUTONOMOUS, Mode.SHARED, Mode.TELEOP})

COUNTER_NAMES = (
    "commands_sent", "clamped", "rejected_policy", "rejected_joint_states", "rejected_joy",
    "estops", "watchdog_holds", "joint_jumps", "arm_refused", "interventions", "clock_steps_back",
    "internal_errors",
)

# A command further than this beyond the robot's position limits is not a position but a fault
# (a policy emitting 1e308 would overflow the ramp arithmetic); nearer ones are clamped [rad or m].
COMMAND_MARGIN_RAD = math.pi

# Inclusive (low, high) bounds of every numeric SupervisorConfig field, in the field's unit. The node
# declares them as parameter ranges (`ros2 param describe` shows them). Why upper bounds: a timeout
# of 1e9 s switches its watchdog off without a word.
CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "control_period_s": (0.0005, 1.0),
    "policy_timeout_s": (0.001, 2.0),
    "joy_timeout_s": (0.01, 5.0),
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
    require_stop_source: arming needs a live stop source and losing it latches ESTOP (robots).
    joint_state_limit_margin_rad: a measured position beyond the robot's limits by more than this is
    rejected as implausible. joint_jump_confirm_samples: consecutive samples a jump must persist.
    Every numeric field must lie in CONFIG_RANGES.
    """

    control_period_s: float = 0.01
    policy_timeout_s: float = 0.1
    joy_timeout_s: float = 0.5
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


@dataclass(frozen=True)
class SentCommand:
    """A command to publish: positions (n,) [rad] in the configured joint order.

    hold is True when it is a hold at a fixed target (stop category 2).
    """

    positions: np.ndarray
    mode: Mode
    hold: bool


@dataclass(frozen=True)
class InterventionEvent:
    """A human takeover (end_ns = 0, still running) or hand-back; times [ns].

    mode: for a takeover the human mode entered, for a hand-back the mode control went to.
    """

    event: str
    start_ns: int
    end_ns: int
    mode: Mode
    reason: str


@dataclass(frozen=True)
class SupervisorStatus:
    """What supervisor/state reports."""

    mode: Mode
    reason: str
    estop_sources: tuple[str, ...]
    counters: dict[str, int]
    intervention_start_ns: int | None
    jog_mode: str
    foreign_publishers: int
    last_rejection: str
    hold_target: np.ndarray | None = field(default=None)


def _fail_safe(on_error: str) -> Callable:
    """Decorate a public entry point so that nothing raises out of it.

    An unexpected exception (a bug, an arithmetic corner no check foresaw) latches ESTOP at the last
    command sent and is counted, instead of escaping into the node, whose callback would then die
    and leave the robot without a supervisor. on_error: what the entry point returns then:
    "command" (the hold), "bool" (False), "request" ((False, message)) or "none".
    """

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def guarded(self: Supervisor, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 - the point: no input may end the supervisor
                return self._internal_error(method.__name__, err, on_error)

        return guarded

    return decorate


class Supervisor:
    """Modes, watchdogs, e-stop latch, teleop and handover (see the module docstring).

    Not thread-safe: the node serializes calls with a lock.
    """

    def __init__(self, config: SupervisorConfig, limits: SafetyLimits, jogger: Jogger) -> None:
        self.config = config
        self.limits = limits
        self.jogger = jogger
        self._dt = config.control_period_s
        self._estop_button = jogger.mapping.buttons.get("estop", -1)
        if config.require_stop_source and config.estop_heartbeat_timeout_s <= 0 and self._estop_button < 0:
            raise ConfigError(config.source, "require_stop_source", True,
                              "needs a stop source: estop_heartbeat_timeout_s > 0 or a joystick e-stop button")
        # The e-stop heartbeat counts from the first tick (with sim time the clock may start at 0).
        self._first_tick_ns: int | None = None
        self._latest_ns: int | None = None  # the latest time seen [ns]; earlier ones are a clock step back
        self._mode = Mode.HOLD
        self._reason = "starting: holding until armed"
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.last_rejection = ""
        self._events: list[InterventionEvent] = []
        self._q_meas: np.ndarray | None = None
        self._meas_ns: int | None = None
        self._jumps = JointJumpDetector(JointJumpConfig(
            limits.joint_names, limits.velocity, slack_rad=config.max_joint_jump_rad,
            max_dt_s=config.joint_state_timeout_s, confirm_samples=config.joint_jump_confirm_samples,
            source=config.source))
        self._outliers_counted = 0
        self._jump = ""  # why the joints last jumped, until the next tick acts on it
        self._q_policy: np.ndarray | None = None
        self._policy_ns: int | None = None
        self._joy: JoySample | None = None
        self._joy_ns: int | None = None
        self._joy_estop_ns: int | None = None  # last Joy whose e-stop button could be read
        self._estop_topic_active = False
        self._estop_msg_ns: int | None = None
        self._estop_button_active = ""  # why the joystick's e-stop is active ("" = released)
        self._unheard_estop_publishers = 0
        self._hold_target: np.ndarray | None = None
        self._last_sent: np.ndarray | None = None
        self._last_send_ns: int | None = None
        self._ramp_start_q: np.ndarray | None = None
        self._ramp_start_ns: int | None = None
        self._ramp_ns = 0  # duration of the running ramp [ns]
        self._shared_offset = np.zeros(limits.n)
        self._teleop_holding = True
        self._user_disarmed = False
        self._foreign_publishers = 0
        self._intervention_start_ns: int | None = None
        self._hold_reason = self._reason
        self._auto_arm_waiting = ""

    # ------------------------------------------------------------------------------------------
    # Read-outs
    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def last_sent(self) -> np.ndarray | None:
        return None if self._last_sent is None else self._last_sent.copy()

    @property
    def hold_target(self) -> np.ndarray | None:
        """Where the running hold converges [rad] (None before the first joint state)."""
        return None if self._hold_target is None else self._hold_target.copy()

    def estop_sources(self, now_ns: int) -> tuple[str, ...]:
        """The e-stop sources active now (a reset is refused while any is)."""
        sources = []
        if self._estop_topic_active:
            sources.append("estop topic is true")
        if self._estop_button_active:
            sources.append(self._estop_button_active)
        if self._heartbeat_silent_s(now_ns) is not None:
            sources.append("e-stop heartbeat is silent")
        if self._unheard_estop_publishers > 0:
            sources.append(f"{self._unheard_estop_publishers} estop publisher(s) cannot be heard (QoS must be "
                           "reliable + transient local)")
        missing = self._stop_source_missing(now_ns)
        if missing:
            sources.append(missing)
        return tuple(sources)

    def status(self, now_ns: int) -> SupervisorStatus:
        return SupervisorStatus(
            mode=self._mode, reason=self._reason, estop_sources=self.estop_sources(now_ns),
            counters=dict(self.counters), intervention_start_ns=self._intervention_start_ns,
            jog_mode=self.jogger.mode_name, foreign_publishers=self._foreign_publishers,
            last_rejection=self.last_rejection,
            hold_target=None if self._hold_target is None else self._hold_target.copy(),
        )

    def change_key(self) -> tuple:
        """Cheap fingerprint of what supervisor/state reports on change (mode, reason, e-stop
        inputs, pending events, rejections); the node builds a full status only when it changes."""
        rejected = self.counters["rejected_policy"] + self.counters["rejected_joint_states"] + \
            self.counters["rejected_joy"]
        return (self._mode, self._reason, self._estop_topic_active, self._estop_button_active,
                self._unheard_estop_publishers, len(self._events), rejected)

    def pop_events(self) -> list[InterventionEvent]:
        """Intervention events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------------------------------
    # Inputs
    @_fail_safe("bool")
    def on_joint_state(self, names: Sequence[str], positions: Sequence[float], now_ns: int,
                       stamp_ns: int | None = None) -> bool:
        """Measured joint positions [rad] (may include extra joints), received at now_ns and measured
        at stamp_ns (the message's header stamp [ns]; None or 0: use now_ns). False if not used:
        rejected (malformed, implausible), or held back as a possible outlier or jump."""
        self._observe_clock(now_ns)
        try:
            q = order_positions(names, positions, self.limits.joint_names, allow_extra=True)
        except InvalidInputError as err:
            self._reject("rejected_joint_states", f"joint_states: {err}")
            return False
        implausible = self._beyond_limits(q, self.config.joint_state_limit_margin_rad)
        if implausible:
            self._reject("rejected_joint_states", f"joint_states: implausible reading, {implausible}")
            return False
        jump = self._jumps.update(q, stamp_ns if stamp_ns else now_ns)
        if self._jumps.outliers != self._outliers_counted:
            self.counters["rejected_joint_states"] += self._jumps.outliers - self._outliers_counted
            self._outliers_counted = self._jumps.outliers
            self.last_rejection = self._jumps.last_outlier
        if self._jumps.pending:
            return False
        if jump:
            self.counters["joint_jumps"] += 1
            self._jump = jump
            # The policy's last command was planned for where the arm was: never arm on it.
            self._policy_ns = None
        self._q_meas = q
        self._meas_ns = now_ns
        return True

    @_fail_safe("bool")
    def on_policy_command(self, names: Sequence[str], positions: Sequence[float], now_ns: int) -> bool:
        """The policy's command [rad] (exactly the configured joints, any order). False if rejected."""
        self._observe_clock(now_ns)
        try:
            q = order_positions(names, positions, self.limits.joint_names, allow_extra=False)
        except InvalidInputError as err:
            self._reject("rejected_policy", f"command/policy: {err}")
            return False
        nonphysical = self._beyond_limits(q, COMMAND_MARGIN_RAD)
        if nonphysical:
            self._reject("rejected_policy", f"command/policy: not a position, {nonphysical}")
            return False
        self._q_policy = q
        self._policy_ns = now_ns
        return True

    @_fail_safe("command")
    def on_estop(self, active: bool, now_ns: int) -> SentCommand | None:
        """An `estop` message (true = stop). Returns the hold to publish at once when it latches."""
        self._observe_clock(now_ns)
        self._estop_msg_ns = now_ns
        self._estop_topic_active = bool(active)
        if active:
            return self._latch(now_ns, "estop topic is true")
        return None

    @_fail_safe("command")
    def on_joy(self, axes: Sequence[float], buttons: Sequence[int], now_ns: int) -> SentCommand | None:
        """A Joy message. The e-stop button is read first, before anything else is checked, and wins
        over every other button: a message rejected for its axes still stops the arm.

        Returns a hold to publish at once (e-stop button, deadman released, hold button), else None.
        """
        self._observe_clock(now_ns)
        self._read_estop_button(buttons, now_ns)
        try:
            sample = decode_joy(self.jogger.mapping, axes, buttons)
        except JoyMessageError as err:
            self._reject("rejected_joy", f"joy: {err}")
            return self._latch(now_ns, self._estop_button_active) if self._estop_button_active else None
        if self._estop_button_active:
            return self._latch(now_ns, self._estop_button_active)
        # A joystick that (re)appears with a button already down must not act on it: edges only
        # count between two consecutive fresh messages.
        fresh = self._fresh(self._joy_ns, now_ns, self.config.joy_timeout_s)
        edges = sample.pressed - self._joy.pressed if (fresh and self._joy is not None) else frozenset()
        self._joy, self._joy_ns = sample, now_ns
        if self._mode == Mode.ESTOP:
            return None
        if "next_group" in edges:
            self.jogger.next_group()
        if "toggle_cartesian" in edges:
            self.jogger.toggle_cartesian()
        if "hold" in edges:
            self.request_hold(now_ns, "hold button")
            return self._emit_hold(now_ns)
        if "takeover" in edges:
            self._takeover(now_ns)
        elif "shared" in edges:
            self._toggle_shared(now_ns)
        elif "arm" in edges:
            self.request_arm(now_ns, "arm button")
        if self._mode == Mode.TELEOP and not sample.is_pressed("deadman") and not self._teleop_holding:
            self._teleop_holding = True
            self._capture_hold(now_ns)
            self._reason = "TELEOP: deadman released, holding"
            return self._emit_hold(now_ns)
        return None

    def _read_estop_button(self, buttons: Sequence[int], now_ns: int) -> None:
        """Set the joystick e-stop state from the raw buttons, whatever else the message holds."""
        index = self._estop_button
        if index < 0:
            return
        try:
            pressed = bool(buttons[index]) if len(buttons) > index else None
        except Exception:  # noqa: BLE001 - an unreadable button is a fault of the stop source
            pressed = None
        if pressed is None:
            self._estop_button_active = (f"joystick e-stop button {index} unreadable (the Joy message has "
                                         f"{len(buttons)} buttons): a stop source that cannot be read")
            return
        self._joy_estop_ns = now_ns
        self._estop_button_active = "joystick e-stop button is pressed" if pressed else ""

    @_fail_safe("command")
    def set_unheard_estop_publishers(self, count: int, now_ns: int) -> SentCommand | None:
        """How many publishers on `estop` this subscription cannot hear (incompatible QoS).

        A stop button that cannot be heard counts as pressed: it latches and blocks the reset.
        """
        self._observe_clock(now_ns)
        self._unheard_estop_publishers = int(count)
        if count > 0:
            return self._latch(now_ns, f"{count} estop publisher(s) with incompatible QoS cannot be heard")
        return None

    def set_foreign_publishers(self, count: int) -> None:
        """How many publishers other than the supervisor are on the robot command topic."""
        self._foreign_publishers = int(count)

    # ------------------------------------------------------------------------------------------
    # Requests (services, buttons)
    @_fail_safe("request")
    def request_reset(self, now_ns: int) -> tuple[bool, str]:
        """Clear the e-stop latch, only once every e-stop source is released. Goes to HOLD at the
        measured position (a jump while latched did not move the hold; the reset does, ramped)."""
        self._observe_clock(now_ns)
        if self._mode != Mode.ESTOP:
            return True, f"not latched (mode {self._mode.value}); nothing to reset"
        active = self.estop_sources(now_ns)
        if active:
            return False, "reset refused: e-stop still active: " + "; ".join(active)
        self._set_mode(Mode.HOLD, f"reset after e-stop ({self._reason}); holding until armed", now_ns)
        self._capture_hold(now_ns)
        return True, "e-stop cleared; HOLD until armed"

    @_fail_safe("request")
    def request_arm(self, now_ns: int, why: str = "arm request") -> tuple[bool, str]:
        """Give control to the policy (AUTONOMOUS), ramped from the measured position."""
        self._observe_clock(now_ns)
        if self._mode == Mode.ESTOP:
            return self._refuse_arm(f"{why} refused: e-stop latched; reset first")
        if self._mode == Mode.AUTONOMOUS:
            return True, "already AUTONOMOUS"
        blockers = self._policy_blockers(now_ns)
        if blockers:
            return self._refuse_arm(f"{why} refused: " + "; ".join(blockers))
        self._user_disarmed = False
        self._enter_policy_mode(Mode.AUTONOMOUS, now_ns, f"armed by {why}")
        return True, f"AUTONOMOUS (ramp {self._ramp_ns / NS_PER_S:.3f} s)"

    @_fail_safe("request")
    def request_hold(self, now_ns: int, why: str = "hold request") -> tuple[bool, str]:
        """HOLD and stay disarmed (auto_arm waits for an explicit arm). No effect while latched."""
        self._observe_clock(now_ns)
        if self._mode == Mode.ESTOP:
            return False, "e-stop latched; already holding"
        self._user_disarmed = True
        self._set_mode(Mode.HOLD, f"{why}: holding until armed", now_ns)
        return True, "HOLD"

    # ------------------------------------------------------------------------------------------
    # The control tick
    @_fail_safe("command")
    def tick(self, now_ns: int) -> SentCommand | None:
        """One control period: watchdogs, then the command to send (None until a joint state)."""
        self._observe_clock(now_ns)
        if self._first_tick_ns is None:
            self._first_tick_ns = now_ns
        silent = self._heartbeat_silent_s(now_ns)
        if silent is not None:
            self._latch(now_ns, f"e-stop heartbeat silent for {silent:.3f} s")
        if self._mode in MOVING_MODES:
            missing = self._stop_source_missing(now_ns)
            if missing:
                self._latch(now_ns, f"stop source lost: {missing}")
        if self._jump:
            # This tick holds at the new position; re-arming can come from the next one.
            self._on_jump(now_ns)
            return self._emit_hold(now_ns)
        if self._mode == Mode.ESTOP:
            return self._emit_hold(now_ns)
        if self._mode in MOVING_MODES:
            problem = self._watchdog_problem(now_ns)
            if problem:
                self.counters["watchdog_holds"] += 1
                self._set_mode(Mode.HOLD, problem, now_ns)
        if self._mode == Mode.HOLD:
            if self._hold_target is None and self._q_meas is not None:
                self._capture_hold(now_ns)
            if self.config.auto_arm and not self._user_disarmed:
                self._auto_arm(now_ns)
        if self._mode == Mode.HOLD:
            return self._emit_hold(now_ns)
        if self._mode == Mode.TELEOP:
            return self._teleop_tick(now_ns)
        return self._policy_tick(now_ns)

    # ------------------------------------------------------------------------------------------
    def _on_jump(self, now_ns: int) -> None:
        """Re-capture the hold at the measured position after a jump (see the module docstring)."""
        why, self._jump = self._jump, ""
        if self._mode == Mode.ESTOP:
            base = self._reason.split(" | ")[0]
            self._reason = f"{base} | {why}: hold kept while latched (the reset re-captures it)"
            return
        if self._mode in POLICY_MODES:
            self._set_mode(Mode.HOLD, f"{why}: holding at the new measured position", now_ns)
            return
        self._capture_hold(now_ns)
        if self._mode == Mode.TELEOP:
            self._teleop_holding = True
            self._reason = f"TELEOP: {why}: holding at the new measured position"
        elif self._mode == Mode.HOLD:
            base = self._hold_reason.split(" | ")[0]  # repeated jumps replace, not pile up
            self._reason = self._hold_reason = f"{base} | {why}: holding at the new measured position"

    def _teleop_tick(self, now_ns: int) -> SentCommand | None:
        sample = self._joy
        if sample is None or not sample.is_pressed("deadman"):
            if not self._teleop_holding:
                self._teleop_holding = True
                self._capture_hold(now_ns)
            return self._emit_hold(now_ns)
        if self._teleop_holding or self._last_sent is None:
            if self._last_sent is None:
                self._capture_hold(now_ns)
                return self._emit_hold(now_ns)
            if self._hold_target is not None and not np.allclose(self._last_sent, self._hold_target,
                                                                 rtol=0.0, atol=1e-9):
                # Jogging starts where the arm is: first the hold reaches it (after a jump it is
                # still on its way from the old position, through the step limit).
                return self._emit_hold(now_ns)
            self._teleop_holding = False
            self._reason = "TELEOP: jogging"
        velocity = self.jogger.joint_velocity(sample, self._last_sent)
        return self._send(self._last_sent + velocity * self._dt, now_ns)

    def _policy_tick(self, now_ns: int) -> SentCommand | None:
        assert self._q_policy is not None
        target = self._q_policy
        if self._mode == Mode.SHARED:
            if self._joy is not None and self._joy.is_pressed("deadman") and self._last_sent is not None:
                velocity = self.jogger.joint_velocity(self._joy, self._last_sent)
                self._shared_offset = np.clip(
                    self._shared_offset + self.config.shared_authority * velocity * self._dt,
                    -self.config.shared_max_offset_rad, self.config.shared_max_offset_rad)
            target = target + self._shared_offset
        if self._ramp_start_ns is not None and self._ramp_start_q is not None:
            s = (now_ns - self._ramp_start_ns) / self._ramp_ns if self._ramp_ns > 0 else 1.0
            if s >= 1.0:
                self._ramp_start_ns = self._ramp_start_q = None
            else:
                target = self._ramp_start_q + max(s, 0.0) * (target - self._ramp_start_q)
        return self._send(target, now_ns)

    def _step_limited(self, wish: np.ndarray, now_ns: int) -> np.ndarray:
        """What may be sent for `wish` (n,) [rad] now: within the position limits and at most velocity
        x the time since the last command sent (capped at one control period) from it; the first
        command ever is limited from the measured position. Records it as sent."""
        dt = self._dt
        if self._last_send_ns is not None:
            # Ticks closer together than the control period (a node forwarding the policy's commands
            # as they arrive, an e-stop between ticks) move proportionally less: the velocity limit
            # holds at any tick rate.
            dt = min(max((now_ns - self._last_send_ns) / NS_PER_S, 0.0), self._dt)
        reference = self._last_sent
        if reference is None and self._q_meas is not None:
            reference = clamp_position(self._q_meas, self.limits)
        sent = clamp_command(wish, reference, self.limits, dt)
        self._last_sent = sent
        self._last_send_ns = now_ns
        self.counters["commands_sent"] += 1
        return sent

    def _send(self, wish: np.ndarray, now_ns: int) -> SentCommand:
        sent = self._step_limited(wish, now_ns)
        if not np.allclose(sent, wish, rtol=0.0, atol=1e-12):
            self.counters["clamped"] += 1
        return SentCommand(sent.copy(), self._mode, hold=False)

    def _emit_hold(self, now_ns: int) -> SentCommand | None:
        """The hold command: toward the hold target, step-limited like every command."""
        if self._hold_target is None:
            return None
        sent = self._step_limited(self._hold_target, now_ns)
        return SentCommand(sent.copy(), self._mode, hold=True)

    def _capture_hold(self, now_ns: int) -> None:
        """Stop category 2 target: measured position now (last sent if the measurement is stale)."""
        if self._q_meas is not None and self._fresh(self._meas_ns, now_ns, self.config.joint_state_timeout_s):
            self._hold_target = clamp_position(self._q_meas, self.limits)
        elif self._last_sent is not None:
            self._hold_target = self._last_sent.copy()
        elif self._q_meas is not None:
            self._hold_target = clamp_position(self._q_meas, self.limits)

    # ------------------------------------------------------------------------------------------
    def _latch(self, now_ns: int, why: str) -> SentCommand | None:
        if self._mode == Mode.ESTOP:
            return None
        self.counters["estops"] += 1
        self._set_mode(Mode.ESTOP, f"e-stop: {why}", now_ns)
        return self._emit_hold(now_ns)

    def _set_mode(self, mode: Mode, reason: str, now_ns: int) -> None:
        """Every mode change goes through here: hold capture, ramp reset, intervention events."""
        previous = self._mode
        if mode in (Mode.HOLD, Mode.ESTOP) and (previous in MOVING_MODES or self._hold_target is None):
            self._capture_hold(now_ns)
        if mode == Mode.TELEOP and previous != Mode.TELEOP:
            self._teleop_holding = True
            self._capture_hold(now_ns)
        if mode != Mode.SHARED:
            self._shared_offset = np.zeros(self.limits.n)
        if mode not in POLICY_MODES:
            self._ramp_start_ns = self._ramp_start_q = None
        if previous in HUMAN_MODES and mode not in HUMAN_MODES and self._intervention_start_ns is not None:
            self._events.append(InterventionEvent("handback", self._intervention_start_ns, now_ns, mode, reason))
            self._intervention_start_ns = None
        if previous not in HUMAN_MODES and mode in HUMAN_MODES:
            self._intervention_start_ns = now_ns
            self.counters["interventions"] += 1
            self._events.append(InterventionEvent("takeover", now_ns, 0, mode, reason))
        self._mode = mode
        self._reason = reason
        if mode == Mode.HOLD:
            self._hold_reason = reason
            self._auto_arm_waiting = ""

    def _enter_policy_mode(self, mode: Mode, now_ns: int, reason: str) -> None:
        # SHARED -> AUTONOMOUS drops the human's offset, so it ramps like any hand-back.
        ramp = self._mode not in POLICY_MODES or (mode == Mode.AUTONOMOUS and self._mode == Mode.SHARED)
        self._set_mode(mode, reason, now_ns)
        if ramp and self.config.handover_ramp_s > 0:
            assert self._q_meas is not None and self._q_policy is not None
            gap = float(np.max(np.abs(self._q_policy - self._q_meas)))
            fraction = min(1.0, gap / self.config.handover_max_gap_rad)
            self._ramp_ns = int(round(self.config.handover_ramp_s * fraction * NS_PER_S))
            if self._ramp_ns > 0:
                self._ramp_start_q = self._q_meas.copy()
                self._ramp_start_ns = now_ns

    def _takeover(self, now_ns: int) -> None:
        if self._mode == Mode.TELEOP:
            return
        blockers = []
        if not self._fresh(self._meas_ns, now_ns, self.config.joint_state_timeout_s):
            blockers.append("no fresh joint_states")
        if self._foreign_publishers > 0:
            blockers.append(f"{self._foreign_publishers} other publisher(s) on the robot command topic")
        missing = self._stop_source_missing(now_ns)
        if missing:
            blockers.append(missing)
        if blockers:
            self._refuse_arm("takeover refused: " + "; ".join(blockers))
            return
        self._user_disarmed = True
        self._set_mode(Mode.TELEOP, "TELEOP: human took over (hold the deadman to jog)", now_ns)

    def _toggle_shared(self, now_ns: int) -> None:
        if self._mode == Mode.SHARED:
            self.request_arm(now_ns, "shared button (hand back)")
            return
        if self._mode == Mode.AUTONOMOUS:
            self._user_disarmed = True
            self._set_mode(Mode.SHARED, "SHARED: policy with human corrections", now_ns)
            return
        blockers = self._policy_blockers(now_ns)
        if blockers:
            self._refuse_arm("shared refused: " + "; ".join(blockers))
            return
        self._user_disarmed = True
        self._enter_policy_mode(Mode.SHARED, now_ns, "SHARED: policy with human corrections")

    def _auto_arm(self, now_ns: int) -> None:
        missing = self._missing_inputs(now_ns)
        refusals = self._failed_checks(now_ns, check_gap=not missing)
        if not missing and not refusals:
            self._enter_policy_mode(Mode.AUTONOMOUS, now_ns, "armed automatically (auto_arm)")
            return
        waiting = "auto_arm waiting: " + "; ".join(missing + refusals)
        if waiting != self._auto_arm_waiting and refusals:
            # A refusal is a check that failed (gap, another publisher, no stop source), counted once
            # per distinct reason, not once per tick; waiting for inputs to arrive (at start-up, after
            # a jump made the policy's last plan stale) is not one.
            self.counters["arm_refused"] += 1
        self._auto_arm_waiting = waiting
        self._reason = f"{self._hold_reason} | {waiting}"

    def _policy_blockers(self, now_ns: int) -> list[str]:
        """Why control cannot go to the policy now (empty: it can): missing inputs, failed checks."""
        missing = self._missing_inputs(now_ns)
        return missing + self._failed_checks(now_ns, check_gap=not missing)

    def _missing_inputs(self, now_ns: int) -> list[str]:
        """The inputs a policy mode needs that are not fresh now (empty: all are)."""
        missing = []
        if not self._fresh(self._meas_ns, now_ns, self.config.joint_state_timeout_s):
            missing.append("no fresh joint_states")
        if not self._fresh(self._policy_ns, now_ns, self.config.policy_timeout_s):
            missing.append("no fresh command/policy")
        return missing

    def _failed_checks(self, now_ns: int, check_gap: bool) -> list[str]:
        """The arming checks that fail now; the handover gap only with check_gap and nothing else failing."""
        blockers = []
        if self._foreign_publishers > 0:
            blockers.append(f"{self._foreign_publishers} other publisher(s) on the robot command topic")
        missing = self._stop_source_missing(now_ns)
        if missing:
            blockers.append(missing)
        if check_gap and not blockers and self._q_policy is not None and self._q_meas is not None:
            gap = np.abs(self._q_policy - self._q_meas)
            worst = int(np.argmax(gap))
            if gap[worst] > self.config.handover_max_gap_rad:
                blockers.append(
                    f"handover gap {gap[worst]:.3f} rad at joint '{self.limits.joint_names[worst]}' "
                    f"> handover_max_gap_rad {self.config.handover_max_gap_rad}")
        return blockers

    def _refuse_arm(self, message: str) -> tuple[bool, str]:
        self.counters["arm_refused"] += 1
        self._reason = message if self._mode != Mode.ESTOP else self._reason
        return False, message

    def _watchdog_problem(self, now_ns: int) -> str:
        cfg = self.config
        age = self._age_s
        if not self._fresh(self._meas_ns, now_ns, cfg.joint_state_timeout_s):
            return f"joint_states silent for {age(self._meas_ns, now_ns)} (timeout {cfg.joint_state_timeout_s} s)"
        if self._mode in POLICY_MODES and not self._fresh(self._policy_ns, now_ns, cfg.policy_timeout_s):
            return f"command/policy silent for {age(self._policy_ns, now_ns)} (timeout {cfg.policy_timeout_s} s)"
        if self._mode in HUMAN_MODES and not self._fresh(self._joy_ns, now_ns, cfg.joy_timeout_s):
            return f"joy silent for {age(self._joy_ns, now_ns)} (timeout {cfg.joy_timeout_s} s)"
        if self._foreign_publishers > 0:
            return f"{self._foreign_publishers} other publisher(s) on the robot command topic"
        return ""

    def _heartbeat_silent_s(self, now_ns: int) -> float | None:
        """Seconds of e-stop silence when the heartbeat is configured and exceeded, else None."""
        timeout = self.config.estop_heartbeat_timeout_s
        if timeout <= 0:
            return None
        last = self._estop_msg_ns if self._estop_msg_ns is not None else self._first_tick_ns
        if last is None:
            return None
        silent = (now_ns - last) / NS_PER_S
        return silent if silent > timeout else None

    def _stop_source_missing(self, now_ns: int) -> str:
        """With require_stop_source: why no stop source is live now ("" when one is, or not required)."""
        cfg = self.config
        if not cfg.require_stop_source:
            return ""
        heartbeat = cfg.estop_heartbeat_timeout_s
        if heartbeat > 0 and self._fresh(self._estop_msg_ns, now_ns, heartbeat):
            return ""
        if self._estop_button >= 0 and self._fresh(self._joy_estop_ns, now_ns, cfg.joy_timeout_s):
            return ""
        sources = []
        if heartbeat > 0:
            sources.append(f"estop messages within {heartbeat} s")
        if self._estop_button >= 0:
            sources.append(f"a joystick (e-stop button {self._estop_button}) within {cfg.joy_timeout_s} s")
        return "no live stop source (require_stop_source: needs " + " or ".join(sources) + ")"

    def _observe_clock(self, now_ns: int) -> None:
        """Watchdogs count forward only: a time earlier than one already seen re-anchors every input
        age at `now_ns` (stale until it arrives again) and holds a moving arm."""
        latest = self._latest_ns
        if latest is None or now_ns >= latest:
            self._latest_ns = now_ns
            return
        self._latest_ns = now_ns
        self.counters["clock_steps_back"] += 1
        step_s = (latest - now_ns) / NS_PER_S
        self._meas_ns = self._policy_ns = self._joy_ns = self._joy_estop_ns = None
        self._estop_msg_ns = None
        self._first_tick_ns = now_ns  # the e-stop heartbeat counts again from here
        self._last_send_ns = None
        self._jumps.reset()
        why = f"clock stepped back {step_s:.3f} s: every input is stale until it arrives again"
        if self._mode in MOVING_MODES:
            self.counters["watchdog_holds"] += 1
            self._set_mode(Mode.HOLD, why, now_ns)
        elif self._mode == Mode.HOLD:
            self._reason = self._hold_reason = f"{self._hold_reason.split(' | ')[0]} | {why}"
        else:
            self._reason = f"{self._reason.split(' | ')[0]} | {why}"

    def _beyond_limits(self, q: np.ndarray, margin: float) -> str:
        """Why `q` (n,) lies beyond the robot's limits by more than `margin` [rad] ("" when it does not)."""
        lower = self.limits.physical_lower - margin
        upper = self.limits.physical_upper + margin
        outside = (q < lower) | (q > upper)
        if not np.any(outside):
            return ""
        worst = int(np.argmax(outside))
        return (f"joint '{self.limits.joint_names[worst]}' at {q[worst]:.6g} is beyond its limits "
                f"[{self.limits.physical_lower[worst]:.3f}, {self.limits.physical_upper[worst]:.3f}] "
                f"by more than {margin:.3f}")

    def _internal_error(self, where: str, err: Exception, on_error: str):
        """Latch ESTOP at the last command sent after an unexpected error (see _fail_safe)."""
        self.counters["internal_errors"] += 1
        self.last_rejection = f"internal error in {where}: {type(err).__name__}: {err}"
        if self._mode != Mode.ESTOP:
            self.counters["estops"] += 1
        self._mode = Mode.ESTOP
        self._reason = f"e-stop: {self.last_rejection}"
        if self._last_sent is not None:
            self._hold_target = self._last_sent.copy()
        if on_error == "command":
            return None if self._last_sent is None else SentCommand(self._last_sent.copy(), Mode.ESTOP, hold=True)
        if on_error == "bool":
            return False
        if on_error == "request":
            return False, self._reason
        return None

    def record_rejection(self, counter: str, message: str) -> None:
        """Count a malformed input rejected before it reached the core (e.g. by the conversions)."""
        self._reject(counter, message)

    def _reject(self, counter: str, message: str) -> None:
        self.counters[counter] += 1
        self.last_rejection = message

    @staticmethod
    def _fresh(stamp_ns: int | None, now_ns: int, timeout_s: float) -> bool:
        """Received within timeout_s [s] before now_ns; a receipt in the future is not fresh."""
        return stamp_ns is not None and 0 <= now_ns - stamp_ns <= timeout_s * NS_PER_S

    @staticmethod
    def _age_s(stamp_ns: int | None, now_ns: int) -> str:
        return "ever (nothing received)" if stamp_ns is None else f"{(now_ns - stamp_ns) / NS_PER_S:.3f} s"
