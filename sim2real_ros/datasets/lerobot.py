"""LeRobot datasets (codebase v2.0/v2.1 and v3.0) read, and imported into a rosbag2 MCAP bag.

    summary = import_dataset("g1_pick", "bags/g1_pick", episodes=[1])

What maps to what (docs/datasets.md): `observation.state` -> /joint_states and `action` ->
/command/teleop (sensor_msgs/JointState, names from info.json, stamped at the frame time); each
`observation.images.<key>` video, decoded with PyAV one frame at a time -> /camera/<key>/image_raw
(sensor_msgs/Image rgb8) and /camera/<key>/camera_info (from a calibration YAML, else all-zero K,
D, R, P: ROS's mark for an uncalibrated camera); episode starts and ends (with the task string) ->
/dataset/episode (diagnostic_msgs/DiagnosticArray, as sim/episode, topics.DatasetEpisodeEvent), the
start labelled `operator: human` (a LeRobot episode is a teleoperated demonstration), so the replay
evaluator and the fine-tuning dataset count the actions as human (episodes/ reads the label where a
bag has no supervisor/state; bags imported before the label carry /supervisor/state and read the same).

Frame times: frame i of episode e is stamped start_e + timestamp_i, where the episodes follow each
other on one time line from `start_ns` with a gap of EPISODE_GAP_S; log time = stamp.

A dataset is untrusted input (lerobot_limits.py): its metadata is schema-checked with caps, its files
are opened inside its folder only, parquet row counts and sizes are checked from the file's metadata
before its data is read, and videos are demuxed as local MP4/Matroska files whose frame size must be
the declared one. A failed import removes the bag it started.

Pure: no rclpy (messages are serialized with rosbags).
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import IO, Any

import numpy as np

from ..core.errors import ConfigError, Sim2RealError
from ..core.timebase import NS_PER_S
from ..topics import DATASET_EPISODE, JOINT_STATES, TELEOP_COMMAND, DatasetEpisodeEvent, StatusPayload
from .lerobot_limits import (
    MAX_CAMERAS,
    MAX_EPISODE_FRAMES,
    MAX_EPISODE_VALUES,
    MAX_EPISODES,
    MAX_INDEX,
    MAX_META_BYTES,
    MAX_ROW_GROUP_ROWS,
    MAX_TASKS,
    MAX_TIMESTAMP_S,
    V2_FIELDS,
    V3_FIELDS,
    VIDEO_DEMUXERS,
    VIDEO_FORMATS,
    DatasetError,
    PathTemplate,
    check_image_shape,
    check_info,
    check_int,
    check_number,
    check_text,
    check_vector_names,
    exists_inside,
    open_inside,
    parse_json,
    read_text_inside,
)
from .lerobot_units import DatasetUnits, dataset_units, looks_like_motor_units, motor_name, robot_lower_limits

__all__ = ["DatasetError", "LeRobotDataset", "import_dataset"]

STATE_KEY = "observation.state"
ACTION_KEY = "action"
IMAGE_PREFIX = "observation.images."
STATE_TOPIC = JOINT_STATES.absolute
COMMAND_TOPIC = TELEOP_COMMAND.absolute
EPISODE_TOPIC = DATASET_EPISODE.absolute
# Who drove the arm in a LeRobot episode (topics.OPERATOR_MODES): a person, through a leader arm.
OPERATOR = "human"
DEFAULT_START_NS = 1_700_000_000 * NS_PER_S  # the imported time line's origin [ns]
EPISODE_GAP_S = 1.0  # between the last frame of an episode and the first of the next [s]
V2 = ("v2.0", "v2.1")
V3 = ("v3.0",)
HARDWARE_ID = "lerobot import"
# a video may hold a few frames more than its episode (rounding, B-frames); past this many extra
# decoded frames that land on no row, it is not the episode's video
EXTRA_DECODED_FRAMES = 1000
BATCH_VALUES = 1 << 22  # numbers decoded per parquet batch (16-32 MB)
TEXT_BATCH_BYTES = 64 * 1024 * 1024  # text decoded per parquet batch at most [bytes]
LIST_VALUES = 1000  # values per row of a list column whose width info.json does not give (tasks)


def image_topic(key: str) -> str:
    return f"/camera/{key}/image_raw"


def camera_info_topic(key: str) -> str:
    return f"/camera/{key}/camera_info"


# ----------------------------------------------------------------------------------------------
# Reading a LeRobot dataset
@dataclass(frozen=True)
class Episode:
    """One episode as the metadata describes it: paths relative to the dataset folder (checked to stay
    inside it). v3.0 only: where its video frames start in the shared video file [s]."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_rel: str
    video_at: dict[str, tuple[int, int]] = field(default_factory=dict)  # v3.0: key -> (chunk, file)
    video_from_s: dict[str, float] = field(default_factory=dict)
    root: Path = Path(".")

    @property
    def data_file(self) -> Path:
        """Where the data file is (for messages) [path]."""
        return self.root / self.data_rel


