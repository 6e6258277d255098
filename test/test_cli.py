"""The `sim2real` entry point and the graph declaration."""
import signal
import subprocess
import sys

from sim2real_ros.graph import GraphArgs, declare_graph
from sim2real_ros.runtime.launcher import node_command, write_overrides


def test_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "node" in out and "launch" in out


def test_unknown_command_fails_with_usage():
    proc = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "fly"], capture_output=True, text=True)
    assert proc.returncode == 1 and "unknown command 'fly'" in proc.stderr


def test_sigint_stops_a_command_started_with_sigint_ignored():
    """A shell without job control starts `cmd &` with SIGINT ignored (CI runners, scripts): Ctrl-C
    forwarded by a launcher, or `kill -INT`, must still stop the command in order (exit 0). Without
    it the robot bring-up only stopped at SIGKILL when the suite ran as a background job."""
    proc = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "emulate-bus", "--ids", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout.readline().startswith("/dev/"), proc.stderr.read()
        assert proc.stdout.readline().startswith("emulating servos"), proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_sim_graph_declaration_and_node_command(tmp_path):
    args = GraphArgs(namespace="arm1", command_topic="/arm1/fpc/commands")
    decls = declare_graph("sim", args)
    sim = next(d for d in decls if d.executable == "sim_node")
    overrides = write_overrides(sim, tmp_path)
    cmd = node_command(sim, "arm1", overrides)
    assert cmd[3:6] == ["node", "sim_node", "--ros-args"]
    assert "__ns:=/arm1" in cmd and str(overrides) in cmd
