"""The scripted person on the joystick, for "real" teleoperation recordings without a robot.

A scripted operator who knows where the target is (sim/target, privileged) acts only through the
joystick topic and the supervisor, like a person would: it takes over (TELEOP) and jogs the joints
toward the privileged IK teacher's goal with the deadman held, or hands back to the policy (arm).
How it behaves over a recording is a TeleopPlan. runtime.teleop_recording runs it on the sim graph.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ..conversions import stamp_to_ns
from ..core.errors import ConfigError
from ..core.robot.urdf import RobotModel
from ..core.safety.joystick import load_joystick_mapping
from ..core.timebase import NS_PER_S
from ..episodes.dataset import TAKEOVER_GRACE_S
from ..paths import config_path
from ..sim.expert import ReachExpert
from ..sim.params import SimParams
from .graph_session import SimGraphSession
from .scripted_joystick import ScriptedJoystick

SOURCE = "teleop recording"


# [s] sim time the policy drives beyond the takeover grace, so an intervention reads back as one.
MIN_POLICY_MARGIN_S = 0.25


@dataclass(frozen=True)
class TeleopPlan:
    """How the scripted operator behaves.

    intervention_every: every n-th episode (1-based) starts autonomous and is taken over after
      policy_s [s] (sim time); 0 = demonstrations only. joy_rate_hz: Joy messages per second while
      recording [Hz]. jog_speed_fraction: the operator's joystick jogs each joint at up to this
      fraction of its URDF velocity limit (see operator_joystick_config). camera_rate_hz /
      clock_rate_hz: sim node overrides (0 = the sim params' rates). real_time_factor: the sim node's
      pace (0 = its default, real time); below 1 a loaded machine's stalls cost less sim time, so the
      recorded command stream keeps its rate (a stalled 100 Hz stream leaves gaps the labeller will
      not interpolate across). episode_wall_timeout_s: give
      up on an episode after this long [s] (wall).
    startup_timeout_s: how long the graph may take to arm [s].
    """

    intervention_every: int = 2
    policy_s: float = 1.5
    joy_rate_hz: float = 20.0
    jog_speed_fraction: float = 0.6
    camera_rate_hz: float = 0.0
    clock_rate_hz: float = 0.0
    real_time_factor: float = 0.0
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
        for name in ("policy_s", "camera_rate_hz", "clock_rate_hz", "real_time_factor"):
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
        state = self.session.state()
        return state.jog_mode if state is not None else ""

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

    def take_over(self, timeout_s: float = 10.0) -> bool:
        """TELEOP, jogging all joints at once; False if the supervisor refused. As a person would,
        the operator presses `takeover` again until the supervisor shows TELEOP or `timeout_s` [s]
        passes: a press can go unseen (a CI run on a loaded machine: one press, 5 s of AUTONOMOUS)."""
        deadline = time.monotonic() + timeout_s
        while self.session.mode() != "TELEOP" and time.monotonic() < deadline:
            self.press("takeover")
            if self.session.wait_for_mode("TELEOP", 1.0):
                break
        if self.session.mode() != "TELEOP":
            return False
        if self.jog_mode() == "cartesian":
            self.press("toggle_cartesian")
            # supervisor/state repeats at its state rate; the jog mode shows there.
            if not wait_for(lambda: self.jog_mode().startswith("joints"), 5.0):
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
        wait_for(lambda: self.sim_time_ns() > after, timeout_s)
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


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `predicate` every 20 ms until it holds or `timeout_s` [s] (wall) passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
