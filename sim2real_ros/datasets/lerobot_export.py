"""A recorded bag -> a LeRobot v3.0 dataset (docs/datasets.md).

Frames lie on an `fps` grid from each episode's start. Per frame: `observation.state` = the joint
state nearest the frame time (within half a frame), `action` = the robot command meant for the
frame time, linearly interpolated as the fine-tuning labels are (episodes/dataset.py: a command
sent at tau is meant for tau + actuation_latency; the default latency 0 gives LeRobot's convention,
the command sent at frame t), `observation.images.<camera>` = the image nearest the frame time, per
Image topic, encoded (H.264 or AV1) one frame at a time. Frames lacking any of them are left out
(counted). Episodes: dataset/episode start/end events, else sim/episode outcomes, else stretches of
human control in supervisor/state, else the whole bag.

Layout (LeRobot v3.0): meta/info.json, meta/stats.json, meta/tasks.parquet,
meta/episodes/chunk-000/file-000.parquet, data/chunk-000/file-000.parquet,
videos/<key>/chunk-000/file-000.mp4 (every episode in one file; no size split).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bags import BagReader
from ..conversions import stamp_to_ns
from ..episodes.actions import sample_actions
from ..episodes.recording import RecordingCollector
from ..episodes.topics import resolve_topic
from ..topics import (
    DATASET_EPISODE,
    JOINT_STATES,
    ROBOT_COMMAND,
    SIM_EPISODE,
    SUPERVISOR_STATE,
    TELEOP_COMMAND,
    DatasetEpisodeEvent,
    EpisodeOutcome,
    SupervisorState,
)
from .lerobot import ACTION_KEY, IMAGE_PREFIX, NS_PER_S, STATE_KEY, DatasetError

ACTION_TOPICS = (TELEOP_COMMAND.name, ROBOT_COMMAND.name)
CODECS = {"h264": ("libx264", "h264"), "av1": ("libsvtav1", "av1")}
HUMAN_MODES = ("TELEOP", "SHARED")
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


@dataclass
class ExportSummary:
    dataset: str
    bags: list[str]
    episodes: int
    frames: int
    fps: float
    cameras: list[str]
    dropped_frames: int
    elapsed_s: float
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def camera_key(topic: str) -> str:
    """camera/<key>/image_raw -> <key>; camera/image_raw -> camera; else the topic, sanitized."""
    parts = [p for p in topic.strip("/").split("/") if p]
    if len(parts) >= 3 and parts[-3] == "camera" and parts[-1] == "image_raw":
        return parts[-2]
    if len(parts) >= 2 and parts[-1] == "image_raw":
        return parts[-2]
    return re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts))


@dataclass
class _BagPlan:
    bag: Path
    joint_names: tuple[str, ...]
    image_topics: dict[str, str]  # key -> topic
    episodes: list[tuple[int, int, str]]  # (start, end [ns], task)
    frames: list[np.ndarray]  # per episode: grid times [ns] kept
    states: list[np.ndarray]
    actions: list[np.ndarray]
    picks: dict[str, list[np.ndarray]]  # per camera, per episode: image ordinal per kept frame
    dropped: int
    splits: int = 0  # spans split into several episodes at left-out frames
    empty_cameras: list[str] = field(default_factory=list)  # image topics without a message: left out


def _plan(bag: Path, fps: float, latency_s: float, task: str) -> _BagPlan:
    with BagReader(bag) as reader:
        types = reader.topic_types()
        state_topic, _ = resolve_topic(JOINT_STATES.name, types)
        if state_topic is None:
            raise DatasetError(f"{bag}: topic 'joint_states' (observation.state) is not in the bag "
                               f"(it has {sorted(types)})")
        action_topic = next((t for t in (resolve_topic(a, types)[0] for a in ACTION_TOPICS) if t), None)
        if action_topic is None:
            raise DatasetError(f"{bag}: no action topic ({' or '.join(ACTION_TOPICS)}) in the bag "
                               f"(it has {sorted(types)})")
        images = {camera_key(t): t for t, ty in sorted(types.items())
                  if ty == "sensor_msgs/msg/Image" and not t.strip("/").startswith("policy/")}
        episode_topic = resolve_topic(DATASET_EPISODE.name, types)[0]
        sim_topic = resolve_topic(SIM_EPISODE.name, types)[0]
        sup_topic = resolve_topic(SUPERVISOR_STATE.name, types)[0]
        joint_names: tuple[str, ...] | None = None
        collector = None
        image_stamps: dict[str, list[int]] = {k: [] for k in images}
        events: list[tuple[int, DatasetEpisodeEvent]] = []
        outcomes: list[tuple[int, EpisodeOutcome]] = []
        modes: list[tuple[int, str]] = []
        wanted = [t for t in (state_topic, action_topic, episode_topic, sim_topic, sup_topic) if t]
        pending_actions = []
        for m in reader.messages(wanted + list(images.values())):
            if m.topic == state_topic:
                if joint_names is None:
                    joint_names = tuple(m.msg.name)
                    collector = RecordingCollector(joint_names, types[action_topic], (), ())
                    for msg, log in pending_actions:
                        collector.add_action(msg, log)
                collector.add_joint_state(m.msg, m.log_time_ns)
            elif m.topic == action_topic:
                if collector is None:
                    pending_actions.append((m.msg, m.log_time_ns))
                else:
                    collector.add_action(m.msg, m.log_time_ns)
            elif m.topic == episode_topic:
                events.append((stamp_to_ns(m.msg.header.stamp), DatasetEpisodeEvent.from_msg(m.msg)))
            elif m.topic == sim_topic:
                outcomes.append((stamp_to_ns(m.msg.header.stamp), EpisodeOutcome.from_msg(m.msg)))
            elif m.topic == sup_topic:
                state = SupervisorState.from_msg(m.msg)
                if state is not None and state.mode:
                    modes.append((stamp_to_ns(m.msg.header.stamp) or m.log_time_ns, state.mode))
            else:
                key = next(k for k, t in images.items() if t == m.topic)
                image_stamps[key].append(stamp_to_ns(m.msg.header.stamp) or m.log_time_ns)
    if collector is None or joint_names is None:
        raise DatasetError(f"{bag}: topic {state_topic} has no joint states")
    # A camera topic without one image (a dataset imported without its videos) is no camera of the export.
    empty_cameras = [images.pop(k) for k in [k for k, v in image_stamps.items() if not v]]
    image_stamps = {k: v for k, v in image_stamps.items() if v}
    recording = collector.finish()
    if not len(recording.action_send_ns):
        raise DatasetError(f"{bag}: topic {action_topic} (action) has no usable commands")
    start_all = int(recording.joint_stamps_ns.min())
    end_all = int(recording.joint_stamps_ns.max())
    spans: list[tuple[int, int, str]] = []
    starts = {e.episode: (t, e.task) for t, e in events if e.event == "start"}
    for t, e in events:
        if e.event == "end" and e.episode in starts:
            s, text = starts[e.episode]
            spans.append((s, t, text or task))
    if not spans and outcomes:
        for t, o in outcomes:
            duration = o.duration_s
            spans.append((t - int(round(duration * NS_PER_S)) if np.isfinite(duration) else start_all, t, task))
    if not spans:
        begin = None
        for t, mode in sorted(modes):
            if mode in HUMAN_MODES and begin is None:
                begin = t
            elif mode not in HUMAN_MODES and begin is not None:
                spans.append((begin, t, task))
                begin = None
        if begin is not None:
            spans.append((begin, end_all, task))
    if not spans:
        spans = [(start_all, end_all, task)]
    period = NS_PER_S / fps
    half = int(period / 2)
    latency_ns = int(round(latency_s * NS_PER_S))
    delay_ns = recording.clock.offset_ns if not recording.clock.applied else 0
    meant = recording.action_send_ns - delay_ns + latency_ns
    stamps = {k: np.asarray(v, dtype=np.int64) for k, v in image_stamps.items()}
    orders = {k: np.argsort(v, kind="stable") for k, v in stamps.items()}
    plan = _BagPlan(bag, joint_names, images, [], [], [], [], {k: [] for k in images}, 0,
                    empty_cameras=empty_cameras)
    for start, end, text in spans:
        # A quarter frame of slack: float32 timestamps put the last frame a hair before its grid time.
        count = int(np.floor((end - start) / period + 0.25)) + 1
        grid = start + np.round(np.arange(count) * period).astype(np.int64)
        states = recording.joint_positions_at(grid, half)
        actions = sample_actions(meant, recording.action_values, grid, int(round(2 * period)))
        ok = np.all(np.isfinite(states), axis=1) & np.all(np.isfinite(actions), axis=1)
        picks = {}
        for k, s in stamps.items():
            sorted_stamps = s[orders[k]]
            if not len(sorted_stamps):
                ok[:] = False
                picks[k] = np.zeros(len(grid), dtype=np.int64)
                continue
            right = np.clip(np.searchsorted(sorted_stamps, grid), 0, len(sorted_stamps) - 1)
            left = np.clip(right - 1, 0, len(sorted_stamps) - 1)
            nearest = np.where(np.abs(sorted_stamps[left] - grid) <= np.abs(sorted_stamps[right] - grid), left, right)
            ok &= np.abs(sorted_stamps[nearest] - grid) <= half
            picks[k] = orders[k][nearest]
        plan.dropped += int((~ok).sum())
        # LeRobot reads frame i of an episode at timestamp i / fps from a gap-free video: a grid frame
        # left out inside a span would shift every later frame's time (and the last one past the
        # video's end), so a span with holes becomes one episode per gap-free run of frames.
        runs = _gap_free_runs(ok)
        plan.splits += max(len(runs) - 1, 0)
        for first, last in runs:
            keep = slice(first, last + 1)
            plan.episodes.append((int(grid[first]), int(grid[last]), text))
            plan.frames.append(grid[keep])
            plan.states.append(states[keep].astype(np.float32))
            plan.actions.append(actions[keep].astype(np.float32))
            for k in images:
                plan.picks[k].append(picks[k][keep])
    return plan


def _gap_free_runs(ok: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of every run of consecutive True values in `ok`, in order."""
    edges = np.diff(np.concatenate(([0], ok.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) - 1).tolist(), strict=True))


