"""The fault-injection soak's pure logic: a fault schedule from a seed, invariants over a recording.

No ROS here: runtime/soak.py injects the faults into a running graph and reads the recorder's bag;
this module decides what to inject (`fault_schedule`) and judges what was recorded
(`check_commands`, `check_estops`, `check_no_auto_arm`). Every time is integer nanoseconds on one
clock, the wall clock of the machine (the bag's publish times are the publishers' DDS source
timestamps, the injector's events time.time_ns()): the sim clock is itself one of the faults.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError

NS_PER_S = 1_000_000_000

# What the soak does to the running graph (docs/safety.md, "Fault-injection soak").
FAULT_KINDS: tuple[str, ...] = (
    "kill_policy_node",  # SIGKILL, down for duration_s, started again
    "kill_actuator_node",
    "kill_camera_preprocessor",
    "camera_freeze",  # the camera pipeline hangs (SIGSTOP of the preprocessor) for duration_s
    "joint_states_drop",  # no joint_states for duration_s (50-500 ms)
    "foreign_command_burst",  # out-of-range command/policy and action chunks from a foreign publisher
    "clock_step",  # a second clock source steps sim time back by magnitude [s]
    "cpu_hog",  # magnitude busy processes for duration_s
    "estop",  # e-stop pressed for duration_s, released, reset, armed again
    "stop_source_lost",  # the e-stop heartbeat falls silent until ESTOP latches, then duration_s more
)

VIOLATION_KINDS: tuple[str, ...] = (
    "command_not_finite",
    "command_outside_limits",
    "command_step_too_large",
    "estop_not_honoured",
    "auto_rearm",
    "stop_source_loss_ignored",
    "node_left_behind",
    "bag_unreadable",
)

# (duration range [s], magnitude range) of each kind; magnitudes: clock_step [s] back, cpu_hog
# processes, foreign_command_burst [rad] beyond the limits, others unused (0).
_RANGES: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "kill_policy_node": ((0.2, 2.0), (0.0, 0.0)),
    "kill_actuator_node": ((0.2, 2.0), (0.0, 0.0)),
    "kill_camera_preprocessor": ((0.2, 2.0), (0.0, 0.0)),
    "camera_freeze": ((0.5, 3.0), (0.0, 0.0)),
    "joint_states_drop": ((0.05, 0.5), (0.0, 0.0)),
    "foreign_command_burst": ((0.1, 0.5), (0.2, 2.5)),
    "clock_step": ((0.05, 0.05), (0.5, 5.0)),
    "cpu_hog": ((2.0, 6.0), (1.0, 2.0)),
    "estop": ((0.5, 2.0), (0.0, 0.0)),
    "stop_source_lost": ((0.5, 1.5), (0.0, 0.0)),  # after the latch (the injector waits for it)
}


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: the `index`-th, of `kind`, injected `gap_s` [s] (wall) after the graph
    recovered from the previous one, lasting `duration_s` [s], with a kind-specific `magnitude`."""

    index: int
    kind: str
    gap_s: float
    duration_s: float
    magnitude: float


def iter_faults(seed: int, gap_range_s: tuple[float, float] = (1.0, 4.0)) -> Iterator[Fault]:
    """An endless seeded fault sequence: every kind once in a random order, then kinds at random.

    The same seed always gives the same sequence, so a failing soak can be run again."""
    lo, hi = gap_range_s
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
        raise ConfigError("soak", "gap_range_s", gap_range_s, "must be 0 <= low <= high, finite")
    rng = np.random.default_rng(seed)
    index = 0
    first_round = [FAULT_KINDS[i] for i in rng.permutation(len(FAULT_KINDS))]
    while True:
        kind = first_round[index] if index < len(first_round) else FAULT_KINDS[int(rng.integers(len(FAULT_KINDS)))]
        (d_lo, d_hi), (m_lo, m_hi) = _RANGES[kind]
        magnitude = float(rng.uniform(m_lo, m_hi))
        if kind == "cpu_hog":
            magnitude = float(round(magnitude))
        yield Fault(index, kind, float(rng.uniform(lo, hi)), float(rng.uniform(d_lo, d_hi)), magnitude)
        index += 1


