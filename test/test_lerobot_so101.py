"""`sim2real dataset import/export --calibration`: an SO-101 dataset as LeRobot records one (joints in
motor units, "<motor>.pos" names, downloaded without its videos) becomes URDF radians and goes back."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim2real_ros.bags.reader import BagReader
from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.datasets.lerobot import COMMAND_TOPIC, STATE_TOPIC, import_dataset
from sim2real_ros.datasets.lerobot_export import export_bag
from sim2real_ros.hardware.calibration import MotorCalibration, write_calibration
from sim2real_ros.robots import get_robot

FPS = 30
MOTORS = [MotorCalibration("shoulder_pan", 1, 0, -1470, 800, 3280),
          MotorCalibration("shoulder_lift", 2, 0, 1398, 900, 3150),
          MotorCalibration("elbow_flex", 3, 1, 1290, 950, 3120),
          MotorCalibration("wrist_flex", 4, 0, -935, 950, 3100),
          MotorCalibration("wrist_roll", 5, 0, 1547, 250, 3800),
          MotorCalibration("gripper", 6, 0, 1300, 2030, 3250)]
NAMES = [f"{m.name}.pos" for m in MOTORS]
LENGTHS = {0: 40, 1: 25}


def _values(n: int, episode: int) -> np.ndarray:
    """Joint values as LeRobot's SO-101 follower reports them: arm -100..100, gripper 0..100."""
    t = np.arange(n) / FPS
    arm = [80 * np.sin(t * (k + 1) + episode) for k in range(5)]
    return np.stack(arm + [50 + 45 * np.sin(t)], axis=1).astype(np.float32)


def make_so101_dataset(root: Path) -> Path:
    """v2.1 as LeRobot writes an SO-101 recording; the camera's videos were not downloaded."""
    (root / "meta").mkdir(parents=True)
    video = {"dtype": "video", "shape": [480, 640, 3], "names": ["height", "width", "channels"],
             "info": {"video.height": 480, "video.width": 640, "video.codec": "av1", "video.pix_fmt": "yuv420p",
                      "video.is_depth_map": False, "video.fps": FPS, "video.channels": 3, "has_audio": False}}
    scalar = {"shape": [1], "names": None}
    features = {"action": {"dtype": "float32", "shape": [6], "names": NAMES},
                "observation.state": {"dtype": "float32", "shape": [6], "names": NAMES},
                "observation.images.front": video,
                "timestamp": {"dtype": "float32", **scalar}, "frame_index": {"dtype": "int64", **scalar},
                "episode_index": {"dtype": "int64", **scalar}, "index": {"dtype": "int64", **scalar},
                "task_index": {"dtype": "int64", **scalar}}
    info = {"codebase_version": "v2.1", "robot_type": "so101_follower", "total_episodes": 2,
            "total_frames": sum(LENGTHS.values()), "total_tasks": 1, "total_videos": 2, "total_chunks": 1,
            "chunks_size": 1000, "fps": FPS, "splits": {"train": "0:2"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "features": features}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    (root / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "pick the cube"}) + "\n")
    (root / "meta" / "episodes.jsonl").write_text("".join(
        json.dumps({"episode_index": e, "tasks": ["pick the cube"], "length": n}) + "\n" for e, n in LENGTHS.items()))
    start = 0
    for e, n in LENGTHS.items():
        values = _values(n, e)
        path = root / "data" / "chunk-000" / f"episode_{e:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({
            "action": pa.FixedSizeListArray.from_arrays(pa.array((values + 1.0).ravel()), 6),
            "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 6),
            "timestamp": pa.array((np.arange(n) / FPS).astype(np.float32)),
            "frame_index": pa.array(np.arange(n), pa.int64()),
            "episode_index": pa.array(np.full(n, e), pa.int64()),
            "index": pa.array(start + np.arange(n), pa.int64()),
            "task_index": pa.array(np.zeros(n), pa.int64())}), path)
        start += n
    return root


def _positions(bag: Path, topic: str) -> tuple[list[str], np.ndarray]:
    with BagReader(bag) as reader:
        msgs = [m.msg for m in reader.messages() if m.topic == topic]
    return list(msgs[0].name), np.array([m.position for m in msgs])


@pytest.fixture
def so101_data(tmp_path):
    calibration = tmp_path / "follower.json"
    write_calibration(calibration, MOTORS)
    return make_so101_dataset(tmp_path / "ds"), calibration


