"""`sim2real`: the user's entry point (docs/design.md §6).

Each command lives in its own module with `add_arguments(parser)` and `run(args) -> int`; only the
chosen command's module is imported, so `sim2real node supervisor` never pays for importing torch.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import signal
import sys

from ..paths import use_dds_profile

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "node": ("sim2real_ros.cli.node_cmd", "run one node, like `ros2 run sim2real_ros NAME`"),
    "launch": ("sim2real_ros.cli.launch_cmd", "start a graph: sim | robot | replay (like ros2 launch)"),
    "topics": ("sim2real_ros.cli.topics_cmd", "list the topics of a running graph with their rates"),
    "demo": ("sim2real_ros.cli.demo_cmd", "the main job: the full graph against the PyBullet sim"),
    "policy": ("sim2real_ros.cli.policy_cmd", "policy checkpoints: info, init, export (ONNX)"),
    "bag": ("sim2real_ros.cli.bag_cmd", "rosbag2 tools: info, repair, export-foxglove"),
    "dataset": ("sim2real_ros.cli.dataset_cmd", "LeRobot datasets: import into a bag, export a bag"),
    "record": ("sim2real_ros.cli.record_cmd", "record the graph's topics to an MCAP bag"),
    "replay": ("sim2real_ros.cli.replay_cmd", "evaluate a checkpoint against a recorded bag"),
    "train": ("sim2real_ros.cli.train_cmd", "train a policy in the randomized sim"),
    "train-teacher": ("sim2real_ros.cli.train_teacher_cmd", "PPO teacher with privileged state, on Ray workers"),
    "eval-sim": ("sim2real_ros.cli.eval_sim_cmd", "success rate of a checkpoint in the sim"),
    "sysid": ("sim2real_ros.cli.sysid_cmd", "system identification: latency, fit, excite"),
    "validate": ("sim2real_ros.cli.validate_cmd", "staged validation gate and sim-vs-real report"),
    "finetune": ("sim2real_ros.cli.finetune_cmd", "fine-tune a checkpoint on real bags, co-trained with sim"),
    "teleop-record": ("sim2real_ros.cli.teleop_record_cmd", "record scripted teleop bags on a sim robot stand-in"),
    "bench": ("sim2real_ros.cli.bench_cmd", "run every benchmark of the stack"),
    "soak": ("sim2real_ros.cli.soak_cmd", "fault-injection soak of the running sim graph (docs/safety.md)"),
    "emulate-bus": ("sim2real_ros.cli.emulate_bus_cmd", "an emulated Feetech servo bus (SO-101) on a pseudo-terminal"),
    "view": ("sim2real_ros.cli.view_cmd", "serve a recorded bag to Foxglove: 3D arm, camera, plots (docs/viz.md)"),
}


def available_commands() -> dict[str, tuple[str, str]]:
    return {name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


def _usage() -> str:
    lines = ["usage: sim2real COMMAND [options]   (sim2real COMMAND --help for details)", "", "commands:"]
    for name, (_, text) in available_commands().items():
        lines.append(f"  {name:<14} {text}")
    return "\n".join(lines)


def answer_sigint() -> None:
    """Make SIGINT stop us even when it was inherited as ignored.

    A shell without job control starts background commands (`sim2real launch robot &` in a script, a CI
    runner's job) with SIGINT ignored, and Python then never raises KeyboardInterrupt: `kill -INT` and
    the launcher's Ctrl-C forwarding would be lost and a graph would only stop at SIGKILL. ros2 launch
    installs its own SIGINT handler for the same reason; every node's rclpy does too.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    answer_sigint()
    # Before any DDS participant exists: camera images need the large-message transport profile.
    use_dds_profile()
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 1
    name, rest = argv[0], argv[1:]
    commands = available_commands()
    if name not in commands:
        print(f"sim2real: unknown command '{name}'\n\n{_usage()}", file=sys.stderr)
        return 1
    module = importlib.import_module(commands[name][0])
    parser = argparse.ArgumentParser(prog=f"sim2real {name}", description=commands[name][1])
    module.add_arguments(parser)
    return int(module.run(parser.parse_args(rest)) or 0)


if __name__ == "__main__":
    sys.exit(main())
