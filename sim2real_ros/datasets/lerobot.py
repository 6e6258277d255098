"""LeRobot datasets (codebase v2.0/v2.1 and v3.0) read, and imported into a rosbag2 MCAP bag.

    summary = import_dataset("g1_pick", "bags/g1_pick", episodes=[1])

What maps to what (docs/datasets.md): `observation.state` -> /joint_states and `action` ->
/command/teleop (sensor_msgs/JointState, names from info.json, stamped at the frame time); each
`observation.images.<key>` video, decoded with PyAV one frame at a time -> /camera/<key>/image_raw
(sensor_msgs/Image rgb8) and /camera/<key>/camera_info (from a calibration YAML, else all-zero K,
D, R, P: ROS's mark for an uncalibrated camera); episode starts and ends (with the task string) ->
/dataset/episode (diagnostic_msgs/DiagnosticArray, as sim/episode); and /supervisor/state with mode
TELEOP during an episode and HOLD between episodes (a LeRobot episode is a teleoperated
demonstration), so the replay evaluator and the fine-tuning dataset count the actions as human.

Frame times: frame i of episode e is stamped start_e + timestamp_i, where the episodes follow each
other on one time line from `start_ns` with a gap of EPISODE_GAP_S; log time = stamp.

Pure: no rclpy (messages are serialized with rosbags).
"""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ConfigError, Sim2RealError
from ..core.timebase import NS_PER_S

STATE_KEY = "observation.state"
ACTION_KEY = "action"
IMAGE_PREFIX = "observation.images."
STATE_TOPIC = "/joint_states"
COMMAND_TOPIC = "/command/teleop"
EPISODE_TOPIC = "/dataset/episode"
SUPERVISOR_TOPIC = "/supervisor/state"
DEFAULT_START_NS = 1_700_000_000 * NS_PER_S  # the imported time line's origin [ns]
EPISODE_GAP_S = 1.0  # between the last frame of an episode and the first of the next [s]
V2 = ("v2.0", "v2.1")
V3 = ("v3.0",)
HARDWARE_ID = "lerobot import"


class DatasetError(Sim2RealError):
    """A dataset is unreadable or lacks what was asked for; the message names the file and field."""


def image_topic(key: str) -> str:
    return f"/camera/{key}/image_raw"


def camera_info_topic(key: str) -> str:
    return f"/camera/{key}/camera_info"


