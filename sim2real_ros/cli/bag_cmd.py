"""`sim2real bag info PATH [--json]` and `sim2real bag repair PATH`: inspect and fix rosbag2 bags."""
from __future__ import annotations

import argparse
import json
import sys

from ..core.errors import BagError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    info = sub.add_parser("info", help="storage, duration, per-topic type/count/decodable, problems")
    info.add_argument("path", help="rosbag2 folder, or a single .db3/.mcap file")
    info.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    info.add_argument("--no-verify", action="store_true",
                      help="do not decode each topic's first message (faster; 'decodable' = type known)")
    repair = sub.add_parser("repair", help="fix a bag whose recorder died (metadata.yaml, unclosed MCAP)")
    repair.add_argument("path", help="rosbag2 folder")
    repair.add_argument("--no-backup", action="store_true",
                        help="delete damaged originals instead of keeping them as *.damaged / *.bak")


def run(args: argparse.Namespace) -> int:
    from ..bags.info import bag_info, format_info
    from ..bags.repair import repair_bag

    try:
        if args.action == "info":
            info = bag_info(args.path, verify_decoding=not args.no_verify)
            print(json.dumps(info.to_dict(), indent=2) if args.json else format_info(info))
            return 0
        report = repair_bag(args.path, keep_originals=not args.no_backup)
    except BagError as err:
        print(f"sim2real bag {args.action}: {err}", file=sys.stderr)
        return 1
    if not report.changed:
        print(f"{report.path}: nothing to repair (files closed, metadata.yaml matches them)")
        return 0
    for action in report.actions:
        print(f"repaired: {action}")
    if report.kept and not args.no_backup:
        print("kept the originals: " + ", ".join(p.name for p in report.kept))
    elif report.kept:
        for p in report.kept:
            p.unlink(missing_ok=True)
    return 0