def _jsonl(text: str, source: str, max_rows: int) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(rows) >= max_rows:
            raise DatasetError(f"{source}: more than {max_rows} lines")
        row = parse_json(line, f"{source}: line {number}")
        if not isinstance(row, dict):
            raise DatasetError(f"{source}: line {number} is not a JSON object")
        rows.append(row)
    return rows


class _Parquet:
    """A dataset parquet file opened inside the dataset, its footer checked before any data is read."""

    def __init__(self, root: Path, rel: str, source: str, max_rows: int, what: str) -> None:
        import pyarrow.parquet as pq

        self.path = root / rel
        handle = open_inside(root, rel, source)
        if handle is None:
            raise DatasetError(f"{self.path}: missing ({what})")
        self._handle: IO[bytes] = handle
        try:
            self.file = pq.ParquetFile(handle)
            self.meta = self.file.metadata
            self.names = list(self.file.schema_arrow.names)
        except Exception as err:  # noqa: BLE001 - pyarrow raises many kinds for a bad file
            handle.close()
            raise DatasetError(f"{self.path}: not a readable parquet file ({type(err).__name__}: "
                               f"{str(err)[:200]})") from err
        if self.meta.num_rows > max_rows:
            handle.close()
            raise DatasetError(f"{self.path}: holds {self.meta.num_rows} rows; the metadata declares at most "
                               f"{max_rows} for it ({what})")

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> _Parquet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _text_chunk_bytes(self, texts: list[str]) -> int:
        """The largest uncompressed size [bytes] of these columns in one row group (it bounds the
        longest string); above MAX_META_BYTES is an error."""
        largest = 0
        for g in range(self.meta.num_row_groups):
            group = self.meta.row_group(g)
            size = sum(max(group.column(i).total_uncompressed_size, 0) for i in range(group.num_columns)
                       if any(group.column(i).path_in_schema == c or group.column(i).path_in_schema.startswith(c + ".")
                              for c in texts))
            if size > MAX_META_BYTES:
                raise DatasetError(f"{self.path}: text columns {texts} declare {size} bytes in row group {g} "
                                   f"(at most {MAX_META_BYTES})")
            largest = max(largest, size)
        return largest

    def require(self, columns: list[str]) -> None:
        missing = [c for c in columns if c not in self.names]
        if missing:
            raise DatasetError(f"{self.path}: column(s) {missing} missing (info.json declares them)")

    def read(self, columns: list[str], widths: dict[str, int] | None = None, episode: int | None = None,
             max_rows: int | None = None):
        """`columns` as a pyarrow Table, read in batches of about BATCH_VALUES numbers, keeping the
        rows of `episode` when given (at most `max_rows` of them). Before any data is read, the footer
        must declare at most rows x width values per column and row group (`widths`: a list column's
        values per row, default LIST_VALUES; 1 for a scalar): what parquet's run-length and dictionary
        encodings let a few kilobytes declare is bounded by what info.json says, and a batch's
        decoded size by the batch length."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self.require(columns)
        widths = dict(widths or {})
        schema = self.file.schema_arrow
        for c in columns:
            kind = schema.field(c).type
            is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
            widths.setdefault(c, LIST_VALUES if is_list else 1)
        tables, rows = [], 0
        try:
            for g in range(self.meta.num_row_groups):
                group = self.meta.row_group(g)
                if group.num_rows > MAX_ROW_GROUP_ROWS:
                    raise DatasetError(f"{self.path}: row group {g} declares {group.num_rows} rows "
                                       f"(at most {MAX_ROW_GROUP_ROWS})")
                for i in range(group.num_columns):
                    chunk = group.column(i)
                    name = chunk.path_in_schema  # a list column's leaf: "<column>.list.element"
                    for c in columns:
                        if (name == c or name.startswith(c + ".")) and chunk.num_values > group.num_rows * widths[c]:
                            raise DatasetError(f"{self.path}: column '{name}' declares {chunk.num_values} values "
                                               f"in row group {g} of {group.num_rows} rows (at most "
                                               f"{widths[c]} per row)")
            batch = max(1, BATCH_VALUES // max(1, sum(widths[c] for c in columns)))
            # text: a dictionary-encoded string is stored once and decoded once per row, so a batch
            # holds at most TEXT_BATCH_BYTES even if every row repeats the longest string
            texts = [c for c in columns if _is_text(schema.field(c).type)]
            text_chunk = self._text_chunk_bytes(texts)
            batch = min(batch, max(1, TEXT_BATCH_BYTES // max(1, text_chunk))) if texts else batch
            text_total = 0
            for part in self.file.iter_batches(batch_size=batch, columns=columns, use_threads=False):
                table = pa.Table.from_batches([part])
                for c in texts:
                    text_total += _text_bytes(table.column(c))
                if text_total > MAX_META_BYTES:
                    raise DatasetError(f"{self.path}: text columns {texts} hold more than {MAX_META_BYTES} bytes")
                if episode is not None:
                    table = table.filter(pc.equal(table.column("episode_index"), episode))
                rows += table.num_rows
                if max_rows is not None and rows > max_rows:
                    raise DatasetError(f"{self.path}: more than {max_rows} rows for episode {episode} (its field "
                                       f"'length' says {max_rows})")
                if table.num_rows:
                    tables.append(table)
            if not tables:
                return schema.empty_table().select(columns)
            return pa.concat_tables(tables)
        except DatasetError:
            raise
        except Exception as err:  # noqa: BLE001 - pyarrow's errors on a damaged or mistyped file
            raise DatasetError(f"{self.path}: not a readable parquet file ({type(err).__name__}: "
                               f"{str(err)[:200]})") from err


def _is_text(kind) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _is_text(kind.value_type)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind))


def _text_bytes(column) -> int:
    """Bytes of text a (chunked) string, binary, dictionary or list-of-those column holds, decoded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    for chunk in column.chunks:
        while pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type) or \
                pa.types.is_fixed_size_list(chunk.type):
            chunk = pc.list_flatten(chunk)
        if pa.types.is_dictionary(chunk.type):
            lengths = pc.binary_length(chunk.dictionary).fill_null(0).to_numpy(zero_copy_only=False)
            indices = chunk.indices.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)
            total += int(lengths.astype(np.int64)[indices].sum())
        else:
            total += int(pc.sum(pc.binary_length(chunk)).as_py() or 0)
    return total


