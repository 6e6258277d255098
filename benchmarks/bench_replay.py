"""Offline replay throughput against merely reading and decoding the same bag.

A synthetic MCAP bag (320x240 rgb8 camera at 30 Hz with camera_info, 100 Hz joint states and robot
commands, supervisor state at 5 Hz) is written once; then, in one run:
  read:   every message of those topics read and deserialized, images viewed as arrays;
  replay: the offline replay of the same bag (preprocessing, pairing, inference, metrics) with an
          untrained checkpoint, torch on one thread.
Figures are frames (camera images) per second; the ratio replay/read is what to compare between
machines (the machine is shared, so absolute numbers move with the load).

    .venv/bin/python benchmarks/bench_replay.py [--json OUT] [--quick]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rclpy.serialization import serialize_message

from sim2real_ros.bags import BagReader
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.conversions import (
    array_to_image,
    camera_model_to_info,
    image_to_array,
    make_joint_state,
    make_position_command,
)
from sim2real_ros.core.perception.camera_model import load_calibration_yaml
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.core.robot.urdf import RobotModel
from sim2real_ros.evaluation import ReplayOptions, evaluate_bag
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.training.untrained import init_checkpoint

NS = 1_000_000_000
TOPICS = {"/camera/image_raw": "sensor_msgs/msg/Image", "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
          "/joint_states": "sensor_msgs/msg/JointState",
          "/forward_position_controller/commands": "std_msgs/msg/Float64MultiArray",
          "/supervisor/state": "diagnostic_msgs/msg/DiagnosticArray"}


def write_bag(path: Path, seconds: float, joints: list[str]) -> int:
    """A synthetic recording of `seconds` [s]; returns the number of camera frames."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    camera = load_calibration_yaml(config_path("camera_sim.yaml"))
    rng = np.random.default_rng(0)
    writer = BagWriter(path)
    for topic, msgtype in TOPICS.items():
        writer.add_topic(topic, msgtype)
    frames = 0
    base = rng.integers(0, 255, (camera.height, camera.width, 3), dtype=np.uint8)
    for tick in range(int(seconds * 100)):  # 100 Hz timeline
        t = NS + tick * NS // 100
        q = 0.2 * np.sin(0.5 * t / NS + np.arange(len(joints)))
        writer.write("/joint_states", t, serialize_message(make_joint_state(joints, q, t)))
        writer.write("/forward_position_controller/commands", t + 1_000_000,
                     serialize_message(make_position_command(q + 0.01)))
        if tick % 20 == 0:
            state = DiagnosticArray()
            state.status = [DiagnosticStatus(name="supervisor", values=[KeyValue(key="mode", value="TELEOP")])]
            state.header.stamp.sec, state.header.stamp.nanosec = divmod(t, NS)
            writer.write("/supervisor/state", t, serialize_message(state))
        if tick % 3 == 0:  # ~33 Hz camera
            image = np.roll(base, tick, axis=1)
            writer.write("/camera/image_raw", t + 2_000_000, serialize_message(array_to_image(image, "rgb8", t)))
            writer.write("/camera/camera_info", t + 2_000_000, serialize_message(camera_model_to_info(camera, t)))
            frames += 1
    writer.close()
    return frames


def read_and_decode(bag: Path) -> tuple[float, int]:
    """(seconds, images) to read and deserialize the replay topics, images viewed as arrays."""
    start = time.perf_counter()
    images = 0
    with BagReader(bag) as reader:
        for message in reader.messages(sorted(TOPICS)):
            if message.topic == "/camera/image_raw":
                image_to_array(message.msg)
                images += 1
    return time.perf_counter() - start, images


def run(quick: bool = False) -> dict:
    """Figures: read_fps, replay_fps (median over repeats), their ratio, spread, frames."""
    joints = RobotModel.from_description(str(urdf_path())).joint_names
    repeats = 2 if quick else 3
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:
        tmp_path = Path(tmp)
        frames = write_bag(tmp_path / "bag", 4.0 if quick else 12.0, joints)
        checkpoint = tmp_path / "policy.safetensors"
        init_checkpoint(checkpoint, joints, PreprocessConfig.from_yaml(config_path("preprocess.yaml")))
        options = ReplayOptions(progress=False, plots=False)
        one_at_a_time = ReplayOptions(progress=False, plots=False, batch_size=1)  # before issue 36
        read_fps, replay_fps, ratios, ratios_one = [], [], [], []
        for _ in range(repeats):  # interleaved, so both see the same load
            seconds, images = read_and_decode(tmp_path / "bag")
            read_fps.append(images / seconds)
            start = time.perf_counter()
            report = evaluate_bag(tmp_path / "bag", checkpoint, "offline", None, options)
            replay_fps.append(report["frames"]["predicted"] / (time.perf_counter() - start))
            ratios.append(replay_fps[-1] / read_fps[-1])
            start = time.perf_counter()
            single = evaluate_bag(tmp_path / "bag", checkpoint, "offline", None, one_at_a_time)
            ratios_one.append(single["frames"]["predicted"] / (time.perf_counter() - start) / read_fps[-1])
        return {
            "frames": frames,
            "evaluated": report["frames"]["evaluated"],
            "read_fps": statistics.median(read_fps),
            "replay_fps": statistics.median(replay_fps),
            "replay_read_ratio": statistics.median(ratios),
            "replay_read_ratio_min": min(ratios),
            "replay_read_ratio_max": max(ratios),
            "replay_read_ratio_batch_1": statistics.median(ratios_one),  # one forward pass per frame
            "batch_size": options.batch_size,
            "inference_ms_p50": report["stats"]["inference_ms_p50"],
            "inference_ms_p99": report["stats"]["inference_ms_p99"],
            "repeats": repeats,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true", help="a shorter bag, fewer repeats")
    args = parser.parse_args(argv)
    figures = run(quick=args.quick)
    print(f"frames {figures['frames']}: read+decode {figures['read_fps']:.0f} frames/s, offline replay "
          f"{figures['replay_fps']:.1f} frames/s, ratio {figures['replay_read_ratio']:.3f} "
          f"(spread {figures['replay_read_ratio_min']:.3f}..{figures['replay_read_ratio_max']:.3f}; one at a time "
          f"{figures['replay_read_ratio_batch_1']:.3f}); inference "
          f"p50 {figures['inference_ms_p50']:.1f} ms p99 {figures['inference_ms_p99']:.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
