"""Graph replay: the bag played into the replay graph's nodes, their chunks compared with the recording.

This is what `ros2 bag play` does on a robot: camera_preprocessor, policy_node and actuator_node
(declare_graph("replay"), use_sim_time) run as processes through the same launcher as
`sim2real launch`; the player publishes the recorded camera, camera_info and joint_states (never
what the graph itself produces: policy/*, command/*) and `clock` from the bag time. The graph's
policy/action_chunk and command/policy are collected here and compared like offline predictions,
which proves the nodes, not only the core, agree with the recording.
"""
from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from ..bags import BagReader
from ..conversions import MessageError, joint_state_to_sample, reorder, trajectory_to_chunk
from ..conversions import merged_diagnostic_values as _diagnostic_values
from ..core.errors import Sim2RealError
from ..core.policy.checkpoint import LoadedPolicy
from ..core.progress import progress
from ..episodes.actions import sample_actions
from ..episodes.bag_source import BagTopics, feed, find_topics, make_collector
from ..episodes.options import ReplayOptions
from ..episodes.recording import Recording
from ..evaluation.metrics import NS_PER_S, Predictions, _error_stats
from ..evaluation.replay_offline import ReplayRun
from ..graph import GraphArgs, declare_graph
from ..nodes.common import JOINT_STATE_QOS, SENSOR_QOS
from ..topics import ACTION_CHUNK, POLICY_COMMAND, node_diagnostics
from .launcher import GraphLauncher
from .player import BagPlayer, PlayedTopic

# Collect every chunk and command: the graph's publishers keep only the newest, we must not drop.
COLLECT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10_000, reliability=ReliabilityPolicy.RELIABLE)
DIAGNOSTICS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.VOLATILE)
QUIET_S = 2.0  # [s] wall time without a new chunk after the end of the bag: the graph is done
QUIET_MAX_S = 30.0  # [s] wall time at most spent waiting for it


class GraphReplayError(Sim2RealError):
    """The replay graph did not come up or died; the message says which node and its output."""


def read_recording(bag: Path, topics: BagTopics, joint_names: tuple[str, ...], options: ReplayOptions) -> Recording:
    """Everything but the images, in one pass: joint states, actions, supervisor states."""
    collector = make_collector(topics, joint_names, options)
    wanted = sorted({t for t in (topics.joint_states, topics.action, *topics.mode_topics) if t})
    with BagReader(bag) as reader:
        for message in reader.messages(wanted):
            feed(collector, topics, message.topic, message.msg, message.log_time_ns)
    return collector.finish()


class _Collector:
    """The graph's outputs, gathered by subscriptions spun in a background thread."""

    def __init__(self, node: Node) -> None:
        self.lock = threading.Lock()
        self.chunks: list[JointTrajectory] = []
        self.commands: list[JointState] = []
        self.diagnostics: dict[str, DiagnosticArray] = {}
        self.last_chunk_wall = time.monotonic()
        self.chunk_sub = node.create_subscription(JointTrajectory, ACTION_CHUNK.name, self._on_chunk, COLLECT_QOS)
        self.command_sub = node.create_subscription(JointState, POLICY_COMMAND.name, self._on_command, COLLECT_QOS)
        for name in ("policy_node", "camera_preprocessor", "actuator_node"):
            # policy_node publishes its diagnostics latched, the others volatile: volatile matches both.
            node.create_subscription(DiagnosticArray, node_diagnostics(name),
                                     lambda msg, n=name: self._on_diagnostics(n, msg), DIAGNOSTICS_QOS)

    def _on_chunk(self, msg: JointTrajectory) -> None:
        with self.lock:
            self.chunks.append(msg)
            self.last_chunk_wall = time.monotonic()

    def _on_command(self, msg: JointState) -> None:
        with self.lock:
            self.commands.append(msg)

    def _on_diagnostics(self, name: str, msg: DiagnosticArray) -> None:
        with self.lock:
            self.diagnostics[name] = msg


