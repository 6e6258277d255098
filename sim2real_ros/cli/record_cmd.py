"""`sim2real record --out DIR [topics...] [--duration S]`: record the graph to a rosbag2 MCAP bag."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topics", nargs="*", help="topics to record (default: every topic, discovered continuously)")
    parser.add_argument("--out", "-o", default="", help="bag folder to create (default: rosbag2_<date>)")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds [s]")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="storage plugin")
    parser.add_argument("--flush-period", type=float, default=1.0,
                        help="the longest a received message waits to be handed to the OS [s]: the most a "
                             "killed recorder loses (a flush is no fsync: a power loss can lose more)")


def run(args: argparse.Namespace) -> int:
    from ..nodes.recorder import default_output, record

    return record(args.out or default_output(), args.topics, args.duration, args.storage, args.flush_period)
