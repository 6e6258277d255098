"""Record "real" teleoperation bags through the graph: a scripted person on the joystick.

The sim graph runs with a sim variant that stands in for a real robot (e.g.
config/sim_params_real_a.yaml) and records every topic, exactly as on a robot. A scripted operator
who knows where the target is (sim/target, privileged) acts only through the joystick topic and
the supervisor, like a person would:

- demonstration episodes: it takes over (TELEOP) and jogs the end effector to the target in
  Cartesian mode with the deadman held;
- intervention episodes: the policy drives first (AUTONOMOUS) for `policy_s`, then the operator
  takes over and finishes the episode; at the next episode it hands back (arm).

The session bag is then cut into one bag per episode (episode boundaries from sim/episode), so the
episodes can be held out one by one. `episodes.json` in the output folder lists them.

    sim2real_ros.runtime.teleop_recording --out DIR --episodes 10 --checkpoint CKPT
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..bags import BagReader
from ..bags.writer import BagWriter
from ..conversions import stamp_to_ns
from ..core.errors import ConfigError
from ..core.joystick import load_joystick_mapping
from ..core.timebase import NS_PER_S
from ..core.urdf import RobotModel
from ..episodes.dataset import TAKEOVER_GRACE_S
from ..graph import GraphArgs
from ..paths import config_path, default_policy_path, urdf_path
from ..sim.expert import ReachExpert
from ..sim.params import SimParams, load_sim_params
from .graph_session import EpisodeOutcome, SimGraphSession, diagnostic_values
from .scripted_joystick import ScriptedJoystick

MANIFEST = "episodes.json"
SESSION_BAG = "session_bag"
# Topics whose last message before an episode is carried into that episode's bag (latched state).
CARRIED_TOPICS = ("/supervisor/state", "/sim/target", "/camera/camera_info", "/policy/camera_info")
SOURCE = "teleop recording"
# Message types whose first field is a std_msgs/Header.
STAMPED_TYPES = frozenset({
    "sensor_msgs/msg/Image", "sensor_msgs/msg/CameraInfo", "sensor_msgs/msg/JointState", "sensor_msgs/msg/Joy",
    "diagnostic_msgs/msg/DiagnosticArray", "geometry_msgs/msg/PointStamped", "trajectory_msgs/msg/JointTrajectory",
})


# [s] sim time the policy drives beyond the takeover grace, so an intervention reads back as one.
MIN_POLICY_MARGIN_S = 0.25


@dataclass(frozen=True)
class TeleopPlan:
    """How the scripted operator behaves.

    intervention_every: every n-th episode (1-based) starts autonomous and is taken over after
      policy_s [s] (sim time); 0 = demonstrations only. joy_rate_hz: Joy messages per second while
      recording [Hz]. jog_speed_fraction: the operator's joystick jogs each joint at up to this
      fraction of its URDF velocity limit (see operator_joystick_config). camera_rate_hz /
      clock_rate_hz: sim node overrides (0 = the sim params' rates). episode_wall_timeout_s: give
      up on an episode after this long [s] (wall).
    startup_timeout_s: how long the graph may take to arm [s].
    """

    intervention_every: int = 2
    policy_s: float = 1.5
    joy_rate_hz: float = 20.0
    jog_speed_fraction: float = 0.6
    camera_rate_hz: float = 0.0
    clock_rate_hz: float = 0.0
    episode_wall_timeout_s: float = 90.0
    startup_timeout_s: float = 240.0

    def __post_init__(self) -> None:
        if self.intervention_every < 0:
            raise ConfigError(SOURCE, "intervention_every", self.intervention_every, "must be >= 0 (0 = none)")
        positive = ("joy_rate_hz", "episode_wall_timeout_s", "startup_timeout_s")
        for name in positive:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(SOURCE, name, value, "must be a finite number > 0")
        if not 0 < self.jog_speed_fraction <= 1:
            raise ConfigError(SOURCE, "jog_speed_fraction", self.jog_speed_fraction, "must be in (0, 1]")
        for name in ("policy_s", "camera_rate_hz", "clock_rate_hz"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(SOURCE, name, value, "must be a finite number >= 0")
        if self.intervention_every and self.policy_s <= TAKEOVER_GRACE_S + MIN_POLICY_MARGIN_S:
            # Reading the bag back, a takeover within the grace after an episode starts is a
            # demonstration: a shorter policy phase would be recorded as one whenever the hand-back
            # is quick, and as an intervention when it is slow.
            raise ConfigError(SOURCE, "policy_s", self.policy_s,
                              f"must exceed the takeover grace ({TAKEOVER_GRACE_S} s) by more than "
                              f"{MIN_POLICY_MARGIN_S} s, or interventions read back as demonstrations")

    def kind(self, episode_index: int) -> str:
        """'intervention' or 'demonstration' for the 0-based episode index."""
        every = self.intervention_every
        return "intervention" if every and (episode_index + 1) % every == 0 else "demonstration"


class ScriptedTeleoperator:
    """The person on the joystick. A background thread publishes the stick's current state at
    joy_rate_hz, as the ROS `joy` node does, so the supervisor's joy watchdog never starves while
    the operator waits; buttons are pressed on edges (held for two messages each way)."""

    def __init__(self, session: SimGraphSession, robot_description: str, params: SimParams, plan: TeleopPlan,
                 joystick_config: Path) -> None:
        ee_link = params.robot.ee_link
        self.session = session
        self.plan = plan
        self.model = RobotModel.from_description(robot_description)
        self.joint_names = self.model.joint_names
        self.ee_link = ee_link
        self.joystick = ScriptedJoystick(load_joystick_mapping(joystick_config))
        # The privileged teacher decides where to go; the operator only moves the sticks.
        home = params.home_pose(self.joint_names)
        limits = self.model.limits_arrays(self.joint_names)
        home_q = np.clip([home.get(n, 0.0) for n in self.joint_names], limits["lower"], limits["upper"])
        self.teacher = ReachExpert(self.model, self.joint_names, ee_link, np.asarray(home_q))
        groups = self.joystick.mapping.groups_for(len(self.joint_names))
        if len(groups) != 1:
            raise ConfigError(str(joystick_config), "joint_jog.axes", list(self.joystick.mapping.joint_axes),
                              f"the scripted operator jogs all {len(self.joint_names)} joints at once: needs one "
                              f"axis per joint")
        self.jog_joints = groups[0]
        self.jog_speed = limits["velocity"] * self.joystick.mapping.joint_speed_fraction
        self.period_s = 1.0 / plan.joy_rate_hz
        self._state: tuple[tuple[str, ...], dict[int, float]] = ((), {})
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_loop, name="scripted_joy", daemon=True)
        self._thread.start()

    def _publish_loop(self) -> None:
        while not self._stop.wait(self.period_s):
            with self._lock:
                pressed, axes = self._state
            self.session.publish_joy(self.joystick.message(time.time_ns(), pressed, axes))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    # -- what the operator sees ---------------------------------------------------------------
    def ee_position(self) -> np.ndarray | None:
        q = self.session.latest_joint_positions(self.joint_names)
        return None if q is None else self.model.forward_kinematics(q, self.ee_link, self.joint_names)[0][:3, 3]

    def sim_time_ns(self) -> int:
        """The robot's clock: the stamp of the latest joint state [ns] (0 before any)."""
        states = self.session.joint_states
        return stamp_to_ns(states[-1].header.stamp) if states else 0

    def jog_mode(self) -> str:
        states = self.session.states
        return diagnostic_values(states[-1][1]).get("jog_mode", "") if states else ""

    # -- what the operator does ---------------------------------------------------------------
    def hold_stick(self, pressed: tuple[str, ...] = (), axes: dict[int, float] | None = None,
                   periods: float = 0.0) -> None:
        """Set the stick's state (published from now on) and keep it for `periods` Joy periods."""
        with self._lock:
            self._state = (tuple(pressed), dict(axes or {}))
        if periods:
            time.sleep(periods * self.period_s)

    def press(self, role: str, deadman: bool = True) -> None:
        """One press of `role`: up, down, up, each for two Joy periods (buttons act on edges)."""
        held = ("deadman",) if deadman else ()
        self.hold_stick(held, periods=2.5)
        self.hold_stick((*held, role), periods=2.5)
        self.hold_stick(held, periods=2.5)

    def take_over(self) -> bool:
        """TELEOP, jogging all joints at once; False if the supervisor refused."""
        if self.session.mode() != "TELEOP":
            self.press("takeover")
            if not self.session.wait_for_mode("TELEOP", 5.0):
                return False
        if self.jog_mode() == "cartesian":
            self.press("toggle_cartesian")
            # supervisor/state repeats at its state rate; the jog mode shows there.
            if not _wait(lambda: self.jog_mode().startswith("joints"), 5.0):
                return False
        return True

    def hand_back(self, timeout_s: float = 20.0) -> bool:
        """AUTONOMOUS again (ramped from the measured position). The supervisor refuses while the
        policy's command is far from the robot (e.g. a chunk from before the episode reset), so
        the operator presses `arm` again until it is accepted or `timeout_s` [s] passes."""
        deadline = time.monotonic() + timeout_s
        while self.session.mode() != "AUTONOMOUS" and time.monotonic() < deadline:
            self.press("arm")
            if self.session.wait_for_mode("AUTONOMOUS", 1.0):
                break
        self.hold_stick()
        return self.session.mode() == "AUTONOMOUS"

    def stick_for(self, q: np.ndarray, target_xyz: np.ndarray) -> dict[int, float]:
        """Stick deflections moving the joints along the teacher's straight line to its IK goal:
        joint velocities (goal - q) / duration with the teacher's speed and shortest duration."""
        goal = self.teacher.solve_ik(target_xyz)
        config = self.teacher.config
        distance = float(np.max(np.abs(goal - q)))
        duration = max(config.min_duration_s, distance / config.speed_rad_s)
        velocity = (goal - q) / duration
        axes: dict[int, float] = {}
        for axis, scale, joint in zip(self.joystick.mapping.joint_axes, self.joystick.mapping.joint_axis_scales,
                                      self.jog_joints, strict=False):
            axes[axis] = self.joystick.raw_axis(float(velocity[joint] / (self.jog_speed[joint] * scale)))
        return axes

    def jog_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Deadman held, sticks toward the target until `done()`; False on timeout."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if done():
                self.hold_stick(("deadman",))
                return True
            if self.session.mode() != "TELEOP":
                # A watchdog (e.g. joint states late on a loaded machine) put the robot on HOLD:
                # a person would press takeover again and carry on.
                if not self.take_over():
                    self.hold_stick(("deadman",), periods=2)
                continue
            q, target = self.session.latest_joint_positions(self.joint_names), self.session.target_position()
            if q is None or target is None:
                self.hold_stick(("deadman",), periods=1)
                continue
            self.hold_stick(("deadman",), self.stick_for(q, target), periods=0.5)
        self.hold_stick(("deadman",))
        return done()

    def release_after_reset(self, outcome_stamp_ns: int, timeout_s: float = 10.0) -> None:
        """After an episode: let go of the deadman once the robot is back home, so the supervisor's
        TELEOP hold is captured at the new episode's measured position, not the old one."""
        self.hold_stick(("deadman",))
        after = outcome_stamp_ns + NS_PER_S // 50
        _wait(lambda: self.sim_time_ns() > after, timeout_s)
        self.hold_stick((), periods=3)


def operator_joystick_config(out_dir: Path, plan: TeleopPlan, joints: int) -> Path:
    """The operator's joystick (written to out_dir, given to the supervisor): config/joystick.yaml
    with one stick axis per joint, all jogged at once (a 6-axis input such as a SpaceMouse), at up
    to jog_speed_fraction of each joint's velocity limit."""
    data = yaml.safe_load(config_path("joystick.yaml").read_text())
    joint_jog = data.setdefault("joint_jog", {})
    axes = list(joint_jog.get("axes", [1, 0, 3]))
    spare = [a for a in range(16) if a not in axes]
    axes = (axes + spare)[:joints]
    joint_jog.update({"axes": axes, "axis_scales": [1.0] * joints, "groups": [list(range(joints))],
                      "speed_fraction": float(plan.jog_speed_fraction)})
    path = out_dir / "joystick_operator.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    load_joystick_mapping(path)  # fail here, naming the file, rather than in the supervisor
    return path


def _sim_parameters(sim_params: Path, seed: int, plan: TeleopPlan) -> dict[str, Any]:
    params: dict[str, Any] = {"sim_params_file": str(sim_params), "seed": int(seed), "randomize": False}
    if plan.camera_rate_hz:
        params["camera_rate_hz"] = float(plan.camera_rate_hz)
    if plan.clock_rate_hz:
        params["clock_rate_hz"] = float(plan.clock_rate_hz)
    return params


def record_teleop_episodes(out_dir: str | Path, episodes: int, sim_params: str | Path | None = None,
                           checkpoint: str | Path | None = None, seed: int = 0, plan: TeleopPlan | None = None,
                           robot_description: str | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Record `episodes` teleoperated episodes of the sim graph (sim variant `sim_params`, default
    config/sim_params_real_a.yaml; the policy `checkpoint` drives before interventions) and return
    one bag folder per episode (out_dir/episode_000, ...). out_dir must not exist or be empty.
    Raises RuntimeError when a node dies, TimeoutError when the graph stalls."""
    if episodes <= 0:
        raise ConfigError(SOURCE, "episodes", episodes, "must be > 0")
    plan = plan or TeleopPlan()
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(SOURCE, "out_dir", str(out), "exists and is not empty; recordings are never overwritten")
    out.mkdir(parents=True, exist_ok=True)
    sim_file = Path(sim_params) if sim_params else config_path("sim_params_real_a.yaml")
    params = load_sim_params(sim_file)
    ckpt = Path(checkpoint) if checkpoint else default_policy_path()
    joints = len(RobotModel.from_description(robot_description or str(urdf_path())).joint_names)
    joystick = operator_joystick_config(out, plan, joints)
    graph_args = GraphArgs(checkpoint=str(ckpt),
                           extra_parameters={"sim_node": _sim_parameters(sim_file, seed, plan),
                                             "supervisor": {"joystick_config": str(joystick)}},
                           **({"robot_description": robot_description} if robot_description else {}))
    session_bag = out / SESSION_BAG
    log(f"[teleop] recording {episodes} episode(s) in {sim_file.name} with {ckpt.name}; node output in "
        f"{out / 'graph.log'}")
    with SimGraphSession(graph_args, out / "graph.log", record_to=session_bag) as session:
        operator = ScriptedTeleoperator(session, graph_args.robot_description, params, plan, joystick)
        try:
            start_stamp_ns, records = _record(session, operator, plan, episodes, log, out / "graph.log")
            operator.hold_stick((), periods=3)
        finally:
            operator.close()
    bags = split_by_episode(session_bag, out, start_stamp_ns, [r.pop("outcome_stamp_ns") for r in records])
    for record, bag in zip(records, bags, strict=True):
        record["bag"] = bag.name
    manifest = {"sim_params": str(sim_file), "sim_params_version": params.version, "checkpoint": str(ckpt),
                "seed": seed, "plan": asdict(plan), "episodes": records}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(session_bag, ignore_errors=True)
    wins = sum(bool(r["success"]) for r in records)
    log(f"[teleop] {len(bags)} episode bag(s) in {out} ({wins} successes)")
    return bags


def _record(session: SimGraphSession, operator: ScriptedTeleoperator, plan: TeleopPlan, episodes: int,
            log: Callable[[str], None], log_file: Path) -> tuple[int, list[dict[str, Any]]]:
    """Arm, start a fresh episode, run `episodes` of them. Returns (stamp of the first episode's
    start [ns], one record per episode)."""
    if not session.wait_for_mode("AUTONOMOUS", plan.startup_timeout_s):
        session.check_nodes()
        raise TimeoutError(f"the supervisor never armed (mode {session.mode()!r}: {session.mode_reason()}); "
                           f"node output in {log_file}")
    targets_before = len(session.targets)
    ok, message = session.call("sim/reset")
    if not ok:
        raise RuntimeError(f"sim/reset refused: {message}")
    if not _wait(lambda: len(session.targets) > targets_before, 10.0):
        raise TimeoutError("no sim/target after sim/reset")
    # The episode starts at the reset: sim/target is published with the new episode's stamp.
    start_stamp_ns = stamp_to_ns(session.targets[-1][1].header.stamp)
    skip = len(session.outcomes)
    records = []
    for index in range(episodes):
        record = _run_episode(session, operator, plan, plan.kind(index), skip + index, log)
        records.append({"index": index, **record})
        session.check_nodes()
    return start_stamp_ns, records


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _run_episode(session: SimGraphSession, operator: ScriptedTeleoperator, plan: TeleopPlan, kind: str,
                 outcomes_before: int, log: Callable[[str], None]) -> dict[str, Any]:
    """One episode of `kind`; returns what happened (outcome, who drove)."""
    finished = lambda: len(session.episodes_raw) > outcomes_before  # noqa: E731
    driven_by = kind
    took_over_after_s: float | None = None
    if kind == "intervention":
        if operator.hand_back():
            start_ns = operator.sim_time_ns()
            end_ns = start_ns + int(plan.policy_s * NS_PER_S)
            _wait(lambda: finished() or operator.sim_time_ns() >= end_ns, plan.episode_wall_timeout_s)
            took_over_after_s = round((operator.sim_time_ns() - start_ns) / NS_PER_S, 2)
            if finished():
                driven_by = "policy"
        else:
            log(f"[teleop] hand-back refused ({session.mode_reason()}); the operator demonstrates this episode")
            driven_by = "demonstration"
    if not finished():
        if not operator.take_over():
            session.check_nodes()
            raise RuntimeError(f"takeover refused: mode {session.mode()!r}: {session.mode_reason()}")
        if not operator.jog_until(finished, plan.episode_wall_timeout_s):
            session.check_nodes()
            raise TimeoutError(f"episode did not end within {plan.episode_wall_timeout_s} s of jogging")
    outcome_msg = session.episodes_raw[outcomes_before]
    outcome = EpisodeOutcome.from_message(outcome_msg)
    if session.mode() == "TELEOP":
        operator.release_after_reset(stamp_to_ns(outcome_msg.header.stamp))
    log(f"[teleop] episode {outcome.episode} ({driven_by}): {'success' if outcome.success else outcome.reason} "
        f"in {outcome.duration_s:.1f} s")
    return {"kind": driven_by, "planned": kind, "outcome_stamp_ns": stamp_to_ns(outcome_msg.header.stamp),
            "success": outcome.success, "reason": outcome.reason, "duration_s": outcome.duration_s,
            "final_distance_m": outcome.final_distance_m,
            "sim_episode": outcome.episode, "policy_drove_s": took_over_after_s}


def split_by_episode(session_bag: Path, out_dir: Path, start_ns: int, outcome_stamps_ns: list[int]) -> list[Path]:
    """Cut a session bag into one bag per episode: episode i holds the messages stamped (header
    stamp, else log time) in (boundary i, boundary i+1] (boundaries: start_ns, then each outcome's
    stamp), preceded by the last message before it of each latched topic (CARRIED_TOPICS),
    re-logged at the boundary."""
    boundaries = [int(start_ns), *[int(s) for s in outcome_stamps_ns]]
    bags = [out_dir / f"episode_{i:03d}" for i in range(len(outcome_stamps_ns))]
    writers = [BagWriter(path) for path in bags]
    last: dict[str, tuple[str, bytes]] = {}
    try:
        with BagReader(session_bag) as reader:
            types = reader.topic_types()
            delay_ns = recorder_delay_ns(reader)
            for writer in writers:
                for topic, msgtype in types.items():
                    writer.add_topic(topic, msgtype)
            started: set[int] = set()
            for log_ns, topic, data in reader.raw_messages():
                # Messages arrive at the recorder late (an image logged after the reset may have been
                # captured before it; an outcome is logged after the episode it ends): stamped ones
                # are placed by their stamp.
                # Unstamped ones (robot commands) by their log time less the recorder's delay.
                when = header_stamp_ns(types[topic], data) or log_ns - delay_ns
                index = int(np.searchsorted(boundaries, when, side="left")) - 1
                if index >= len(writers):
                    continue
                if index >= 0 and index not in started:
                    started.add(index)
                    for carried, payload in last.values():
                        writers[index].write(carried, boundaries[index], payload)
                if topic in CARRIED_TOPICS:
                    last[topic] = (topic, bytes(data))
                if index >= 0:
                    writers[index].write(topic, log_ns, data)
    finally:
        for writer in writers:
            writer.close()
    return bags


def recorder_delay_ns(reader: BagReader, topic: str = "/joint_states") -> int:
    """Median (log time - header stamp) of `topic` [ns]: how late the recorder logs what it hears."""
    msgtype = reader.topic_types().get(topic, "")
    delays = [log_ns - header_stamp_ns(msgtype, data) for log_ns, _, data in reader.raw_messages([topic])]
    return int(np.median(delays)) if delays else 0


def header_stamp_ns(msgtype: str, data: bytes | memoryview) -> int:
    """header.stamp [ns] of a serialized message whose first field is a std_msgs/Header (0 for
    other types): CDR puts it right after the 4-byte encapsulation header."""
    if msgtype not in STAMPED_TYPES or len(data) < 12:
        return 0
    sec, nanosec = struct.unpack_from("<iI" if bytes(data[1:2]) == b"\x01" else ">iI", data, 4)
    return sec * NS_PER_S + nanosec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim2real_ros.runtime.teleop_recording",
                                     description="record scripted teleoperation episodes as 'real' bags")
    parser.add_argument("--out", required=True, type=Path, help="output folder (one bag per episode)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--sim-params", type=Path, default=config_path("sim_params_real_a.yaml"))
    parser.add_argument("--checkpoint", type=Path, default=default_policy_path(), help="policy before interventions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--intervention-every", type=int, default=TeleopPlan.intervention_every,
                        help="every n-th episode is an intervention (0 = demonstrations only)")
    args = parser.parse_args(argv)
    from ..paths import use_dds_profile

    use_dds_profile()
    try:
        bags = record_teleop_episodes(args.out, args.episodes, args.sim_params, args.checkpoint, args.seed,
                                      TeleopPlan(intervention_every=args.intervention_every))
    except (ConfigError, RuntimeError, TimeoutError) as err:
        print(f"[ERROR] {err}", file=sys.stderr)
        return 2
    print("\n".join(str(b) for b in bags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
