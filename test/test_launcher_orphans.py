"""Nodes die with their launcher (docs/design.md §4): a launcher killed outright (SIGKILL, as the OOM
killer does) leaves no node process behind. Real processes throughout, found through /proc."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from support import REPO_ROOT, wait_until

from sim2real_ros.graph import declare_graph
from sim2real_ros.runtime.lifeline import GRACE_S, LAUNCHER_PID_ENV, WATCH_PERIOD_S
from sim2real_ros.topics import JOINT_STATES, ROBOT_COMMAND

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes through /proc")

PROCS = str(Path(__file__).resolve().parent / "lifeline_procs.py")
# [s] from the launcher's death until every node is gone: a node gets SIGTERM at once (or within
# WATCH_PERIOD_S) and is SIGKILLed GRACE_S later at the latest; the rest is slack for a loaded machine.
GONE_WITHIN_S = WATCH_PERIOD_S + GRACE_S + 4.0
SILENT_FOR_S = 2.0  # [s] how long the graph's topics must stay silent once its processes are gone


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time [clock ticks since boot]) of `pid`, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
    return int(fields[1]), fields[0], int(fields[19])


def _identity(pid: int) -> int | None:
    """The start time that tells this process apart from a later one reusing its pid."""
    stat = _stat(pid)
    return None if stat is None else stat[2]


def _alive(pid: int, started: int | None) -> bool:
    """The same process (not a reused pid) still exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[2] == started and stat[1] != "Z"


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None and stat[0] == pid:
            kids.append(int(entry.name))
    return kids


def _describe(pid: int) -> str:
    """Command line and per-thread state and kernel wait channel of `pid`, to tell where it hangs."""
    def read(path: str) -> str:
        try:
            return Path(path).read_text().replace("\0", " ").strip()
        except OSError:
            return "?"
    threads = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        threads.append(f"{read(f'{task}/comm')}:{(_stat(int(task.name)) or (0, '?', 0))[1]}/{read(f'{task}/wchan')}")
    return f"{pid} {read(f'/proc/{pid}/cmdline')}: threads {' '.join(threads)}"