def _column_vector(table, key: str, width: int, path: Path) -> np.ndarray:
    """A list column as an (n, width) float64 array; every row must hold `width` numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(key).combine_chunks()
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)) or not (
            pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)):
        raise DatasetError(f"{path}: column '{key}' has type {kind}; info.json declares a vector of {width} numbers")
    if column.null_count:
        raise DatasetError(f"{path}: column '{key}' has {column.null_count} empty row(s)")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if len(lengths) and (lengths.min() != width or lengths.max() != width):
        raise DatasetError(f"{path}: column '{key}' has rows of {int(lengths.min())}..{int(lengths.max())} "
                           f"values, info.json says {width}")
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.float64)
    return values.reshape(len(column), width)


def _column_scalar(table, key: str, dtype, path: Path) -> np.ndarray:
    import pyarrow as pa

    column = table.column(key).combine_chunks()
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise DatasetError(f"{path}: column '{key}' has type {column.type}; a number is expected")
    if column.null_count:
        raise DatasetError(f"{path}: column '{key}' has {column.null_count} empty row(s)")
    values = column.to_numpy(zero_copy_only=False)
    if dtype is np.int64 and pa.types.is_floating(column.type) and not np.all(np.isfinite(values)):
        raise DatasetError(f"{path}: column '{key}' holds NaN or infinite values")
    return values.astype(dtype)


def _rel_join(*parts: str) -> str:
    return str(PurePosixPath(*parts))


class LeRobotDataset:
    """An on-disk LeRobot dataset: info.json, episodes, tasks, and per-episode rows and frames."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.info_path = self.root / "meta" / "info.json"
        source = str(self.info_path)
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: no such dataset folder")
        text = read_text_inside(self.root, "meta/info.json", source)
        if text is None:
            raise DatasetError(f"{self.info_path}: missing; {self.root} is not a LeRobot dataset "
                               "(expected meta/info.json)")
        info = check_info(parse_json(text, source), source)
        self.info = info
        version = info["codebase_version"]
        if not isinstance(version, str) or version not in V2 + V3:
            raise DatasetError(f"{source}: field 'codebase_version' = {str(version)[:40]!r}: "
                               f"supported are {', '.join(V2 + V3)}")
        self.version = version
        self.fps = float(info["fps"])
        self.features: dict[str, dict[str, Any]] = dict(info["features"])
        images = {k: f.get("dtype") for k, f in self.features.items() if k.startswith(IMAGE_PREFIX)}
        self.video_keys = [k for k, dtype in images.items() if dtype == "video"]
        self.image_keys = [k for k, dtype in images.items() if dtype == "image"]
        self.image_shapes = {k: check_image_shape(self.features[k], k, source) for k in self.video_keys}
        if len(self.video_keys) > MAX_CAMERAS:
            raise DatasetError(f"{source}: field 'features' has {len(self.video_keys)} video features "
                               f"(at most {MAX_CAMERAS})")
        if self.video_keys and not isinstance(info.get("video_path"), str):
            raise DatasetError(f"{source}: field 'video_path' is missing (features {self.video_keys} are videos)")
        fields = V2_FIELDS if version in V2 else V3_FIELDS
        self.data_template = PathTemplate(info["data_path"], fields["data_path"], source, "data_path")
        self.data_template.check_inside([])
        self.video_template = None
        if self.video_keys:
            self.video_template = PathTemplate(info["video_path"], fields["video_path"], source, "video_path")
            self.video_template.check_inside(self.video_keys)
        self.tasks = self._read_tasks()
        self.episodes = self._read_episodes()
        self._file_rows: dict[str, int] | None = None

    # ------------------------------------------------------------------ metadata
    def require(self, key: str) -> dict[str, Any]:
        if key not in self.features:
            raise DatasetError(f"{self.info_path}: feature '{key}' is not in the dataset "
                               f"(it has {', '.join(list(self.features)[:20])})")
        return self.features[key]

    def names(self, key: str) -> tuple[str, ...]:
        return check_vector_names(self.require(key), key, str(self.info_path))

    def video_rel(self, episode: Episode, key: str) -> str:
        """The dataset-relative path of the episode's video `key` (the template was checked to stay inside)."""
        assert self.video_template is not None  # noqa: S101 - only called for video keys
        if self.version in V2:
            chunk = episode.index // int(self.info.get("chunks_size", 1000))
            return self.video_template.fill({"episode_chunk": chunk, "episode_index": episode.index, "video_key": key})
        chunk, file = episode.video_at[key]
        return self.video_template.fill({"chunk_index": chunk, "file_index": file, "video_key": key})

    def _read_tasks(self) -> dict[int, str]:
        if self.version in V2:
            source = str(self.root / "meta" / "tasks.jsonl")
            text = read_text_inside(self.root, "meta/tasks.jsonl", source)
            if text is None:
                return {}
            out = {}
            for row in _jsonl(text, source, MAX_TASKS):
                out[check_int(row.get("task_index"), source, "task_index", 0, MAX_INDEX)] = check_text(
                    row.get("task"), source, "task")
            return out
        if not exists_inside(self.root, "meta/tasks.parquet", str(self.root / "meta")):
            return {}
        with _Parquet(self.root, "meta/tasks.parquet", str(self.root / "meta"), MAX_TASKS, "tasks") as file:
            text_column = "task" if "task" in file.names else "__index_level_0__"
            table = file.read(["task_index", text_column]).to_pydict()
        source = str(file.path)
        return {check_int(i, source, "task_index", 0, MAX_INDEX): check_text(t, source, "task")
                for i, t in zip(table["task_index"], table[text_column], strict=True)}

    def _episode(self, index: int, length: int, tasks: Any, source: str, data_values: dict[str, int | str],
                 video_at: dict[str, tuple[int, int]], starts: dict[str, float]) -> Episode:
        if tasks is None:
            tasks = []
        if not isinstance(tasks, list | tuple) or len(tasks) > 1000:
            raise DatasetError(f"{source}: episode {index}: field 'tasks' = {str(tasks)[:80]}: must be a list of text")
        tasks = tuple(check_text(t, source, "tasks") for t in tasks)
        return Episode(index, length, tasks, self.data_template.fill(data_values), video_at, starts, self.root)

    def _read_episodes(self) -> dict[int, Episode]:
        chunks_size = int(self.info.get("chunks_size", 1000))
        out: dict[int, Episode] = {}
        if self.version in V2:
            source = str(self.root / "meta" / "episodes.jsonl")
            text = read_text_inside(self.root, "meta/episodes.jsonl", source)
            if text is None:
                raise DatasetError(f"{source}: missing (a v2 dataset lists its episodes there)")
            for number, row in enumerate(_jsonl(text, source, MAX_EPISODES), 1):
                where = f"{source}: line {number}"
                index = check_int(row.get("episode_index"), where, "episode_index", 0, MAX_INDEX)
                length = check_int(row.get("length"), where, "length", 1, MAX_EPISODE_FRAMES)
                if index in out:
                    raise DatasetError(f"{where}: episode {index} is listed twice")
                chunk = index // chunks_size
                out[index] = self._episode(index, length, row.get("tasks"), where,
                                           {"episode_chunk": chunk, "episode_index": index}, {}, {})
            return out
        folder = self.root / "meta" / "episodes"
        if folder.is_symlink():
            raise DatasetError(f"{folder}: is a symlink; files of a dataset are read only inside its folder")
        files = sorted(folder.glob("chunk-*/file-*.parquet"))[:MAX_EPISODES]
        if not files:
            raise DatasetError(f"{folder}: no chunk-*/file-*.parquet (a v3.0 dataset lists its episodes there)")
        columns = ["episode_index", "length", "tasks", "data/chunk_index", "data/file_index"]
        for k in self.video_keys:
            columns += [f"videos/{k}/chunk_index", f"videos/{k}/file_index", f"videos/{k}/from_timestamp"]
        for path in files:
            rel = _rel_join("meta", "episodes", path.parent.name, path.name)
            with _Parquet(self.root, rel, str(folder), MAX_EPISODES, "episodes") as file:
                table = file.read(columns).to_pydict()
            source = str(file.path)
            for i, value in enumerate(table["episode_index"]):
                index = check_int(value, source, "episode_index", 0, MAX_INDEX)
                if index in out:
                    raise DatasetError(f"{source}: episode {index} is listed twice")
                if len(out) >= MAX_EPISODES:
                    raise DatasetError(f"{folder}: lists more than {MAX_EPISODES} episodes")
                where = f"{source}: episode {index}"

                def number(name: str, i: int = i, where: str = where, table: dict = table) -> int:
                    return check_int(table[name][i], where, name, 0, MAX_INDEX)
                length = check_int(table["length"][i], where, "length", 1, MAX_EPISODE_FRAMES)
                data = {"chunk_index": number("data/chunk_index"), "file_index": number("data/file_index")}
                videos, starts = {}, {}
                for k in self.video_keys:
                    videos[k] = (number(f"videos/{k}/chunk_index"), number(f"videos/{k}/file_index"))
                    starts[k] = check_number(table[f"videos/{k}/from_timestamp"][i], where,
                                             f"videos/{k}/from_timestamp", 0.0, MAX_TIMESTAMP_S)
                out[index] = self._episode(index, length, table["tasks"][i], where, data, videos, starts)
        return out

    def _rows_allowed(self, episode: Episode) -> int:
        """Rows the data file of `episode` may hold: the declared lengths of the episodes stored in it."""
        if self._file_rows is None:
            self._file_rows = {}
            for e in self.episodes.values():
                self._file_rows[e.data_rel] = self._file_rows.get(e.data_rel, 0) + e.length
        return self._file_rows[episode.data_rel]

    def has_data(self, episode: Episode) -> bool:
        return exists_inside(self.root, episode.data_rel, str(self.info_path))

    def select(self, wanted: list[int] | None) -> tuple[list[Episode], list[int]]:
        """(episodes to read, listed episodes skipped because their data file is absent). Asked-for
        episodes must exist; with none asked for, every episode whose data file is present."""
        if wanted:
            chosen = []
            for index in wanted:
                if index not in self.episodes:
                    listed = sorted(self.episodes)
                    raise DatasetError(f"{self.root}: episode {index} is not in the dataset "
                                       + (f"(episodes {listed[0]}..{listed[-1]})" if listed else "(no episodes)"))
                episode = self.episodes[index]
                if not self.has_data(episode):
                    raise DatasetError(f"{episode.data_file}: missing (data of episode {index})")
                chosen.append(episode)
            return chosen, []
        present, absent = [], []
        seen: dict[str, bool] = {}
        for i, e in sorted(self.episodes.items()):
            if e.data_rel not in seen:
                seen[e.data_rel] = self.has_data(e)
            (present if seen[e.data_rel] else absent).append(e if seen[e.data_rel] else i)
        if not present:
            raise DatasetError(f"{self.root}: none of the {len(self.episodes)} episodes has its data file "
                               f"(e.g. {next(iter(self.episodes.values())).data_file})" if self.episodes
                               else f"{self.root}: lists no episodes")
        return present, absent

    # ------------------------------------------------------------------ rows and frames
    def rows(self, episode: Episode, keys: list[str]) -> dict[str, np.ndarray]:
        """The episode's rows sorted by frame_index: each of `keys` (plus timestamp, frame_index) as an array.
        At most MAX_EPISODE_VALUES numbers by the declared length and widths, checked before reading."""
        widths = {key: len(self.names(key)) for key in keys}
        scalars = ["timestamp", "frame_index", "episode_index"]
        per_row = sum(widths.values()) + len(scalars) + 1
        if episode.length * per_row > MAX_EPISODE_VALUES:
            raise DatasetError(f"{self.info_path}: episode {episode.index}: field 'length' = {episode.length} "
                               f"x {per_row} numbers per row is above {MAX_EPISODE_VALUES} numbers per episode")
        allowed = self._rows_allowed(episode)
        with _Parquet(self.root, episode.data_rel, str(self.info_path), allowed,
                      f"field 'length' of the episodes stored in it: {allowed}") as file:
            extra = ["task_index"] if "task_index" in file.names else []
            columns = sorted({*keys, *scalars}) + extra
            table = file.read(columns, widths=widths, episode=episode.index, max_rows=episode.length)
            path = file.path
        if not table.num_rows:
            raise DatasetError(f"{path}: no rows for episode {episode.index}")
        out: dict[str, np.ndarray] = {}
        for key, width in widths.items():
            out[key] = _column_vector(table, key, width, path)
        out["timestamp"] = _column_scalar(table, "timestamp", np.float64, path)
        for key in ("frame_index", "episode_index", *extra):
            out[key] = _column_scalar(table, key, np.int64, path)
        if not np.all(np.isfinite(out["timestamp"])) or np.abs(out["timestamp"]).max() > MAX_TIMESTAMP_S:
            raise DatasetError(f"{path}: column 'timestamp' holds NaN, infinite or values above {MAX_TIMESTAMP_S:g} s")
        order = np.argsort(out["frame_index"], kind="stable")
        return {k: v[order] for k, v in out.items()}

    def has_video(self, episode: Episode, key: str) -> bool:
        return exists_inside(self.root, self.video_rel(episode, key), str(self.info_path))

    def frames(self, episode: Episode, key: str, count: int) -> Iterator[tuple[int, np.ndarray]]:
        """(frame index, HxWx3 uint8 RGB) of the episode's video `key`, one decoded frame at a time.
        A frame's index is its time in the episode x fps, rounded; frames outside [0, count) are skipped.
        The video is demuxed from our own file handle as MP4 or Matroska (by its extension), with no
        other file or URL opened; every frame must have info.json's height and width."""
        import av

        rel = self.video_rel(episode, key)
        path = self.root / rel
        demuxer = VIDEO_FORMATS.get(PurePosixPath(rel).suffix.lower())
        if demuxer is None:
            raise DatasetError(f"{path}: video '{key}' has extension {PurePosixPath(rel).suffix[:20]!r}; "
                               f"read are {', '.join(sorted(VIDEO_FORMATS))}")
        handle = open_inside(self.root, rel, str(self.info_path))
        if handle is None:
            raise DatasetError(f"{path}: missing (video '{key}' of episode {episode.index})")
        height, width = self.image_shapes[key]
        start_s = episode.video_from_s.get(key, 0.0)

        def refuse_other_files(url: str, flags: int, options: dict) -> None:
            raise DatasetError(f"{path}: video '{key}' asks to open another file or URL ({url[:100]!r})")

        try:
            container = av.open(handle, format=demuxer, io_open=refuse_other_files, timeout=10.0)
        except Exception as err:  # noqa: BLE001 - any open failure: not a video
            handle.close()
            raise DatasetError(f"{path}: does not open as a video (feature '{key}': "
                               f"{type(err).__name__}: {str(err)[:200]})") from err
        try:
            if container.format.name not in VIDEO_DEMUXERS:
                raise DatasetError(f"{path}: container {container.format.name!r} is not MP4 or Matroska "
                                   f"(feature '{key}')")
            if not container.streams.video:
                raise DatasetError(f"{path}: has no video stream (feature '{key}')")
            stream = container.streams.video[0]
            declared = (stream.codec_context.height, stream.codec_context.width)
            if declared != (height, width):
                raise DatasetError(f"{path}: video is {declared[1]}x{declared[0]}; info.json field "
                                   f"'features.{key}.shape' says {width}x{height}")
            stream.thread_type = "AUTO"
            if start_s > 0:
                container.seek(int(start_s / stream.time_base), stream=stream, backward=True, any_frame=False)
            last, decoded, skipped = -1, 0, 0
            for frame in container.decode(stream):
                decoded += 1
                if (frame.height, frame.width) != (height, width):
                    raise DatasetError(f"{path}: frame {decoded} is {frame.width}x{frame.height}; info.json field "
                                       f"'features.{key}.shape' says {width}x{height}")
                t = float(frame.pts * stream.time_base) if frame.pts is not None else (last + 1) / self.fps + start_s
                index = int(round((t - start_s) * self.fps))
                if index <= last or index < 0:
                    skipped += 1
                    if skipped > count + EXTRA_DECODED_FRAMES:
                        raise DatasetError(f"{path}: {skipped} decoded frames land on no row of episode "
                                           f"{episode.index} (feature '{key}'): not this episode's video")
                    continue
                if index >= count:
                    break
                last = index
                yield index, frame.to_ndarray(format="rgb24")
        except DatasetError:
            raise
        except Exception as err:  # noqa: BLE001 - av.error.* and decoder failures
            raise DatasetError(f"{path}: does not decode (feature '{key}', episode {episode.index}: "
                               f"{type(err).__name__}: {str(err)[:200]})") from err
        finally:
            container.close()
            handle.close()


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

    def diagnostic(self, stamp_ns: int, payload: StatusPayload) -> bytes:
        """A typed payload (topics.py) as a DiagnosticArray, level OK, hardware_id HARDWARE_ID."""
        status = self._status(level=0, name=payload.name, message=payload.message, hardware_id=HARDWARE_ID,
                              values=[self._kv(key=k, value=v) for k, v in payload.values.items()])
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
    from ..core.perception.camera_model import load_calibration_yaml

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