def _to_motor_units(plans: list[_BagPlan], names: tuple[str, ...], calibration: str | Path, joint_units: str,
                    robot: str) -> tuple[str, ...]:
    """Convert every plan's states and actions from radians to LeRobot motor units (in place); the
    dataset's joint names in LeRobot's form."""
    from .lerobot_units import POSITION_SUFFIX, dataset_units, robot_lower_limits

    motor_names = tuple(f"{n}{POSITION_SUFFIX}" for n in names)
    units = dataset_units(calibration, motor_names, robot_lower_limits(robot), joint_units)
    for plan in plans:
        plan.states = [units.from_radians(s).astype(np.float32) for s in plan.states]
        plan.actions = [units.from_radians(a).astype(np.float32) for a in plan.actions]
    return motor_names


class _VideoWriter:
    def __init__(self, path: Path, fps: float, codec: str, key: str) -> None:
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.key, self.codec = path, key, codec
        self.container = av.open(str(path), "w")
        self.stream = None
        self.fps = fps
        self.sums = np.zeros(3)
        self.squares = np.zeros(3)
        self.mins = np.full(3, np.inf)
        self.maxs = np.full(3, -np.inf)
        self.pixels = 0
        self.count = 0
        self.shape: tuple[int, int] | None = None

    def write(self, rgb: np.ndarray) -> None:
        from fractions import Fraction

        import av

        if self.stream is None:
            h, w = rgb.shape[:2]
            if h % 2 or w % 2:
                raise DatasetError(f"{self.path}: camera '{self.key}' images are {w}x{h}; yuv420p video needs "
                                   "even sizes")
            rate = Fraction(self.fps).limit_denominator(1000)
            self.stream = self.container.add_stream(CODECS[self.codec][0], rate=rate)
            self.stream.width, self.stream.height, self.stream.pix_fmt = w, h, "yuv420p"
            if self.codec == "h264":
                self.stream.options = {"crf": "18", "preset": "veryfast", "g": "2"}
            else:
                self.stream.options = {"crf": "30", "preset": "10", "g": "2"}
            self.shape = (h, w)
        if rgb.shape[:2] != self.shape:
            raise DatasetError(f"{self.path}: camera '{self.key}' changed size from {self.shape} to {rgb.shape[:2]}")
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.count
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
        small = rgb[::4, ::4].reshape(-1, 3).astype(np.float64) / 255.0
        self.sums += small.sum(0)
        self.squares += (small ** 2).sum(0)
        self.mins = np.minimum(self.mins, small.min(0))
        self.maxs = np.maximum(self.maxs, small.max(0))
        self.pixels += len(small)
        self.count += 1

    def close(self) -> None:
        if self.stream is not None:
            for packet in self.stream.encode():
                self.container.mux(packet)
        self.container.close()

    def stats(self) -> dict[str, Any]:
        mean = self.sums / max(self.pixels, 1)
        std = np.sqrt(np.maximum(self.squares / max(self.pixels, 1) - mean ** 2, 0))
        shape = lambda v: [[[float(x)]] for x in v]  # noqa: E731 - (3, 1, 1) as LeRobot stores image stats
        return {"min": shape(self.mins), "max": shape(self.maxs), "mean": shape(mean), "std": shape(std),
                "count": [self.count]}


