"""The supervisor's modes, the events that move between them, and the transition table.

The table is data: `TRANSITIONS[(mode, event)]` says what an event does in a mode, for every mode and
every event (the table is total; `test/test_supervisor_parts.py` checks it, and docs/safety.md shows
it as `transition_table_markdown()` renders it). An entry is one of:

- `Transition(to, reason, guard, refusal)`: the mode becomes `to` (possibly the same mode, with a new
  reason), once `guard` passes; when it fails, nothing changes and the request is refused with
  `refusal: <what failed>`.
- `Note(reason)`: the mode stays; `reason` is appended to the mode's standing reason
  ("standing | note"; a later note replaces an earlier one, notes never pile up).
- `Refused(reason)`: the mode stays and the request fails (a service answers False).
- `Ignored(reason)`: the mode stays; nothing to do in this mode (not a failure).

Reasons are `str.format` templates; the fields each event fills are `EVENT_FIELDS[event]`.
What happens *with* a transition (hold capture, the hand-over ramp, intervention events) belongs to
the coordinator (`coordinator.py`), keyed on the modes it leaves and enters.
"""
from __future__ import annotations

import enum
import string
from dataclasses import dataclass


class Mode(str, enum.Enum):
    ESTOP = "ESTOP"
    HOLD = "HOLD"
    AUTONOMOUS = "AUTONOMOUS"
    SHARED = "SHARED"
    TELEOP = "TELEOP"


HUMAN_MODES = frozenset({Mode.SHARED, Mode.TELEOP})
"""Modes in which the human acts on the command (entering one is a takeover, leaving it a hand-back)."""
POLICY_MODES = frozenset({Mode.AUTONOMOUS, Mode.SHARED})
"""Modes in which the policy's command is sent (needs a fresh policy command)."""
MOVING_MODES = frozenset({Mode.AUTONOMOUS, Mode.SHARED, Mode.TELEOP})
"""Modes in which the arm moves (a watchdog or a lost stop source stops them)."""


class Event(str, enum.Enum):
    """Everything that can change the mode, by where it comes from."""

    ESTOP_SOURCE = "estop_source"  # estop true, joystick e-stop pressed/unreadable, heartbeat silent, unheard publisher
    STOP_SOURCE_LOST = "stop_source_lost"  # require_stop_source and no live stop source at a tick
    INTERNAL_ERROR = "internal_error"  # an unexpected exception inside the supervisor
    RESET = "reset"  # supervisor/reset
    ARM = "arm"  # supervisor/arm, the arm button
    AUTO_ARM = "auto_arm"  # a tick with auto_arm, not disarmed by the user
    HOLD_REQUEST = "hold_request"  # supervisor/hold, the hold button
    TAKEOVER = "takeover"  # the takeover button
    SHARED_TOGGLE = "shared_toggle"  # the shared button
    WATCHDOG = "watchdog"  # a stale input or another publisher on the command topic, at a tick
    CLOCK_STEP_BACK = "clock_step_back"  # now_ns earlier than a time already seen
    JOINT_JUMP = "joint_jump"  # a confirmed measured jump, acted on at the next tick
    DEADMAN_RELEASED = "deadman_released"  # the deadman let go while jogging
    JOG_START = "jog_start"  # the deadman held and the hold reached: jogging starts


class Guard(str, enum.Enum):
    """The checks a guarded transition needs (evaluated by the coordinator, at the event's time)."""

    NONE = "none"
    POLICY_READY = "policy ready"  # fresh joint_states and command/policy, no other publisher, live stop source, gap
    HUMAN_READY = "human ready"  # fresh joint_states, no other publisher, live stop source
    SOURCES_RELEASED = "sources released"  # every e-stop source released


@dataclass(frozen=True)
class Transition:
    """Go to `to` with `reason` once `guard` passes; else refuse with f"{refusal}: <what failed>"."""

    to: Mode
    reason: str
    guard: Guard = Guard.NONE
    refusal: str = ""


@dataclass(frozen=True)
class Note:
    """Stay; append `reason` to the standing reason."""

    reason: str


@dataclass(frozen=True)
class Refused:
    """Stay; the request fails with `reason`."""

    reason: str


@dataclass(frozen=True)
class Ignored:
    """Stay; nothing to do in this mode."""

    reason: str


Entry = Transition | Note | Refused | Ignored

EVENT_FIELDS: dict[Event, frozenset[str]] = {
    Event.ESTOP_SOURCE: frozenset({"source"}),
    Event.STOP_SOURCE_LOST: frozenset({"missing"}),
    Event.INTERNAL_ERROR: frozenset({"error"}),
    Event.RESET: frozenset({"latched_reason", "mode"}),
    Event.ARM: frozenset({"why"}),
    Event.AUTO_ARM: frozenset(),
    Event.HOLD_REQUEST: frozenset({"why"}),
    Event.TAKEOVER: frozenset(),
    Event.SHARED_TOGGLE: frozenset(),
    Event.WATCHDOG: frozenset({"problem"}),
    Event.CLOCK_STEP_BACK: frozenset({"step_s"}),
    Event.JOINT_JUMP: frozenset({"jump"}),
    Event.DEADMAN_RELEASED: frozenset(),
    Event.JOG_START: frozenset(),
}
"""The template fields each event supplies to its reasons."""

_LATCHED = Ignored("already latched")
_BUTTONS_WHILE_LATCHED = Ignored("e-stop latched: joystick buttons other than the e-stop are ignored")
_CLOCK_BACK = "clock stepped back {step_s:.3f} s: every input is stale until it arrives again"
_AT_NEW_POSITION = "{jump}: holding at the new measured position"
_SHARED = "SHARED: policy with human corrections"
_ARM = Transition(Mode.AUTONOMOUS, "armed by {why}", Guard.POLICY_READY, "{why} refused")


