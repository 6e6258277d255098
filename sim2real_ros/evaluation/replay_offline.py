"""Offline replay: the recorded observations through the policy code the nodes run, without ROS.

Messages are taken in the order the recorder received them (log time), which is the order the
nodes saw them: each image goes through core.preprocess.ImagePipeline (as camera_preprocessor),
is paired with a joint state by core.observation_pairing.ObservationPairer (as policy_node: the
nearest stamp among the joint states received so far, waiting for one still to come when all are
older), and core.checkpoint.LoadedPolicy predicts its chunk. Unlike the node nothing is superseded
or stale: every frame is evaluated, however slow the machine. As every observation is known in
advance, they are evaluated `options.batch_size` at a time (select_actions, one forward pass), with
the predictions of one at a time up to the network's float32 rounding. Batches run on one worker
thread while the next messages are read, decoded and preprocessed (torch's kernels release the GIL,
so reading and inference overlap on two cores); one worker keeps the predictions in reading order.
"""
from __future__ import annotations

import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..bags import BagReader
from ..conversions import MessageError, camera_info_to_model, image_to_array, stamp_to_ns
from ..core.control.observation_pairing import DropReason, ObservationPairer, PairingConfig
from ..core.perception.camera_model import CameraModel
from ..core.perception.preprocess import ImageError, ImagePipeline
from ..core.perception.preprocess_config import PreprocessConfig
from ..core.policy.checkpoint import LoadedPolicy
from ..core.policy.spec import check_against_data
from ..core.progress import progress
from ..episodes.bag_source import BagTopics, feed, find_topics, make_collector, recorded_joint_names
from ..episodes.options import ReplayOptions
from ..episodes.recording import Recording
from .metrics import NS_PER_S, Predictions

# Offline there is no "now": images are never too old (the node's max age is about its clock).
_NO_MAX_AGE_NS = 10 ** 18
# Batches handed to the inference thread and not yet done: bounds the images held in memory when
# inference is slower than reading (the reader then waits for the oldest batch).
_BATCHES_IN_FLIGHT = 4


@dataclass
class ReplayRun:
    """What a replay produced: predictions, the recording to compare with, and accounting.

    skipped: frames (images) without a prediction, by reason. stats: timing and counts.
    """

    predictions: Predictions
    recording: Recording
    topics: BagTopics
    images_total: int
    skipped: Counter = field(default_factory=Counter)
    stats: dict = field(default_factory=dict)
    bag_start_ns: int | None = None
    bag_end_ns: int | None = None


def check_policy_against_bag(policy: LoadedPolicy, reader: BagReader, topics: BagTopics,
                             preprocess: PreprocessConfig) -> None:
    """CheckpointError naming the checkpoint and the bag when the bag's joint states lack one of
    the policy's joints, or the preprocessing to run is not the one the policy was trained with."""
    names = recorded_joint_names(reader, topics)
    where = f"bag {reader.path} ({topics.joint_states})"
    check_against_data(policy.spec, policy.spec.joint_names if names is None else names, policy.source, where,
                       preprocess)


def preprocess_for(policy: LoadedPolicy, options: ReplayOptions) -> PreprocessConfig:
    """The preprocessing to run: the option's YAML (checked against the checkpoint, as policy_node
    does) or the one stored in the checkpoint."""
    if options.preprocess_config:
        config = PreprocessConfig.from_yaml(options.preprocess_config)
        policy.check_compatible(policy.spec.joint_names, config)
        return config
    return PreprocessConfig.from_dict(policy.spec.preprocess, source=f"{policy.source} preprocess")


class _CameraInfoCache:
    """camera_info -> CameraModel, parsed once per distinct calibration (drivers repeat it per frame)."""

    def __init__(self) -> None:
        self.model: CameraModel | None = None
        self._key: tuple | None = None
        self.bad = 0

    def add(self, msg) -> None:
        key = (int(msg.width), int(msg.height), str(msg.distortion_model), tuple(np.asarray(msg.k).tolist()),
               tuple(np.asarray(msg.d).tolist()))
        if key == self._key:
            return
        try:
            self.model = camera_info_to_model(msg)
            self._key = key
        except MessageError:
            self.bad += 1