def _claim_output(bag_dir: Path) -> bool:
    """Make `bag_dir` ours to write: it must not exist, or be an empty folder (removed here, for the
    bag writer creates it). Returns whether it was an empty folder (restored if the import fails).
    Never deletes content that was there before."""
    if not os.path.lexists(bag_dir):
        return False
    if bag_dir.is_symlink() or not bag_dir.is_dir():
        raise DatasetError(f"{bag_dir}: exists already and is not a folder; --out must be a new or empty folder")
    try:
        bag_dir.rmdir()  # only an empty folder goes
    except OSError as err:
        raise DatasetError(f"{bag_dir}: is not empty; --out must be a new or empty folder "
                           "(an import never overwrites)") from err
    return True


def _remove_output(bag_dir: Path, was_empty_folder: bool) -> None:
    """Remove the partial bag a failed import wrote (only what it created)."""
    shutil.rmtree(bag_dir, ignore_errors=True)
    if was_empty_folder:
        bag_dir.mkdir(exist_ok=True)


def import_dataset(dataset_dir: str | Path, bag_dir: str | Path, episodes: list[int] | None = None,
                   camera_calibration: list[str] | None = None, start_ns: int = DEFAULT_START_NS,
                   progress: bool = True, compression: str = "zstd", joint_calibration: str | Path | None = None,
                   joint_units: str = "range", robot: str = "so101") -> ImportSummary:
    """Write the LeRobot dataset at `dataset_dir` (its `episodes`, default all present) as a new MCAP bag
    at `bag_dir` (new, or an empty folder). Any failure raises DatasetError (or ConfigError for a bad
    calibration) and leaves no bag behind.

    joint_calibration: the arm's LeRobot calibration JSON; with it, joints stored in LeRobot's motor units
    (`joint_units` "range" -100..100 or "degrees", the gripper 0..100) become `robot`'s URDF radians and
    the joint names lose LeRobot's ".pos" (datasets/lerobot_units.py). Without it, values are kept as
    stored (the summary says so when they look like motor units)."""
    import time

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
    units = _joint_units(joint_calibration, joint_units, robot, state_names, action_names)
    if units:
        state_names = [motor_name(n) for n in state_names]
        action_names = [motor_name(n) for n in action_names]
        problems.append(f"joints converted from LeRobot '{joint_units}' units (gripper 0..100) to {robot} URDF "
                        f"radians with {joint_calibration}")
    elif looks_like_motor_units(state_names):
        problems.append("joint values kept in the dataset's own units (LeRobot motor units, not radians): pass "
                        "--calibration FILE (the arm's LeRobot calibration) to convert them")
    if dataset.image_keys:
        problems.append(f"image features stored as parquet images are not imported: {dataset.image_keys}")
    if absent:
        problems.append(f"{len(absent)} episode(s) listed in the metadata have no data file and were skipped "
                        f"({absent[:5]}{'...' if len(absent) > 5 else ''})")
    shapes = {key.removeprefix(IMAGE_PREFIX): shape for key, shape in dataset.image_shapes.items()}
    camera_summary: dict[str, dict[str, Any]] = {
        k: {"calibrated": k in calibrations, "frames": 0, "missing_frames": 0, "shape": list(shapes[k]),
            "episodes_without_video": []}
        for k in cameras}
    bag_path = Path(bag_dir)
    was_empty_folder = _claim_output(bag_path)
    try:
        counts = _write_bag(dataset, chosen, bag_path, compression, start_ns, progress_bar if progress else None,
                            state_names, action_names, cameras, calibrations, camera_summary, units)
    except BaseException as err:
        _remove_output(bag_path, was_empty_folder)
        if isinstance(err, Sim2RealError | KeyboardInterrupt | SystemExit):
            raise
        if isinstance(err, MemoryError | RecursionError | OverflowError | ValueError | OSError):
            raise DatasetError(f"{dataset.root}: import failed ({type(err).__name__}: {str(err)[:200]})") from err
        raise
    for k, summary in camera_summary.items():
        if summary["episodes_without_video"]:
            skipped = summary["episodes_without_video"]
            problems.append(f"camera {k}: no video file for {len(skipped)} episode(s) "
                            f"({skipped[:5]}{'...' if len(skipped) > 5 else ''}); their images were skipped, "
                            "joints imported")
        elif summary["missing_frames"]:
            problems.append(f"camera {k}: {summary['missing_frames']} frame(s) had no video frame at their time")
    return ImportSummary(bag=str(bag_dir), dataset=str(dataset.root), codebase_version=dataset.version,
                         episodes=[e.index for e in chosen], skipped_absent=absent,
                         frames=int(counts.get(STATE_TOPIC, 0)), messages=counts,
                         cameras=camera_summary, elapsed_s=time.perf_counter() - started, problems=problems)


