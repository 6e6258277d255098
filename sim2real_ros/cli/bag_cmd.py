"""`sim2real bag info PATH [--json]`, `sim2real bag repair PATH`: inspect and fix rosbag2 bags;
`sim2real bag export-foxglove PATH --out FILE.mcap`: a Foxglove MCAP with the 3D arm (docs/viz.md)."""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator

from ..core.errors import BagError, Sim2RealError


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
    export = sub.add_parser("export-foxglove", help="write a Foxglove MCAP: 3D arm, images, plots, supervisor")
    export.add_argument("path", help="rosbag2 folder or .mcap/.db3 file with joint_states")
    export.add_argument("--out", required=True, help="the .mcap file to write")
    export.add_argument("--urdf", default=None, help="URDF file (default: the bag's robot_description)")
    export.add_argument("--tool-link", default="", help="link whose planned path is drawn (default: the tool point)")
    export.add_argument("--namespace", default="", help="the graph's namespace in the bag (e.g. arm1)")
    export.add_argument("--jpeg-quality", type=int, default=80, help="camera JPEG quality; 0 = raw images")
    export.add_argument("--layout", default=None, help="also write the default Foxglove layout JSON here")
    export.add_argument("--overwrite", action="store_true", help="replace an existing output file")


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while the command runs, so that its `finally` blocks run: a
    compressed bag's inflated temp copy and a repair's temp files are removed, not left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    with _sigterm_unwinds():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..bags.info import bag_info, format_info
    from ..bags.repair import repair_bag

    try:
        if args.action == "info":
            info = bag_info(args.path, verify_decoding=not args.no_verify)
            print(json.dumps(info.to_dict(), indent=2) if args.json else format_info(info))
            return 0
        if args.action == "export-foxglove":
            return _export_foxglove(args)
        report = repair_bag(args.path, keep_originals=not args.no_backup)
    except (BagError, Sim2RealError) as err:
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


def _export_foxglove(args: argparse.Namespace) -> int:
    from ..viz.export import export_foxglove
    from ..viz.layout import write_layout

    if not 0 <= args.jpeg_quality <= 100:
        raise BagError(f"--jpeg-quality {args.jpeg_quality}: must be in [0, 100] (0 = raw images)")
    report = export_foxglove(args.path, args.out, urdf=args.urdf, tool_link=args.tool_link, namespace=args.namespace,
                             jpeg_quality=args.jpeg_quality, overwrite=args.overwrite)
    print("\n".join(report.lines()))
    if args.layout:
        print(f"wrote layout {write_layout(args.layout, report.joint_names)}")
    return 0