def _wait(predicate, timeout_s: float, launcher: GraphLauncher, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [(name, code) for name, code in launcher.check()]
        if dead:
            raise GraphReplayError(f"replay graph node(s) exited {dead} while waiting for {what}; "
                                   f"output:\n{_tail(log)}")
        if predicate():
            return
        time.sleep(0.1)
    raise GraphReplayError(f"replay graph not ready after {timeout_s:.0f} s: {what}; output:\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text().splitlines()[-lines:])
    except OSError:
        return "(no output)"


def replay_graph(bag: Path, checkpoint: Path, policy: LoadedPolicy, options: ReplayOptions,
                 log_dir: Path | None = None) -> tuple[ReplayRun, dict[str, Any]]:
    """Play the bag into a freshly launched replay graph; returns (run, graph facts for the report)."""
    spec = policy.spec
    joint_names = tuple(spec.joint_names)
    started = time.perf_counter()
    with BagReader(bag) as reader:
        topics = find_topics(reader, options)
        types = reader.topic_types()
        counts = {t.name: t.count for t in reader.topics()}
        bag_start, bag_end = reader.start_ns, reader.end_ns
    recording = read_recording(bag, topics, joint_names, options)
    played = [
        PlayedTopic(topics.camera_info, options.camera_info_topic.strip("/"), types[topics.camera_info], SENSOR_QOS),
        PlayedTopic(topics.image, options.image_topic.strip("/"), types[topics.image], SENSOR_QOS),
        PlayedTopic(topics.joint_states, options.joint_states_topic.strip("/"), types[topics.joint_states],
                    JOINT_STATE_QOS),
    ]
    graph_args = GraphArgs(checkpoint=str(checkpoint), camera_image_topic=options.image_topic.strip("/"),
                           camera_info_topic=options.camera_info_topic.strip("/"),
                           joint_states_topic=options.joint_states_topic.strip("/"),
                           extra_parameters={"policy_node": {"pairing_tolerance_s": options.pairing_tolerance_s},
                                             "actuator_node": {"actuation_latency_s": options.actuation_latency_s}})
    if options.preprocess_config:
        extra = dict(graph_args.extra_parameters)
        for name in ("camera_preprocessor", "policy_node"):
            extra[name] = {**extra.get(name, {}), "preprocess_config": options.preprocess_config}
        graph_args = GraphArgs(**{**graph_args.__dict__, "extra_parameters": extra})
    decls = declare_graph("replay", graph_args)

    tmp = None
    if log_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="sim2real_replay_")
        log_dir = Path(tmp.name)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "graph.log"
    context = Context()
    rclpy.init(context=context)
    node = Node("bag_player", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=lambda: _spin(executor), daemon=True)
    spinner.start()
    launcher = GraphLauncher(decls, echo=False, log_file=log)
    stop = threading.Event()
    try:
        player = BagPlayer(node, played, recording.clock, options.rate,
                           int(round(options.clock_period_s * NS_PER_S)))
        collector = _Collector(node)
        launcher.start()
        graph_t0 = time.perf_counter()

        def ready() -> bool:
            subs = player.subscription_counts()
            return (subs[played[0].graph_topic] >= 1 and subs[played[1].graph_topic] >= 1
                    and subs[played[2].graph_topic] >= 2 and collector.chunk_sub.get_publisher_count() >= 1
                    and collector.command_sub.get_publisher_count() >= 1)

        _wait(ready, options.graph_startup_timeout_s, launcher,
              "camera_preprocessor, policy_node and actuator_node subscribed to the played topics", log)
        startup_s = time.perf_counter() - graph_t0
        others = player.other_publishers()
        if others:
            raise GraphReplayError(f"other publishers on {others}: a live graph (sim or robot) runs on this ROS "
                                   f"domain, and replaying into it would mix recorded and live data")
        total = sum(counts.get(t.bag_topic, 0) for t in played)
        with BagReader(bag) as reader:
            messages = reader.raw_messages([t.bag_topic for t in played])
            if options.progress:
                messages = progress(messages, total, f"replay graph (rate {options.rate:g})")
            play_t0 = time.perf_counter()
            player.play(messages, stop, end_extra_ns=int(options.drain_s * NS_PER_S))
            play_s = time.perf_counter() - play_t0
        # The graph may still be working on the last observations: wait until it goes quiet.
        quiet_deadline = time.monotonic() + QUIET_MAX_S
        while time.monotonic() < quiet_deadline:
            with collector.lock:
                idle = time.monotonic() - collector.last_chunk_wall
            if idle >= QUIET_S:
                break
            time.sleep(0.1)
        with collector.lock:
            diagnostics_before = dict(collector.diagnostics)
        # One more diagnostics period so the counters include the end of the bag.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            with collector.lock:
                if collector.diagnostics.get("policy_node") is not diagnostics_before.get("policy_node"):
                    break
            time.sleep(0.05)
        with collector.lock:
            chunks, commands = list(collector.chunks), list(collector.commands)
            diagnostics = dict(collector.diagnostics)
        exited_during_replay = dict(launcher.check())
    finally:
        stop.set()
        codes = launcher.shutdown()
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        spinner.join(timeout=2.0)
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.cleanup()
    predictions, bad_chunks = _predictions(chunks, joint_names, spec.chunk_length, spec.dt_s, recording, options)
    images_played = player.published[topics.image]
    policy_diag = _diagnostic_values(diagnostics.get("policy_node"))
    pre_diag = _diagnostic_values(diagnostics.get("camera_preprocessor"))
    skipped: Counter[str] = Counter()
    for key, value in policy_diag.items():
        if key.startswith("drops_") and int(value):
            skipped[f"policy_node_{key.removeprefix('drops_')}"] += int(value)
    for key, value in pre_diag.items():
        if key.startswith("dropped_") and int(value):
            skipped[f"camera_preprocessor_{key.removeprefix('dropped_')}"] += int(value)
    if bad_chunks:
        skipped["malformed_chunk"] += bad_chunks
    # Images lost in transit: best-effort camera topics, and depth-1 queues that keep only the newest.
    if pre_diag.get("received"):
        lost = images_played - int(pre_diag["received"])
        if lost > 0:
            skipped["not_received_by_camera_preprocessor"] += lost
        if policy_diag.get("images_received"):
            overwritten = int(pre_diag.get("published", 0)) - int(policy_diag["images_received"])
            if overwritten > 0:
                skipped["not_received_by_policy_node"] += overwritten
    unexplained = images_played - len(predictions.stamps_ns) - sum(skipped.values())
    if unexplained > 0:
        skipped["no_chunk_from_graph"] += unexplained
    elapsed = time.perf_counter() - started
    stats = {
        "elapsed_s": elapsed,
        "graph_startup_s": startup_s,
        "play_s": play_s,
        "frames_per_s": len(predictions.stamps_ns) / play_s if play_s > 0 else float("nan"),
        "player_max_lag_s": player.lag_s,
        "images_in_bag": counts.get(topics.image, 0),
    }
    graph_info = {
        "nodes": [d.name for d in decls],
        "exited_during_replay": exited_during_replay,
        "exit_codes": codes,  # after SIGINT (then SIGTERM, SIGKILL) at the end
        "rate": options.rate,
        "published": {t.graph_topic: player.published[t.bag_topic] for t in played},
        "clock_messages": player.clock_messages,
        "chunks_received": len(chunks),
        "commands_received": len(commands),
        "command_policy_vs_recorded": _commands_vs_recording(commands, joint_names, recording, options),
        "policy_node_diagnostics": policy_diag,
        "camera_preprocessor_diagnostics": pre_diag,
        "log": str(log) if tmp is None else None,
    }
    run = ReplayRun(predictions, recording, topics, images_played, skipped, stats, bag_start, bag_end)
    return run, graph_info


def _spin(executor: SingleThreadedExecutor) -> None:
    # The context is shut down under the executor at the end; that ends spin() with an error.
    with contextlib.suppress(Exception):
        executor.spin()


def _predictions(chunks: list[JointTrajectory], joint_names: tuple[str, ...], chunk_length: int, dt_s: float,
                 recording: Recording, options: ReplayOptions) -> tuple[Predictions, int]:
    """The graph's chunks as Predictions (policy joint order), and how many were malformed."""
    times_s = np.arange(chunk_length, dtype=float) * dt_s
    stamps, targets, bad = [], [], 0
    for msg in chunks:
        try:
            chunk = trajectory_to_chunk(msg)
            order = [chunk.joint_names.index(name) for name in joint_names]
        except (MessageError, ValueError):
            bad += 1
            continue
        if chunk.positions.shape[0] != chunk_length or not np.allclose(chunk.times_s, times_s, atol=1e-6):
            bad += 1
            continue
        stamps.append(chunk.stamp_ns)
        targets.append(chunk.positions[:, order])
    if not stamps:
        return Predictions.empty(joint_names, times_s), bad
    stamp_array = np.asarray(stamps, dtype=np.int64)
    order = np.argsort(stamp_array, kind="stable")
    stamp_array = stamp_array[order]
    observed = recording.joint_positions_at(stamp_array, int(round(options.pairing_tolerance_s * NS_PER_S)))
    return Predictions(joint_names, stamp_array, times_s, np.asarray(targets)[order], observed), bad


def _commands_vs_recording(commands: list[JointState], joint_names: tuple[str, ...], recording: Recording,
                           options: ReplayOptions) -> dict[str, Any]:
    """The graph's command/policy (stamped t, target for t + latency) against the recorded human
    actions meant for the same time: what the actuator would have sent vs what was sent."""
    stamps, values = [], []
    for msg in commands:
        try:
            sample = joint_state_to_sample(msg)
            values.append(np.array(reorder(sample, joint_names), dtype=float))
            stamps.append(sample.stamp_ns)
        except MessageError:
            continue
    if not stamps:
        return {"points": 0}
    latency_ns = int(round(options.actuation_latency_s * NS_PER_S))
    human = recording.action_human
    recorded = sample_actions(recording.action_send_ns[human] + latency_ns, recording.action_values[human],
                              np.asarray(stamps, dtype=np.int64) + latency_ns,
                              int(round(options.action_tolerance_s * NS_PER_S)))
    errors = np.asarray(values) - recorded
    errors = errors[np.all(np.isfinite(errors), axis=1)]
    return {"overall": _error_stats(errors),
            "per_joint_mae": {name: float(np.abs(errors[:, j]).mean()) if len(errors) else None
                              for j, name in enumerate(joint_names)}}



def evaluate_bag_in_graph(bag: Path, checkpoint: Path, report_dir: Path | None = None,
                          options: ReplayOptions | None = None) -> dict[str, Any]:
    """`evaluation.evaluate_bag` in graph mode: the bag played into the replay graph's nodes."""
    from ..evaluation.replay import evaluate_bag

    return evaluate_bag(bag, checkpoint, "graph", report_dir, options, graph_replay=replay_graph)