def replay_offline(bag: str | Path, policy: LoadedPolicy, options: ReplayOptions) -> ReplayRun:
    """Predict a chunk for every recorded image; collect the recorded actions alongside."""
    spec = policy.spec
    joint_names = tuple(spec.joint_names)
    preprocess = preprocess_for(policy, options)
    pipeline = ImagePipeline(preprocess)
    pairer = ObservationPairer(PairingConfig(tolerance_ns=int(round(options.pairing_tolerance_s * NS_PER_S)),
                                             max_age_ns=_NO_MAX_AGE_NS, history=4096))
    times_s = np.arange(spec.chunk_length, dtype=float) * spec.dt_s
    horizon_ns = int((times_s[-1] + options.actuation_latency_s + options.action_tolerance_s + 1.0) * NS_PER_S)
    skipped: Counter[str] = Counter()
    inference_errors = [0]  # written by the inference thread only; skipped is the reader's
    stamps: list[int] = []
    targets: list[np.ndarray] = []
    observed: list[np.ndarray] = []
    pending: list[tuple[int, np.ndarray]] = []  # images waiting for their joint state
    infer_s: list[float] = []
    start = time.perf_counter()

    # paired observations not yet evaluated: (stamp, image, q, joint history or None)
    batch: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = []
    lags_s = tuple(spec.joint_history_s)  # a policy with history sees the bag's joint states before each image

    def evaluate_one(stamp_ns: int, image: np.ndarray, q: np.ndarray, history: np.ndarray | None) -> None:
        t0 = time.perf_counter()
        try:
            chunk = policy.select_action(image, q, history)
        except (ValueError, RuntimeError):
            inference_errors[0] += 1
            return
        infer_s.append(time.perf_counter() - t0)
        stamps.append(stamp_ns)
        targets.append(chunk)
        observed.append(np.array(q, dtype=float))

    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-inference")
    in_flight: deque[Future] = deque()

    def flush() -> None:
        """Hand the batch to the inference thread (waiting for the oldest one when too many are
        queued); a worker's exception is raised here."""
        if not batch:
            return
        items = list(batch)
        batch.clear()
        while len(in_flight) >= _BATCHES_IN_FLIGHT:
            in_flight.popleft().result()
        in_flight.append(worker.submit(evaluate_batch, items))

    def finish_inference() -> None:
        flush()
        while in_flight:
            in_flight.popleft().result()

    def evaluate_batch(items: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]) -> None:
        """Evaluate a batch in one forward pass; a batch that fails (one bad observation) is
        evaluated one at a time, so each failure is counted as the node would."""
        if len(items) == 1 or not hasattr(policy, "select_actions"):
            for item in items:
                evaluate_one(*item)
            return
        t0 = time.perf_counter()
        try:
            chunks = policy.select_actions(np.stack([image for _, image, _, _ in items]),
                                           np.stack([np.asarray(q, dtype=float) for _, _, q, _ in items]),
                                           np.stack([h for _, _, _, h in items]) if lags_s else None)
        except (ValueError, RuntimeError):
            for item in items:
                evaluate_one(*item)
            return
        per_frame_s = (time.perf_counter() - t0) / len(items)
        for (stamp_ns, _, q, _), chunk in zip(items, chunks, strict=True):
            infer_s.append(per_frame_s)
            stamps.append(stamp_ns)
            targets.append(chunk)
            observed.append(np.array(q, dtype=float))

    def predict(stamp_ns: int, image: np.ndarray, q: np.ndarray, history: np.ndarray | None) -> None:
        batch.append((stamp_ns, image, np.array(q, dtype=float), history))  # q may be the pairer's buffer
        if len(batch) >= options.batch_size:
            flush()

    def try_pair(stamp_ns: int, image: np.ndarray) -> bool:
        """Pair and predict; False when the image must wait for a joint state still to come."""
        pairing = pairer.pair(stamp_ns, stamp_ns)
        if pairing.wait:
            return False
        if pairing.positions is None:
            skipped["no_joint_state_within_tolerance"] += 1
        else:
            predict(stamp_ns, image, pairing.positions, pairer.history(stamp_ns, lags_s) if lags_s else None)
        return True

    with worker, BagReader(bag) as reader:
        topics = find_topics(reader, options)
        check_policy_against_bag(policy, reader, topics, preprocess)
        collector = make_collector(topics, joint_names, options)
        cameras = _CameraInfoCache()
        counts = {t.name: t.count for t in reader.topics()}
        images_in_bag = counts.get(topics.image, 0)
        wanted = [t for t in (topics.image, topics.camera_info, topics.joint_states, topics.action,
                              *topics.mode_topics) if t]
        total = sum(counts.get(t, 0) for t in set(wanted))
        messages = reader.messages(sorted(set(wanted)))
        if options.progress:
            messages = progress(messages, total, "replay offline")
        images_seen = 0
        stop_after_ns: int | None = None
        read_s = 0.0
        for message in messages:
            log_ns = message.log_time_ns
            if stop_after_ns is not None and log_ns > stop_after_ns:
                break
            topic, msg = message.topic, message.msg
            if topic == topics.image:
                if stop_after_ns is not None:
                    continue
                images_seen += 1
                if options.max_frames and images_seen >= options.max_frames:
                    stop_after_ns = log_ns + horizon_ns  # keep reading actions for this frame's horizon
                t0 = time.perf_counter()
                reason, image = _policy_image(msg, cameras.model, pipeline)
                read_s += time.perf_counter() - t0
                if reason:
                    skipped[reason] += 1
                    continue
                stamp = stamp_to_ns(msg.header.stamp)
                if not try_pair(stamp, image):
                    pending.append((stamp, image))
            elif topic == topics.camera_info:
                cameras.add(msg)
            else:
                positions = feed(collector, topics, topic, msg, log_ns)
                if positions is not None:
                    stamp = stamp_to_ns(msg.header.stamp) or log_ns
                    pairer.add_joint_state(stamp, positions)
                    if pending:
                        pending = [(s, img) for s, img in pending if not try_pair(s, img)]
        finish_inference()
        decode_errors = int(reader.decode_errors.get(topics.image, 0))
        bag_start, bag_end = reader.start_ns, reader.end_ns
    skipped["no_joint_state_within_tolerance"] += len(pending)
    if inference_errors[0]:
        skipped[DropReason.INFERENCE_ERROR.value] += inference_errors[0]
    if decode_errors:
        skipped["decode_error"] += decode_errors
    elapsed = time.perf_counter() - start
    order = np.argsort(np.asarray(stamps, dtype=np.int64), kind="stable")
    n = len(joint_names)
    predictions = Predictions(
        joint_names,
        np.asarray(stamps, dtype=np.int64)[order],
        times_s,
        np.asarray(targets, dtype=float).reshape(-1, len(times_s), n)[order],
        np.asarray(observed, dtype=float).reshape(-1, n)[order],
    )
    recording = collector.finish()
    infer = np.asarray(infer_s) * 1e3
    stats = {
        "elapsed_s": elapsed,
        "frames_per_s": len(stamps) / elapsed if elapsed > 0 else float("nan"),
        "inference_ms_p50": float(np.percentile(infer, 50)) if infer.size else float("nan"),
        "inference_ms_p99": float(np.percentile(infer, 99)) if infer.size else float("nan"),
        "batch_size": options.batch_size,
        "image_decode_preprocess_s": read_s,
        "images_in_bag": images_in_bag,
        "images_read": images_seen + decode_errors,
        "bad_camera_info": cameras.bad,
    }
    return ReplayRun(predictions, recording, topics, images_seen + decode_errors, skipped, stats, bag_start, bag_end)


def _policy_image(msg, camera: CameraModel | None, pipeline: ImagePipeline) -> tuple[str, np.ndarray | None]:
    """(skip reason or "", the policy's rgb8 image) of one recorded camera image."""
    if camera is None:
        return "no_camera_info", None
    try:
        array = image_to_array(msg)
    except MessageError:
        return "bad_image", None
    if (int(msg.width), int(msg.height)) != (camera.width, camera.height):
        return "image_size_mismatch", None
    try:
        return "", pipeline.process(array, str(msg.encoding), camera)
    except ImageError:
        return "bad_image", None
