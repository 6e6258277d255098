"""`sim2real demo`: the main job (what `make demo` runs)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..paths import default_policy_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="output folder (replaced)")
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path())
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from ..runtime.demo import Demo, DemoConfig, replay_error_rad

    config = DemoConfig(out_dir=args.out, checkpoint=args.checkpoint, episodes=args.episodes, seed=args.seed)
    report = Demo(config, log=lambda text: print(text, flush=True)).run()
    lo, hi = report["success_ci95"]
    replay_err = replay_error_rad(report["replay"])
    print("\n=== sim2real demo summary ===")
    print(f"episodes        {report['episodes']}, successes {report['successes']} (95% CI {lo:.2f}-{hi:.2f})")
    print(f"interventions   {len(report['interventions'])} events (takeover accepted "
          f"{report['takeover']['accepted']}, handed back {report['takeover']['handed_back']})")
    print(f"e-stop          reaction {report['estop']['reaction_ms']} ms (hold reached after "
          f"{report['estop']['hold_reached_ms']} ms), held {report['estop']['held_position']}, "
          f"reset refused while pressed {report['estop']['reset_refused_while_pressed']}")
    print(f"replay error    {'n/a' if replay_err is None else f'{replay_err:.4f} rad MAE'} "
          "(policy vs the human's commands during the takeover)")
    print(f"report          {args.out / 'report.md'}  (wall time {report['wall_time_s']} s)")
    # The policy may fail an episode; the safety chain may not: those make the demo fail.
    checks = {"takeover accepted": report["takeover"]["accepted"], "handed back": report["takeover"]["handed_back"],
              "e-stop latched": report["estop"]["latched"], "hold sent": report["estop"]["held_position"],
              "reset refused while pressed": report["estop"]["reset_refused_while_pressed"],
              "reset after release": report["estop"]["reset"], "re-armed": report["estop"]["rearmed"],
              "replay ran": "error" not in report["replay"]}
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        print(f"DEMO FAILED: {', '.join(failed)} (see {args.out / 'graph.log'})")
        return 1
    return 0
