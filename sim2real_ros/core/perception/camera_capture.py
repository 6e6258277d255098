"""What the camera node (nodes/camera_node.py) decides without ROS: which source a parameter
names, when each frame of a file is due, and the bookkeeping of captured, published, failed and
dropped frames. Times are integer nanoseconds passed in by the caller.

Sources: a device index ("0"), a V4L2 device path ("/dev/video0"), a video file, or a network
stream URL (rtsp/http...) only when the user allows URLs. A file plays at the configured fps
(frame k due at start + k / fps): when the node falls behind, the frames it is late for are
skipped and counted as dropped, so a slow machine lowers the rate, never the clock. A live source
sets its own pace; a gap between captures longer than 1.5 periods counts the frames it lost.
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ..errors import ConfigError
from ..timebase import NS_PER_S
from .camera_model import CameraModel, load_calibration_yaml

SOURCE_KINDS = ("index", "device", "file", "url")
URL_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp")
# Files FFmpeg would read as lists of other files or streams (a playlist can point anywhere on disk or
# the network): refused as sources, so a "file" is always the one named.
PLAYLIST_SUFFIXES = (".m3u", ".m3u8", ".sdp", ".ffconcat", ".concat", ".txt", ".xspf", ".pls")
LIVE_GAP_FACTOR = 1.5  # a live capture gap above this many periods lost frames
RATE_WINDOW_S = 2.0  # the measured rate is over the captures of this last window [s]


class DropReason:
    """Why a frame was not published (diagnostics keys dropped_<reason>)."""

    LATE = "late"  # file source: the node was late for it and skipped it to stay on time
    GAP = "gap"  # live source: it never arrived (a capture gap of more than 1.5 periods)
    SIZE = "size_mismatch"  # not the calibration's width x height
    ALL = (LATE, GAP, SIZE)


@dataclass(frozen=True)
class CameraSource:
    """A parsed `source` parameter: kind in SOURCE_KINDS; value: int index or str path/URL."""

    kind: str
    value: int | str

    @property
    def live(self) -> bool:
        """Live sources set their own pace; a file is paced by the node."""
        return self.kind != "file"

    def describe(self) -> str:
        return f"{self.kind} {self.value}"


def parse_source(text: str, *, allow_url: bool, source: str = "camera_node parameter") -> CameraSource:
    """The source `text` names. Raises ConfigError naming `source` parameter when it is empty, a
    URL without allow_url, a missing device or file, or a playlist."""
    raw = text.strip()
    if not raw:
        raise ConfigError(source, "source", text, "must name a device index (0), a /dev/video path or a video file")
    if raw.isdigit():
        return CameraSource("index", int(raw))
    if "://" in raw:
        scheme = raw.split("://", 1)[0].lower()
        if scheme == "file":
            raise ConfigError(source, "source", text, "give a file as a plain path, not a file:// URL")
        if scheme not in URL_SCHEMES:
            raise ConfigError(source, "source", text, f"URL scheme {scheme!r} is not one of {URL_SCHEMES}")
        if not allow_url:
            raise ConfigError(source, "source", text, "is a network stream: set allow_url:=true to open URLs")
        return CameraSource("url", raw)
    path = Path(raw)
    if raw.startswith("/dev/"):
        if not path.exists():
            raise ConfigError(source, "source", text, "no such device")
        return CameraSource("device", raw)
    if not path.is_file():
        raise ConfigError(source, "source", text, "no such video file (or device index / /dev/video path)")
    if path.suffix.lower() in PLAYLIST_SUFFIXES:
        raise ConfigError(source, "source", text, f"playlists ({', '.join(PLAYLIST_SUFFIXES)}) are not opened: "
                                                  "name the video file itself")
    return CameraSource("file", str(path.resolve()))


@dataclass(frozen=True)
class CameraCalibration:
    """A ROS camera calibration YAML as camera_info carries it: the model (size, K, D) plus the
    rectification R (3x3, row-major) and projection P (3x4, row-major) exactly as the file gives
    them, and the camera's name."""

    model: CameraModel
    r: tuple[float, ...]
    p: tuple[float, ...]
    camera_name: str
    path: str


def load_camera_calibration(path: str | Path) -> CameraCalibration:
    """Read `path` (ROS camera_calibration format). ConfigError names the file and field."""
    model = load_calibration_yaml(path)  # validates size, K, D, P and names the file
    data = yaml.safe_load(Path(path).read_text())
    r = data.get("rectification_matrix", {"data": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]})
    values = {}
    for key, entry, size in (("rectification_matrix", r, 9), ("projection_matrix", data["projection_matrix"], 12)):
        numbers = np.asarray(entry.get("data", []) if isinstance(entry, dict) else [], dtype=float).ravel()
        if numbers.size != size or not np.all(np.isfinite(numbers)):
            raise ConfigError(str(path), key, entry, f"needs {size} finite numbers")
        values[key] = tuple(float(v) for v in numbers)
    return CameraCalibration(model, values["rectification_matrix"], values["projection_matrix"],
                             str(data.get("camera_name", "")), str(path))


