"""Training frames from real bags: demonstrations and interventions, labelled with the human's commands.

Inputs are what the policy node would have seen: each recorded camera image through the same
preprocessing (core.preprocess.ImagePipeline, with the bag's camera_info), paired with the
measured joint state nearest its stamp. Labels follow the time convention of the graph
(docs/design.md §3): for an observation stamped t, point k of the label chunk is the human's command
meant for time t + k*dt, where a robot command sent at tau is meant for tau + actuation_latency
(the latency the actuator compensates), linearly interpolated between commands.

Only commands sent while a person had control (supervisor mode TELEOP or SHARED) are labels. A
frame is kept when every point of its chunk is covered by such commands and lies inside its
episode; in an intervention the inputs are therefore the states the policy drove the robot into
and the labels what the person did from there.

Episodes: from sim/episode outcomes when the bag has them (a sim or a test rig that reports
episodes), else each continuous stretch of human control is one episode.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..bags import BagReader
from ..conversions import MessageError, camera_info_to_model, image_to_array, stamp_to_ns
from ..core.errors import ConfigError
from ..core.perception.camera_model import CameraModel
from ..core.perception.preprocess import ImageError, ImagePipeline
from ..core.timebase import NS_PER_S
from ..paths import config_path
from ..topics import (
    CAMERA_IMAGE,
    CAMERA_INFO,
    JOINT_STATES,
    ROBOT_COMMAND,
    SIM_EPISODE,
    SUPERVISOR_STATE,
    EpisodeOutcome,
)
from .actions import sample_actions
from .bag_source import feed, find_topics, make_collector
from .options import HUMAN_MODES, ReplayOptions
from .recording import Recording, modes_at
from .topics import resolve_topic

EPISODE_TOPIC = SIM_EPISODE.name
POLICY_MODES = ("AUTONOMOUS", "SHARED")
# A takeover this soon after an episode starts is a demonstration: the policy had no real turn [s].
TAKEOVER_GRACE_S = 1.0
SOURCE = "finetune labels"


def default_actuation_latency_s() -> float:
    """The latency the graph's actuator compensates (config/params.yaml), else 0.02 s. Labels must
    use the actuator's value: executing the learned chunk then reproduces the human's commands."""
    try:
        data = yaml.safe_load(config_path("params.yaml").read_text()) or {}
        parameters = data["/**/actuator_node"]["ros__parameters"]
        # actuation_latency: the name before actuation_latency_s, still accepted for one release.
        return float(parameters.get("actuation_latency_s", parameters.get("actuation_latency")))
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return 0.02


@dataclass(frozen=True)
class LabelConfig:
    """How frames are labelled.

    actuation_latency_s [s]: a command sent at tau is meant for tau + this (the actuator's value).
    action_tolerance_s [s]: largest gap between two commands interpolated across (a loaded robot
      computer skips control ticks; a jog is smooth over 0.1 s).
    pairing_tolerance_s [s]: largest |image stamp - joint state stamp| paired (as policy_node).
    episode_start_margin_s [s]: frames this soon after a sim/episode start are skipped (a sim
      teleports the robot home at a reset, while the person's last command still points at the
      previous target).
    correct_recorder_delay: take the recorder's logging delay (median log time - stamp of the
      joint states) off the commands' log times, their only time (a loaded recorder hears them late).
    human_modes: supervisor modes whose commands are human actions.
    image_topic, camera_info_topic, joint_states_topic, action_topic, supervisor_state_topic:
      graph topic names (a namespace prefix in the bag is matched).
    """

    actuation_latency_s: float = field(default_factory=default_actuation_latency_s)
    action_tolerance_s: float = 0.1
    pairing_tolerance_s: float = 0.05
    episode_start_margin_s: float = 0.15
    correct_recorder_delay: bool = True
    human_modes: tuple[str, ...] = HUMAN_MODES
    image_topic: str = CAMERA_IMAGE.name
    camera_info_topic: str = CAMERA_INFO.name
    joint_states_topic: str = JOINT_STATES.name
    action_topic: str = ROBOT_COMMAND.name
    supervisor_state_topic: str = SUPERVISOR_STATE.name

    def __post_init__(self) -> None:
        for name in ("actuation_latency_s", "action_tolerance_s", "pairing_tolerance_s", "episode_start_margin_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(SOURCE, name, value, "must be a finite number >= 0 [s]")
        if not self.human_modes:
            raise ConfigError(SOURCE, "human_modes", self.human_modes, "needs at least one mode (TELEOP, SHARED)")

    def replay_options(self) -> ReplayOptions:
        """The same topics and tolerances as the replay evaluator's options (it reads bags the same way)."""
        return ReplayOptions(image_topic=self.image_topic, camera_info_topic=self.camera_info_topic,
                             joint_states_topic=self.joint_states_topic, action_topic=self.action_topic,
                             supervisor_state_topic=self.supervisor_state_topic, human_modes=self.human_modes,
                             actuation_latency_s=self.actuation_latency_s,
                             pairing_tolerance_s=self.pairing_tolerance_s,
                             action_tolerance_s=self.action_tolerance_s, progress=False, plots=False)