def fault_schedule(seed: int, count: int, gap_range_s: tuple[float, float] = (1.0, 4.0)) -> list[Fault]:
    """The first `count` faults of `iter_faults(seed)`."""
    faults = iter_faults(seed, gap_range_s)
    return [next(faults) for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# What was recorded
@dataclass(frozen=True)
class TimedPositions:
    """A command or a measured joint state: publish time [ns] (wall), positions [rad] (n,) and the
    publisher's count of it (the DDS publication sequence number; 0: unknown)."""

    t_ns: int
    positions: np.ndarray
    sequence: int = 0


@dataclass(frozen=True)
class ModeSample:
    """One supervisor/state message: publish time [ns] (wall), mode and reason."""

    t_ns: int
    mode: str
    reason: str = ""


@dataclass(frozen=True)
class EstopPress:
    """An e-stop the injector pressed at `pressed_ns` and released at `released_ns` [ns] (wall)."""

    pressed_ns: int
    released_ns: int


@dataclass(frozen=True)
class Violation:
    kind: str
    t_ns: int
    detail: str


@dataclass(frozen=True)
class EstopVerdict:
    """How one e-stop went: honoured or not (`problem` says why), latched after `latch_ms`, first
    command toward the final hold after `reaction_ms` [ms] (nan when unknown)."""

    pressed_ns: int
    honoured: bool
    latch_ms: float
    reaction_ms: float
    problem: str = ""


@dataclass(frozen=True)
class CommandLimits:
    """The invariants every robot command must meet: URDF position limits [rad] and the largest
    step between two commands [rad] (velocity limit x one control period), each (n,); tol_rad
    absorbs float rounding."""

    lower: np.ndarray
    upper: np.ndarray
    max_step: np.ndarray
    tol_rad: float = 1e-9

    @classmethod
    def from_limits(cls, lower: Sequence[float], upper: Sequence[float], velocity: Sequence[float],
                    control_period_s: float, tol_rad: float = 1e-9) -> CommandLimits:
        """From URDF limits (lower, upper [rad], velocity [rad/s]) and the control period [s]."""
        if not (math.isfinite(control_period_s) and control_period_s > 0):
            raise ConfigError("soak", "control_period_s", control_period_s, "must be a finite number > 0")
        velocity_arr = np.asarray(velocity, dtype=float)
        return cls(np.asarray(lower, dtype=float), np.asarray(upper, dtype=float),
                   velocity_arr * control_period_s, tol_rad)


def sent_counts(ordered: Sequence[TimedPositions]) -> list[int]:
    """For each recorded command after the first (in publish order), how many commands were sent
    since the one recorded before it (1: none in between), from the publication sequence numbers.

    The numbers count one writer's samples, and the bag does not say which writer sent a message:
    only a recording whose numbers are all known (> 0) and strictly increase is one writer's
    uninterrupted stream. Anything else (a second publisher on the topic, a restart, numbers the
    middleware did not give) is judged strictly: every pair as neighbours (all 1)."""
    sequences = [c.sequence for c in ordered]
    one_stream = all(s > 0 for s in sequences) and all(b > a for a, b in zip(sequences[:-1], sequences[1:],
                                                                              strict=True))
    if not one_stream:
        return [1] * max(len(ordered) - 1, 0)
    return [b - a for a, b in zip(sequences[:-1], sequences[1:], strict=True)]


def missed_commands(commands: Sequence[TimedPositions]) -> int:
    """Commands the publisher sent that the recording lacks (by publication sequence number; 0 when
    the numbers do not make one writer's stream, see sent_counts)."""
    return sum(k - 1 for k in sent_counts(sorted(commands, key=lambda c: c.t_ns)))


def check_commands(commands: Sequence[TimedPositions], limits: CommandLimits) -> list[Violation]:
    """Every command finite, inside the position limits, and at most one step from the one sent
    before it (in publish order). When the recording lacks commands in between (a recorder stalled
    past its queue loses the oldest: the publication sequence numbers of the two recorded ones say
    how many were sent), the bound is one step per command sent: each of them was itself limited,
    so a larger difference is still a violation, and one command that jumps is caught wherever it
    is. Returns one Violation per offending command."""
    violations: list[Violation] = []
    previous: TimedPositions | None = None
    ordered = sorted(commands, key=lambda c: c.t_ns)
    sent_since_previous = [1, *sent_counts(ordered)]
    for command, sent_since in zip(ordered, sent_since_previous, strict=True):
        q = np.asarray(command.positions, dtype=float)
        if q.shape != limits.lower.shape or not np.all(np.isfinite(q)):
            violations.append(Violation("command_not_finite", command.t_ns, f"command {q.tolist()}"))
            previous = None
            continue
        outside = (q < limits.lower - limits.tol_rad) | (q > limits.upper + limits.tol_rad)
        if np.any(outside):
            joint = int(np.argmax(outside))
            violations.append(Violation("command_outside_limits", command.t_ns,
                                        f"joint {joint}: {q[joint]:.6f} rad outside "
                                        f"[{limits.lower[joint]:.6f}, {limits.upper[joint]:.6f}]"))
        if previous is not None:
            sent = sent_since  # `previous` is the command recorded just before (None after a bad one)
            step = np.abs(q - np.asarray(previous.positions, dtype=float))
            bound = limits.max_step * sent
            over = step > bound + limits.tol_rad
            if np.any(over):
                joint = int(np.argmax(step - bound))
                across = f" across {sent} commands sent" if sent > 1 else ""
                violations.append(Violation("command_step_too_large", command.t_ns,
                                            f"joint {joint}: step {step[joint]:.6f} rad > "
                                            f"{bound[joint]:.6f} rad{across}"))
        previous = command
    return violations


def check_estops(presses: Sequence[EstopPress], commands: Sequence[TimedPositions],
                 measured: Sequence[TimedPositions], modes: Sequence[ModeSample], bound_s: float,
                 hold_tol_rad: float = 0.03, lookback_s: float = 0.1) -> tuple[list[EstopVerdict], list[Violation]]:
    """Was every e-stop honoured within `bound_s` [s]? For a press at tp released at tr:

    - supervisor/state says ESTOP no later than tp + bound_s;
    - from tp + bound_s to tr the commands only come nearer one fixed hold, the last command
      before tr (a hold is step-limited, so it may take several commands to get there);
    - that hold is where the arm was when the stop happened: within `hold_tol_rad` of a measured
      position between tp - lookback_s and tp + bound_s (a stop category 2 hold, docs/safety.md).
      A supervisor that let the policy drive on and held later holds somewhere else. A press while
      ESTOP is already latched changes nothing (latched, the command never moves: docs/safety.md),
      so its hold is judged against where the arm was when ESTOP was entered: a sim arm teleported
      by an episode reset since then is not where the stop happened. When ESTOP was entered during
      a joint-state silence, the last measured position before the entry is that place.
    - the commands do not stop altogether (a hold is sent every control period).
    """
    bound_ns = int(bound_s * NS_PER_S)
    commands = sorted(commands, key=lambda c: c.t_ns)
    measured = sorted(measured, key=lambda m: m.t_ns)
    modes = sorted(modes, key=lambda m: m.t_ns)
    verdicts: list[EstopVerdict] = []
    violations: list[Violation] = []
    for press in presses:
        tp, tr = press.pressed_ns, press.released_ns
        before = [m for m in modes if m.t_ns < tp]
        stopped_ns = tp  # when the stop this press is judged by happened
        if before and before[-1].mode == "ESTOP":
            latch: int | None = tp  # already latched (a stop the injector has not reset yet)
            entered = len(before) - 1
            while entered > 0 and before[entered - 1].mode == "ESTOP":
                entered -= 1
            stopped_ns = before[entered].t_ns
        else:
            latch = next((m.t_ns for m in modes if m.t_ns >= tp and m.mode == "ESTOP"), None)
        latch_ms = (latch - tp) / 1e6 if latch is not None else math.nan
        window = [c for c in commands if tp < c.t_ns <= tr]
        problem = ""
        reaction_ms = math.nan
        if latch is None or latch > tp + bound_ns:
            problem = (f"ESTOP not reported within {bound_s * 1e3:.0f} ms" if latch is None
                       else f"ESTOP reported after {latch_ms:.1f} ms > {bound_s * 1e3:.0f} ms")
        elif tr - tp > bound_ns and not [c for c in window if c.t_ns >= tp + bound_ns]:
            problem = "no command after the press (a hold is sent every control period)"
        elif window:
            hold = np.asarray(window[-1].positions, dtype=float)
            distance = [float(np.max(np.abs(np.asarray(c.positions, dtype=float) - hold))) for c in window]
            # first command from which the distance to the hold never grows again
            first = len(window) - 1
            while first > 0 and distance[first - 1] + 1e-12 >= distance[first]:
                first -= 1
            reaction_ms = (window[first].t_ns - tp) / 1e6
            near = [m for m in measured
                    if stopped_ns - int(lookback_s * NS_PER_S) <= m.t_ns <= stopped_ns + bound_ns]
            if not near and stopped_ns != tp:
                # ESTOP was entered while joint states were silent (a stale measurement: the
                # supervisor holds the last one it had), so judge by the last one before the entry.
                near = [m for m in measured if m.t_ns < stopped_ns][-1:]
            if window[first].t_ns > tp + bound_ns:
                problem = f"commands moved away from the hold until {reaction_ms:.1f} ms after the press"
            elif near and min(float(np.max(np.abs(np.asarray(m.positions, dtype=float) - hold)))
                              for m in near) > hold_tol_rad:
                # The supervisor's state just before the press says which hold it was (a HOLD or
                # ESTOP from an earlier fault keeps its target; a moving mode captures a new one).
                state = (f"{before[-1].mode} since {(tp - before[-1].t_ns) / 1e9:.2f} s before: "
                         f"{before[-1].reason}" if before else "unknown")
                problem = (f"held {min(float(np.max(np.abs(np.asarray(m.positions) - hold))) for m in near):.3f} "
                           f"rad away from every measured position within {bound_s * 1e3:.0f} ms of the press "
                           f"(supervisor before the press: {state})")
            elif not near:
                problem = "no measured joint state around the press to check the hold against"
        verdicts.append(EstopVerdict(tp, not problem, latch_ms, reaction_ms, problem))
        if problem:
            violations.append(Violation("estop_not_honoured", tp, problem))
    return verdicts, violations


def check_no_auto_arm(modes: Sequence[ModeSample], arm_requests_ns: Sequence[int]) -> list[Violation]:
    """With auto_arm off (the robot's supervisor), every entry into a policy mode (AUTONOMOUS or
    SHARED) must follow an arm request made after the supervisor last left one: after a stop, a
    lost stop source or a hold, only a person re-arms."""
    violations: list[Violation] = []
    requests = sorted(arm_requests_ns)
    left_ns: int | None = None  # when the mode last left a policy mode (None: never in one yet)
    moving = False
    for sample in sorted(modes, key=lambda m: m.t_ns):
        in_policy = sample.mode in ("AUTONOMOUS", "SHARED")
        if in_policy and not moving:
            since = left_ns if left_ns is not None else -1
            if not any(since < t <= sample.t_ns for t in requests):
                violations.append(Violation("auto_rearm", sample.t_ns,
                                            f"{sample.mode} without an arm request since the stop ({sample.reason})"))
        if not in_policy and moving:
            left_ns = sample.t_ns
        moving = in_policy
    return violations


def check_stop_source_losses(losses: Sequence[tuple[int, int]], modes: Sequence[ModeSample]) -> list[Violation]:
    """Every loss of the only stop source [(silent from, heard again) ns] that began while the
    supervisor drove the arm (AUTONOMOUS or SHARED) latched ESTOP before the source came back."""
    modes = sorted(modes, key=lambda m: m.t_ns)
    violations: list[Violation] = []
    for start, end in losses:
        before = [m for m in modes if m.t_ns <= start]
        if not before or before[-1].mode not in ("AUTONOMOUS", "SHARED"):
            continue  # not moving: the supervisor only refuses to arm (docs/safety.md)
        if not any(start < m.t_ns <= end and m.mode == "ESTOP" for m in modes):
            violations.append(Violation("stop_source_loss_ignored", start,
                                        f"stop source silent for {(end - start) / 1e9:.2f} s while "
                                        f"{before[-1].mode} without ESTOP"))
    return violations


@dataclass
class RecoveryLog:
    """Recovery times [s] per fault kind (None: not recovered within the injector's timeout)."""

    times: dict[str, list[float | None]] = field(default_factory=dict)

    def add(self, kind: str, seconds: float | None) -> None:
        self.times.setdefault(kind, []).append(seconds)

    def summary(self) -> dict[str, dict[str, float | int | None]]:
        out: dict[str, dict[str, float | int | None]] = {}
        for kind, values in sorted(self.times.items()):
            done = [v for v in values if v is not None]
            out[kind] = {"count": len(values), "unrecovered": len(values) - len(done),
                         "median_s": round(float(np.median(done)), 3) if done else None,
                         "max_s": round(float(np.max(done)), 3) if done else None}
        return out


def count_by_kind(items: Sequence[str], kinds: Sequence[str]) -> dict[str, int]:
    """{kind: count} with every one of `kinds` present (0 when absent), plus any other kind seen."""
    counts = Counter(items)
    return {**{k: counts.get(k, 0) for k in kinds}, **{k: v for k, v in counts.items() if k not in kinds}}