# ----------------------------------------------------------------------------------------------
# Reading a LeRobot dataset
@dataclass(frozen=True)
class Episode:
    """One episode as the metadata describes it. v3.0 only: where its rows and video frames lie."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_file: Path
    video_files: dict[str, Path]
    video_from_s: dict[str, float] = field(default_factory=dict)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise DatasetError(f"{path}: cannot read ({err.strerror or err})") from err
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: not valid JSON ({err})") from err


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise DatasetError(f"{path}: cannot read ({err.strerror or err})") from err
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DatasetError(f"{path}: line {number} is not valid JSON ({err})") from err
    return rows


def _read_parquet(path: Path, columns: list[str] | None = None, episode: int | None = None):
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DatasetError(f"{path}: missing (the dataset's metadata lists it)")
    try:
        filters = [("episode_index", "==", episode)] if episode is not None else None
        return pq.read_table(path, columns=columns, filters=filters)
    except Exception as err:  # noqa: BLE001 - pyarrow raises many kinds for a bad file
        raise DatasetError(f"{path}: not a readable parquet file ({type(err).__name__}: {err})") from err


def feature_names(info: dict[str, Any], key: str, source: str) -> tuple[str, ...]:
    """Names of a vector feature: info.json's `names` (a list, a nested list as LeRobot v2 wrote it,
    or {"motors": [...]}); `<key>_<i>` when it has none."""
    feature = info["features"][key]
    shape = feature.get("shape") or []
    if len(shape) != 1:
        raise DatasetError(f"{source}: feature '{key}' has shape {shape}; a joint vector needs one dimension")
    names = feature.get("names")
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        names = names[0]
    if not names:
        return tuple(f"{key}_{i}" for i in range(int(shape[0])))
    names = tuple(str(n) for n in names)
    if len(names) != int(shape[0]):
        raise DatasetError(f"{source}: feature '{key}' has {len(names)} names for shape {shape}")
    return names


class LeRobotDataset:
    """An on-disk LeRobot dataset: info.json, episodes, tasks, and per-episode rows and frames."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.info_path = self.root / "meta" / "info.json"
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: no such dataset folder")
        if not self.info_path.is_file():
            raise DatasetError(f"{self.info_path}: missing; {self.root} is not a LeRobot dataset "
                               "(expected meta/info.json)")
        info = _read_json(self.info_path)
        if not isinstance(info, dict):
            raise DatasetError(f"{self.info_path}: expected a JSON object")
        for key in ("codebase_version", "fps", "features", "data_path"):
            if key not in info:
                raise DatasetError(f"{self.info_path}: field '{key}' is missing")
        self.info = info
        self.version = str(info["codebase_version"])
        if self.version not in V2 + V3:
            raise DatasetError(f"{self.info_path}: field 'codebase_version' = {self.version!r}: "
                               f"supported are {', '.join(V2 + V3)}")
        self.fps = float(info["fps"])
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise DatasetError(f"{self.info_path}: field 'fps' = {info['fps']!r}: must be > 0")
        self.features: dict[str, dict[str, Any]] = dict(info["features"])
        images = {k: f.get("dtype") for k, f in self.features.items() if k.startswith(IMAGE_PREFIX)}
        self.video_keys = [k for k, dtype in images.items() if dtype == "video"]
        self.image_keys = [k for k, dtype in images.items() if dtype == "image"]
        self.tasks = self._read_tasks()
        self.episodes = self._read_episodes()

    # ------------------------------------------------------------------ metadata
    def require(self, key: str) -> dict[str, Any]:
        if key not in self.features:
            raise DatasetError(f"{self.info_path}: feature '{key}' is not in the dataset "
                               f"(it has {', '.join(self.features)})")
        return self.features[key]

    def names(self, key: str) -> tuple[str, ...]:
        self.require(key)
        return feature_names(self.info, key, str(self.info_path))

    def _read_tasks(self) -> dict[int, str]:
        meta = self.root / "meta"
        if self.version in V2:
            path = meta / "tasks.jsonl"
            if not path.is_file():
                return {}
            return {int(r["task_index"]): str(r["task"]) for r in _read_jsonl(path)}
        path = meta / "tasks.parquet"
        if not path.is_file():
            return {}
        table = _read_parquet(path).to_pydict()
        texts = table.get("task") or table.get("__index_level_0__") or []
        return {int(i): str(t) for i, t in zip(table.get("task_index", []), texts, strict=False)}

    def _read_episodes(self) -> dict[int, Episode]:
        chunks_size = int(self.info.get("chunks_size", 1000))
        out: dict[int, Episode] = {}
        if self.version in V2:
            path = self.root / "meta" / "episodes.jsonl"
            if not path.is_file():
                raise DatasetError(f"{path}: missing (a v2 dataset lists its episodes there)")
            for row in _read_jsonl(path):
                index = int(row["episode_index"])
                chunk = index // chunks_size
                data = self.root / self.info["data_path"].format(episode_chunk=chunk, episode_index=index)
                videos = {k: self.root / str(self.info.get("video_path", "")).format(
                    episode_chunk=chunk, video_key=k, episode_index=index) for k in self.video_keys}
                out[index] = Episode(index, int(row.get("length", 0)), tuple(row.get("tasks") or ()), data, videos)
            return out
        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise DatasetError(f"{self.root / 'meta' / 'episodes'}: no chunk-*/file-*.parquet (a v3.0 dataset "
                               "lists its episodes there)")
        for path in files:
            table = _read_parquet(path).to_pydict()
            for i, index in enumerate(table.get("episode_index", [])):
                def col(name: str, i: int = i, path: Path = path, table: dict = table) -> Any:
                    if name not in table:
                        raise DatasetError(f"{path}: column '{name}' is missing")
                    return table[name][i]
                data = self.root / self.info["data_path"].format(chunk_index=int(col("data/chunk_index")),
                                                                 file_index=int(col("data/file_index")))
                videos, starts = {}, {}
                for k in self.video_keys:
                    videos[k] = self.root / str(self.info.get("video_path", "")).format(
                        video_key=k, chunk_index=int(col(f"videos/{k}/chunk_index")),
                        file_index=int(col(f"videos/{k}/file_index")))
                    starts[k] = float(col(f"videos/{k}/from_timestamp"))
                out[int(index)] = Episode(int(index), int(col("length")), tuple(col("tasks") or ()), data, videos,
                                          starts)
        return out

    def select(self, wanted: list[int] | None) -> tuple[list[Episode], list[int]]:
        """(episodes to read, listed episodes skipped because their data file is absent). Asked-for
        episodes must exist; with none asked for, every episode whose data file is present."""
        if wanted:
            chosen = []
            for index in wanted:
                if index not in self.episodes:
                    listed = sorted(self.episodes)
                    raise DatasetError(f"{self.root}: episode {index} is not in the dataset "
                                       f"(episodes {listed[0]}..{listed[-1]})" if listed else "(no episodes)")
                episode = self.episodes[index]
                if not episode.data_file.is_file():
                    raise DatasetError(f"{episode.data_file}: missing (data of episode {index})")
                chosen.append(episode)
            return chosen, []
        present = [e for _, e in sorted(self.episodes.items()) if e.data_file.is_file()]
        absent = [i for i, e in sorted(self.episodes.items()) if not e.data_file.is_file()]
        if not present:
            raise DatasetError(f"{self.root}: none of the {len(self.episodes)} episodes has its data file "
                               f"(e.g. {next(iter(self.episodes.values())).data_file})" if self.episodes
                               else f"{self.root}: lists no episodes")
        return present, absent

    # ------------------------------------------------------------------ rows and frames
    def rows(self, episode: Episode, keys: list[str]) -> dict[str, np.ndarray]:
        """The episode's rows sorted by frame_index: each of `keys` (plus timestamp, frame_index) as an array."""
        for key in keys:
            self.require(key)
        columns = sorted({*keys, "timestamp", "frame_index", "episode_index"})
        import pyarrow.parquet as pq

        try:
            present = set(pq.read_schema(episode.data_file).names) if episode.data_file.is_file() else set()
        except Exception as err:  # noqa: BLE001 - a damaged file
            raise DatasetError(f"{episode.data_file}: not a readable parquet file ({err})") from err
        missing = [c for c in columns if present and c not in present]
        if missing:
            raise DatasetError(f"{episode.data_file}: column(s) {missing} missing (info.json declares them)")
        extra = ["task_index"] if "task_index" in present else []
        table = _read_parquet(episode.data_file, columns=columns + extra, episode=episode.index)
        if missing:
            raise DatasetError(f"{episode.data_file}: column(s) {missing} missing (info.json declares them)")
        out: dict[str, np.ndarray] = {}
        order = np.argsort(np.asarray(table.column("frame_index").to_numpy(zero_copy_only=False)), kind="stable")
        for c in columns:
            values = table.column(c).to_pylist()
            array = np.asarray(values, dtype=float if c not in ("frame_index", "episode_index") else np.int64)
            out[c] = array[order]
        if "task_index" in table.column_names:
            out["task_index"] = np.asarray(table.column("task_index").to_pylist(), dtype=np.int64)[order]
        if not len(out["timestamp"]):
            raise DatasetError(f"{episode.data_file}: no rows for episode {episode.index}")
        return out

    def frames(self, episode: Episode, key: str, count: int) -> Iterator[tuple[int, np.ndarray]]:
        """(frame index, HxWx3 uint8 RGB) of the episode's video `key`, one decoded frame at a time.
        A frame's index is its time in the episode x fps, rounded; frames outside [0, count) are skipped."""
        import av

        path = episode.video_files[key]
        if not path.is_file():
            raise DatasetError(f"{path}: missing (video '{key}' of episode {episode.index})")
        start_s = episode.video_from_s.get(key, 0.0)
        try:
            container = av.open(str(path))
        except Exception as err:  # noqa: BLE001 - any open failure: not a video
            raise DatasetError(f"{path}: does not open as a video (feature '{key}': {err})") from err
        try:
            if not container.streams.video:
                raise DatasetError(f"{path}: has no video stream (feature '{key}')")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            if start_s > 0:
                container.seek(int(start_s / stream.time_base), stream=stream, backward=True, any_frame=False)
            last = -1
            for frame in container.decode(stream):
                t = float(frame.pts * stream.time_base) if frame.pts is not None else (last + 1) / self.fps + start_s
                index = int(round((t - start_s) * self.fps))
                if index <= last or index < 0:
                    continue
                if index >= count:
                    break
                last = index
                yield index, frame.to_ndarray(format="rgb24")
        except DatasetError:
            raise
        except Exception as err:  # noqa: BLE001 - av.error.* and decoder failures
            raise DatasetError(f"{path}: does not decode (feature '{key}', episode {episode.index}: "
                               f"{type(err).__name__}: {err})") from err
        finally:
            container.close()