def _signals(pid: int) -> str:
    """Pending, blocked, ignored and caught signal masks and the parent of `pid` (/proc status)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "no status"
    return " ".join(line.replace("\t", "") for line in lines
                    if line.split(":")[0] in ("State", "PPid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))


def _kill_survivors(processes: dict[int, int | None]) -> None:
    """SIGKILL what a failing test left behind, checking identity first (pids get reused)."""
    for pid, started in processes.items():
        if _alive(pid, started):
            os.kill(pid, signal.SIGKILL)


def _kill_launcher(launcher: subprocess.Popen) -> float:
    """SIGKILL the launcher (no cleanup of its own can run); returns when it happened [s, monotonic]."""
    launcher.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    launcher.wait(timeout=10)
    return killed_at


def test_sigkilled_launch_sim_leaves_no_node_running(ros, tmp_path):
    """`sim2real launch sim` with its five nodes up and the supervisor commanding; SIGKILL the
    launcher: every node process is gone within GONE_WITHIN_S, and the arm's topics fall silent."""
    namespace = f"orphans_{os.getpid()}"  # this graph's nodes apart from any other in the domain
    names = {d.name for d in declare_graph("sim")}

    def ours() -> set[str]:
        return {name for name, ns in ros.node.get_node_names_and_namespaces() if ns == f"/{namespace}"}

    log = tmp_path / "launch.log"
    nodes: dict[int, int | None] = {}
    with open(log, "w") as out:
        # TMPDIR: the launcher's parameter folder lands here, as a SIGKILLed launcher cannot remove it.
        launcher = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "launch", "sim", "--duration",
                                     "600", "--namespace", namespace], cwd=REPO_ROOT, stdout=out,
                                    stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        # Up = every node on DDS, so each one is past its startup and spinning when the launcher dies.
        up = wait_until(lambda: names <= ours(), 180.0, poll_s=0.2)
        assert up, f"nodes on DDS: {sorted(ros.node.get_node_names_and_namespaces())}\n{log.read_text()}"
        commands = ros.collect(Float64MultiArray, f"/{namespace}/{ROBOT_COMMAND.name}", 10)
        states = ros.collect(JointState, f"/{namespace}/{JOINT_STATES.name}", 10)
        ros.wait_for_messages(commands, 5, timeout_s=60.0)  # the supervisor is commanding the arm
        ros.wait_for_messages(states, 5, timeout_s=60.0)
        nodes = {pid: _identity(pid) for pid in _children(launcher.pid)}
        assert len(nodes) == len(names), (nodes, log.read_text())

        killed_at = _kill_launcher(launcher)
        gone = wait_until(lambda: not any(_alive(p, s) for p, s in nodes.items()), GONE_WITHIN_S, poll_s=0.05)
        survivors = [p for p, s in nodes.items() if _alive(p, s)]
        assert gone, (f"node processes {survivors} still running {GONE_WITHIN_S} s after the launcher was killed:\n"
                      + "\n".join(_describe(p) for p in survivors) + f"\n{log.read_text()}")
        print(f"all {len(nodes)} nodes gone {time.monotonic() - killed_at:.2f} s after the launcher's SIGKILL")
        # The graph is silent: nothing more on the arm's command or state topics. (Its node names
        # are not waited off DDS: a killed participant stays in the others' view until its lease
        # expires, and CI on Jazzy still saw one 35 s after its process ended; that cache is Fast
        # DDS's, not a node still running, which /proc settled above.)
        commands.clear()
        states.clear()
        time.sleep(SILENT_FOR_S)
        assert not commands and not states, (f"{len(commands)} commands and {len(states)} joint states within "
                                             f"{SILENT_FOR_S} s after every node process ended")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        _kill_survivors(nodes)