def _joint_units(calibration: str | Path | None, joint_units: str, robot: str, state_names: list[str],
                 action_names: list[str]) -> dict[str, DatasetUnits] | None:
    """The unit maps of the state and action vectors, or None without a calibration file."""
    if calibration is None:
        return None
    lower = robot_lower_limits(robot)
    maps = {STATE_KEY: dataset_units(calibration, state_names, lower, joint_units)}
    if action_names:
        maps[ACTION_KEY] = dataset_units(calibration, action_names, lower, joint_units)
    return maps


def _write_bag(dataset: LeRobotDataset, chosen: list[Episode], bag_path: Path, compression: str, start_ns: int,
               progress_bar, state_names: list[str], action_names: list[str], cameras: list[str],
               calibrations: dict[str, Any], camera_summary: dict[str, dict[str, Any]],
               units: dict[str, DatasetUnits] | None = None) -> dict[str, int]:
    """The bag's messages, episode after episode; {topic: messages written}. units: per feature key,
    the map from LeRobot motor units to radians (None: values as stored)."""
    from ..bags.writer import BagWriter

    has_action = bool(action_names)
    messages = _Messages()
    frame_ns = NS_PER_S / dataset.fps
    total = sum(e.length for e in chosen)  # bounded: lengths are capped in the schema
    writer = BagWriter(bag_path, compression=compression)
    try:
        writer.add_topic(STATE_TOPIC, "sensor_msgs/msg/JointState")
        if has_action:
            writer.add_topic(COMMAND_TOPIC, "sensor_msgs/msg/JointState")
        for k in cameras:
            writer.add_topic(image_topic(k), "sensor_msgs/msg/Image")
            writer.add_topic(camera_info_topic(k), "sensor_msgs/msg/CameraInfo")
        writer.add_topic(EPISODE_TOPIC, DATASET_EPISODE.msgtype)
        # the bar counts rows as they are written; an episode shorter than its declared length leaves it short
        ticks = progress_bar(iter(int, 1), total, "import", sys.stderr) if progress_bar and total else None
        episode_start = int(start_ns)
        for episode in chosen:
            keys = [STATE_KEY] + ([ACTION_KEY] if has_action else [])
            rows = dataset.rows(episode, keys)
            for key, unit_map in (units or {}).items():
                rows[key] = unit_map.to_radians(rows[key], where=f"{episode.data_file}: column '{key}'")
            count = len(rows["timestamp"])
            relative = np.round((rows["timestamp"] - rows["timestamp"][0]) * NS_PER_S).astype(np.int64)
            stamps = episode_start + relative
            if episode_start + int(relative.max()) > _LAST_STAMP_NS:
                raise DatasetError(f"{episode.data_file}: column 'timestamp': the episodes' time line passes "
                                   f"{_LAST_STAMP_NS} ns")
            task_index = int(rows["task_index"][0]) if "task_index" in rows else -1
            task = dataset.tasks.get(task_index) or (episode.tasks[0] if episode.tasks else "")
            # A LeRobot episode is a teleoperated demonstration: the start says so (operator label).
            start = DatasetEpisodeEvent(episode=episode.index, event="start", task=task, task_index=task_index,
                                        frames=count, fps=float(dataset.fps), source=str(dataset.root.name),
                                        operator=OPERATOR)
            first, last = int(stamps[0]), int(stamps[-1])
            writer.write(EPISODE_TOPIC, first, messages.diagnostic(first, start.to_status()))
            videos = {}
            for k in cameras:
                if dataset.has_video(episode, IMAGE_PREFIX + k):
                    videos[k] = dataset.frames(episode, IMAGE_PREFIX + k, count)
                else:  # a dataset downloaded without its videos: the joints still import
                    camera_summary[k]["episodes_without_video"].append(episode.index)
            pending: dict[str, tuple[int, np.ndarray] | None] = {k: next(v, None) for k, v in videos.items()}
            for i in range(count):
                t = int(stamps[i])
                writer.write(STATE_TOPIC, t, messages.joint_state(t, state_names, rows[STATE_KEY][i]))
                if has_action:
                    writer.write(COMMAND_TOPIC, t, messages.joint_state(t, action_names, rows[ACTION_KEY][i]))
                for k in videos:
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
                if ticks is not None:
                    next(ticks, None)
            end = replace(start, event="end", duration_s=(last - first) / NS_PER_S)
            writer.write(EPISODE_TOPIC, last, messages.diagnostic(last, end.to_status()))
            for v in videos.values():
                v.close()
            episode_start = max(last, first) + int(round(max(EPISODE_GAP_S * NS_PER_S, frame_ns)))
        if ticks is not None:
            ticks.close()
    except BaseException:
        writer.close()
        raise
    writer.close()
    return {t: int(n) for t, n in _topic_counts(writer).items()}


_LAST_STAMP_NS = 2**63 - 1 - 10**18  # the imported time line must fit int64 nanoseconds with room to spare


def _topic_counts(writer) -> dict[str, int]:
    return {name: topic.count for name, topic in writer._topics.items()}  # noqa: SLF001 - same package family