# ----------------------------------------------------------------------------------------------
# Messages (rosbags types: no rclpy)
class _Messages:
    def __init__(self) -> None:
        from rosbags.typesys import Stores, get_typestore

        self.store = get_typestore(Stores.ROS2_HUMBLE)
        t = self.store.types
        self._time, self._header = t["builtin_interfaces/msg/Time"], t["std_msgs/msg/Header"]
        self._joint_state, self._image = t["sensor_msgs/msg/JointState"], t["sensor_msgs/msg/Image"]
        self._info, self._roi = t["sensor_msgs/msg/CameraInfo"], t["sensor_msgs/msg/RegionOfInterest"]
        self._array, self._status = t["diagnostic_msgs/msg/DiagnosticArray"], t["diagnostic_msgs/msg/DiagnosticStatus"]
        self._kv = t["diagnostic_msgs/msg/KeyValue"]
        self._empty = np.zeros(0, dtype=np.float64)

    def header(self, stamp_ns: int, frame_id: str = ""):
        return self._header(stamp=self._time(sec=stamp_ns // NS_PER_S, nanosec=stamp_ns % NS_PER_S), frame_id=frame_id)

    def joint_state(self, stamp_ns: int, names: list[str], positions: np.ndarray) -> bytes:
        msg = self._joint_state(header=self.header(stamp_ns), name=names,
                                position=np.asarray(positions, dtype=np.float64), velocity=self._empty,
                                effort=self._empty)
        return bytes(self.store.serialize_cdr(msg, "sensor_msgs/msg/JointState"))

    def image(self, stamp_ns: int, frame_id: str, rgb: np.ndarray) -> bytes:
        h, w = rgb.shape[:2]
        msg = self._image(header=self.header(stamp_ns, frame_id), height=h, width=w, encoding="rgb8",
                          is_bigendian=0, step=w * 3, data=np.ascontiguousarray(rgb, dtype=np.uint8).reshape(-1))
        return bytes(self.store.serialize_cdr(msg, "sensor_msgs/msg/Image"))

    def camera_info(self, stamp_ns: int, frame_id: str, width: int, height: int, model) -> bytes:
        if model is None:  # uncalibrated, as ROS marks it: K, D, R, P zero
            k, d, r, p, dist = np.zeros(9), self._empty, np.zeros(9), np.zeros(12), ""
        else:
            k = model.K.ravel().astype(float)
            d = np.asarray(model.distortion if model.distortion_model != "none" else [0.0] * 5, dtype=float)
            dist = model.distortion_model if model.distortion_model != "none" else "plumb_bob"
            r = np.eye(3).ravel()
            p = np.hstack([model.K, np.zeros((3, 1))]).ravel().astype(float)
        msg = self._info(header=self.header(stamp_ns, frame_id), height=height, width=width, distortion_model=dist,
                         d=d, k=k, r=r, p=p, binning_x=0, binning_y=0,
                         roi=self._roi(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
        return bytes(self.store.serialize_cdr(msg, "sensor_msgs/msg/CameraInfo"))

    def diagnostic(self, stamp_ns: int, name: str, message: str, values: dict[str, str]) -> bytes:
        status = self._status(level=0, name=name, message=message, hardware_id=HARDWARE_ID,
                              values=[self._kv(key=k, value=v) for k, v in values.items()])
        msg = self._array(header=self.header(stamp_ns), status=[status])
        return bytes(self.store.serialize_cdr(msg, "diagnostic_msgs/msg/DiagnosticArray"))


# ----------------------------------------------------------------------------------------------
# Import
@dataclass
class ImportSummary:
    bag: str
    dataset: str
    codebase_version: str
    episodes: list[int]
    skipped_absent: list[int]
    frames: int
    messages: dict[str, int]
    cameras: dict[str, dict[str, Any]]
    elapsed_s: float
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _load_calibrations(paths: list[str] | None, keys: list[str]) -> dict[str, Any]:
    """Calibration YAML per camera key: one YAML for every camera, or KEY=PATH items."""
    from ..core.camera_model import load_calibration_yaml

    out: dict[str, Any] = {}
    for item in paths or []:
        key, sep, path = item.partition("=")
        if sep and key:
            short = key.removeprefix(IMAGE_PREFIX)
            if short not in keys:
                raise ConfigError("--camera-calibration", "camera", key, f"no such camera (cameras: {keys})")
            out[short] = load_calibration_yaml(path)
        else:
            model = load_calibration_yaml(item)
            for k in keys:
                out.setdefault(k, model)
    return out


def import_dataset(dataset_dir: str | Path, bag_dir: str | Path, episodes: list[int] | None = None,
                   camera_calibration: list[str] | None = None, start_ns: int = DEFAULT_START_NS,
                   progress: bool = True, compression: str = "zstd") -> ImportSummary:
    """Write the LeRobot dataset at `dataset_dir` (its `episodes`, default all present) as a new MCAP bag."""
    import time

    from ..bags.writer import BagWriter
    from ..core.progress import progress as progress_bar

    started = time.perf_counter()
    dataset = LeRobotDataset(dataset_dir)
    chosen, absent = dataset.select(episodes)
    state_names = list(dataset.names(STATE_KEY))
    has_action = ACTION_KEY in dataset.features
    action_names = list(dataset.names(ACTION_KEY)) if has_action else []
    cameras = [k.removeprefix(IMAGE_PREFIX) for k in dataset.video_keys]
    calibrations = _load_calibrations(camera_calibration, cameras)
    problems: list[str] = []
    if dataset.image_keys:
        problems.append(f"image features stored as parquet images are not imported: {dataset.image_keys}")
    if absent:
        problems.append(f"{len(absent)} episode(s) listed in the metadata have no data file and were skipped "
                        f"({absent[:5]}{'...' if len(absent) > 5 else ''})")
    shapes = {}
    for key in dataset.video_keys:
        shape = dataset.features[key].get("shape") or []
        names = dataset.features[key].get("names") or ["height", "width", "channel"]
        dims = dict(zip(names, shape, strict=False))
        shapes[key.removeprefix(IMAGE_PREFIX)] = (int(dims.get("height", shape[0])), int(dims.get("width", shape[1])))
    total = sum(e.length for e in chosen)
    messages = _Messages()
    frame_ns = NS_PER_S / dataset.fps
    camera_summary: dict[str, dict[str, Any]] = {
        k: {"calibrated": k in calibrations, "frames": 0, "missing_frames": 0, "shape": list(shapes[k])}
        for k in cameras}
    writer = BagWriter(Path(bag_dir), compression=compression)
    try:
        writer.add_topic(STATE_TOPIC, "sensor_msgs/msg/JointState")
        if has_action:
            writer.add_topic(COMMAND_TOPIC, "sensor_msgs/msg/JointState")
        for k in cameras:
            writer.add_topic(image_topic(k), "sensor_msgs/msg/Image")
            writer.add_topic(camera_info_topic(k), "sensor_msgs/msg/CameraInfo")
        writer.add_topic(EPISODE_TOPIC, "diagnostic_msgs/msg/DiagnosticArray")
        writer.add_topic(SUPERVISOR_TOPIC, "diagnostic_msgs/msg/DiagnosticArray")
        ticks = progress_bar(range(total), total, "import", sys.stderr) if progress and total else iter(range(total))
        episode_start = int(start_ns)
        for episode in chosen:
            keys = [STATE_KEY] + ([ACTION_KEY] if has_action else [])
            rows = dataset.rows(episode, keys)
            count = len(rows["timestamp"])
            for key, names in ((STATE_KEY, state_names), (ACTION_KEY, action_names)):
                if key in rows and rows[key].shape[1:] != (len(names),):
                    raise DatasetError(f"{episode.data_file}: column '{key}' has shape {rows[key].shape[1:]}, "
                                       f"info.json says {len(names)}")
            stamps = episode_start + np.round((rows["timestamp"] - rows["timestamp"][0]) * NS_PER_S).astype(np.int64)
            task_index = int(rows["task_index"][0]) if "task_index" in rows else -1
            task = dataset.tasks.get(task_index) or (episode.tasks[0] if episode.tasks else "")
            values = {"episode": str(episode.index), "event": "start", "task": task, "task_index": str(task_index),
                      "frames": str(count), "fps": f"{dataset.fps:g}", "source": str(dataset.root.name)}
            first, last = int(stamps[0]), int(stamps[-1])
            writer.write(SUPERVISOR_TOPIC, first, messages.diagnostic(
                first, "supervisor", "TELEOP", {"mode": "TELEOP", "reason": "lerobot episode"}))
            writer.write(EPISODE_TOPIC, first, messages.diagnostic(first, "episode", task, values))
            videos = {k: dataset.frames(episode, IMAGE_PREFIX + k, count) for k in cameras}
            pending: dict[str, tuple[int, np.ndarray] | None] = {k: next(v, None) for k, v in videos.items()}
            for i in range(count):
                t = int(stamps[i])
                writer.write(STATE_TOPIC, t, messages.joint_state(t, state_names, rows[STATE_KEY][i]))
                if has_action:
                    writer.write(COMMAND_TOPIC, t, messages.joint_state(t, action_names, rows[ACTION_KEY][i]))
                for k in cameras:
                    item = pending[k]
                    if item is None or item[0] != i:
                        camera_summary[k]["missing_frames"] += 1
                        continue
                    image = item[1]
                    height, width = image.shape[:2]
                    # camera_info first: a consumer of the image needs the calibration already
                    writer.write(camera_info_topic(k), t,
                                 messages.camera_info(t, k, width, height, calibrations.get(k)))
                    writer.write(image_topic(k), t, messages.image(t, k, image))
                    camera_summary[k]["frames"] += 1
                    camera_summary[k]["decoded_shape"] = [height, width, 3]
                    pending[k] = next(videos[k], None)
                next(ticks, None)
            end_values = dict(values, event="end", duration_s=f"{(last - first) / NS_PER_S:.4f}")
            writer.write(EPISODE_TOPIC, last, messages.diagnostic(last, "episode", task, end_values))
            writer.write(SUPERVISOR_TOPIC, last, messages.diagnostic(
                last, "supervisor", "HOLD", {"mode": "HOLD", "reason": "lerobot episode end"}))
            for v in videos.values():
                v.close()
            episode_start = last + int(round(max(EPISODE_GAP_S * NS_PER_S, frame_ns)))
        for _ in ticks:  # finish the bar when episodes were shorter than their metadata length
            pass
    except BaseException:
        writer.close()
        raise
    writer.close()
    for k, summary in camera_summary.items():
        if summary["missing_frames"]:
            problems.append(f"camera {k}: {summary['missing_frames']} frame(s) had no video frame at their time")
    counts = {t: int(n) for t, n in _topic_counts(writer).items()}
    return ImportSummary(bag=str(bag_dir), dataset=str(dataset.root), codebase_version=dataset.version,
                         episodes=[e.index for e in chosen], skipped_absent=absent,
                         frames=int(counts.get(STATE_TOPIC, 0)), messages=counts,
                         cameras=camera_summary, elapsed_s=time.perf_counter() - started, problems=problems)


def _topic_counts(writer) -> dict[str, int]:
    return {name: topic.count for name, topic in writer._topics.items()}  # noqa: SLF001 - same package family
