"""LeRobot datasets in and out: `sim2real dataset import` (v2.1, v3.0) and `export` (v3.0).

The real dataset (../shared/data/lerobot, written by LeRobot on a Unitree G1) is read where
present; synthetic v2.1 and v3.0 datasets made here cover the code without it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim2real_ros.bags import BagReader
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.datasets.lerobot import (
    COMMAND_TOPIC,
    DEFAULT_START_NS,
    EPISODE_TOPIC,
    NS_PER_S,
    STATE_TOPIC,
    DatasetError,
    LeRobotDataset,
    camera_info_topic,
    image_topic,
    import_dataset,
)
from sim2real_ros.topics import DatasetEpisodeEvent

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("SIM2REAL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
G1 = SHARED_DATA / "lerobot" / "g1_inspire_pick_bottle"
needs_g1 = pytest.mark.skipif(not (G1 / "meta" / "info.json").is_file(),
                              reason=f"the real LeRobot dataset is not at {G1}; set SIM2REAL_SHARED_DATA")
JOINTS = ["shoulder", "elbow", "wrist"]
FPS = 10
H, W = 48, 64
TASK = "Reach the red cube."


# ----------------------------------------------------------------------------------------------
# Synthetic datasets, written as LeRobot writes them (independently of our exporter)
def _frame(episode: int, i: int) -> np.ndarray:
    """A frame whose grey level tells its frame index (survives lossy coding within a few levels)."""
    image = np.full((H, W, 3), i * 15 + episode * 40 + 10, dtype=np.uint8)
    image[:, :, 2] = 128
    return image


def _encode(path: Path, frames: list[np.ndarray], codec: str = "mpeg4") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.bit_rate = 4_000_000
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _series(episode: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(n) / FPS
    state = np.stack([np.sin(t + episode), np.cos(t) * 0.5, t * 0.1], axis=1).astype(np.float32)
    action = (state + 0.01).astype(np.float32)
    return state, action


def _features(version: str) -> dict:
    video = {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channel"],
             "info": {"video.height": H, "video.width": W, "video.codec": "mpeg4", "video.pix_fmt": "yuv420p",
                      "video.is_depth_map": False, "video.fps": FPS, "video.channels": 3, "has_audio": False}}
    names = [JOINTS] if version == "v2.1" else JOINTS  # v2.1 as the G1 dataset writes them: nested
    scalar = {"shape": [1], "names": None}
    return {"observation.state": {"dtype": "float32", "shape": [3], "names": names},
            "action": {"dtype": "float32", "shape": [3], "names": names},
            "observation.images.front": video,
            "timestamp": {"dtype": "float32", **scalar}, "frame_index": {"dtype": "int64", **scalar},
            "episode_index": {"dtype": "int64", **scalar}, "index": {"dtype": "int64", **scalar},
            "task_index": {"dtype": "int64", **scalar}}


def _table(episode: int, n: int, start_index: int) -> pa.Table:
    state, action = _series(episode, n)
    return pa.table({
        "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), 3),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(action.ravel()), 3),
        "timestamp": pa.array((np.arange(n) / FPS).astype(np.float32)),
        "frame_index": pa.array(np.arange(n), pa.int64()),
        "episode_index": pa.array(np.full(n, episode), pa.int64()),
        "index": pa.array(start_index + np.arange(n), pa.int64()),
        "task_index": pa.array(np.zeros(n), pa.int64()),
    })


LENGTHS = {0: 12, 1: 9}


def make_v21(root: Path) -> Path:
    (root / "meta").mkdir(parents=True)
    info = {"codebase_version": "v2.1", "robot_type": "arm3", "total_episodes": 2, "total_frames": 21,
            "total_tasks": 1, "total_videos": 2, "total_chunks": 1, "chunks_size": 1000, "fps": FPS,
            "splits": {"train": "0:2"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "features": _features("v2.1")}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    (root / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": TASK}) + "\n")
    (root / "meta" / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e, "tasks": [TASK], "length": n}) + "\n" for e, n in LENGTHS.items()))
    start = 0
    for e, n in LENGTHS.items():
        path = root / "data" / "chunk-000" / f"episode_{e:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(e, n, start), path)
        _encode(root / "videos" / "chunk-000" / "observation.images.front" / f"episode_{e:06d}.mp4",
                [_frame(e, i) for i in range(n)])
        start += n
    return root


def make_v30(root: Path) -> Path:
    """Both episodes in one data file and one video file, as LeRobot v3.0 packs them."""
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    info = {"codebase_version": "v3.0", "robot_type": "arm3", "total_episodes": 2, "total_frames": 21,
            "total_tasks": 1, "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
            "fps": FPS, "splits": {"train": "0:2"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": _features("v3.0")}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    pq.write_table(pa.table({"task_index": pa.array([0], pa.int64()), "task": [TASK]}), root / "meta" / "tasks.parquet")
    tables, frames, rows, start = [], [], [], 0
    for e, n in LENGTHS.items():
        tables.append(_table(e, n, start))
        frames += [_frame(e, i) for i in range(n)]
        rows.append({"episode_index": e, "tasks": [TASK], "length": n, "data/chunk_index": 0, "data/file_index": 0,
                     "dataset_from_index": start, "dataset_to_index": start + n,
                     "videos/observation.images.front/chunk_index": 0, "videos/observation.images.front/file_index": 0,
                     "videos/observation.images.front/from_timestamp": start / FPS,
                     "videos/observation.images.front/to_timestamp": (start + n) / FPS,
                     "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        start += n
    (root / "data" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.concat_tables(tables), root / "data" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.Table.from_pylist(rows), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    _encode(root / "videos" / "observation.images.front" / "chunk-000" / "file-000.mp4", frames, "h264")
    return root


def read_bag(bag: Path) -> dict[str, list]:
    out: dict[str, list] = {}
    with BagReader(bag) as reader:
        for m in reader.messages():
            out.setdefault(m.topic, []).append(m)
    return out


def stamp_ns(msg) -> int:
    return int(msg.header.stamp.sec) * NS_PER_S + int(msg.header.stamp.nanosec)


# ----------------------------------------------------------------------------------------------
# Import
@pytest.mark.parametrize("make", [make_v21, make_v30], ids=["v2.1", "v3.0"])
def test_import_synthetic(tmp_path, make):
    root = make(tmp_path / "ds")
    summary = import_dataset(root, tmp_path / "bag", progress=False)
    assert summary.episodes == [0, 1]
    msgs = read_bag(tmp_path / "bag")
    total = sum(LENGTHS.values())
    for topic in (STATE_TOPIC, COMMAND_TOPIC, image_topic("front"), camera_info_topic("front")):
        assert len(msgs[topic]) == total, topic
    starts = [m for m in msgs[EPISODE_TOPIC] if m.msg.status[0].values[1].value == "start"]
    assert [s.msg.status[0].message for s in starts] == [TASK, TASK]
    assert [m.msg.status[0].values[0].value for m in msgs[EPISODE_TOPIC]] == ["0", "0", "1", "1"]
    # the operator label, not a supervisor state: nobody's supervisor ran during a LeRobot recording
    assert "/supervisor/state" not in msgs
    events = [DatasetEpisodeEvent.from_msg(m.msg) for m in msgs[EPISODE_TOPIC]]
    assert [(e.event, e.operator) for e in events] == [("start", "human"), ("end", "human")] * 2
    assert [e.operator_mode for e in events] == ["TELEOP", "HOLD", "TELEOP", "HOLD"]
    offset = 0
    for e, n in LENGTHS.items():
        state, action = _series(e, n)
        js = msgs[STATE_TOPIC][offset:offset + n]
        cmd = msgs[COMMAND_TOPIC][offset:offset + n]
        images = msgs[image_topic("front")][offset:offset + n]
        assert list(js[0].msg.name) == JOINTS and list(cmd[0].msg.name) == JOINTS
        np.testing.assert_allclose([m.msg.position for m in js], state, atol=1e-6)
        np.testing.assert_allclose([m.msg.position for m in cmd], action, atol=1e-6)
        episode_start = stamp_ns(js[0].msg)
        for i in range(n):
            assert stamp_ns(js[i].msg) == stamp_ns(cmd[i].msg) == stamp_ns(images[i].msg) == js[i].log_time_ns
            assert abs(stamp_ns(js[i].msg) - episode_start - i / FPS * NS_PER_S) < 1e6
            pixels = np.frombuffer(images[i].msg.data, np.uint8).reshape(H, W, 3)
            assert images[i].msg.encoding == "rgb8"
            # the right frame of the right episode (v3.0: both in one video file, seek by from_timestamp)
            assert abs(float(pixels[..., 0].mean()) - float(_frame(e, i)[..., 0].mean())) < 6, (e, i)
        offset += n
    info = msgs[camera_info_topic("front")][0].msg
    assert (info.width, info.height) == (W, H) and not np.any(info.k)  # uncalibrated: K = 0
    assert stamp_ns(msgs[STATE_TOPIC][0].msg) == DEFAULT_START_NS


def test_import_with_calibration(tmp_path):
    root = make_v21(tmp_path / "ds")
    yaml_path = tmp_path / "cam.yaml"
    yaml_path.write_text(
        f"image_width: {W}\nimage_height: {H}\ncamera_name: front\n"
        "camera_matrix: {rows: 3, cols: 3, data: [50, 0, 32, 0, 50, 24, 0, 0, 1]}\n"
        "distortion_model: plumb_bob\ndistortion_coefficients: {rows: 1, cols: 5, data: [0.1, 0, 0, 0, 0]}\n"
        "rectification_matrix: {rows: 3, cols: 3, data: [1, 0, 0, 0, 1, 0, 0, 0, 1]}\n"
        "projection_matrix: {rows: 3, cols: 4, data: [50, 0, 32, 0, 0, 50, 24, 0, 0, 0, 1, 0]}\n")
    import_dataset(root, tmp_path / "bag", episodes=[1], camera_calibration=[f"front={yaml_path}"], progress=False)
    msgs = read_bag(tmp_path / "bag")
    info = msgs[camera_info_topic("front")][0].msg
    assert list(info.k) == [50, 0, 32, 0, 50, 24, 0, 0, 1] and info.d[0] == pytest.approx(0.1)
    assert len(msgs[STATE_TOPIC]) == LENGTHS[1]


@needs_g1
def test_import_real_g1_first_episode(tmp_path):
    info = json.loads((G1 / "meta" / "info.json").read_text())
    names = info["features"]["observation.state"]["names"][0]
    height, width, _ = info["features"]["observation.images.cam_high"]["shape"]
    first = min(int(p.stem.split("_")[1]) for p in (G1 / "data" / "chunk-000").glob("episode_*.parquet"))
    table = pq.read_table(G1 / "data" / "chunk-000" / f"episode_{first:06d}.parquet")
    timestamps = np.asarray(table.column("timestamp").to_pylist(), dtype=float)
    state = np.asarray(table.column("observation.state").to_pylist())
    action = np.asarray(table.column("action").to_pylist())
    summary = import_dataset(G1, tmp_path / "bag", episodes=[first], progress=False)
    msgs = read_bag(tmp_path / "bag")
    n = len(timestamps)
    assert summary.frames == n
    for topic in (STATE_TOPIC, COMMAND_TOPIC, image_topic("cam_high"), camera_info_topic("cam_high")):
        assert len(msgs[topic]) == n, topic
    assert list(msgs[STATE_TOPIC][0].msg.name) == names == list(msgs[COMMAND_TOPIC][0].msg.name)
    image = msgs[image_topic("cam_high")][0].msg
    assert (image.height, image.width, image.step) == (height, width, width * 3)
    start = stamp_ns(msgs[STATE_TOPIC][0].msg)
    for topic in (STATE_TOPIC, COMMAND_TOPIC, image_topic("cam_high")):
        stamps = (np.array([stamp_ns(m.msg) for m in msgs[topic]]) - start) / NS_PER_S
        np.testing.assert_allclose(stamps, timestamps - timestamps[0], atol=1e-3)
    np.testing.assert_allclose([m.msg.position for m in msgs[STATE_TOPIC]], state, atol=1e-6)
    np.testing.assert_allclose([m.msg.position for m in msgs[COMMAND_TOPIC]], action, atol=1e-6)
    task = json.loads((G1 / "meta" / "tasks.jsonl").read_text().splitlines()[0])["task"]
    assert msgs[EPISODE_TOPIC][0].msg.status[0].message == task


@needs_g1
def test_real_g1_default_episodes_skip_absent_files(tmp_path):
    dataset = LeRobotDataset(G1)
    chosen, absent = dataset.select(None)
    assert [e.index for e in chosen] == [1, 2] and len(absent) == len(dataset.episodes) - 2
    with pytest.raises(DatasetError, match=r"episode_000000\.parquet: missing"):
        dataset.select([0])


# ----------------------------------------------------------------------------------------------
# Bad input
def test_no_info_json(tmp_path, capsys):
    (tmp_path / "ds" / "meta").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"meta/info\.json: missing"):
        import_dataset(tmp_path / "ds", tmp_path / "bag", progress=False)
    assert cli_main(["dataset", "import", str(tmp_path / "ds"), "--out", str(tmp_path / "bag")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "info.json" in err[0] and "Traceback" not in err[0]


def test_missing_feature(tmp_path):
    root = make_v21(tmp_path / "ds")
    info = json.loads((root / "meta" / "info.json").read_text())
    del info["features"]["observation.state"]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"info\.json: feature 'observation\.state' is not in the dataset"):
        import_dataset(root, tmp_path / "bag", progress=False)


def test_missing_column(tmp_path):
    root = make_v21(tmp_path / "ds")
    path = root / "data" / "chunk-000" / "episode_000000.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["action"]), path)
    with pytest.raises(DatasetError, match=r"episode_000000\.parquet: column\(s\) \['action'\] missing"):
        import_dataset(root, tmp_path / "bag", episodes=[0], progress=False)


def test_video_that_does_not_decode(tmp_path, capsys):
    root = make_v21(tmp_path / "ds")
    video = root / "videos" / "chunk-000" / "observation.images.front" / "episode_000001.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    with pytest.raises(DatasetError, match=r"episode_000001\.mp4: .*observation\.images\.front"):
        import_dataset(root, tmp_path / "bag", episodes=[1], progress=False)
    assert cli_main(["dataset", "import", str(root), "--out", str(tmp_path / "bag2"), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "episode_000001.mp4" in err[0]


def test_unknown_episode_and_version(tmp_path):
    root = make_v21(tmp_path / "ds")
    with pytest.raises(DatasetError, match="episode 7 is not in the dataset"):
        import_dataset(root, tmp_path / "bag", episodes=[7], progress=False)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["codebase_version"] = "v1.6"
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="codebase_version"):
        LeRobotDataset(root)


# ----------------------------------------------------------------------------------------------
# Export (LeRobot v3.0) and the round trip
V30_INFO_FIELDS = {"codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size",
                   "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits", "data_path", "video_path",
                   "features"}
VIDEO_INFO_FIELDS = {"video.height", "video.width", "video.codec", "video.pix_fmt", "video.is_depth_map",
                     "video.fps", "video.channels", "has_audio"}


def _decoded_frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]


def check_v30_layout(root: Path, frames: int, episodes: int, reference: Path | None = None) -> dict:
    """The files, columns, dtypes and info.json fields LeRobot v3.0 has; against a real dataset's
    feature entries and parquet types when one is given."""
    from sim2real_ros.datasets.lerobot_export import export_bag  # noqa: F401 - the module under test

    info = json.loads((root / "meta" / "info.json").read_text())
    assert set(info) >= V30_INFO_FIELDS and info["codebase_version"] == "v3.0"
    assert info["total_frames"] == frames and info["total_episodes"] == episodes
    assert info["splits"] == {"train": f"0:{episodes}"}
    data = pq.read_table(root / info["data_path"].format(chunk_index=0, file_index=0))
    assert data.num_rows == frames
    features = info["features"]
    assert set(data.column_names) == {k for k, f in features.items() if f["dtype"] != "video"}
    for key, feature in features.items():
        if feature["dtype"] == "video":
            assert set(feature["info"]) >= VIDEO_INFO_FIELDS and len(feature["shape"]) == 3
            video = root / info["video_path"].format(video_key=key, chunk_index=0, file_index=0)
            decoded = _decoded_frames(video)
            assert len(decoded) == frames and decoded[0].shape == tuple(feature["shape"])
            continue
        column = data.schema.field(key).type
        if feature["shape"] == [1]:
            assert str(column) == {"float32": "float", "int64": "int64"}[feature["dtype"]], key
        else:
            assert pa.types.is_fixed_size_list(column) and column.list_size == feature["shape"][0], key
            assert str(column.value_type) == "float" and len(feature["names"]) == feature["shape"][0]
    np.testing.assert_array_equal(data.column("index").to_numpy(), np.arange(frames))
    episodes_table = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pydict()
    assert sum(episodes_table["length"]) == frames
    assert episodes_table["dataset_to_index"][-1] == frames
    for column in ("episode_index", "tasks", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "meta/episodes/chunk_index", "stats/observation.state/mean", "stats/action/max"):
        assert column in episodes_table, column
    tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pydict()
    assert set(tasks) >= {"task_index", "task"}
    stats = json.loads((root / "meta" / "stats.json").read_text())
    for key in ("observation.state", "action"):
        assert set(stats[key]) >= {"min", "max", "mean", "std", "count"}
        assert len(stats[key]["mean"]) == features[key]["shape"][0]
    if reference is not None:  # same feature entries and parquet types as LeRobot wrote
        ref = json.loads((reference / "meta" / "info.json").read_text())
        for key in ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index"):
            assert features[key]["dtype"] == ref["features"][key]["dtype"]
            assert features[key]["shape"] == ref["features"][key]["shape"]
        first = sorted((reference / "data" / "chunk-000").glob("*.parquet"))[0]
        assert pq.read_schema(first).remove_metadata().equals(data.schema.remove_metadata())
        assert set(ref["features"]["observation.images.cam_high"]["info"]) <= set(
            features["observation.images.cam_high"]["info"])
    return info


def test_round_trip_synthetic(tmp_path):
    from sim2real_ros.datasets.lerobot_export import export_bag

    import_dataset(make_v21(tmp_path / "ds"), tmp_path / "bag", progress=False)
    summary = export_bag(tmp_path / "bag", tmp_path / "out", fps=FPS, progress=False)
    total = sum(LENGTHS.values())
    assert (summary.episodes, summary.frames, summary.dropped_frames) == (2, total, 0)
    info = check_v30_layout(tmp_path / "out", total, 2)
    assert info["features"]["observation.state"]["names"] == JOINTS
    tasks = pq.read_table(tmp_path / "out" / "meta" / "tasks.parquet").to_pydict()
    assert tasks["task"] == [TASK]
    import_dataset(tmp_path / "out", tmp_path / "bag2", progress=False)
    first, second = read_bag(tmp_path / "bag"), read_bag(tmp_path / "bag2")
    for topic in (STATE_TOPIC, COMMAND_TOPIC):
        a = np.array([m.msg.position for m in first[topic]])
        b = np.array([m.msg.position for m in second[topic]])
        np.testing.assert_allclose(a, b, atol=1e-6)  # float32 in both datasets: exact up to rounding
        for bag in (first, second):  # the same frame times within an episode
            rel = [stamp_ns(m.msg) - stamp_ns(bag[topic][0].msg) for m in bag[topic][:LENGTHS[0]]]
            np.testing.assert_allclose(rel, np.arange(LENGTHS[0]) * NS_PER_S / FPS, atol=1e3)
    for m1, m2 in zip(first[image_topic("front")], second[image_topic("front")], strict=True):
        p1 = np.frombuffer(m1.msg.data, np.uint8).astype(int)
        p2 = np.frombuffer(m2.msg.data, np.uint8).astype(int)
        assert np.abs(p1 - p2).mean() < 3  # one more lossy encoding
    assert [m.msg.status[0].message for m in second[EPISODE_TOPIC]] == [TASK] * 4


@needs_g1
def test_export_matches_the_real_dataset_schema(tmp_path):
    from sim2real_ros.datasets.lerobot_export import export_bag

    import_dataset(G1, tmp_path / "bag", episodes=[2], progress=False)
    length = json.loads((G1 / "meta" / "episodes.jsonl").read_text().splitlines()[2])["length"]
    export_bag(tmp_path / "bag", tmp_path / "out", fps=30, progress=False)
    info = check_v30_layout(tmp_path / "out", length, 1, reference=G1)
    real = json.loads((G1 / "meta" / "info.json").read_text())
    assert info["features"]["observation.state"]["names"] == real["features"]["observation.state"]["names"][0]
    assert info["features"]["observation.images.cam_high"]["shape"] == real["features"][
        "observation.images.cam_high"]["shape"]


def _recorded_bag(path: Path, with_state: bool = True, missing_images: tuple[int, ...] = ()) -> dict:
    """A bag as `sim2real record` writes one in sim: joint_states 100 Hz, robot commands (Float64MultiArray,
    no stamp: log time) 100 Hz, camera/image_raw 30 Hz, supervisor/state HOLD -> TELEOP -> HOLD."""
    from rosbags.typesys import Stores, get_typestore

    from sim2real_ros.bags.writer import BagWriter

    store = get_typestore(Stores.ROS2_HUMBLE)
    t = store.types
    stamp = lambda ns: t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](  # noqa: E731
        sec=ns // NS_PER_S, nanosec=ns % NS_PER_S), frame_id="")
    t0 = 50 * NS_PER_S
    command = lambda s: np.array([0.2 * s, -0.1 * s, 0.05])  # noqa: E731 - [rad] at time s [s]
    rows = []
    for i in range(300):  # 3 s
        ns = t0 + i * 10_000_000
        s = i / 100
        if with_state:
            msg = t["sensor_msgs/msg/JointState"](header=stamp(ns), name=JOINTS, position=command(s) - 0.01,
                                                  velocity=np.zeros(0), effort=np.zeros(0))
            rows.append((ns + 1_000_000, "/joint_states", store.serialize_cdr(msg, msg.__msgtype__)))
        array = t["std_msgs/msg/Float64MultiArray"](layout=t["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
                                                    data=command(s))
        # heard 1 ms late, like the joint states: the exporter takes that recorder delay off
        rows.append((ns + 1_000_000, "/forward_position_controller/commands",
                     store.serialize_cdr(array, array.__msgtype__)))
    for i in range(90):
        if i in missing_images:
            continue
        ns = t0 + round(i * NS_PER_S / 30)
        image = t["sensor_msgs/msg/Image"](header=stamp(ns), height=H, width=W, encoding="bgr8", is_bigendian=0,
                                           step=W * 3, data=_frame(0, i % 10)[..., ::-1].reshape(-1).copy())
        rows.append((ns + 2_000_000, "/camera/image_raw", store.serialize_cdr(image, image.__msgtype__)))
    for ns, mode in ((t0, "HOLD"), (t0 + NS_PER_S // 2, "TELEOP"), (t0 + 5 * NS_PER_S // 2, "HOLD")):
        kv = t["diagnostic_msgs/msg/KeyValue"](key="mode", value=mode)
        status = t["diagnostic_msgs/msg/DiagnosticStatus"](level=0, name="supervisor", message=mode, hardware_id="",
                                                           values=[kv])
        msg = t["diagnostic_msgs/msg/DiagnosticArray"](header=stamp(ns), status=[status])
        rows.append((ns, "/supervisor/state", store.serialize_cdr(msg, msg.__msgtype__)))
    with BagWriter(path) as writer:
        for topic, ty in (("/joint_states", "sensor_msgs/msg/JointState"),
                          ("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
                          ("/camera/image_raw", "sensor_msgs/msg/Image"),
                          ("/supervisor/state", "diagnostic_msgs/msg/DiagnosticArray")):
            if with_state or topic != "/joint_states":
                writer.add_topic(topic, ty)
        for log, topic, data in sorted(rows, key=lambda r: r[0]):
            writer.write(topic, log, data)
    return {"t0": t0, "command": command}


def test_export_recorded_bag(tmp_path):
    """Episodes from the supervisor's TELEOP stretch; actions = commands meant for the frame time
    (the recorder delay taken off as in the fine-tuning labels); bgr8 images made RGB."""
    from sim2real_ros.datasets.lerobot_export import export_bag

    truth = _recorded_bag(tmp_path / "rec")
    summary = export_bag(tmp_path / "rec", tmp_path / "out", fps=FPS, task="reach", progress=False)
    assert summary.episodes == 1 and summary.cameras == ["camera"]
    assert summary.frames == 21  # 0.5 s .. 2.5 s at 10 fps
    check_v30_layout(tmp_path / "out", 21, 1)
    data = pq.read_table(tmp_path / "out" / "data" / "chunk-000" / "file-000.parquet")
    times = np.asarray(data.column("timestamp").to_pylist()) + 0.5
    actions = np.asarray(data.column("action").to_pylist())
    states = np.asarray(data.column("observation.state").to_pylist())
    np.testing.assert_allclose(actions, np.stack([truth["command"](s) for s in times]), atol=1e-5)
    np.testing.assert_allclose(states, actions - 0.01, atol=1e-5)
    frames = _decoded_frames(tmp_path / "out" / "videos" / "observation.images.camera" / "chunk-000" / "file-000.mp4")
    assert abs(float(frames[0][..., 0].mean()) - float(_frame(0, 5)[..., 0].mean())) < 6  # t = 0.5 s: image 15
    assert abs(float(frames[0][..., 2].mean()) - 128) < 6  # RGB order kept


def test_export_gap_splits_the_episode_and_keeps_video_time(tmp_path):
    """Frames left out inside a span (images lost for 0.2 s) must not shift later frames: LeRobot reads
    frame i at timestamp i / fps of a gap-free video, so the span becomes two gap-free episodes and every
    frame's query time decodes a frame of its own episode (the bug: 615 of 616 frames loaded, the last
    one queried past the video's end)."""
    from sim2real_ros.datasets.lerobot_export import export_bag

    _recorded_bag(tmp_path / "rec", missing_images=tuple(range(45, 52)))  # 1.5 .. 1.7 s at 30 fps
    summary = export_bag(tmp_path / "rec", tmp_path / "out", fps=FPS, task="reach", progress=False)
    assert summary.episodes == 2 and summary.dropped_frames > 0
    assert any("split" in p for p in summary.problems)
    data = pq.read_table(tmp_path / "out" / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    episodes = pq.read_table(next((tmp_path / "out" / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    video = tmp_path / "out" / "videos" / "observation.images.camera" / "chunk-000" / "file-000.mp4"
    frames = _decoded_frames(video)
    assert len(frames) == summary.frames == len(data["timestamp"])
    for e, row in enumerate(episodes):
        rows = [i for i, ep in enumerate(data["episode_index"]) if ep == e]
        stamps = np.array([data["timestamp"][i] for i in rows])
        np.testing.assert_allclose(stamps, np.array([data["frame_index"][i] for i in rows]) / FPS, atol=1e-6)
        key = "videos/observation.images.camera"
        # The last frame of each episode is within its video range (LeRobot's query at from + timestamp).
        assert row[f"{key}/from_timestamp"] + stamps[-1] < row[f"{key}/to_timestamp"] <= len(frames) / FPS + 1e-9


def test_export_bad_input(tmp_path, capsys):
    from sim2real_ros.datasets.lerobot_export import export_bag

    _recorded_bag(tmp_path / "rec", with_state=False)
    with pytest.raises(DatasetError, match=r"rec: topic 'joint_states' \(observation\.state\) is not in the bag"):
        export_bag(tmp_path / "rec", tmp_path / "out", progress=False)
    assert cli_main(["dataset", "export", str(tmp_path / "rec"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "joint_states" in err[0]
    assert cli_main(["dataset", "export", str(tmp_path / "nothing"), "--out", str(tmp_path / "out")]) == 2


def test_a_round_trip_keeps_the_offline_replay_action_error(tmp_path):
    """The issue's check: a demonstration exported and imported back gives the replay evaluator the
    same action error (the shipped policy's 6 joints, the sim camera's calibration)."""
    from sim2real_ros.datasets.lerobot_export import export_bag
    from sim2real_ros.episodes.options import ReplayOptions
    from sim2real_ros.evaluation.replay import evaluate_bag

    joints, n, fps, h, w = [f"joint{i}" for i in range(1, 7)], 45, 30, 240, 320
    root = tmp_path / "ds"
    (root / "meta").mkdir(parents=True)
    features = _features("v3.0")
    for key in ("observation.state", "action"):
        features[key] = {"dtype": "float32", "shape": [6], "names": joints}
    features["observation.images.front"]["shape"] = [h, w, 3]
    info = {"codebase_version": "v2.1", "fps": fps, "chunks_size": 1000,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "features": features}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "episodes.jsonl").write_text(json.dumps({"episode_index": 0, "tasks": ["reach"], "length": n}))
    t = np.arange(n) / fps
    state = (0.3 * np.sin(t[:, None] + np.arange(6)[None])).astype(np.float32)
    action = (state + 0.05 * np.cos(2 * t)[:, None]).astype(np.float32)
    data = root / "data" / "chunk-000" / "episode_000000.parquet"
    data.parent.mkdir(parents=True)
    vector = lambda v: pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 6)  # noqa: E731
    pq.write_table(pa.table({"observation.state": vector(state), "action": vector(action),
                             "timestamp": pa.array(t.astype(np.float32)), "frame_index": pa.array(np.arange(n)),
                             "episode_index": pa.array(np.zeros(n, np.int64)), "index": pa.array(np.arange(n)),
                             "task_index": pa.array(np.zeros(n, np.int64))}), data)
    yy, xx = np.mgrid[0:h, 0:w]
    video = root / "videos" / "chunk-000" / "observation.images.front" / "episode_000000.mp4"
    video.parent.mkdir(parents=True)
    with av.open(str(video), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt, stream.options = w, h, "yuv420p", {"crf": "18"}
        for i in range(n):
            image = np.stack([(xx + 4 * i) % 256, (yy * 2 + i) % 256, np.full_like(xx, 90)], -1).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    calibration = [str(REPO_ROOT / "config" / "camera_sim.yaml")]
    import_dataset(root, tmp_path / "bag1", camera_calibration=calibration, progress=False)
    export_bag(tmp_path / "bag1", tmp_path / "out", fps=fps, progress=False)
    import_dataset(tmp_path / "out", tmp_path / "bag2", camera_calibration=calibration, progress=False)
    options = ReplayOptions(image_topic="camera/front/image_raw", camera_info_topic="camera/front/camera_info",
                            action_topic="command/teleop", plots=False, progress=False)
    reports = [evaluate_bag(tmp_path / b, REPO_ROOT / "policies" / "reach_default.safetensors", options=options)
               for b in ("bag1", "bag2")]
    for report in reports:
        # every frame: camera_info comes before its image, states and actions cover every chunk point
        assert report["frames"]["evaluated"] == n and report["frames"]["skipped_total"] == 0
    first, second = (r["metrics"]["overall"] for r in reports)
    assert first["points"] == second["points"] > 300
    # the same recorded actions; the images went through one more lossy encoding
    assert abs(first["mae"] - second["mae"]) < 1e-3 and abs(first["rmse"] - second["rmse"]) < 1e-3


def test_sysid_latency_reads_an_imported_bag(tmp_path, capsys):
    """`sysid latency --command-topic command/teleop --state-topic joint_states` on LeRobot data, unchanged
    (bag topics are fully qualified: /command/teleop)."""
    import_dataset(make_v21(tmp_path / "ds"), tmp_path / "bag", progress=False)
    code = cli_main(["sysid", "latency", "--bag", str(tmp_path / "bag"), "--command-topic", "command/teleop",
                     "--state-topic", "joint_states", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["command_topic"] == COMMAND_TOPIC and report["state_topic"] == STATE_TOPIC


# ----------------------------------------------------------------------------------------------
# Hostile datasets (issue 34): each ends in one DatasetError naming the file and the field, and
# leaves no bag behind
def _set_info(root: Path, **changes) -> None:
    info = json.loads((root / "meta" / "info.json").read_text())
    info.update(changes)
    (root / "meta" / "info.json").write_text(json.dumps(info))


def _refused(root: Path, out: Path, match: str, **kwargs) -> None:
    with pytest.raises(DatasetError, match=match):
        import_dataset(root, out, progress=False, **kwargs)
    assert not os.path.lexists(out), "a failed import leaves no bag"


def test_declared_length_too_large(tmp_path):
    root = make_v21(tmp_path / "ds")
    (root / "meta" / "episodes.jsonl").write_text(
        json.dumps({"episode_index": 0, "tasks": [TASK], "length": 10**12}) + "\n")
    _refused(root, tmp_path / "bag", r"episodes\.jsonl: line 1: field 'length' = 1000000000000")


def test_state_shape_too_large(tmp_path):
    root = make_v21(tmp_path / "ds")
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"]["observation.state"]["shape"] = [10**12]
    info["features"]["observation.state"]["names"] = None
    (root / "meta" / "info.json").write_text(json.dumps(info))
    _refused(root, tmp_path / "bag", r"info\.json: field 'features\.observation\.state\.shape\[0\]' = 1000000000000")


def test_parquet_with_more_rows_than_declared(tmp_path):
    """A small parquet file of 5e6 rows: refused from its footer, before any data is read."""
    root = make_v21(tmp_path / "ds")
    path = root / "data" / "chunk-000" / "episode_000000.parquet"
    n = 5_000_000
    pq.write_table(pa.table({"frame_index": pa.array(np.zeros(n, np.int64))}), path, compression="zstd")
    assert path.stat().st_size < 1_000_000
    _refused(root, tmp_path / "bag", r"episode_000000\.parquet: holds 5000000 rows; .*'length'.*: 12",
             episodes=[0])


def test_parquet_with_longer_vectors_than_declared(tmp_path):
    """One row holding a vector of 2e6 values where info.json says 3: refused from the footer's value count."""
    root = make_v21(tmp_path / "ds")
    path = root / "data" / "chunk-000" / "episode_000000.parquet"
    table = pq.read_table(path)
    long = pa.array([np.zeros(2_000_000, np.float32)] + [np.zeros(3, np.float32)] * (table.num_rows - 1),
                    pa.list_(pa.float32()))
    pq.write_table(table.set_column(table.column_names.index("observation.state"), "observation.state", long), path)
    _refused(root, tmp_path / "bag", r"episode_000000\.parquet: column 'observation\.state.*' declares 2000033 values",
             episodes=[0])


def test_episode_declaring_too_many_numbers(tmp_path):
    """Run-length encoding lets a few kilobytes of parquet hold gigabytes of numbers: an episode may
    hold at most MAX_EPISODE_VALUES by its declared length and widths, checked before reading."""
    root = make_v21(tmp_path / "ds")
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"]["observation.state"] = {"dtype": "float32", "shape": [4096], "names": None}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "episodes.jsonl").write_text(json.dumps({"episode_index": 0, "length": 200_000}) + "\n")
    _refused(root, tmp_path / "bag", r"info\.json: episode 0: field 'length' = 200000 x 4103 numbers per row is "
             r"above 8000000")


def test_task_text_bomb(tmp_path):
    """A dictionary-encoded task string of 1 MB repeated on 100,000 rows: half a megabyte of parquet
    that decodes to 100 GB. Read in batches whose decoded text is bounded, refused at 64 MB."""
    root = make_v30(tmp_path / "ds")
    n = 100_000
    task = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["x" * 1_000_000]))
    pq.write_table(pa.table({"task_index": pa.array(np.arange(n)), "task": task}), root / "meta" / "tasks.parquet",
                   compression="zstd")
    assert (root / "meta" / "tasks.parquet").stat().st_size < 2_000_000
    _refused(root, tmp_path / "bag", r"tasks\.parquet: text columns \['task'\] hold more than 67108864 bytes")


def test_video_larger_than_declared(tmp_path):
    """A video of another size than info.json's shape is refused before its first frame is decoded
    (the finding: 8192x8192 where info.json says 48x64)."""
    root = make_v21(tmp_path / "ds")
    video = root / "videos" / "chunk-000" / "observation.images.front" / "episode_000001.mp4"
    with av.open(str(video), "w") as container:
        stream = container.add_stream("mpeg4", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = 1024, 768, "yuv420p"
        for packet in stream.encode(av.VideoFrame.from_ndarray(np.zeros((768, 1024, 3), np.uint8), format="rgb24")):
            container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    _refused(root, tmp_path / "bag", r"episode_000001\.mp4: video is 1024x768; info\.json field "
             r"'features\.observation\.images\.front\.shape' says 64x48", episodes=[1])


def test_declared_image_too_large(tmp_path):
    root = make_v21(tmp_path / "ds")
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"]["observation.images.front"]["shape"] = [100_000, 100_000, 3]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    _refused(root, tmp_path / "bag", r"field 'features\.observation\.images\.front\.shape\[0\]' = 100000")


@pytest.mark.parametrize("template", [
    "../outside/episode_{episode_index:06d}.parquet",
    "data/../../outside/episode_{episode_index:06d}.parquet",
    "/tmp/outside/episode_{episode_index:06d}.parquet",
])
def test_data_path_outside_the_dataset(tmp_path, template):
    root = make_v21(tmp_path / "ds")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "episode_000000.parquet").write_bytes((root / "data" / "chunk-000" /
                                                      "episode_000000.parquet").read_bytes())
    _set_info(root, data_path=template)
    _refused(root, tmp_path / "bag", r"info\.json: field 'data_path'.*(leaves the dataset folder|is absolute)")


@pytest.mark.parametrize("what", ["data file", "video file", "data folder", "meta folder"])
def test_symlinks_are_refused(tmp_path, what):
    root = make_v21(tmp_path / "ds")
    outside = tmp_path / "outside"
    if what == "data file":
        link = root / "data" / "chunk-000" / "episode_000000.parquet"
    elif what == "video file":
        link = root / "videos" / "chunk-000" / "observation.images.front" / "episode_000000.mp4"
    elif what == "data folder":
        link = root / "data" / "chunk-000"
    else:
        link = root / "meta"
    link.rename(outside)
    link.symlink_to(outside, target_is_directory=outside.is_dir())
    _refused(root, tmp_path / "bag", r"is a symlink; files of a dataset are read only inside its folder")


def test_playlists_and_other_containers_are_refused(tmp_path):
    """An HLS playlist pointing at a video elsewhere on disk: refused by its extension, and named .mp4
    it is demuxed as MP4 (no probing), so it does not open; the outside video is never read."""
    root = make_v21(tmp_path / "ds")
    elsewhere = tmp_path / "elsewhere.mp4"
    _encode(elsewhere, [_frame(0, i) for i in range(12)])
    playlist = (f"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:1.2,\n{elsewhere}\n"
                f"#EXTINF:1.2,\nfile://{elsewhere}\n#EXT-X-ENDLIST\n")
    video = root / "videos" / "chunk-000" / "observation.images.front" / "episode_000000.mp4"
    video.write_text(playlist)
    _refused(root, tmp_path / "bag", r"episode_000000\.mp4: does not open as a video", episodes=[0])
    video.with_suffix(".m3u8").write_text(playlist)
    _set_info(root, video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.m3u8")
    _refused(root, tmp_path / "bag", r"episode_000000\.m3u8: video 'observation\.images\.front' has extension "
             r"'\.m3u8'", episodes=[0])


@pytest.mark.parametrize(("template", "match"), [
    ("data/episode_{episode_index:01900000000d}.parquet", "format '01900000000d'"),
    ("data/episode_{episode_index:060d}.parquet", "width 60 of {episode_index} is above 20"),
    ("data/{episode_index.__class__}.parquet", r"unknown field \{episode_index\.__class__\}"),
    ("data/{0}.parquet", r"unknown field \{0\}"),
    ("data/{episode_index!r}.parquet", "only plain"),
    ("data/{episode_index:>{episode_chunk}}.parquet", "only plain"),
    ("data/{episode_index", "expected '}' before end of string"),
])
def test_path_template_formatter(tmp_path, template, match):
    """Untrusted templates never reach str.format: only LeRobot's fields, integer widths up to 20."""
    root = make_v21(tmp_path / "ds")
    _set_info(root, data_path=template)
    _refused(root, tmp_path / "bag", r"info\.json: field 'data_path' = .*" + match)


def test_failed_import_removes_its_bag_and_never_touches_an_existing_out(tmp_path, capsys):
    root = make_v21(tmp_path / "ds")
    video = root / "videos" / "chunk-000" / "observation.images.front" / "episode_000001.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    # the bag is created, episode 0 written, then episode 1's video fails: nothing is left
    _refused(root, tmp_path / "bag", r"episode_000001\.mp4")
    assert cli_main(["dataset", "import", str(root), "--out", str(tmp_path / "bag"), "--no-progress"]) == 2
    assert not os.path.lexists(tmp_path / "bag")
    # an empty folder is used and given back empty on failure; a non-empty one is refused and kept
    (tmp_path / "empty").mkdir()
    _refused_keeps = pytest.raises(DatasetError, match=r"episode_000001\.mp4")
    with _refused_keeps:
        import_dataset(root, tmp_path / "empty", progress=False)
    assert (tmp_path / "empty").is_dir() and not any((tmp_path / "empty").iterdir())
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(DatasetError, match=r"full: is not empty; --out must be a new or empty folder"):
        import_dataset(root, full, episodes=[0], progress=False)
    assert (full / "keep.txt").read_text() == "mine" and len(list(full.iterdir())) == 1
    import_dataset(root, tmp_path / "empty", episodes=[0], progress=False)
    assert len(read_bag(tmp_path / "empty")[STATE_TOPIC]) == LENGTHS[0]


def test_dataset_without_videos_imports_its_joints(tmp_path, capsys):
    """A dataset downloaded without videos/: the joints import, the images are skipped with a note."""
    root = make_v21(tmp_path / "ds")
    import shutil

    shutil.rmtree(root / "videos")
    summary = import_dataset(root, tmp_path / "bag", progress=False)
    msgs = read_bag(tmp_path / "bag")
    assert len(msgs[STATE_TOPIC]) == len(msgs[COMMAND_TOPIC]) == sum(LENGTHS.values())
    assert image_topic("front") not in msgs
    assert summary.cameras["front"]["episodes_without_video"] == [0, 1]
    assert any("no video file for 2 episode(s)" in p and "images were skipped" in p for p in summary.problems)
    assert cli_main(["dataset", "import", str(root), "--out", str(tmp_path / "bag2"), "--no-progress"]) == 0
    assert "images were skipped" in capsys.readouterr().err


# A few hostile datasets through the CLI in a child process: one line, rc 2, no traceback, memory
# bounded (ru_maxrss of the child; the budget is 600 MB).
HOSTILE = {
    "length 1e12": lambda root: (root / "meta" / "episodes.jsonl").write_text(
        json.dumps({"episode_index": 0, "length": 10**12}) + "\n"),
    "state shape 1e12": lambda root: _set_info(root, features={
        **json.loads((root / "meta" / "info.json").read_text())["features"],
        "observation.state": {"dtype": "float32", "shape": [10**12]}}),
    "5e6 rows": lambda root: pq.write_table(
        pa.table({"frame_index": pa.array(np.zeros(5_000_000, np.int64))}),
        root / "data" / "chunk-000" / "episode_000000.parquet", compression="zstd"),
    "width 1.9e9": lambda root: _set_info(root, data_path="data/{episode_index:01900000000d}.parquet"),
}


# The child runs the CLI and then reports its own peak resident memory (VmHWM of its own address
# space: ru_maxrss would carry over the parent's peak through fork and exec).
_CLI_WITH_PEAK = ("import sys\nfrom sim2real_ros.cli.main import main\nrc = main(sys.argv[2:])\n"
                  "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
                  "open(sys.argv[1], 'w').write(hwm)\nsys.exit(rc)\n")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_dataset_cli(tmp_path, case):
    import subprocess
    import sys

    root = make_v21(tmp_path / "ds")
    HOSTILE[case](root)
    result = subprocess.run([sys.executable, "-c", _CLI_WITH_PEAK, str(tmp_path / "peak_kb"), "dataset", "import",
                             str(root), "--out", str(tmp_path / "bag"), "--episodes", "0", "--no-progress"],
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr and str(root) in lines[0], result.stderr
    peak_mb = int((tmp_path / "peak_kb").read_text()) / 1024
    assert peak_mb < 600, f"peak {peak_mb:.0f} MB"
    assert not os.path.lexists(tmp_path / "bag")


# ----------------------------------------------------------------------------------------------
# Fuzz: info.json with any field replaced by any JSON value (or removed). Every outcome is an import
# or a DatasetError; never another exception, a hang or a bag left behind.
from hypothesis import HealthCheck, given, settings  # noqa: E402 - the fuzz section's own imports
from hypothesis import strategies as st  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("SIM2REAL_FUZZ_EXAMPLES", "60"))  # per codebase version: ~10 s each
_TRICKY_TEXT = ["../x", "/etc/passwd", "{episode_index:099999999999d}", "{episode_index:01900000000d}",
                "{episode_index.__class__.__mro__}", "{video_key[0]}", "{0}", "{}", "{{}}", "{episode_chunk:>{x}}",
                "data/{episode_index}.parquet", "v2.1", "v3.0", "video", "image", "height", "concat:a|b",
                "http://127.0.0.1:9/x.mp4", "videos/{video_key}/x.m3u8", "\x00", "C:\\x", ""]
_json_leaf = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
              | st.sampled_from([0, 1, -1, 3, 48, 64, 10**12, 2**63, 1e12, 1.5, -0.0])
              | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20) | st.sampled_from(_TRICKY_TEXT))
_json_value = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | st.sampled_from(_TRICKY_TEXT), inner, max_size=4),
                           max_leaves=12)


def _paths(value, prefix=()):
    """Every key path in a JSON tree (lists by index)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _mutated(info: dict, edits: list[tuple[int, bool, object]]) -> object:
    """info with each edit applied: (which path, remove it?, new value)."""
    info = json.loads(json.dumps(info))
    for which, remove, value in edits:
        paths = list(_paths(info))
        path = paths[which % len(paths)]
        if not path:
            info = value
            continue
        parent = info
        for part in path[:-1]:
            parent = parent[part]
        if remove and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        if not isinstance(info, dict | list):
            break
    return info


@pytest.fixture(scope="module", params=[make_v21, make_v30], ids=["v2.1", "v3.0"])
def fuzz_dataset(request, tmp_path_factory):
    root = request.param(tmp_path_factory.mktemp("fuzz") / "ds")
    return root, json.loads((root / "meta" / "info.json").read_text())


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.booleans(), _json_value), min_size=1, max_size=4))
def test_fuzz_info_json(fuzz_dataset, edits):
    root, info = fuzz_dataset
    mutated = _mutated(info, edits)
    (root / "meta" / "info.json").write_text(json.dumps(mutated))
    out = root.parent / "bag"
    try:
        import_dataset(root, out, episodes=[1], progress=False)
    except DatasetError as err:
        assert str(root) in str(err), err  # names the file
        assert not os.path.lexists(out)
    else:
        import shutil

        shutil.rmtree(out)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.booleans(), _json_value), min_size=1, max_size=4),
       raw=st.sampled_from(["", "\n", "{", "[]", "null", "1e999", "[" * 100_000, "9" * 5000]))
def test_fuzz_episodes_jsonl(v21_fuzz_dataset, edits, raw):
    """episodes.jsonl (v2.1) with any field replaced by any JSON value, and a broken line now and then."""
    root, rows = v21_fuzz_dataset
    mutated = _mutated(rows, edits)
    lines = [json.dumps(r) for r in (mutated if isinstance(mutated, list) else [mutated])]
    if raw:
        lines.insert(len(lines) // 2, raw)
    (root / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    out = root.parent / "bag"
    try:
        import_dataset(root, out, progress=False)
    except DatasetError as err:
        assert str(root) in str(err), err
        assert not os.path.lexists(out)
    else:
        import shutil

        shutil.rmtree(out)


@pytest.fixture(scope="module")
def v21_fuzz_dataset(tmp_path_factory):
    root = make_v21(tmp_path_factory.mktemp("fuzz_episodes") / "ds")
    return root, [json.loads(line) for line in (root / "meta" / "episodes.jsonl").read_text().splitlines()]


V3_EPISODES = Path("meta") / "episodes" / "chunk-000" / "file-000.parquet"


@pytest.mark.parametrize(("column", "values", "match"), [
    ("length", pa.array(["12", "9"]), r"field 'length' = '12'"),
    ("length", pa.array([12, None], pa.int64()), r"field 'length' = None"),
    ("length", pa.array([12.0, float("nan")]), r"field 'length' = nan"),
    ("episode_index", pa.array([0, 0], pa.int64()), "episode 0 is listed twice"),
    ("episode_index", pa.array([-1, 1], pa.int64()), r"field 'episode_index' = -1"),
    ("data/file_index", pa.array([0, 2**62], pa.int64()), r"field 'data/file_index' = 4611686018427387904"),
    ("tasks", pa.array(["a", "b"]), r"field 'tasks' = a"),
    ("tasks", pa.array([[1], [2]], pa.list_(pa.int64())), r"field 'tasks' = 1"),
    ("videos/observation.images.front/from_timestamp", pa.array([0.0, -5.0]), r"from_timestamp' = -5\.0"),
    ("videos/observation.images.front/from_timestamp", pa.array([0.0, float("inf")]), r"from_timestamp' = inf"),
    ("videos/observation.images.front/chunk_index", None, r"column\(s\) \['videos/observation\.images\.front/"
                                                          r"chunk_index'\] missing"),
])
def test_v30_episodes_metadata_checked(tmp_path, column, values, match):
    """v3.0's episode list (a parquet file) is schema-checked as episodes.jsonl is."""
    root = make_v30(tmp_path / "ds")
    table = pq.read_table(root / V3_EPISODES)
    index = table.column_names.index(column)
    table = table.remove_column(index) if values is None else table.set_column(index, column, values)
    pq.write_table(table, root / V3_EPISODES)
    _refused(root, tmp_path / "bag", r"file-000\.parquet: .*" + match)
