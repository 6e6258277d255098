"""`sim2real bag export-foxglove`: a bag as one Foxglove MCAP with the 3D arm.

The same channels as the live view (channels.py), written by the foxglove SDK's MCAP writer: the
robot model and URDF at the start, frame transforms for every joint state (forward kinematics of
the bag's or the given URDF), images, the planned path of every chunk, the time series, the
supervisor's state and events, and per-topic stats once per second of bag time.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import foxglove
from foxglove import Context

from ..bags import BagReader
from ..core.errors import BagError
from .channels import VizPublisher
from .router import VizRouter
from .source import BagView, open_bag_view, view_messages

NS_PER_S = 1_000_000_000


@dataclass
class ExportReport:
    """What an export wrote: output file, per input topic the messages read and shown, dropped."""

    output: Path
    tool_link: str
    urdf_source: str
    joint_names: list[str] = field(default_factory=list)
    read: Counter = field(default_factory=Counter)
    shown: Counter = field(default_factory=Counter)
    dropped: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"wrote {self.output} (tool point {self.tool_link}, URDF from {self.urdf_source})"]
        for topic in sorted(self.read):
            note = f"; dropped: {self.dropped[topic]}" if topic in self.dropped else ""
            out.append(f"  {topic}: {self.read[topic]} read, {self.shown[topic]} written{note}")
        return out


def export_foxglove(bag: str | Path, out: str | Path, *, urdf: str | None = None, tool_link: str = "",
                    namespace: str = "", jpeg_quality: int = 80, overwrite: bool = False,
                    view: BagView | None = None) -> ExportReport:
    """Write bag `bag` to Foxglove MCAP `out`; BagError names a missing joint_states or URDF, or an
    existing output (without overwrite)."""
    view = view or open_bag_view(bag, urdf=urdf, tool_link=tool_link, namespace=namespace)
    out = Path(out)
    if out.exists() and not overwrite:
        raise BagError(f"{out}: exists already (pass --overwrite to replace it)")
    if out.parent and not out.parent.exists():
        raise BagError(f"{out}: folder {out.parent} does not exist")
    context = Context()
    kinematics = view.kinematics()
    report = ExportReport(out, view.tool_link, view.urdf_source, kinematics.model.joint_names)
    try:
        writer = foxglove.open_mcap(str(out), allow_overwrite=overwrite, context=context)
    except RuntimeError as err:
        raise BagError(f"{out}: cannot write the MCAP file: {err}") from err
    with writer:
        publisher = VizPublisher(context, jpeg_quality=jpeg_quality)
        router = VizRouter(publisher, kinematics, view.urdf_xml)
        router.publish_robot(view.start_ns)
        next_stats = view.start_ns + NS_PER_S
        with BagReader(view.path) as reader:
            for log_time, topic, msg in view_messages(reader, view):
                while log_time >= next_stats:
                    router.publish_stats(next_stats)
                    next_stats += NS_PER_S
                report.read[topic] += 1
                if router.handle(topic, msg, log_time):
                    report.shown[topic] += 1
        router.publish_stats(max(view.end_ns, view.start_ns))
        for topic, stats in router.stats.items():
            if stats.dropped:
                report.dropped[topic] = f"{stats.dropped} ({stats.last_error})"
        writer.write_metadata("sim2real_ros", {"source_bag": str(view.path), "tool_link": view.tool_link,
                                               "urdf_source": view.urdf_source})
    return report