def test_import_with_calibration_gives_urdf_radians(so101_data, tmp_path):
    dataset, calibration = so101_data
    summary = import_dataset(dataset, tmp_path / "bag", progress=False, joint_calibration=calibration)
    assert summary.frames == sum(LENGTHS.values())
    assert any("no video file for 2 episode(s)" in p for p in summary.problems)  # joints-only download
    assert any("URDF radians" in p for p in summary.problems)
    names, radians = _positions(tmp_path / "bag", STATE_TOPIC)
    assert names == [m.name for m in MOTORS]  # LeRobot's ".pos" dropped: the URDF's joint names
    model = RobotModel.from_file(get_robot("so101").urdf_path())
    limits = model.limits_arrays(names)
    assert np.all(radians >= limits["lower"]) and np.all(radians <= limits["upper"])
    # 0 in range units is the middle of the calibrated range: the URDF zero of the new calibration
    expected_pan = (_values(LENGTHS[0], 0)[:, 0] + 100) / 200 * (3280 - 800) + 800 - (800 + 3280) / 2
    np.testing.assert_allclose(radians[:LENGTHS[0], 0], expected_pan * 2 * np.pi / 4096, atol=1e-5)
    # the gripper: 0 % = closed = the jaw's lower limit, opening at the servo's 2 pi / 4096 rad per tick
    jaw = limits["lower"][5] + _values(LENGTHS[0], 0)[:, 5] / 100 * (3250 - 2030) * 2 * np.pi / 4096
    np.testing.assert_allclose(radians[:LENGTHS[0], 5], jaw, atol=1e-5)
    _, commands = _positions(tmp_path / "bag", COMMAND_TOPIC)
    assert commands.shape == radians.shape and not np.allclose(commands, radians)


def test_without_calibration_units_are_kept_and_said(so101_data, tmp_path):
    dataset, _ = so101_data
    summary = import_dataset(dataset, tmp_path / "bag", progress=False)
    assert any("kept in the dataset's own units" in p for p in summary.problems)
    names, values = _positions(tmp_path / "bag", STATE_TOPIC)
    assert names == NAMES
    np.testing.assert_allclose(values[:LENGTHS[0]], _values(LENGTHS[0], 0), atol=1e-5)


def test_export_writes_the_same_units_back(so101_data, tmp_path):
    """import --calibration, then export --calibration: LeRobot's own values and names again."""
    dataset, calibration = so101_data
    assert cli_main(["dataset", "import", str(dataset), "--out", str(tmp_path / "bag"), "--calibration",
                     str(calibration), "--no-progress"]) == 0
    summary = export_bag(tmp_path / "bag", tmp_path / "out", fps=FPS, progress=False, joint_calibration=calibration)
    info = json.loads((tmp_path / "out" / "meta" / "info.json").read_text())
    assert info["features"]["observation.state"]["names"] == NAMES
    data = pq.read_table(tmp_path / "out" / "data" / "chunk-000" / "file-000.parquet")
    states = np.asarray(data.column("observation.state").to_pylist())
    assert summary.frames == len(states) > 0
    original = np.concatenate([_values(n, e) for e, n in LENGTHS.items()])
    # every exported frame is one of the original frames, in LeRobot units (float32 rounding)
    nearest = np.abs(states[:, None, :] - original[None, :, :]).max(axis=2).min(axis=1)
    assert nearest.max() < 1e-3


def test_a_calibration_for_another_arm_is_named(so101_data, tmp_path, capsys):
    dataset, _ = so101_data
    wrong = tmp_path / "koch.json"
    write_calibration(wrong, [MotorCalibration(f"joint{i}", i, 0, 0, 1000, 3000) for i in range(1, 7)])
    assert cli_main(["dataset", "import", str(dataset), "--out", str(tmp_path / "bag"), "--calibration", str(wrong),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no calibration for motor 'shoulder_pan'" in err and "koch.json" in err
    assert not (tmp_path / "bag").exists()
    assert cli_main(["dataset", "import", str(dataset), "--out", str(tmp_path / "bag2"), "--calibration",
                     str(tmp_path / "so101.json"), "--joint-units", "degrees", "--no-progress"]) == 2
    assert "calibration file not found" in capsys.readouterr().err