def test_node_outlives_the_thread_that_started_it_not_its_launcher(ros, tmp_path):
    """The kernel's parent-death signal follows the thread that forked: a GraphLauncher started
    from a worker thread that ends must keep its node; killing the launcher still ends it."""
    launcher = subprocess.Popen([sys.executable, PROCS, "worker-thread"], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    nodes: dict[int, int | None] = {}
    try:
        assert launcher.stdout is not None and launcher.stdin is not None
        line = launcher.stdout.readline()
        assert line.startswith("node "), line
        pid = int(line.split()[1])
        nodes[pid] = _identity(pid)
        # Up on DDS: past die_with_launcher (prctl armed where it was asked for) and spinning.
        assert wait_until(lambda: "supervisor" in ros.node.get_node_names(), 60.0, poll_s=0.1)
        launcher.stdin.write("end the thread\n")
        launcher.stdin.flush()
        assert launcher.stdout.readline().strip() == "thread ended"
        # A signal at the thread's exit would end the node within a second or two; it must
        # stay up, and on DDS, for this whole window.
        window_end = time.monotonic() + 3.0
        while time.monotonic() < window_end:
            assert _alive(pid, nodes[pid]), "the node died with the thread that started it"
            time.sleep(0.05)
        assert "supervisor" in ros.node.get_node_names()

        killed_at = _kill_launcher(launcher)  # no kernel signal here: the watchdog must notice
        assert wait_until(lambda: not _alive(pid, nodes[pid]), GONE_WITHIN_S, poll_s=0.05), (
            f"node {pid} still running {GONE_WITHIN_S} s after its launcher was killed")
        print(f"node gone {time.monotonic() - killed_at:.2f} s after the launcher's SIGKILL")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        _kill_survivors(nodes)


@contextlib.contextmanager
def _launcher_with_ready_node(role: str) -> Iterator[tuple[subprocess.Popen, int, int | None]]:
    """`python lifeline_procs.py ROLE`: a launcher whose one process prints "ready PID"; yields
    (launcher, node pid, node identity) and leaves neither running, whatever the test did."""
    launcher = subprocess.Popen([sys.executable, PROCS, role], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    nodes: dict[int, int | None] = {}
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline()
        assert line.startswith("ready "), line
        pid = int(line.split()[1])
        nodes[pid] = _identity(pid)
        yield launcher, pid, nodes[pid]
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        _kill_survivors(nodes)


def test_node_that_ignores_sigterm_is_killed_after_the_grace_period():
    """A node whose SIGTERM handling never ends it (hung cleanup) is SIGKILLed once the grace
    period after its launcher's death has passed, and not before."""
    from lifeline_procs import STUBBORN_GRACE_S

    with _launcher_with_ready_node("stubborn") as (launcher, pid, started):
        killed_at = _kill_launcher(launcher)
        assert wait_until(lambda: not _alive(pid, started), STUBBORN_GRACE_S + WATCH_PERIOD_S + 4.0,
                          poll_s=0.02), "a node ignoring SIGTERM outlived its launcher"
        lived_s = time.monotonic() - killed_at
        # It ignored the SIGTERM, so only the SIGKILL after the grace period could end it.
        assert lived_s >= STUBBORN_GRACE_S - 0.1, f"gone after {lived_s:.2f} s, before the grace period"


def test_node_whose_exit_hangs_in_interpreter_finalization_is_ended_by_the_kernel_timer():
    """A node that took its SIGTERM and returned, but whose interpreter hangs on the way out (where
    no Python thread runs, the watchdog's included), is ended by bound_exit's kernel timer."""
    from lifeline_procs import HUNG_EXIT_DEADLINE_S, HUNG_EXIT_GRACE_S

    with _launcher_with_ready_node("hung-exit") as (launcher, pid, started):
        killed_at = _kill_launcher(launcher)
        within_s = HUNG_EXIT_DEADLINE_S + WATCH_PERIOD_S + 4.0
        assert within_s < HUNG_EXIT_GRACE_S  # so the watchdog's own SIGKILL cannot be what ends it
        assert wait_until(lambda: not _alive(pid, started), within_s, poll_s=0.02), (
            f"a node hung in its interpreter's exit was still running {within_s} s after its launcher died: "
            f"{_describe(pid)}; {_signals(pid)}")
        print(f"gone {time.monotonic() - killed_at:.2f} s after the launcher's SIGKILL")


def test_node_whose_launcher_died_before_it_started_does_not_start():
    """The launcher may die before the node arms the parent-death signal (which would then never
    come): a node whose parent is not the launcher it was given refuses to start."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a launcher pid that is no longer our node's parent
    env = {**os.environ, LAUNCHER_PID_ENV: str(dead.pid)}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "node", "supervisor"], cwd=REPO_ROOT,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert f"the launcher (pid {dead.pid}) is gone; not starting" in result.stderr
    assert "[INFO]" not in result.stdout + result.stderr, result.stderr  # no node came up
    print(f"refused in {time.monotonic() - started:.2f} s")


def test_a_node_has_its_own_process_group_in_the_launchers_session(tmp_path):
    """A launched node stays in the launcher's session (where the kernel schedules sessions as
    groups, a node alone in its session waited up to 180 ms for a CPU beside two busy processes:
    launcher.NODE_PROCESS) but leads a process group of its own (the terminal's Ctrl-C reaches the
    launcher only, which stops the nodes in order) and reads no terminal input."""
    from sim2real_ros.graph import NodeDecl
    from sim2real_ros.runtime.launcher import GraphLauncher

    launcher = GraphLauncher([NodeDecl("supervisor", "supervisor", {"auto_arm": False})], echo=False,
                             log_file=tmp_path / "graph.log")
    launcher.start()
    try:
        pid = launcher.nodes[0].process.pid
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpgid(pid) == pid != os.getpgid(0)
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    finally:
        launcher.shutdown()