def _rows() -> dict[tuple[Mode, Event], Entry]:
    E, H, A, S, T = Mode.ESTOP, Mode.HOLD, Mode.AUTONOMOUS, Mode.SHARED, Mode.TELEOP
    rows: dict[Event, dict[Mode, Entry]] = {
        Event.ESTOP_SOURCE: {E: _LATCHED, **dict.fromkeys((H, A, S, T), Transition(E, "e-stop: {source}"))},
        Event.STOP_SOURCE_LOST: {
            E: _LATCHED,
            H: Ignored("not moving: arming waits for a live stop source"),
            **dict.fromkeys((A, S, T), Transition(E, "e-stop: stop source lost: {missing}")),
        },
        # Also from ESTOP: the newest error is the one to read.
        Event.INTERNAL_ERROR: dict.fromkeys((E, H, A, S, T), Transition(E, "e-stop: {error}")),
        Event.RESET: {
            E: Transition(H, "reset after e-stop ({latched_reason}); holding until armed",
                          Guard.SOURCES_RELEASED, "reset refused: e-stop still active"),
            **dict.fromkeys((H, A, S, T), Ignored("not latched (mode {mode}); nothing to reset")),
        },
        Event.ARM: {E: Refused("{why} refused: e-stop latched; reset first"), A: Ignored("already AUTONOMOUS"),
                    H: _ARM, S: _ARM, T: _ARM},
        Event.AUTO_ARM: {
            H: Transition(A, "armed automatically (auto_arm)", Guard.POLICY_READY, "auto_arm waiting"),
            **dict.fromkeys((E, A, S, T), Ignored("auto_arm arms from HOLD only")),
        },
        Event.HOLD_REQUEST: {E: Refused("e-stop latched; already holding"),
                             **dict.fromkeys((H, A, S, T), Transition(H, "{why}: holding until armed"))},
        Event.TAKEOVER: {
            E: _BUTTONS_WHILE_LATCHED,
            T: Ignored("already TELEOP"),
            **dict.fromkeys((H, A, S), Transition(T, "TELEOP: human took over (hold the deadman to jog)",
                                                  Guard.HUMAN_READY, "takeover refused")),
        },
        Event.SHARED_TOGGLE: {
            E: _BUTTONS_WHILE_LATCHED,
            # From AUTONOMOUS the policy already drives: no check, no ramp (the offset starts at 0).
            A: Transition(S, _SHARED),
            H: Transition(S, _SHARED, Guard.POLICY_READY, "shared refused"),
            T: Transition(S, _SHARED, Guard.POLICY_READY, "shared refused"),
            # Leaving SHARED drops the human's offset: a hand-back, checked and ramped like an arm.
            S: Transition(A, "armed by shared button (hand back)", Guard.POLICY_READY,
                          "shared button (hand back) refused"),
        },
        Event.WATCHDOG: {E: _LATCHED, H: Ignored("not moving: already holding"),
                         **dict.fromkeys((A, S, T), Transition(H, "{problem}"))},
        Event.CLOCK_STEP_BACK: {E: Note(_CLOCK_BACK), H: Note(_CLOCK_BACK),
                                **dict.fromkeys((A, S, T), Transition(H, _CLOCK_BACK))},
        Event.JOINT_JUMP: {
            # While latched the hold never moves; the reset re-captures it at the measured position.
            E: Note("{jump}: hold kept while latched (the reset re-captures it)"),
            H: Note(_AT_NEW_POSITION),
            A: Transition(H, _AT_NEW_POSITION),
            S: Transition(H, _AT_NEW_POSITION),
            # TELEOP keeps the human in charge: it holds until the deadman is pressed again.
            T: Transition(T, "TELEOP: " + _AT_NEW_POSITION),
        },
        Event.DEADMAN_RELEASED: {T: Transition(T, "TELEOP: deadman released, holding"),
                                 **dict.fromkeys((E, H, A, S), Ignored("the deadman drives TELEOP only"))},
        Event.JOG_START: {T: Transition(T, "TELEOP: jogging"),
                          **dict.fromkeys((E, H, A, S), Ignored("only TELEOP jogs"))},
    }
    return {(mode, event): row[mode] for event, row in rows.items() for mode in Mode}


TRANSITIONS: dict[tuple[Mode, Event], Entry] = _rows()
"""(from mode, event) -> what happens; total over Mode x Event."""


def entry(mode: Mode, event: Event) -> Entry:
    """The table's entry for `event` in `mode`."""
    return TRANSITIONS[(mode, event)]


def template_fields(template: str) -> set[str]:
    """The `str.format` field names a reason template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _cell(item: Entry) -> str:
    if isinstance(item, Transition):
        guard = f" if {item.guard.value}" if item.guard != Guard.NONE else ""
        return f"**{item.to.value}**{guard}: `{item.reason}`"
    kind = {Note: "note", Refused: "refused", Ignored: "ignored"}[type(item)]
    return f"{kind}: `{item.reason}`"


def transition_table_markdown() -> str:
    """The transition table as a Markdown table (events down, modes across), as docs/safety.md shows it."""
    modes = list(Mode)
    lines = ["| event | " + " | ".join(mode.value for mode in modes) + " |",
             "|---|" + "---|" * len(modes)]
    for event in Event:
        cells = [_cell(entry(mode, event)).replace("|", "\\|") for mode in modes]
        lines.append(f"| `{event.value}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# regenerate the table in docs/safety.md: python -m sim2real_ros.core.safety.supervision.modes
if __name__ == "__main__":
    print(transition_table_markdown(), end="")