@dataclass
class EpisodeFrames:
    """The labelled frames of one episode.

    episode_id: "<bag name>#<index>". kind: demonstration (a person drove from the start),
    intervention (the policy drove, then a person took over) or autonomous (no human command).
    stamps_ns (N,); images (N, H, W, 3) uint8 policy images; joints (N, n) [rad]; labels (N, K, n)
    [rad] absolute targets. outcome: the sim/episode values when known. start_ns/end_ns: its span.
    """

    bag: str
    episode_id: str
    kind: str
    start_ns: int
    end_ns: int
    stamps_ns: np.ndarray
    images: np.ndarray
    joints: np.ndarray
    labels: np.ndarray
    outcome: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.stamps_ns)

    def summary(self) -> dict[str, Any]:
        return {"bag": self.bag, "episode": self.episode_id, "kind": self.kind, "frames": len(self),
                "duration_s": round((self.end_ns - self.start_ns) / NS_PER_S, 3), "outcome": self.outcome}


@dataclass
class RealDataset:
    """Labelled episodes of several bags, plus why frames were left out."""

    episodes: list[EpisodeFrames] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    bags: list[str] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return sum(len(e) for e in self.episodes)

    def usable(self) -> list[EpisodeFrames]:
        """Episodes with at least one labelled frame."""
        return [e for e in self.episodes if len(e)]

    def arrays(self, episodes: list[EpisodeFrames]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(images, joints, labels) of the given episodes, concatenated."""
        chosen = [e for e in episodes if len(e)]
        if not chosen:
            raise ValueError("no labelled frames in the chosen episodes")
        return (np.concatenate([e.images for e in chosen]), np.concatenate([e.joints for e in chosen]),
                np.concatenate([e.labels for e in chosen]))

    def summary(self) -> dict[str, Any]:
        kinds = Counter(e.kind for e in self.episodes if len(e))
        return {"bags": list(self.bags), "episodes": len(self.usable()), "frames": self.frames,
                "by_kind": dict(kinds), "skipped_frames": dict(self.skipped),
                "episode_list": [e.summary() for e in self.episodes]}


# ----------------------------------------------------------------------------------------------
# Pure labelling maths
def chunk_times(stamps_ns: np.ndarray, times_s: np.ndarray, end_ns: int | None = None) -> np.ndarray:
    """(N, K) times [ns] chunk points are meant for: stamps_ns[i] + times_s[k], held at `end_ns`
    (an episode's end: after it, the person's last command of the episode stands)."""
    offsets = np.round(np.asarray(times_s, dtype=float) * NS_PER_S).astype(np.int64)
    query = np.asarray(stamps_ns, dtype=np.int64)[:, None] + offsets[None, :]
    return query if end_ns is None else np.minimum(query, int(end_ns))


def chunk_labels(query_ns: np.ndarray, meant_ns: np.ndarray, values: np.ndarray, max_gap_ns: int) -> np.ndarray:
    """Label chunks (N, K, n) [rad]: the commands meant for the (N, K) times query_ns, linearly
    interpolated between commands at most max_gap_ns apart (NaN where not covered).

    meant_ns (M,) sorted: when each command takes effect (send time + actuation latency);
    values (M, n) [rad].
    """
    return sample_actions(np.asarray(meant_ns, dtype=np.int64), np.asarray(values, dtype=float),
                          np.asarray(query_ns, dtype=np.int64), max_gap_ns)


def inside_runs(query_ns: np.ndarray, meant_ns: np.ndarray, human: np.ndarray) -> np.ndarray:
    """Whether each query time lies within a run of consecutive human commands (between the first
    and the last command of the run, by meant time): a label never reaches past the person's
    first or last command into what the policy did."""
    meant = np.asarray(meant_ns, dtype=np.int64)
    flags = np.asarray(human, dtype=bool)
    query = np.asarray(query_ns, dtype=np.int64)
    out = np.zeros(query.shape, dtype=bool)
    if not flags.any():
        return out
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    for first, stop in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        out |= (query >= meant[first]) & (query <= meant[stop - 1])
    return out


def human_spans(recording: Recording, human_modes: tuple[str, ...], end_ns: int) -> list[tuple[int, int, str]]:
    """(start, end, mode before) of each continuous stretch of human control [ns]."""
    spans: list[tuple[int, int, str]] = []
    start: int | None = None
    before = "UNKNOWN"
    previous = "UNKNOWN"
    for t, mode in zip(recording.mode_times_ns.tolist(), recording.modes, strict=True):
        human = mode in human_modes
        if human and start is None:
            start, before = int(t), previous
        elif not human and start is not None:
            spans.append((start, int(t), before))
            start = None
        previous = mode
    if start is not None:
        spans.append((start, int(end_ns), before))
    return spans


def episode_kind(mode_times_ns: np.ndarray, modes: tuple[str, ...], human_modes: tuple[str, ...], start_ns: int,
                 end_ns: int) -> str:
    """demonstration | intervention | autonomous, from the supervisor modes in force during
    [start, end]: a person only, the policy and then a person, or nobody. Modes of the first
    TAKEOVER_GRACE_S count from the end of that grace (a person taking over at once demonstrates)."""
    times = np.asarray(mode_times_ns, dtype=np.int64)
    start_ns = min(int(start_ns) + int(TAKEOVER_GRACE_S * NS_PER_S), int(end_ns))
    at_start = modes_at(times, modes, np.array([start_ns]))[0]
    in_force = [at_start] + [m for t, m in zip(times.tolist(), modes, strict=True) if start_ns < t <= end_ns]
    human = [m in human_modes for m in in_force]
    if not any(human):
        return "autonomous"
    policy_then_human = any(m in POLICY_MODES and any(human[i + 1:]) for i, m in enumerate(in_force))
    return "intervention" if policy_then_human else "demonstration"


# ----------------------------------------------------------------------------------------------
# Bags
@dataclass
class _Frame:
    stamp_ns: int
    image: np.ndarray


def read_bag_episodes(bag: str | Path, pipeline: ImagePipeline, joint_names: tuple[str, ...], chunk_length: int,
                      dt_s: float, config: LabelConfig) -> tuple[list[EpisodeFrames], Counter]:
    """The labelled episodes of one bag and the count of frames left out, by reason."""
    bag = Path(bag)
    options = config.replay_options()
    skipped: Counter[str] = Counter()
    frames: list[_Frame] = []
    outcomes: list[tuple[int, EpisodeOutcome]] = []
    camera: CameraModel | None = None
    camera_key: tuple | None = None
    with BagReader(bag) as reader:
        topics = find_topics(reader, options)
        collector = make_collector(topics, joint_names, options)
        episode_topic, _ = resolve_topic(EPISODE_TOPIC, reader.topic_types())
        wanted = sorted({t for t in (topics.image, topics.camera_info, topics.joint_states, topics.action,
                                     *topics.mode_topics, episode_topic) if t})
        for message in reader.messages(wanted):
            topic, msg = message.topic, message.msg
            if topic == topics.image:
                if camera is None:
                    skipped["no_camera_info"] += 1
                    continue
                try:
                    array = image_to_array(msg)
                    image = pipeline.process(array, str(msg.encoding), camera)
                except (MessageError, ImageError):
                    skipped["bad_image"] += 1
                    continue
                frames.append(_Frame(stamp_to_ns(msg.header.stamp), image))
            elif topic == topics.camera_info:
                key = (int(msg.width), int(msg.height), tuple(np.asarray(msg.k).tolist()),
                       tuple(np.asarray(msg.d).tolist()))
                if key != camera_key:
                    try:
                        camera, camera_key = camera_info_to_model(msg), key
                    except MessageError:
                        skipped["bad_camera_info"] += 1
            elif topic == episode_topic:
                outcomes.append((stamp_to_ns(msg.header.stamp), EpisodeOutcome.from_msg(msg)))
            else:
                feed(collector, topics, topic, msg, message.log_time_ns)
        skipped["decode_error"] += int(reader.decode_errors.get(topics.image, 0))
    recording = collector.finish()
    if not frames:
        return [], skipped
    stamps = np.array([f.stamp_ns for f in frames], dtype=np.int64)
    end_ns = int(stamps.max())
    times = np.arange(chunk_length, dtype=float) * dt_s
    horizon_ns = int(round(times[-1] * NS_PER_S))
    latency_ns = int(round(config.actuation_latency_s * NS_PER_S))
    human = recording.action_human
    # Commands carry no stamp: their log time is when the recorder heard them. Take off the delay
    # the recorder logs stamped messages with (joint states; a clock offset is already removed).
    delay_ns = recording.clock.offset_ns if config.correct_recorder_delay and not recording.clock.applied else 0
    meant = recording.action_send_ns - delay_ns + latency_ns
    max_gap_ns = int(round(config.action_tolerance_s * NS_PER_S))

    def label(chosen: np.ndarray, end_ns: int | None) -> np.ndarray:
        query = chunk_times(stamps[chosen], times, end_ns)
        labels = chunk_labels(query, meant[human], recording.action_values[human], max_gap_ns)
        labels[~inside_runs(query, meant, human)] = np.nan
        return labels

    joints = recording.joint_positions_at(stamps, int(round(config.pairing_tolerance_s * NS_PER_S)))

    # Episode spans: (start, end, kind, outcome, start margin)
    spans: list[tuple[int, int, str, dict[str, Any] | None, int]] = []
    if outcomes:
        margin = int(round(config.episode_start_margin_s * NS_PER_S))
        for stamp, reported in outcomes:
            duration = reported.duration_s
            start = stamp - int(round(duration * NS_PER_S)) if math.isfinite(duration) else int(stamps.min())
            kind = episode_kind(recording.mode_times_ns, recording.modes, config.human_modes, start, stamp)
            outcome = {"success": reported.success, "reason": reported.reason, "duration_s": duration,
                       "final_distance_m": reported.final_distance_m,
                       "episode": str(reported.episode) if reported.episode >= 0 else ""}
            spans.append((start, stamp, kind, outcome, margin))
    else:
        for start, stop, before in human_spans(recording, config.human_modes, end_ns):
            kind = "intervention" if before in POLICY_MODES else "demonstration"
            spans.append((start, stop, kind, None, 0))

    paired = np.all(np.isfinite(joints), axis=1)
    assigned = np.zeros(len(stamps), dtype=bool)
    episodes = []
    for index, (start, stop, kind, outcome, margin) in enumerate(spans):
        inside = (stamps >= start) & (stamps <= stop)
        assigned |= inside
        # An episode reported by sim/episode ends the task: after it, the person's last command
        # stands (holding at the goal); a stretch of human control alone does not say what follows.
        usable = inside & (stamps >= start + margin)
        if outcome is None:
            usable &= stamps + horizon_ns <= stop
        skipped["episode_edge"] += int((inside & ~usable).sum())
        covered = np.zeros(len(stamps), dtype=bool)
        candidates = np.flatnonzero(usable)
        labels = np.full((len(stamps), len(times), len(joint_names)), np.nan)
        if len(candidates):
            labels[candidates] = label(candidates, stop if outcome is not None else None)
            covered[candidates] = np.all(np.isfinite(labels[candidates]), axis=(1, 2))
        keep = usable & covered & paired
        skipped["not_human_controlled"] += int((usable & ~covered).sum())
        skipped["no_joint_state_within_tolerance"] += int((usable & covered & ~paired).sum())
        chosen = np.flatnonzero(keep)
        episodes.append(EpisodeFrames(
            bag=str(bag), episode_id=f"{bag.name}#{index}", kind=kind, start_ns=int(start), end_ns=int(stop),
            stamps_ns=stamps[chosen], images=np.stack([frames[i].image for i in chosen]) if len(chosen) else
            np.zeros((0, *frames[0].image.shape), dtype=np.uint8),
            joints=joints[chosen], labels=labels[chosen], outcome=outcome))
    skipped["outside_episodes"] += int((~assigned).sum())
    return episodes, skipped


def build_dataset(bags: list[str | Path], pipeline: ImagePipeline, joint_names: tuple[str, ...], chunk_length: int,
                  dt_s: float, config: LabelConfig | None = None) -> RealDataset:
    """Labelled episodes of every bag (a bag folder or a folder of bag folders)."""
    config = config or LabelConfig()
    dataset = RealDataset()
    for bag in expand_bags(bags):
        episodes, skipped = read_bag_episodes(bag, pipeline, joint_names, chunk_length, dt_s, config)
        dataset.episodes += episodes
        dataset.skipped.update(skipped)
        dataset.bags.append(str(bag))
    return dataset


def expand_bags(paths: list[str | Path]) -> list[Path]:
    """Bags named by `paths`: a bag folder (metadata.yaml or storage files), a .mcap/.db3 file, or a
    folder whose subfolders are bags (e.g. the output of teleop recording), sorted by name."""
    out: list[Path] = []
    for item in paths:
        path = Path(item)
        if not path.exists():
            raise ConfigError("bags", "path", str(path), "does not exist")
        if path.is_file() or _is_bag_folder(path):
            out.append(path)
            continue
        inner = sorted(p for p in path.iterdir() if p.is_dir() and _is_bag_folder(p))
        if not inner:
            raise ConfigError("bags", "path", str(path), "is neither a bag nor a folder of bags")
        out += inner
    return out


def _is_bag_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "metadata.yaml").is_file()
                              or any(p.suffix in (".mcap", ".db3") for p in path.iterdir()))
