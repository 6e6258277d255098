"""`sim2real teleop-record --sim-config YAML --episodes N --out DIR [--intervention-every K] [--checkpoint C]
[--seed S] [--real-time-factor F]`: record "real" teleoperation bags with the scripted operator, without a robot.

The sim graph runs with the sim variant YAML standing in for a real robot (e.g.
config/sim_params_real_b.yaml) and records every topic; a scripted operator who knows where the
target is acts only through the joystick and the supervisor, as a person would: demonstrations, and
every K-th episode an intervention (the policy `--checkpoint` drives first, then the operator takes
over). The session is cut into one bag per episode (DIR/episode_000, ...) with DIR/episodes.json.
DIR must not exist or be empty. Exit code 0, or 2 on bad input or a graph that failed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..paths import config_path, default_policy_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sim-config", type=Path, default=config_path("sim_params_real_a.yaml"), metavar="YAML",
                        help="sim params of the robot stand-in (default config/sim_params_real_a.yaml)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True, help="output folder (one bag per episode)")
    parser.add_argument("--intervention-every", type=int, default=2, metavar="K",
                        help="every K-th episode is an intervention (0 = demonstrations only)")
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path(),
                        help="the policy that drives before an intervention (default: the shipped policy)")
    parser.add_argument("--seed", type=int, default=0, help="the sim's seed (episode targets)")
    parser.add_argument("--real-time-factor", type=float, default=0.0, metavar="F",
                        help="the sim's pace, sim s per wall s (default: real time); on a busy machine 0.5 "
                             "keeps the recorded 100 Hz commands free of the gaps the labeller drops frames at")


def run(args: argparse.Namespace) -> int:
    from ..core.errors import ConfigError
    from ..runtime.teleop_recording import TeleopPlan, record_teleop_episodes

    if not args.sim_config.is_file():
        print(f"sim2real teleop-record: --sim-config {args.sim_config}: no such file", file=sys.stderr)
        return 2
    if not args.checkpoint.is_file():
        print(f"sim2real teleop-record: --checkpoint {args.checkpoint}: no such file", file=sys.stderr)
        return 2
    try:
        bags = record_teleop_episodes(args.out, args.episodes, args.sim_config, args.checkpoint, args.seed,
                                      TeleopPlan(intervention_every=args.intervention_every,
                                                 real_time_factor=args.real_time_factor),
                                      log=lambda text: print(text, file=sys.stderr))
    except ConfigError as err:
        print(f"sim2real teleop-record: {err}", file=sys.stderr)
        return 2
    except (RuntimeError, TimeoutError) as err:
        print(f"sim2real teleop-record: the graph failed: {err}", file=sys.stderr)
        return 2
    print("\n".join(str(b) for b in bags))
    return 0
