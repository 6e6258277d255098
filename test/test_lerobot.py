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
    SUPERVISOR_TOPIC,
    DatasetError,
    LeRobotDataset,
    camera_info_topic,
    image_topic,
    import_dataset,
)

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
    modes = [m.msg.status[0].values[0].value for m in msgs[SUPERVISOR_TOPIC]]
    assert modes == ["TELEOP", "HOLD", "TELEOP", "HOLD"]
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


def test_round_trip_replay_evaluator(tmp_path):
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
    reports = [evaluate_bag(tmp_path / b, REPO_ROOT / "policies" / "reach_default.pt", options=options)
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
