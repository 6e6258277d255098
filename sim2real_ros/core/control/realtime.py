"""Real-time knobs of a node process: which ones, their validation, and the plan (pure, no OS calls).

As ros2_control's controller manager and realtime_tools do: a scheduling policy and priority, CPU
affinity and memory locking, asked for by parameters, applied at start-up only where the process
may (root, CAP_SYS_NICE, or an RLIMIT_RTPRIO at least the priority; a memlock limit for mlockall),
otherwise left out with one warning: the node then runs as it always did. nodes/realtime.py reads
the permissions, calls the OS and reports; this module decides what to try, so it is tested
without privileges.

Why these defaults (docs/deployment.md): a real-time priority goes only to processes whose work
per wake-up is bounded and that sleep between events (the supervisor, the actuator, the servo-bus
drivers). A process that can spin without sleeping (the policy's forward pass, a sim stepping as
fast as it can, the camera path) at SCHED_FIFO would starve everything below it, watchdogs
included; it may get a lower nice value instead (SCHED_OTHER, a larger share of the CPU than the
machine's other work, never all of it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError

POLICIES = ("other", "fifo", "rr")  # SCHED_OTHER (the default), SCHED_FIFO, SCHED_RR
REALTIME_POLICIES = ("fifo", "rr")
PRIORITY_RANGE = (1, 99)  # Linux's range for SCHED_FIFO / SCHED_RR
NICE_RANGE = (-20, 19)  # Linux's nice values (SCHED_OTHER's weight: -20 the largest CPU share)
CAP_SYS_NICE_BIT = 23  # bit of CAP_SYS_NICE in /proc/<pid>/status CapEff
CAP_IPC_LOCK_BIT = 14  # bit of CAP_IPC_LOCK
UNLIMITED = -1  # an rlimit without a bound (RLIM_INFINITY)
GIL_SWITCH_INTERVAL_MAX_S = 0.1  # [s] the longest switch interval a node may ask for


@dataclass(frozen=True)
class RealtimeRequest:
    """What a node's parameters ask for.

    policy: one of POLICIES; priority: 1..99 for fifo/rr, 0 for other; cpu_affinity: CPU indices
    the process may run on (empty: all, as before); lock_memory: mlockall(MCL_CURRENT | MCL_FUTURE),
    so no page fault waits on the disk; nice: the nice value under sched_policy other (-20..19, 0 as
    before; below 0 needs CAP_SYS_NICE or RLIMIT_NICE); gil_switch_interval_s [s]: the interpreter's
    switch interval (0: Python's own, 5 ms), how long a thread that woke for an event may wait for
    another thread of the process to hand over the interpreter.
    """

    policy: str = "other"
    priority: int = 0
    cpu_affinity: tuple[int, ...] = ()
    lock_memory: bool = False
    nice: int = 0
    gil_switch_interval_s: float = 0.0
    source: str = "realtime parameters"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(self.source, "sched_policy", self.policy, f"must be one of {', '.join(POLICIES)}")
        low, high = PRIORITY_RANGE
        if self.policy in REALTIME_POLICIES and not low <= self.priority <= high:
            raise ConfigError(self.source, "sched_priority", self.priority,
                              f"must be in [{low}, {high}] for sched_policy {self.policy}")
        if self.policy == "other" and self.priority != 0:
            raise ConfigError(self.source, "sched_priority", self.priority,
                              "must be 0 for sched_policy other (a priority needs fifo or rr)")
        if not NICE_RANGE[0] <= self.nice <= NICE_RANGE[1]:
            raise ConfigError(self.source, "nice", self.nice, f"must be in [{NICE_RANGE[0]}, {NICE_RANGE[1]}]")
        if self.nice != 0 and self.policy != "other":
            raise ConfigError(self.source, "nice", self.nice,
                              f"applies to sched_policy other only (sched_policy is {self.policy}): leave it 0")
        if not 0.0 <= self.gil_switch_interval_s <= GIL_SWITCH_INTERVAL_MAX_S:
            raise ConfigError(self.source, "gil_switch_interval_s", self.gil_switch_interval_s,
                              f"must be in [0, {GIL_SWITCH_INTERVAL_MAX_S}] s (0: Python's own, 0.005)")
        bad = [cpu for cpu in self.cpu_affinity if cpu < 0]
        if bad:
            raise ConfigError(self.source, "cpu_affinity", list(self.cpu_affinity), f"CPU indices must be >= 0: {bad}")
        if len(set(self.cpu_affinity)) != len(self.cpu_affinity):
            raise ConfigError(self.source, "cpu_affinity", list(self.cpu_affinity), "names a CPU twice")

    @property
    def asks_anything(self) -> bool:
        """False when every knob is left as the process starts (nothing to apply or report)."""
        return (self.policy != "other" or bool(self.cpu_affinity) or self.lock_memory or self.nice != 0
                or self.gil_switch_interval_s > 0)

    @classmethod
    def from_values(cls, values: Mapping[str, object], source: str) -> RealtimeRequest:
        """From declared parameter values {sched_policy, sched_priority, cpu_affinity, lock_memory, nice}.
        The policy name is matched case-insensitively and may be given as SCHED_FIFO."""
        policy = str(values.get("sched_policy", "other")).strip().lower().removeprefix("sched_")
        affinity = tuple(int(cpu) for cpu in (values.get("cpu_affinity") or ()))  # type: ignore[union-attr]
        return cls(policy=policy, priority=int(values.get("sched_priority", 0)),  # type: ignore[call-overload]
                   cpu_affinity=affinity, lock_memory=bool(values.get("lock_memory", False)),
                   nice=int(values.get("nice", 0)),  # type: ignore[call-overload]
                   gil_switch_interval_s=float(values.get("gil_switch_interval_s", 0.0)),  # type: ignore[arg-type]
                   source=source)


@dataclass(frozen=True)
class Permissions:
    """What the process may do. is_root: effective uid 0 (reported; the capabilities decide);
    cap_sys_nice / cap_ipc_lock: those capabilities are effective; rtprio_limit: soft RLIMIT_RTPRIO (UNLIMITED = none);
    memlock_limit_bytes: soft RLIMIT_MEMLOCK (UNLIMITED = none); cpus: the CPUs that exist;
    nice_limit: soft RLIMIT_NICE (the lowest nice value allowed is 20 - nice_limit; UNLIMITED = any)."""

    is_root: bool
    cap_sys_nice: bool
    rtprio_limit: int
    cap_ipc_lock: bool
    memlock_limit_bytes: int
    cpus: tuple[int, ...]
    nice_limit: int = 0

    def may_set_nice(self, nice: int) -> bool:
        # Raising the nice value is always allowed; lowering it below 0 needs the capability or a limit.
        if nice >= 0 or self.cap_sys_nice or self.nice_limit == UNLIMITED:
            return True
        return nice >= 20 - self.nice_limit

    def may_set_priority(self, priority: int) -> bool:
        # Root's power here is CAP_SYS_NICE: a root process without it (a container, setpriv) may not.
        if self.cap_sys_nice:
            return True
        return self.rtprio_limit == UNLIMITED or priority <= self.rtprio_limit

    def may_lock_memory(self) -> bool:
        # mlockall(MCL_FUTURE) under a small memlock limit makes later allocations fail: only an
        # unlimited limit (or the capability) is safe for a Python process that keeps allocating.
        return self.cap_ipc_lock or self.memlock_limit_bytes == UNLIMITED


@dataclass(frozen=True)
class RealtimePlan:
    """What to apply (None / () / False: leave it) and why each refused knob is left out."""

    policy: str | None = None
    priority: int = 0
    cpu_affinity: tuple[int, ...] = ()
    lock_memory: bool = False
    nice: int | None = None
    gil_switch_interval_s: float | None = None  # [s] None: leave the interpreter's
    refused: tuple[str, ...] = field(default_factory=tuple)


def plan_knobs(request: RealtimeRequest, permissions: Permissions) -> RealtimePlan:
    """The knobs of `request` this process may apply; every other one with the reason it is not."""
    refused: list[str] = []
    policy: str | None = None
    if request.policy in REALTIME_POLICIES:
        if permissions.may_set_priority(request.priority):
            policy = request.policy
        else:
            limit = "none" if permissions.rtprio_limit == 0 else str(permissions.rtprio_limit)
            refused.append(f"sched_policy {request.policy} priority {request.priority}: no CAP_SYS_NICE, "
                           f"RLIMIT_RTPRIO {limit} (docs/deployment.md: limits.conf rtprio)")
    affinity: tuple[int, ...] = ()
    if request.cpu_affinity:
        missing = [cpu for cpu in request.cpu_affinity if cpu not in permissions.cpus]
        if missing:
            refused.append(f"cpu_affinity {list(request.cpu_affinity)}: CPUs {missing} not available "
                           f"(this machine: {list(permissions.cpus)})")
        else:
            affinity = request.cpu_affinity
    lock = False
    if request.lock_memory:
        if permissions.may_lock_memory():
            lock = True
        else:
            refused.append(f"lock_memory: RLIMIT_MEMLOCK {permissions.memlock_limit_bytes} B is limited and no "
                           "CAP_IPC_LOCK (docs/deployment.md: limits.conf memlock unlimited)")
    nice: int | None = None
    if request.nice != 0:
        if permissions.may_set_nice(request.nice):
            nice = request.nice
        else:
            refused.append(f"nice {request.nice}: no CAP_SYS_NICE, RLIMIT_NICE {permissions.nice_limit} "
                           "(docs/deployment.md: limits.conf nice)")
    # The switch interval is the interpreter's own setting: no privilege needed.
    switch = request.gil_switch_interval_s if request.gil_switch_interval_s > 0 else None
    return RealtimePlan(policy=policy, priority=request.priority if policy else 0, cpu_affinity=affinity,
                        lock_memory=lock, nice=nice, gil_switch_interval_s=switch, refused=tuple(refused))


@dataclass(frozen=True)
class RealtimeReport:
    """What a process asked for and what it got (nodes/realtime.py fills it after the OS calls)."""

    request: RealtimeRequest
    policy: str  # the policy in force after start-up
    priority: int
    cpu_affinity: tuple[int, ...]  # the CPUs the process may run on after start-up
    memory_locked: bool
    refused: tuple[str, ...]
    nice: int = 0  # the process's nice value after start-up
    gil_switch_interval_s: float = 0.005  # [s] the interpreter's switch interval after start-up

    @property
    def complete(self) -> bool:
        """True when everything asked for was applied."""
        return not self.refused

    def warning(self) -> str:
        """The one warning line for what was refused ("" when nothing was)."""
        if not self.refused:
            return ""
        return ("real-time knobs not applied, running as before: " + "; ".join(self.refused))

    def values(self) -> dict[str, str]:
        """Diagnostic key-values (str), in a fixed order."""
        return {
            "sched_policy_requested": self.request.policy,
            "sched_priority_requested": str(self.request.priority),
            "cpu_affinity_requested": _cpus(self.request.cpu_affinity) or "all",
            "lock_memory_requested": str(self.request.lock_memory).lower(),
            "nice_requested": str(self.request.nice),
            "sched_policy": self.policy,
            "sched_priority": str(self.priority),
            "cpu_affinity": _cpus(self.cpu_affinity),
            "memory_locked": str(self.memory_locked).lower(),
            "nice": str(self.nice),
            "gil_switch_interval_s_requested": f"{self.request.gil_switch_interval_s:g}",
            "gil_switch_interval_s": f"{self.gil_switch_interval_s:g}",
            "refused": "; ".join(self.refused),
        }


def _cpus(cpus: Sequence[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def parse_cap_bits(status_text: str, field_name: str = "CapEff") -> int:
    """The capability mask of a /proc/<pid>/status text (0 when the field is missing or unreadable)."""
    for line in status_text.splitlines():
        if line.startswith(field_name + ":"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return 0
    return 0