@dataclass(frozen=True)
class CameraNodeConfig:
    """Validated camera_node parameters (docs/parameters.md).

    fps: requested rate [Hz] (a file plays at it; a device is asked for it);
    diagnostics_period_s [s]; reopen_after_failures: consecutive failed reads before a live source
    is closed and opened again (0: never); loop: a file restarts at its end.
    """

    fps: float
    diagnostics_period_s: float = 1.0
    reopen_after_failures: int = 30
    loop: bool = False
    frame_id: str = "camera_link"
    source: str = "camera_node parameter"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fps) and 0.1 <= self.fps <= 1000.0):
            raise ConfigError(self.source, "fps", self.fps, "must be in [0.1, 1000] Hz")
        if not (math.isfinite(self.diagnostics_period_s) and 0.01 <= self.diagnostics_period_s <= 3600.0):
            raise ConfigError(self.source, "diagnostics_period_s", self.diagnostics_period_s,
                              "must be in [0.01, 3600] s")
        if self.reopen_after_failures < 0:
            raise ConfigError(self.source, "reopen_after_failures", self.reopen_after_failures, "must be >= 0")

    @property
    def period_ns(self) -> int:
        return round(NS_PER_S / self.fps)


class FramePacer:
    """Due times of a file played at `fps`: frame k of this pass is due at start_ns + k * period."""

    def __init__(self, fps: float, start_ns: int) -> None:
        self.period_ns = NS_PER_S / fps
        self.restart(start_ns)

    def restart(self, start_ns: int) -> None:
        """Start a pass (the file's first frame) due at start_ns [ns]."""
        self._start_ns = start_ns
        self._next = 0

    def next_due_ns(self) -> int:
        """When the next frame to publish is due [ns]."""
        return self._start_ns + round(self._next * self.period_ns)

    def take(self, now_ns: int) -> int:
        """Called at now_ns >= next_due_ns(): how many frames to skip (the node is late for them)
        before the one to publish now. Advances past them and the published one."""
        due = max(self._next, int((now_ns - self._start_ns) // self.period_ns))
        skipped = due - self._next
        self._next = due + 1
        return skipped


@dataclass
class CaptureLedger:
    """Counts of one camera: frames captured (read from the source), published, failed reads,
    reopens, drops by DropReason; capture stamps of the last RATE_WINDOW_S for the rate."""

    period_ns: int
    live: bool
    captured: int = 0
    published: int = 0
    failed_reads: int = 0
    consecutive_failures: int = 0
    reopens: int = 0
    loops: int = 0
    ended: bool = False
    dropped: Counter[str] = field(default_factory=Counter)
    _stamps: deque[int] = field(default_factory=lambda: deque(maxlen=4096))
    _last_capture_ns: int | None = None

    def on_failed_read(self) -> None:
        self.failed_reads += 1
        self.consecutive_failures += 1

    def on_reopen(self) -> None:
        self.reopens += 1
        self._last_capture_ns = None  # the gap while reopening is counted as failures, not as lost frames

    def on_skipped(self, count: int) -> None:
        """File source: `count` frames skipped because the node was late for them."""
        self.dropped[DropReason.LATE] += count
        self.captured += count

    def on_capture(self, stamp_ns: int) -> None:
        """A frame read at stamp_ns [ns]. Live sources: a gap of more than 1.5 periods since the
        previous capture counts the frames that never arrived."""
        self.captured += 1
        self.consecutive_failures = 0
        if self.live and self._last_capture_ns is not None:
            gap = stamp_ns - self._last_capture_ns
            if gap > LIVE_GAP_FACTOR * self.period_ns:
                self.dropped[DropReason.GAP] += max(0, round(gap / self.period_ns) - 1)
        self._last_capture_ns = stamp_ns

    def on_published(self, stamp_ns: int) -> None:
        self.published += 1
        self._stamps.append(stamp_ns)

    def on_dropped(self, reason: str) -> None:
        self.dropped[reason] += 1

    def rate_hz(self, now_ns: int) -> float:
        """Published frames per second over the last RATE_WINDOW_S [Hz] (0 with fewer than 2)."""
        start = now_ns - round(RATE_WINDOW_S * NS_PER_S)
        recent = [s for s in self._stamps if s >= start]
        if len(recent) < 2 or recent[-1] <= recent[0]:
            return 0.0
        return (len(recent) - 1) * NS_PER_S / (recent[-1] - recent[0])

    def last_capture_age_s(self, now_ns: int) -> float:
        """Seconds since the last frame was read (inf before the first)."""
        return math.inf if self._last_capture_ns is None else (now_ns - self._last_capture_ns) / NS_PER_S

    def values(self, now_ns: int) -> dict[str, object]:
        """The diagnostics key/values (every drop reason always present)."""
        out: dict[str, object] = {
            "captured": self.captured, "published": self.published, "failed_reads": self.failed_reads,
            "reopens": self.reopens, "loops": self.loops, "ended": self.ended,
            "rate_hz": round(self.rate_hz(now_ns), 2),
            "last_capture_age_s": round(self.last_capture_age_s(now_ns), 3),
            "dropped_total": sum(self.dropped.values()),
        }
        out.update({f"dropped_{reason}": self.dropped[reason] for reason in DropReason.ALL})
        return out
