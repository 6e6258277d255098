"""`sim2real view BAG`: serve a recorded bag to Foxglove with the 3D arm (docs/viz.md).

The recorder's MCAP or any rosbag2 bag with joint_states; the URDF comes from the bag's
robot_description or --urdf. Open Foxglove -> Open connection -> Foxglove WebSocket ->
ws://localhost:8765; playback starts when the first viewer subscribes (--no-wait: at once) and
Foxglove's playback bar pauses, changes speed and seeks.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

# A viewer subscribes to its panels' channels one after the other: start once they are in.
SUBSCRIBE_GRACE_S = 0.5
# With --exit-at-end: how long the server stays up after the last message, so that the messages still
# queued for a viewer reach it before the server closes its connections [s].
DRAIN_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..viz.server import DEFAULT_BACKLOG, DEFAULT_HOST, DEFAULT_PORT

    parser.add_argument("bag", help="rosbag2 folder or .mcap/.db3 file with joint_states")
    parser.add_argument("--speed", type=float, default=1.0, help="replay speed, x real time (> 0; default 1)")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default 127.0.0.1: this "
                        "machine only; 0.0.0.0: every interface, see docs/viz.md)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="WebSocket port (0 = any free port)")
    parser.add_argument("--urdf", default=None, help="URDF file (default: the bag's robot_description)")
    parser.add_argument("--tool-link", default="", help="link whose planned path is drawn (default: tool point)")
    parser.add_argument("--namespace", default="", help="the graph's namespace in the bag (e.g. arm1)")
    parser.add_argument("--jpeg-quality", type=int, default=80, help="camera JPEG quality; 0 = raw images")
    parser.add_argument("--backlog", type=int, default=DEFAULT_BACKLOG,
                        help="messages queued per viewer before the oldest is dropped")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a browser origin (scheme://host[:port]) let in besides Foxglove's app "
                        "(https://app.foxglove.dev); repeatable. Other web pages are refused (docs/viz.md)")
    parser.add_argument("--no-wait", action="store_true", help="start playing at once, not at the first viewer")
    parser.add_argument("--exit-at-end", action="store_true", help="stop the server at the end of the bag")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds [s]")


class _Listener:
    """The server's callbacks (SDK thread): a viewer subscribing, Foxglove's playback bar."""

    def __init__(self) -> None:
        self.subscribed = threading.Event()
        self.latch = None
        self.replayer = None

    def on_subscribe(self, client, channel) -> None:
        self.subscribed.set()
        if self.latch is not None:
            self.latch.on_subscribe(client, channel)

    def on_playback_control_request(self, request):
        from foxglove.websocket import PlaybackCommand, PlaybackState, PlaybackStatus

        from ..viz.replay import Control

        replayer = self.replayer
        if replayer is None:
            return None
        playing = request.playback_command == PlaybackCommand.Play
        speed = request.playback_speed if request.playback_speed and request.playback_speed > 0 else None
        replayer.request(Control(playing=playing, speed=speed, seek_ns=request.seek_time))
        target = request.seek_time if request.seek_time is not None else replayer.clock.position(time.monotonic_ns())
        return PlaybackState(status=PlaybackStatus.Playing if playing else PlaybackStatus.Paused,
                             current_time=int(target), playback_speed=float(speed or replayer.clock.speed),
                             did_seek=request.seek_time is not None, request_id=request.request_id)


def run(args: argparse.Namespace) -> int:
    from foxglove import Context
    from foxglove.websocket import Capability

    from ..core.errors import Sim2RealError
    from ..signals import set_on_signal
    from ..viz.channels import VizPublisher
    from ..viz.replay import BagReplayer, ReplayClock
    from ..viz.router import VizRouter
    from ..viz.server import LatchOnSubscribe, ServerStartError, start_viz_server
    from ..viz.source import open_bag_view

    if not args.speed > 0:
        print(f"sim2real view: --speed {args.speed}: must be > 0", file=sys.stderr)
        return 2
    try:
        view = open_bag_view(args.bag, urdf=args.urdf, tool_link=args.tool_link, namespace=args.namespace)
        context = Context()
        router = VizRouter(VizPublisher(context, jpeg_quality=args.jpeg_quality), view.kinematics(), view.urdf_xml)
        listener = _Listener()
        listener.latch = LatchOnSubscribe(pending=False)
        server = start_viz_server(context, host=args.host, port=args.port, backlog=args.backlog, listener=listener,
                                  playback_time_range=(view.start_ns, max(view.end_ns, view.start_ns + 1)),
                                  capabilities=[Capability.Time], allowed_origins=args.allow_origin,
                                  on_refused=lambda origin, reason: print(
                                      f"[view] refused a connection: {reason}: {origin!r}"
                                      + (" (--allow-origin to let it in)" if reason == "origin not allowed" else ""),
                                      file=sys.stderr, flush=True))
    except (Sim2RealError, ServerStartError, ValueError) as err:
        print(f"sim2real view: {err}", file=sys.stderr)
        return 2
    for warning in server.warnings():
        print(f"[view] warning: {warning}", file=sys.stderr, flush=True)
    stop = threading.Event()
    # Set from a thread, not in the handler: that can deadlock on the event's own lock (signals.py).
    previous = {sig: signal.signal(sig, set_on_signal(stop)) for sig in (signal.SIGINT, signal.SIGTERM)}
    host = "localhost" if args.host in ("127.0.0.1", "localhost") else args.host
    duration_s = (view.end_ns - view.start_ns) / 1e9
    print(f"[view] {view.path}: {duration_s:.1f} s, tool point {view.tool_link}, URDF from {view.urdf_source}",
          flush=True)
    print(f"[view] Foxglove: Open connection -> Foxglove WebSocket -> ws://{host}:{server.port}", flush=True)
    try:
        if not args.no_wait:
            print("[view] waiting for a viewer to subscribe", flush=True)
            deadline = None if args.duration is None else time.monotonic() + args.duration
            while not stop.is_set() and not listener.subscribed.wait(0.1):
                if deadline is not None and time.monotonic() > deadline:
                    return 0
            time.sleep(SUBSCRIBE_GRACE_S)  # the viewer's other subscriptions of the same request land
        clock = ReplayClock(view.start_ns, view.end_ns, args.speed, wall_ns=time.monotonic_ns())
        next_stats = [view.start_ns + 1_000_000_000]

        def on_time(bag_ns: int) -> None:
            server.broadcast_time(bag_ns)
            if listener.latch.take():  # a viewer subscribed since: it gets the robot model too
                router.publish_robot(bag_ns)
            while bag_ns >= next_stats[0]:
                router.publish_stats(next_stats[0])
                next_stats[0] += 1_000_000_000

        replayer = BagReplayer(view, router, clock, time.monotonic_ns, on_time)
        listener.replayer = replayer
        if args.duration is not None:
            timer = threading.Timer(args.duration, stop.set)
            timer.daemon = True
            timer.start()
        replayer.run(stop, exit_at_end=args.exit_at_end)
        print(f"[view] sent {replayer.sent} messages", flush=True)
        if args.exit_at_end and not stop.is_set():
            stop.wait(DRAIN_S)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
