"""The supervisor: the only thing that decides what the robot is commanded.

Pure numpy, no rclpy; every input carries the time it was received (`now_ns`, int [ns]) so every
transition and watchdog is tested at fixed times (docs/design.md §4, §6). The `Supervisor` here drives the
explicit transition table of `modes.py` (docs/safety.md shows it) and the parts of this package; what
each mode means:

- HOLD (start-up state): hold at a fixed target. Left by arming.
- AUTONOMOUS: the policy's command, clamped. Entered by an arm request (the `arm` joystick button,
  the `supervisor/arm` service, or automatically with `auto_arm` once joint states and policy
  commands are fresh and the user has not disarmed). Arming checks fresh joint states, a fresh policy
  command, no other publisher on the robot command topic, and a gap between the policy's command
  and the measured position <= handover_max_gap_rad; then it ramps (`handover.py`). A refused arm
  stays where it was and says why; `arm_refused` counts refusals (a failed check), not auto_arm
  waiting for its inputs to arrive.
- SHARED: the policy's command plus the human's correction (`shared_control.py`). The `shared`
  button toggles it with AUTONOMOUS; leaving it is a hand-back (ramped, gap-checked).
- TELEOP: the human jogs (joint space or Cartesian) while the deadman is held; releasing it holds
  immediately. Entered with the `takeover` button from HOLD, AUTONOMOUS or SHARED. With a leader arm
  on the graph (a `command/teleop` publisher, or a message within teleop_timeout_s), the deadman makes
  the arm follow the leader instead (`leader_follow.py`): only once the leader is within
  handover_max_gap_rad of the measured position, clamped and step-limited like every command; a
  leader silent for teleop_timeout_s holds (and must be aligned again). The joystick's axes are not
  read while a leader is present.
- ESTOP (latched): any e-stop source (`estop.py`) latches it from any mode, and so does a servo
  alarm from the servo-bus driver's diagnostics (`servo_alarms.py`: overload, overheat); every other
  input is ignored until a reset request arrives while no source is active and no alarm persists.
  A reset goes to HOLD.

A takeover (entering TELEOP or SHARED from a mode without the human) and the hand-back (leaving
them) are intervention events with start and end times (`interventions.py`). After a takeover the
supervisor stays disarmed for auto_arm: only an explicit arm request returns control to the policy.

Holds are stop category 2: the target is the measured position at the moment of the stop (the last
sent command if the measurement is stale), clamped to the position limits, and is not updated by
later measurements, with one exception: a measured jump. Every command, holds included, passes the
step limiter (`command_output.py`), so a hold converges on its target at the velocity limits.

A measured jump is a change of the measured position faster than the velocity limits allow that
persists over joint_jump_confirm_samples consecutive samples (core.joint_jump). Until confirmed the
new samples are held back; a sample that comes back makes them outliers, rejected and counted. A
confirmed jump re-captures the hold at the new measured position (reached through the step limit):
AUTONOMOUS and SHARED go to HOLD (auto_arm re-arms with the usual gap check and ramp, on a policy
command received after the jump: the last one before it was planned for the old position), TELEOP
holds until the deadman is pressed again, HOLD holds where the arm now is. While ESTOP is latched a
jump never moves the hold; the reset re-captures it at the measured position.

Inputs that are not physical are rejected and counted (`plausibility.py`). A stop request is
honoured whenever the e-stop button can be read, whatever else is wrong with the Joy message; a Joy
message too short to hold the button is itself a pressed e-stop.

Time only goes forward for the watchdogs (`watchdogs.py`): after a clock step back every input is
stale until it arrives again, the e-stop heartbeat included, a moving mode holds, and
`clock_steps_back` counts it. The watchdogs never stop with the clock either: the node ticks on a
steady clock and passes its time (`tick(now_ns, steady_ns)`); a node clock that stands still for
longer than max(joint_state_timeout_s, 0.5 s) of steady time (`/clock` stopped under use_sim_time) is a stale
input for every watchdog: a moving mode holds, arming is refused, a required heartbeat latches
ESTOP and no stop source counts as live, until the clock moves again.

The `estop` topic is kept per publisher (`estop.py`): released only when every publisher that
pressed has released; one that leaves the graph while pressed stays pressed until a reset. A
faulty `estop` publisher (a QoS this subscription cannot hear, another message type) is a pressed
stop source for as long as it exists.

No input raises out of the supervisor: an unexpected error latches ESTOP at the last command sent and
counts `internal_errors` (a callback that raises would end the node, and the hold with it).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence

import numpy as np

from ...timebase import NS_PER_S
from ..joint_jump import JointJumpConfig, JointJumpDetector
from ..joystick import JoyMessageError, JoySample, decode_joy
from ..limits import InvalidInputError, SafetyLimits, clamp_position, order_positions
from ..teleop import Jogger
from .command_output import StepLimiter
from .config import SupervisorConfig
from .estop import EStopSources
from .handover import HandoverRamp, gap_refusal
from .interventions import InterventionLog
from .leader_follow import LeaderFollow
from .modes import MOVING_MODES, POLICY_MODES, Entry, Event, Guard, Ignored, Mode, Note, Refused, Transition, entry
from .outputs import COUNTER_NAMES, InterventionEvent, SentCommand, SupervisorStatus
from .plausibility import COMMAND_MARGIN_RAD, beyond_limits
from .servo_alarms import ServoAlarms
from .shared_control import SharedCorrection
from .watchdogs import ClockWatch, InputTimes, foreign_publishers_text, fresh, missing_inputs, watchdog_problem

CLOCK_STANDSTILL_MIN_S = 0.5
"""[s] The shortest node-clock standstill (steady time) that stales every input: never before the
joint-state watchdog would fire, and long enough for a sim thread starved on a loaded machine to
publish its next `/clock` (only sim time can stand still; a robot's wall clock cannot)."""


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
        self._estop = EStopSources(config, jogger.mapping.buttons.get("estop", -1))
        self._clock = ClockWatch()
        self._times = InputTimes()
        self._mode = Mode.HOLD
        self._reason = "starting: holding until armed"
        self._hold_reason = self._reason  # the reason HOLD was entered with, under any note
        self._auto_arm_waiting = ""  # what auto_arm last waited for (a refusal is counted once per reason)
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.last_rejection = ""
        self._interventions = InterventionLog()
        self._q_meas: np.ndarray | None = None
        self._jumps = JointJumpDetector(JointJumpConfig(
            limits.joint_names, limits.velocity, slack_rad=config.max_joint_jump_rad,
            max_dt_s=config.joint_state_timeout_s, confirm_samples=config.joint_jump_confirm_samples,
            source=config.source))
        self._outliers_counted = 0
        self._jump = ""  # why the joints last jumped, until the next tick acts on it
        self._q_policy: np.ndarray | None = None
        self._joy: JoySample | None = None
        self._hold_target: np.ndarray | None = None
        # The hold target is the last sent command, not a measurement (none was fresh when it was
        # captured): the first fresh joint state replaces it, so a stop holds where the arm is.
        self._hold_is_fallback = False
        self._output = StepLimiter(limits, config.control_period_s)
        self._ramp = HandoverRamp()
        self._shared = SharedCorrection(limits.n, config.shared_authority, config.shared_max_offset_rad)
        self._teleop_holding = True
        self._leader = LeaderFollow(limits, config.handover_max_gap_rad, config.teleop_timeout_s)
        self._leader_publishers = 0  # command/teleop publishers in the graph (the node counts them)
        self._leader_note = ""  # the leader's state last said in the reason ("" = none said)
        self._servo_alarms = ServoAlarms()
        self._user_disarmed = False  # a hold request or a takeover: auto_arm waits for an explicit arm
        self._foreign_publishers = 0
        self._clock_stalled = ""  # why the node's clock counts as stopped ("" while it advances)
        self._clock_over_once = False  # the last tick already saw the clock standing still too long

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
        last = self._output.last_sent
        return None if last is None else last.copy()

    @property
    def hold_target(self) -> np.ndarray | None:
        """Where the running hold converges [rad] (None before the first joint state)."""
        return None if self._hold_target is None else self._hold_target.copy()

    def estop_sources(self, now_ns: int) -> tuple[str, ...]:
        """The e-stop sources active now, servo alarms included (a reset is refused while any is)."""
        return self._estop.active(now_ns) + self._servo_alarms.active()

    @property
    def leader_following(self) -> bool:
        """The arm follows the leader arm now (TELEOP, deadman held, leader fresh and aligned)."""
        return self._leader.following

    def status(self, now_ns: int) -> SupervisorStatus:
        return SupervisorStatus(
            mode=self._mode, reason=self._reason, estop_sources=self.estop_sources(now_ns),
            estop_vanished=self._estop.vanished_text(),
            counters=dict(self.counters), intervention_start_ns=self._interventions.start_ns,
            jog_mode=self.jogger.mode_name, foreign_publishers=self._foreign_publishers,
            last_rejection=self.last_rejection,
            hold_target=None if self._hold_target is None else self._hold_target.copy(),
        )

    def change_key(self) -> tuple:
        """Cheap fingerprint of what supervisor/state reports on change (mode, reason, e-stop
        inputs, pending events, rejections); the node builds a full status only when it changes."""
        rejected = self.counters["rejected_policy"] + self.counters["rejected_joint_states"] + \
            self.counters["rejected_joy"] + self.counters["rejected_teleop"]
        return (self._mode, self._reason, self._estop.pressed_publishers, self._estop.button_active,
                self._estop.faulty_publishers, self._estop.vanished_text(), self._clock_stalled,
                self._servo_alarms.active(),
                len(self._interventions.events), rejected)

    def pop_events(self) -> list[InterventionEvent]:
        """Intervention events since the last call, oldest first."""
        return self._interventions.pop()

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
        implausible = beyond_limits(q, self.limits, self.config.joint_state_limit_margin_rad)
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
            self._times.policy_ns = None
        self._q_meas = q
        self._times.joint_state_ns = now_ns
        if self._hold_is_fallback and self._mode == Mode.HOLD:
            # A starved process enters HOLD with stale readings although newer ones wait in its
            # queue: the arm may be far from the last command by now (a sim reset, a push), and a
            # stop holds it where it is. A latched ESTOP keeps its target until the reset.
            self._capture_hold(now_ns)
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
        nonphysical = beyond_limits(q, self.limits, COMMAND_MARGIN_RAD)
        if nonphysical:
            self._reject("rejected_policy", f"command/policy: not a position, {nonphysical}")
            return False
        self._q_policy = q
        self._times.policy_ns = now_ns
        return True

    @_fail_safe("bool")
    def on_teleop_command(self, names: Sequence[str], positions: Sequence[float], now_ns: int) -> bool:
        """A leader arm's command/teleop [rad] (exactly the configured joints, any order), validated like
        a policy command. False if rejected (counted in rejected_teleop)."""
        self._observe_clock(now_ns)
        rejection = self._leader.on_teleop(names, positions, now_ns)
        if rejection:
            self._reject("rejected_teleop", rejection)
            return False
        return True

    def set_teleop_publishers(self, count: int) -> None:
        """How many publishers are on command/teleop (a leader arm on the graph, even a silent one)."""
        self._leader_publishers = int(count)

    @_fail_safe("command")
    def on_servo_diagnostics(self, name: str, hardware_id: str, is_error: bool, values: dict[str, str],
                             now_ns: int) -> SentCommand | None:
        """One status of the servo-bus driver's diagnostics. An overload or overheat alarm latches
        ESTOP naming the servo and the alarm; the hold to publish at once is returned when it latches.
        A reset is refused while the alarm persists (until the driver reports without it)."""
        self._observe_clock(now_ns)
        raised = self._servo_alarms.update(name, hardware_id, is_error, values)
        # Every report with an alarm latches (a no-op while latched), not only the first one.
        if raised:
            return self._latch(now_ns, Event.ESTOP_SOURCE, source="; ".join(raised))
        return None

    @_fail_safe("command")
    def on_estop(self, active: bool, now_ns: int, publisher: str = "",
                 publishers_now: int | None = None) -> SentCommand | None:
        """An `estop` message (true = stop) from `publisher` (its GID as text, "" when unknown);
        publishers_now: the publishers on the topic as it arrives (EstopState.on_message).
        Returns the hold to publish at once when it latches. A "released" releases only the
        publisher's own "pressed"."""
        self._observe_clock(now_ns)
        self._estop.on_message(active, now_ns, publisher, publishers_now)
        if active:
            named = f" (publisher {publisher})" if publisher else ""
            return self._latch(now_ns, Event.ESTOP_SOURCE, source=f"estop topic is true{named}")
        return None

    @_fail_safe("command")
    def on_joy(self, axes: Sequence[float], buttons: Sequence[int], now_ns: int) -> SentCommand | None:
        """A Joy message. The e-stop button is read first, before anything else is checked, and wins
        over every other button: a message rejected for its axes still stops the arm.

        Returns a hold to publish at once (e-stop button, deadman released, hold button), else None.
        """
        self._observe_clock(now_ns)
        self._estop.read_button(buttons, now_ns)
        pressed_estop = self._estop.button_active
        try:
            sample = decode_joy(self.jogger.mapping, axes, buttons)
        except JoyMessageError as err:
            self._reject("rejected_joy", f"joy: {err}")
            return self._latch(now_ns, Event.ESTOP_SOURCE, source=pressed_estop) if pressed_estop else None
        if pressed_estop:
            return self._latch(now_ns, Event.ESTOP_SOURCE, source=pressed_estop)
        # A joystick that (re)appears with a button already down must not act on it: edges only
        # count between two consecutive fresh messages.
        was_fresh = fresh(self._times.joy_ns, now_ns, self.config.joy_timeout_s)
        edges = sample.pressed - self._joy.pressed if (was_fresh and self._joy is not None) else frozenset()
        self._joy, self._times.joy_ns = sample, now_ns
        if self._mode == Mode.ESTOP:
            return None  # every button but the e-stop is ignored while latched (the table's TAKEOVER row)
        if "next_group" in edges:
            self.jogger.next_group()
        if "toggle_cartesian" in edges:
            self.jogger.toggle_cartesian()
        if "hold" in edges:
            self.request_hold(now_ns, "hold button")
            return self._emit_hold(now_ns)
        if "takeover" in edges:
            self._guarded(Event.TAKEOVER, now_ns)
        elif "shared" in edges:
            self._guarded(Event.SHARED_TOGGLE, now_ns)
        elif "arm" in edges:
            self.request_arm(now_ns, "arm button")
        if self._mode == Mode.TELEOP and not sample.is_pressed("deadman"):
            self._release_leader()
        if self._mode == Mode.TELEOP and not sample.is_pressed("deadman") and not self._teleop_holding:
            self._teleop_holding = True
            self._capture_hold(now_ns)
            self._fire(Event.DEADMAN_RELEASED, now_ns)
            return self._emit_hold(now_ns)
        return None

    @_fail_safe("command")
    def set_estop_publishers(self, live: Collection[str], faulty: Sequence[str], now_ns: int) -> SentCommand | None:
        """The `estop` publishers in the graph (polled): `live`, the keys (GIDs as text) of those that
        can be heard; `faulty`, why each other one cannot (a QoS this subscription cannot hear, another
        message type), naming it. A stop source that cannot be read counts as pressed: it latches
        and blocks the reset for as long as it exists. Returns the hold to publish when it latches."""
        self._observe_clock(now_ns)
        self._estop.set_live_publishers(live)
        self._estop.set_faulty_publishers(faulty)
        if faulty:
            return self._latch(now_ns, Event.ESTOP_SOURCE, source="; ".join(faulty))
        return None

    def set_unheard_estop_publishers(self, count: int, now_ns: int) -> SentCommand | None:
        """set_estop_publishers with `count` anonymous publishers of an incompatible QoS (no GIDs known)."""
        faulty = [f"{count} estop publisher(s) cannot be heard (QoS must be reliable + transient local)"] \
            if count > 0 else []
        return self.set_estop_publishers((), faulty, now_ns)

    def set_foreign_publishers(self, count: int) -> None:
        """How many publishers other than the supervisor are on the robot command topic."""
        self._foreign_publishers = int(count)

    def record_rejection(self, counter: str, message: str) -> None:
        """Count a malformed input rejected before it reached the core (e.g. by the conversions)."""
        self._reject(counter, message)

    # ------------------------------------------------------------------------------------------
    # Requests (services, buttons)
    @_fail_safe("request")
    def request_reset(self, now_ns: int) -> tuple[bool, str]:
        """Clear the e-stop latch, only once every e-stop source is released. Goes to HOLD at the
        measured position (a jump while latched did not move the hold; the reset does, ramped)."""
        self._observe_clock(now_ns)
        fields = {"mode": self._mode.value, "latched_reason": self._reason}
        item = entry(self._mode, Event.RESET)
        if not isinstance(item, Transition):
            return True, item.reason.format(**fields)
        failures = self._guard_failures(item.guard, now_ns)
        if failures:
            return False, f"{item.refusal}: " + "; ".join(failures)
        self._fire(Event.RESET, now_ns, **fields)
        self._estop.clear_vanished()  # publishers that left while pressed: the operator's reset clears them
        self._capture_hold(now_ns)
        return True, "e-stop cleared; HOLD until armed"

    @_fail_safe("request")
    def request_arm(self, now_ns: int, why: str = "arm request") -> tuple[bool, str]:
        """Give control to the policy (AUTONOMOUS), ramped from the measured position."""
        self._observe_clock(now_ns)
        item = entry(self._mode, Event.ARM)
        if isinstance(item, Refused):
            return self._refuse_arm(item.reason.format(why=why))
        if isinstance(item, Ignored):
            return True, item.reason
        armed, refusal = self._guarded(Event.ARM, now_ns, why=why)
        if not armed:
            return False, refusal
        return True, f"AUTONOMOUS (ramp {self._ramp.duration_ns / NS_PER_S:.3f} s)"

    @_fail_safe("request")
    def request_hold(self, now_ns: int, why: str = "hold request") -> tuple[bool, str]:
        """HOLD and stay disarmed (auto_arm waits for an explicit arm). No effect while latched."""
        self._observe_clock(now_ns)
        item = entry(self._mode, Event.HOLD_REQUEST)
        if isinstance(item, Refused):
            return False, item.reason
        self._user_disarmed = True
        self._fire(Event.HOLD_REQUEST, now_ns, why=why)
        return True, "HOLD"

    # ------------------------------------------------------------------------------------------
    # The control tick
    @_fail_safe("command")
    def tick(self, now_ns: int, steady_ns: int | None = None) -> SentCommand | None:
        """One control period: watchdogs, then the command to send (None until a joint state).

        steady_ns: a steady clock's time [ns] (never stops or jumps) beside the node's now_ns; with
        it a node clock standing still longer than joint_state_timeout_s stales every input."""
        self._observe_clock(now_ns)
        if steady_ns is not None:
            self._watch_clock_standstill(now_ns, steady_ns)
        if steady_ns is None or self._clock.started:
            # With a steady clock beside it, the heartbeat counts from when the node's clock first
            # ran (sim time jumps from 0 to the sim's time when /clock arrives).
            self._estop.start_heartbeat(now_ns)
        silent = self._estop.heartbeat_silent_s(now_ns)
        if silent is not None:
            self._latch(now_ns, Event.ESTOP_SOURCE, source=f"e-stop heartbeat silent for {silent:.3f} s")
        if self._clock_stalled and self.config.estop_heartbeat_timeout_s > 0 and self._clock.started:
            # Not before the clock first moved (sim time before /clock): nothing can arm then anyway.
            self._latch(now_ns, Event.ESTOP_SOURCE, source=f"e-stop heartbeat cannot be checked: {self._clock_stalled}")
        if isinstance(entry(self._mode, Event.STOP_SOURCE_LOST), Transition):
            missing = self._estop.stop_source_missing(now_ns)
            if missing:
                self._latch(now_ns, Event.STOP_SOURCE_LOST, missing=missing)
        if self._jump:
            # This tick holds at the new position; re-arming can come from the next one.
            self._on_jump(now_ns)
            return self._emit_hold(now_ns)
        if self._mode == Mode.ESTOP:
            return self._emit_hold(now_ns)
        if isinstance(entry(self._mode, Event.WATCHDOG), Transition):
            problem = self._clock_stalled or \
                watchdog_problem(self._times, self._mode, self._foreign_publishers, now_ns, self.config)
            if problem:
                self.counters["watchdog_holds"] += 1
                if self._clock_stalled:  # of those, the holds for a node clock standing still (a starved sim)
                    self.counters["clock_stall_holds"] += 1
                self._fire(Event.WATCHDOG, now_ns, problem=problem)
        if self._mode == Mode.HOLD:
            if self._hold_target is None and self._q_meas is not None:
                self._capture_hold(now_ns)
            if self.config.auto_arm and not self._user_disarmed \
                    and isinstance(entry(self._mode, Event.AUTO_ARM), Transition):
                self._auto_arm(now_ns)
        if self._mode == Mode.HOLD:
            return self._emit_hold(now_ns)
        if self._mode == Mode.TELEOP:
            return self._teleop_tick(now_ns)
        return self._policy_tick(now_ns)

    # ------------------------------------------------------------------------------------------
    # The transition table, applied
    def _fire(self, event: Event, now_ns: int, **fields: object) -> Entry:
        """Apply the table's entry for `event` in the current mode (its guard already passed)."""
        item = entry(self._mode, event)
        if isinstance(item, Transition):
            reason = item.reason.format(**fields)
            if item.to in POLICY_MODES:
                self._enter_policy_mode(item.to, reason, now_ns)
            else:
                self._set_mode(item.to, reason, now_ns)
        elif isinstance(item, Note):
            self._annotate(item.reason.format(**fields))
        return item

    def _guarded(self, event: Event, now_ns: int, **fields: object) -> tuple[bool, str]:
        """A guarded request (arm, takeover, shared): fire it when its guard passes, else refuse it
        with the table's refusal and what failed. (fired, why not)."""
        item = entry(self._mode, event)
        if not isinstance(item, Transition):
            return False, item.reason
        failures = self._guard_failures(item.guard, now_ns)
        if failures:
            return self._refuse_arm(f"{item.refusal.format(**fields)}: " + "; ".join(failures))
        # Arming (a hand-back included) re-enables auto_arm; taking the policy's place disables it.
        self._user_disarmed = item.to != Mode.AUTONOMOUS
        self._fire(event, now_ns, **fields)
        return True, ""

    def _guard_failures(self, guard: Guard, now_ns: int) -> list[str]:
        """What fails `guard` at now_ns (empty: it passes)."""
        if guard == Guard.POLICY_READY:
            missing = self._missing_inputs(now_ns)
            return missing + self._failed_checks(now_ns, check_gap=not missing)
        if guard == Guard.HUMAN_READY:
            blockers = [self._clock_stalled] if self._clock_stalled else []
            if not fresh(self._times.joint_state_ns, now_ns, self.config.joint_state_timeout_s):
                blockers.append("no fresh joint_states")
            return blockers + self._failed_checks(now_ns, check_gap=False)
        if guard == Guard.SOURCES_RELEASED:
            return list(self.estop_sources(now_ns))
        return []

    def _failed_checks(self, now_ns: int, check_gap: bool) -> list[str]:
        """The arming checks that fail now; the handover gap only with check_gap and nothing else failing."""
        blockers = []
        if self._foreign_publishers > 0:
            blockers.append(foreign_publishers_text(self._foreign_publishers))
        missing = self._estop.stop_source_missing(now_ns)
        if missing:
            blockers.append(missing)
        if check_gap and not blockers and self._q_policy is not None and self._q_meas is not None:
            gap = gap_refusal(self._q_policy, self._q_meas, self.limits.joint_names,
                              self.config.handover_max_gap_rad)
            if gap:
                blockers.append(gap)
        return blockers

    def _refuse_arm(self, message: str) -> tuple[bool, str]:
        self.counters["arm_refused"] += 1
        self._reason = message if self._mode != Mode.ESTOP else self._reason
        return False, message

    def _latch(self, now_ns: int, event: Event, **fields: object) -> SentCommand | None:
        """Latch ESTOP for an e-stop event, and the hold to publish at once (None when already latched)."""
        if not isinstance(entry(self._mode, event), Transition):
            return None
        self.counters["estops"] += 1
        self._fire(event, now_ns, **fields)
        return self._emit_hold(now_ns)

    def _missing_inputs(self, now_ns: int) -> list[str]:
        """The inputs a policy mode needs that are not fresh; a standing node clock stales them all
        (waiting for it is waiting for inputs, not a failed check: auto_arm does not count it)."""
        stalled = [self._clock_stalled] if self._clock_stalled else []
        return stalled + missing_inputs(self._times, now_ns, self.config)

    def _auto_arm(self, now_ns: int) -> None:
        missing = self._missing_inputs(now_ns)
        refusals = self._failed_checks(now_ns, check_gap=not missing)
        if not missing and not refusals:
            self._fire(Event.AUTO_ARM, now_ns)
            return
        item = entry(self._mode, Event.AUTO_ARM)
        assert isinstance(item, Transition)
        waiting = f"{item.refusal}: " + "; ".join(missing + refusals)
        if waiting != self._auto_arm_waiting and refusals:
            # A refusal is a check that failed (gap, another publisher, no stop source), counted once
            # per distinct reason, not once per tick; waiting for inputs to arrive (at start-up, after
            # a jump made the policy's last plan stale) is not one.
            self.counters["arm_refused"] += 1
        self._auto_arm_waiting = waiting
        self._reason = f"{self._hold_reason} | {waiting}"

    def _on_jump(self, now_ns: int) -> None:
        """Act on a confirmed jump: the hold moves to the measured position, except while latched."""
        why, self._jump = self._jump, ""
        if self._mode != Mode.ESTOP:
            self._capture_hold(now_ns)
        if self._mode == Mode.TELEOP:
            self._teleop_holding = True
            self._release_leader()
        self._fire(Event.JOINT_JUMP, now_ns, jump=why)

    def _watch_clock_standstill(self, now_ns: int, steady_ns: int) -> None:
        """A node clock that stood still for longer than max(joint_state_timeout_s, CLOCK_STANDSTILL_MIN_S)
        of steady time [s] makes every input age unknowable: say so (the watchdogs, arming and the
        heartbeat read it)."""
        timeout = max(self.config.joint_state_timeout_s, CLOCK_STANDSTILL_MIN_S)
        over = self._clock.standing_still_s(now_ns, steady_ns) > timeout
        # Two ticks in a row, not one: a process starved for longer than the timeout wakes with its
        # tick and the `/clock` message that moves its clock both ready, maybe the tick first.
        still, self._clock_over_once = over and self._clock_over_once, over
        # A fixed text: the reason must not change every tick while the clock stands still.
        self._clock_stalled = (f"the node's clock has not advanced for more than {timeout} s of steady time "
                               "(is /clock running?)") if still else ""
        # The heartbeat counts as uncheckable once the clock has run (before, it waits like the heartbeat).
        self._estop.clock_stalled = self._clock_stalled if self._clock.started else ""

    def _observe_clock(self, now_ns: int) -> None:
        """Watchdogs count forward only: a time earlier than one already seen re-anchors every input
        age at `now_ns` (stale until it arrives again) and holds a moving arm."""
        step_s = self._clock.observe(now_ns)
        if step_s is None:
            return
        self.counters["clock_steps_back"] += 1
        self._times.forget()
        self._leader.forget()
        self._estop.restart_after_clock_step(now_ns)
        self._output.forget_time()
        self._jumps.reset()
        if isinstance(entry(self._mode, Event.CLOCK_STEP_BACK), Transition):
            self.counters["watchdog_holds"] += 1
        self._fire(Event.CLOCK_STEP_BACK, now_ns, step_s=step_s)

    def _annotate(self, note: str) -> None:
        """A Note: the standing reason (HOLD's entry reason in HOLD) plus `note`; notes replace, not pile up."""
        if self._mode == Mode.HOLD:
            self._reason = self._hold_reason = f"{self._hold_reason.split(' | ')[0]} | {note}"
        else:
            self._reason = f"{self._reason.split(' | ')[0]} | {note}"

    def _set_mode(self, mode: Mode, reason: str, now_ns: int) -> None:
        """Every mode change goes through here: hold capture, ramp reset, intervention events."""
        previous = self._mode
        if mode in (Mode.HOLD, Mode.ESTOP) and (previous in MOVING_MODES or self._hold_target is None
                                                or (mode == Mode.ESTOP and previous != Mode.ESTOP
                                                    and self._measurement_fresh(now_ns))):
            # An e-stop holds where the arm is measured now, even pressed during a HOLD (whose target
            # may be an older position or the last command).
            self._capture_hold(now_ns)
        if mode == Mode.TELEOP and previous != Mode.TELEOP:
            self._teleop_holding = True
            self._capture_hold(now_ns)
        if mode != Mode.TELEOP or previous != Mode.TELEOP:
            self._release_leader()  # entering or leaving TELEOP: the leader is aligned again first
        if mode != Mode.SHARED:
            self._shared.reset()
        if mode not in POLICY_MODES:
            self._ramp.clear()
        if self._interventions.on_mode_change(previous, mode, reason, now_ns):
            self.counters["interventions"] += 1
        self._mode = mode
        self._reason = reason
        if mode == Mode.HOLD:
            self._hold_reason = reason
            self._auto_arm_waiting = ""

    def _enter_policy_mode(self, mode: Mode, reason: str, now_ns: int) -> None:
        # SHARED -> AUTONOMOUS drops the human's offset, so it ramps like any hand-back.
        ramp = self._mode not in POLICY_MODES or (mode == Mode.AUTONOMOUS and self._mode == Mode.SHARED)
        self._set_mode(mode, reason, now_ns)
        if ramp:
            self._ramp.start(self._q_meas, self._q_policy, now_ns, self.config.handover_ramp_s,
                             self.config.handover_max_gap_rad)

    # ------------------------------------------------------------------------------------------
    # Commands
    def _measurement_fresh(self, now_ns: int) -> bool:
        return self._q_meas is not None and fresh(self._times.joint_state_ns, now_ns,
                                                  self.config.joint_state_timeout_s)

    def _capture_hold(self, now_ns: int) -> None:
        """Stop category 2 target: measured position now (last sent if the measurement is stale, and
        then replaced by the next fresh measurement while holding)."""
        last_sent = self._output.last_sent
        self._hold_is_fallback = False
        if self._measurement_fresh(now_ns):
            self._hold_target = clamp_position(self._q_meas, self.limits)
        elif last_sent is not None:
            self._hold_target = last_sent.copy()
            self._hold_is_fallback = True
        elif self._q_meas is not None:
            self._hold_target = clamp_position(self._q_meas, self.limits)
            self._hold_is_fallback = True

    def _teleop_tick(self, now_ns: int) -> SentCommand | None:
        sample = self._joy
        last_sent = self._output.last_sent
        if sample is None or not sample.is_pressed("deadman"):
            self._release_leader()
            if not self._teleop_holding:
                self._teleop_holding = True
                self._capture_hold(now_ns)
            return self._emit_hold(now_ns)
        if self._leader_present(now_ns):
            return self._follow_tick(now_ns)
        if self._leader_note:
            # The leader left the graph while the deadman was held: hold, then jog from there.
            self._leader_note = ""
            self._teleop_holding = True
            self._capture_hold(now_ns)
            self._annotate("leader arm gone: holding, then jogging from the joystick")
        if self._teleop_holding or last_sent is None:
            if last_sent is None:
                self._capture_hold(now_ns)
                return self._emit_hold(now_ns)
            if self._hold_target is not None and not np.allclose(last_sent, self._hold_target, rtol=0.0, atol=1e-9):
                # Jogging starts where the arm is: first the hold reaches it (after a jump it is
                # still on its way from the old position, through the step limit).
                return self._emit_hold(now_ns)
            self._teleop_holding = False
            self._fire(Event.JOG_START, now_ns)
        velocity = self.jogger.joint_velocity(sample, last_sent)
        return self._send(last_sent + velocity * self._dt, now_ns)

    def _release_leader(self) -> None:
        """The deadman let go, a jump, or TELEOP entered or left: the leader must be aligned again,
        and its state is said afresh when followed again."""
        self._leader.release()
        self._leader_note = ""

    def _leader_present(self, now_ns: int) -> bool:
        """A leader arm is on the graph: a command/teleop publisher, or a command within the timeout."""
        return self._leader_publishers > 0 or \
            fresh(self._leader.received_ns, now_ns, self.config.teleop_timeout_s)

    def _follow_tick(self, now_ns: int) -> SentCommand | None:
        """TELEOP, deadman held, a leader present: its position once aligned, else the hold."""
        if self._q_meas is None or self._output.last_sent is None:
            return self._emit_hold(now_ns)
        target, why = self._leader.target(self._q_meas, now_ns)
        state = self._leader.state
        if state != self._leader_note:
            # Said once per change of state, not every tick (the gap and the age change every tick).
            self._leader_note = state
            self._annotate(why if why else "following the leader arm")
        if target is None:
            if not self._teleop_holding:
                # It was following (or jogging): hold where the arm is now, stop category 2.
                self._teleop_holding = True
                self._capture_hold(now_ns)
            return self._emit_hold(now_ns)
        self._teleop_holding = False
        return self._send(target, now_ns)

    def _policy_tick(self, now_ns: int) -> SentCommand | None:
        assert self._q_policy is not None
        target = self._q_policy
        if self._mode == Mode.SHARED:
            last_sent = self._output.last_sent
            if self._joy is not None and self._joy.is_pressed("deadman") and last_sent is not None:
                self._shared.integrate(self.jogger.joint_velocity(self._joy, last_sent), self._dt)
            target = self._shared.apply(target)
        return self._send(self._ramp.apply(target, now_ns), now_ns)

    def _step_limited(self, wish: np.ndarray, now_ns: int) -> np.ndarray:
        sent = self._output.limit(wish, now_ns, self._q_meas)
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

    # ------------------------------------------------------------------------------------------
    def _internal_error(self, where: str, err: Exception, on_error: str):
        """Latch ESTOP at the last command sent after an unexpected error (see _fail_safe).

        Sets the mode directly, not through _set_mode: nothing that could fail again runs here."""
        self.counters["internal_errors"] += 1
        self.last_rejection = f"internal error in {where}: {type(err).__name__}: {err}"
        if self._mode != Mode.ESTOP:
            self.counters["estops"] += 1
        item = entry(self._mode, Event.INTERNAL_ERROR)
        assert isinstance(item, Transition)
        self._mode = item.to
        self._reason = item.reason.format(error=self.last_rejection)
        last_sent = self._output.last_sent
        if last_sent is not None:
            self._hold_target = last_sent.copy()
        if on_error == "command":
            return None if last_sent is None else SentCommand(last_sent.copy(), Mode.ESTOP, hold=True)
        if on_error == "bool":
            return False
        if on_error == "request":
            return False, self._reason
        return None

    def _reject(self, counter: str, message: str) -> None:
        self.counters[counter] += 1
        self.last_rejection = message