def _vector_stats(values: np.ndarray) -> dict[str, Any]:
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    return {"min": values.min(0).tolist(), "max": values.max(0).tolist(), "mean": values.mean(0).tolist(),
            "std": values.std(0).tolist(), "count": [int(len(values))]}


def export_bag(bags: str | Path | list, out_dir: str | Path, fps: float = 30.0, codec: str = "h264",
               task: str = "demonstration", robot_type: str = "unknown", actuation_latency_s: float = 0.0,
               progress: bool = True, joint_calibration: str | Path | None = None, joint_units: str = "range",
               robot: str = "so101") -> ExportSummary:
    """Write the bag(s) as a new LeRobot v3.0 dataset at `out_dir` (it must not exist).

    joint_calibration: the arm's LeRobot calibration JSON; with it, the radians of `robot`'s joints are
    written back in LeRobot's motor units (`joint_units` "range" or "degrees", the gripper 0..100) under
    LeRobot's names ("<joint>.pos"), as `dataset import --calibration` reads them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..core.progress import progress as progress_bar
    from ..episodes.dataset import expand_bags

    started = time.perf_counter()
    if not (np.isfinite(fps) and fps > 0):
        raise DatasetError(f"--fps {fps}: must be > 0")
    if codec not in CODECS:
        raise DatasetError(f"codec {codec!r}: choose one of {sorted(CODECS)}")
    out = Path(out_dir)
    if os.path.lexists(out):  # a dangling link too: the dataset would be written where it points
        raise DatasetError(f"{out}: exists already; a dataset is never overwritten")
    paths = expand_bags([bags] if isinstance(bags, (str, Path)) else list(bags))
    plans = [_plan(Path(p), fps, actuation_latency_s, task) for p in paths]
    names = plans[0].joint_names
    cameras = sorted(plans[0].image_topics)
    for plan in plans[1:]:
        if plan.joint_names != names or sorted(plan.image_topics) != cameras:
            raise DatasetError(f"{plan.bag}: joints {plan.joint_names} / cameras {sorted(plan.image_topics)} differ "
                               f"from {plans[0].bag}'s {names} / {cameras}; export them separately")
    if joint_calibration is not None:
        names = _to_motor_units(plans, names, joint_calibration, joint_units, robot)
    total = sum(len(f) for p in plans for f in p.frames)
    if total == 0:
        raise DatasetError(f"{paths[0]}: no frame has a joint state, a command and every camera's image within "
                           "half a frame of its time")
    (out / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    writers = {k: _VideoWriter(out / VIDEO_PATH.format(video_key=IMAGE_PREFIX + k, chunk_index=0, file_index=0),
                               fps, codec, k) for k in cameras}
    tasks: dict[str, int] = {}
    rows = {c: [] for c in (STATE_KEY, ACTION_KEY, "timestamp", "frame_index", "episode_index", "index", "task_index")}
    episode_rows: list[dict[str, Any]] = []
    ticks = progress_bar(range(total), total, "export", sys.stderr) if progress else iter(range(total))
    index = 0
    try:
        for plan in plans:
            # Images: one pass over the bag, each image encoded for every frame that picks it.
            wanted = {k: [(ep, i, int(o)) for ep, picks in enumerate(plan.picks[k]) for i, o in enumerate(picks)]
                      for k in cameras}
            base_episode = len(episode_rows)
            for ep, (_start, _end, text) in enumerate(plan.episodes):
                n = len(plan.frames[ep])
                task_index = tasks.setdefault(text, len(tasks))
                e = base_episode + ep
                rows[STATE_KEY].append(plan.states[ep])
                rows[ACTION_KEY].append(plan.actions[ep])
                # LeRobot's convention (checked by its reader): timestamp = frame_index / fps.
                rows["timestamp"].append((np.arange(n) / fps).astype(np.float32))
                rows["frame_index"].append(np.arange(n, dtype=np.int64))
                rows["episode_index"].append(np.full(n, e, dtype=np.int64))
                rows["index"].append(index + np.arange(n, dtype=np.int64))
                rows["task_index"].append(np.full(n, task_index, dtype=np.int64))
                row = {"episode_index": e, "tasks": [text], "length": n, "data/chunk_index": 0, "data/file_index": 0,
                       "dataset_from_index": index, "dataset_to_index": index + n}
                for k in cameras:
                    before = writers[k].count + sum(len(p) for p in plan.picks[k][:ep])
                    key = IMAGE_PREFIX + k
                    row.update({f"videos/{key}/chunk_index": 0, f"videos/{key}/file_index": 0,
                                f"videos/{key}/from_timestamp": before / fps,
                                f"videos/{key}/to_timestamp": (before + n) / fps})
                for feature, values in ((STATE_KEY, plan.states[ep]), (ACTION_KEY, plan.actions[ep])):
                    for stat, v in _vector_stats(values).items():
                        row[f"stats/{feature}/{stat}"] = v
                row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
                episode_rows.append(row)
                index += n
            if cameras:
                _encode_bag_images(plan, cameras, wanted, writers, ticks)
            else:
                for _ in range(sum(len(f) for f in plan.frames)):
                    next(ticks, None)
    finally:
        for w in writers.values():
            w.close()
    for _ in ticks:
        pass
    n_joints = len(names)

    def vectors(key: str):
        flat = np.concatenate(rows[key]).astype(np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), pa.float32()), n_joints), flat

    state_col, states = vectors(STATE_KEY)
    action_col, actions = vectors(ACTION_KEY)
    table = pa.table({STATE_KEY: state_col, ACTION_KEY: action_col,
                      "timestamp": pa.array(np.concatenate(rows["timestamp"]), pa.float32()),
                      **{c: pa.array(np.concatenate(rows[c]), pa.int64())
                         for c in ("frame_index", "episode_index", "index", "task_index")}})
    data_path = out / DATA_PATH.format(chunk_index=0, file_index=0)
    data_path.parent.mkdir(parents=True)
    pq.write_table(table, data_path)
    pq.write_table(pa.Table.from_pylist(episode_rows), out / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()), "task": list(tasks)}),
                   out / "meta" / "tasks.parquet")
    scalar = {"shape": [1], "names": None}
    features: dict[str, Any] = {
        STATE_KEY: {"dtype": "float32", "shape": [n_joints], "names": list(names)},
        ACTION_KEY: {"dtype": "float32", "shape": [n_joints], "names": list(names)},
    }
    for k in cameras:
        h, w = writers[k].shape or (0, 0)
        features[IMAGE_PREFIX + k] = {
            "dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
            "info": {"video.height": h, "video.width": w, "video.codec": CODECS[codec][1], "video.pix_fmt": "yuv420p",
                     "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False}}
    features["timestamp"] = {"dtype": "float32", **scalar}
    for c in ("frame_index", "episode_index", "index", "task_index"):
        features[c] = {"dtype": "int64", **scalar}
    episodes = len(episode_rows)
    info = {"codebase_version": "v3.0", "robot_type": robot_type, "total_episodes": episodes, "total_frames": index,
            "total_tasks": len(tasks), "chunks_size": 1000, "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 500, "fps": fps, "splits": {"train": f"0:{episodes}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH if cameras else None, "features": features}
    (out / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    stats: dict[str, Any] = {STATE_KEY: _vector_stats(states), ACTION_KEY: _vector_stats(actions)}
    for c in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        stats[c] = _vector_stats(np.concatenate(rows[c]))
    for k in cameras:
        stats[IMAGE_PREFIX + k] = writers[k].stats()
    (out / "meta" / "stats.json").write_text(json.dumps(stats, indent=4))
    dropped = sum(p.dropped for p in plans)
    splits = sum(p.splits for p in plans)
    problems = ([f"{dropped} grid frame(s) left out: no joint state, command or image within half a frame"]
                if dropped else [])
    empty = sorted({t for p in plans for t in p.empty_cameras})
    if empty:
        problems.append(f"image topic(s) without a message left out: {empty}")
    if splits:
        problems.append(f"{splits} episode(s) split where frames were left out (LeRobot episodes have no gaps)")
    return ExportSummary(str(out), [str(p) for p in paths], episodes, index, fps, cameras, dropped,
                         time.perf_counter() - started, problems)


def _encode_bag_images(plan: _BagPlan, cameras: list[str], wanted: dict[str, list[tuple[int, int, int]]],
                       writers: dict[str, _VideoWriter], ticks) -> None:
    """Stream the bag's images once; encode each kept frame's pick, in frame order, per camera."""
    from ..conversions import image_to_array

    topics = {plan.image_topics[k]: k for k in cameras}
    position = {k: 0 for k in cameras}  # next entry of wanted[k] to fill
    ordinal = {k: -1 for k in cameras}
    done = {k: not wanted[k] for k in cameras}
    lead = cameras[0]
    with BagReader(plan.bag) as reader:
        for m in reader.messages(list(topics)):
            k = topics[m.topic]
            ordinal[k] += 1
            items = wanted[k]
            while position[k] < len(items) and items[position[k]][2] == ordinal[k]:
                try:
                    rgb = image_to_array(m.msg)
                except Exception as err:  # noqa: BLE001 - a malformed image message
                    raise DatasetError(f"{plan.bag}: image on {m.topic} does not convert ({err})") from err
                rgb = _to_rgb(rgb, str(m.msg.encoding), m.topic, plan.bag)
                writers[k].write(rgb)
                position[k] += 1
                if k == lead:
                    next(ticks, None)
            if position[k] >= len(items):
                done[k] = True
            if all(done.values()):
                break
    for k in cameras:
        if position[k] < len(wanted[k]):
            raise DatasetError(f"{plan.bag}: topic {plan.image_topics[k]} ended before frame {position[k]} of "
                               f"{len(wanted[k])} (image ordinals out of stamp order?)")


def _to_rgb(array: np.ndarray, encoding: str, topic: str, bag: Path) -> np.ndarray:
    if encoding == "rgb8":
        return array
    if encoding == "bgr8":
        return array[..., ::-1]
    if encoding == "mono8":
        return np.repeat(array.reshape(array.shape[0], array.shape[1], 1), 3, axis=2)
    if encoding == "rgba8":
        return array[..., :3]
    if encoding == "bgra8":
        return array[..., 2::-1]
    raise DatasetError(f"{bag}: images on {topic} are {encoding}; export reads rgb8, bgr8, mono8, rgba8, bgra8")
