"""The PyBullet world: robot, table, task, actuator model, camera (no rclpy).

Time is sim time in integer nanoseconds (`time_ns`), advanced only by `step`. Commands enter a
latency queue at the current sim time; each physics step the PD loop torque is computed here in
Python and applied with TORQUE_CONTROL (PyBullet's velocity motors are reused, with target velocity
0 and max force = Coulomb friction, as the joints' dry friction), so every dynamics parameter has a
physical meaning that system identification can fit. That is the reference loop (physics.loop:
reference, made for 1 kHz); physics.loop: fast runs the same actuator model at a coarser step with an
implicit PD (SimWorld._step_fast; docs/benchmarks.md, "The sim loop").

Random pushes (randomization.pushes, sim/pushes.py) are off unless enabled (`pushes=True` or
`pushes_enabled`); save_state / restore_state snapshot the world within an episode (sim/snapshot.py).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import tempfile
import weakref
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pybullet
from pybullet_utils import bullet_client

from ..core.errors import ConfigError, UrdfError
from ..core.perception.camera_model import CameraModel, load_calibration_yaml
from ..core.robot.urdf import RobotModel
from ..core.timebase import NS_PER_S
from ..robots import robot_for_joints
from .camera_artifacts import ArtifactConfig, apply_artifacts
from .motor_model import ImplicitPd, LatencyQueue, ServoLoop, pd_torque
from .params import SimParams
from .pushes import ScheduledPush, draw_push_schedule, push_links
from .quiet_stdout import stdout_to_stderr
from .randomization import EpisodeRandomization, sample_episode
from .rendering import camera_mount_pose, gl_list, look_at_rotation, projection_matrix, view_matrix
from .snapshot import WorldState
from .tasks import Task, make_task

DYNAMICS_KEYS = ("kp", "kd", "damping", "friction", "effort_limit", "actuation_latency_s", "gravity_compensation",
                 "servo_max_speed", "servo_max_acceleration", "servo_gain", "servo_deadband")
SERVO_KEYS = ("servo_max_speed", "servo_max_acceleration", "servo_gain", "servo_deadband")
SENT_LOG_LENGTH = 64  # commands kept by SimWorld.sent_at_or_before (0.64 s at 100 Hz)
_WORLD_SERIALS = itertools.count()


def _remove_bullet_state(client: Any, state_id: int, live: dict[int, Any]) -> None:
    """Free a saved PyBullet state (a WorldState's finalizer; harmless once the client is gone)."""
    live.pop(state_id, None)
    with contextlib.suppress(pybullet.error):
        client.removeState(state_id)


def episode_seed(base_seed: int, episode: int) -> int:
    """The seed of episode `episode` of a run seeded with `base_seed` (reset(seed=...) replays it)."""
    return int(np.random.SeedSequence([int(base_seed), int(episode)]).generate_state(1)[0])


class SimWorld:
    """One PyBullet physics client with the robot on a table, a task, and a calibrated camera.

    joint_names: the commanded joints (set_command order; default all movable URDF joints).
    all_joint_names: every movable URDF joint in URDF order (what joint_states reports).
    lower, upper [rad]: position limits of joint_names from the URDF.
    pushes / pushes_enabled: random pushes (the sim params' randomization.pushes) in the episodes
    that start while it is true (reset draws the schedule; toggle it between episodes).
    """

    def __init__(self, params: SimParams, robot_description: str, seed: int = 0, render: bool = True,
                 joints: list[str] | None = None, ee_link: str | None = None, camera: CameraModel | None = None,
                 randomize: bool = False, task: Task | None = None, pushes: bool = False) -> None:
        self.params = params
        self.pushes_enabled = bool(pushes)
        self.model = RobotModel.from_description(robot_description)
        self.all_joint_names = self.model.joint_names
        self.joint_names = list(joints) if joints else list(self.all_joint_names)
        unknown = [n for n in self.joint_names if n not in self.all_joint_names]
        if unknown or len(set(self.joint_names)) != len(self.joint_names):
            raise ConfigError("joints", "joints", self.joint_names,
                              f"must be distinct movable joints of {self.model.source} ({self.all_joint_names})")
        limits = self.model.limits_arrays(self.all_joint_names)
        self._cmd_pos = np.array([self.all_joint_names.index(n) for n in self.joint_names])
        self.lower, self.upper = limits["lower"][self._cmd_pos], limits["upper"][self._cmd_pos]
        self.velocity_limits = limits["velocity"][self._cmd_pos]
        self._urdf_effort = limits["effort"]
        self.ee_link = ee_link or params.robot.ee_link
        links = [self._root_link_name()] + self.model.link_names()
        if self.ee_link not in links:
            raise ConfigError("ee_link", "ee_link", self.ee_link,
                              f"no such link in {self.model.source} (links: {links})")
        self.camera = camera or load_calibration_yaml(params.camera.calibration_path())
        self.artifacts = ArtifactConfig.from_dict(params.artifacts, f"{params.source} artifacts")
        self.render_enabled = render

        self._tmp: tempfile.TemporaryDirectory | None = None
        with stdout_to_stderr():  # PyBullet printf()s on connect and while loading: keep stdout for JSON
            self.client = bullet_client.BulletClient(connection_mode=pybullet.DIRECT)
            self.client.setTimeStep(params.physics.dt_s)
            self.client.setPhysicsEngineParameter(numSolverIterations=params.physics.solver_iterations)
            if params.physics.substeps > 1:
                self.client.setPhysicsEngineParameter(numSubSteps=params.physics.substeps)
            self.robot = self.client.loadURDF(self._urdf_file(robot_description), useFixedBase=True,
                                              flags=pybullet.URDF_USE_INERTIA_FROM_FILE)
        self._index_bodies()
        self._build_table()
        self.task = task or make_task(params.task)
        self.task.build(self)

        self.dt_ns = int(round(params.physics.dt_s * NS_PER_S))
        self.loop = params.physics.loop
        self._bind_fast_calls()
        self.time_ns = 0
        self.base_seed = int(seed)
        self.episode_index = -1
        self.episode_start_ns = 0
        self.episode_seed = 0
        self._outcome: dict[str, Any] | None = None
        self._overrides: dict[str, np.ndarray | float] = {}
        self._home_all = self._home_pose()
        self._queue = LatencyQueue(self._home_all[self._cmd_pos])
        # (sim time [ns], target (n,) [rad]) of the latest commands, newest last: what a labeller
        # needs to know which command was in force one decision ago (sent_at_or_before).
        self._sent: deque[tuple[int, np.ndarray]] = deque(maxlen=SENT_LOG_LENGTH)
        self.actuator_model = params.actuator.model
        self._servo = ServoLoop(self._home_all) if self.actuator_model == "servo" else None
        self._last_effort = np.zeros(len(self.all_joint_names))
        self._image_rng = np.random.default_rng(seed)
        push_params = params.randomization.pushes
        self._push_links = [] if push_params is None else \
            push_links(self.model, self._link_index, push_params, params.source)
        self._push_schedule: list[ScheduledPush] = []
        self._episode_pushes = False
        self._push_first = 0  # schedule[:_push_first] are over
        self._pushes_started = 0  # schedule[:_pushes_started] have started
        self._world_serial = next(_WORLD_SERIALS)
        self._episode_serial = 0
        self._live_states: dict[int, weakref.finalize] = {}
        self.randomization: EpisodeRandomization
        self.reset(randomize=randomize)

    # ------------------------------------------------------------------------------------------
    # construction helpers
    def _root_link_name(self) -> str:
        children = {j.child for j in self.model.joints}
        parents = [j.parent for j in self.model.joints if j.parent not in children]
        return parents[0] if parents else ""

    def _urdf_file(self, description: str) -> str:
        if not description.lstrip().startswith("<"):
            return description
        # PyBullet loads files only; mesh paths in inline XML must be absolute or package-free.
        self._tmp = tempfile.TemporaryDirectory(prefix="sim2real_urdf_")
        path = Path(self._tmp.name) / "robot.urdf"
        path.write_text(description)
        return str(path)

    def _index_bodies(self) -> None:
        c = self.client
        joint_index: dict[str, int] = {}
        self._link_index: dict[str, int] = {self._root_link_name(): -1}
        for j in range(c.getNumJoints(self.robot)):
            info = c.getJointInfo(self.robot, j)
            joint_index[info[1].decode()] = j
            self._link_index[info[12].decode()] = j
        missing = [n for n in self.all_joint_names if n not in joint_index]
        if missing:
            raise UrdfError(f"{self.model.source}: PyBullet did not load joints {missing}")
        self._all_idx = [joint_index[n] for n in self.all_joint_names]
        # calculateInverseDynamics wants every degree of freedom, in PyBullet index order.
        self._dof_idx = sorted(self._all_idx)
        self._dof_order = np.array([self._dof_idx.index(i) for i in self._all_idx])
        self._ee_index = self._link_index[self.ee_link]
        camera_link = self.params.camera.link
        self._camera_index = self._link_index.get(camera_link) if camera_link in self._link_index else None
        self._camera_mount = camera_mount_pose(self.params.camera)
        self._nominal_mass: dict[int, tuple[float, tuple[float, float, float]]] = {}
        for link in [-1, *range(c.getNumJoints(self.robot))]:
            info = c.getDynamicsInfo(self.robot, link)
            self._nominal_mass[link] = (info[0], tuple(info[2]))
            # Damping is computed in Python (a fit-able parameter); switch off PyBullet's own.
            c.changeDynamics(self.robot, link, linearDamping=0.0, angularDamping=0.0, jointDamping=0.0)

    def _bind_fast_calls(self) -> None:
        """PyBullet functions bound to this client for the fast loop and the task's per-step tool point:
        BulletClient's attribute lookup costs about 1.3 us a call, a third of a getJointStates."""
        cid = self.client._client  # noqa: SLF001 - the physics client id BulletClient wraps
        self._raw_joint_states = functools.partial(pybullet.getJointStates, self.robot, self._all_idx,
                                                   physicsClientId=cid)
        self._raw_inverse_dynamics = functools.partial(pybullet.calculateInverseDynamics, self.robot,
                                                       physicsClientId=cid)
        self._raw_mass_matrix = functools.partial(pybullet.calculateMassMatrix, self.robot, physicsClientId=cid)
        self._raw_torques = functools.partial(pybullet.setJointMotorControlArray, self.robot, self._all_idx,
                                              pybullet.TORQUE_CONTROL, physicsClientId=cid)
        self._raw_step = functools.partial(pybullet.stepSimulation, physicsClientId=cid)
        self._raw_ee_state = functools.partial(pybullet.getLinkState, self.robot, self._ee_index,
                                               computeForwardKinematics=True, physicsClientId=cid)
        self._dof_inverse = np.argsort(self._dof_order)  # URDF order -> PyBullet dof order
        self._dof_identity = bool(np.array_equal(self._dof_order, np.arange(len(self._dof_order))))
        self._cmd_identity = bool(np.array_equal(self._cmd_pos, np.arange(len(self.all_joint_names))))
        self._dof_zeros = [0.0] * len(self._dof_idx)
        # The gripper's moving jaw (its joint's child link): in the fast loop, while it touches another
        # body its joint is held (ImplicitPd.torque's `held`: the grip the reference loop's PD gives).
        robot = robot_for_joints(self.all_joint_names)
        self._jaw_held: np.ndarray | None = None
        if robot is not None and robot.gripper is not None and robot.gripper in self.all_joint_names:
            jaw = self.all_joint_names.index(robot.gripper)
            self._jaw_held = np.arange(len(self.all_joint_names)) == jaw
            self._raw_jaw_contacts = functools.partial(pybullet.getContactPoints, bodyA=self.robot,
                                                       linkIndexA=self._all_idx[jaw], physicsClientId=cid)

    def _build_table(self) -> None:
        c = self.client
        t = self.params.table
        half = [s / 2.0 for s in t.size]
        col = c.createCollisionShape(c.GEOM_BOX, halfExtents=half)
        vis = c.createVisualShape(c.GEOM_BOX, halfExtents=half, rgbaColor=list(t.rgba))
        self.table = c.createMultiBody(0.0, col, vis, [t.center_xy[0], t.center_xy[1], -half[2]])

    def _home_pose(self) -> np.ndarray:
        """Home positions (all movable joints) [rad]: the sim params' home_pose, else 0, clipped to limits."""
        limits = self.model.limits_arrays(self.all_joint_names)
        listed = self.params.home_pose(self.all_joint_names)
        home = np.array([listed.get(n, 0.0) for n in self.all_joint_names])
        return np.clip(home, limits["lower"], limits["upper"])

    # ------------------------------------------------------------------------------------------
    # dynamics
    def _nominal_dynamics(self) -> dict[str, Any]:
        a = self.params.actuator
        names = self.all_joint_names
        effort = self._urdf_effort.copy()
        if a.effort_limit is not None:
            effort = np.minimum(effort, a.effort_limit.resolve(names))
        values: dict[str, Any] = {
            "kp": a.kp.resolve(names), "kd": a.kd.resolve(names), "damping": a.damping.resolve(names),
            "friction": a.friction.resolve(names), "effort_limit": effort,
            "actuation_latency_s": a.actuation_latency_s, "gravity_compensation": a.gravity_compensation,
        }
        if a.servo is not None:
            values.update({"servo_max_speed": a.servo.max_speed.resolve(names),
                           "servo_max_acceleration": a.servo.max_acceleration.resolve(names),
                           "servo_gain": a.servo.gain.resolve(names),
                           "servo_deadband": a.servo.deadband.resolve(names)})
        for key, value in self._overrides.items():
            if isinstance(value, np.ndarray):
                values[key] = values[key].copy()
                values[key][self._cmd_pos] = value
            else:
                values[key] = value
        values["effort_limit"] = np.minimum(values["effort_limit"], self._urdf_effort)
        return values

    def _apply_dynamics(self) -> None:
        """Active dynamics = nominal (with set_dynamics overrides) x this episode's randomization."""
        nominal = self._nominal_dynamics()
        rand = self.randomization
        self._kp = nominal["kp"] * rand.kp_scale
        self._kd = nominal["kd"] * rand.kd_scale
        self._damping = nominal["damping"] * rand.damping_scale
        self._friction = nominal["friction"] * rand.friction_scale
        self._effort_limit = nominal["effort_limit"]
        self._gravity_compensation = float(nominal["gravity_compensation"])
        # Randomized episodes draw the latency itself (a range, not a scale of the nominal value).
        latency = rand.actuation_latency_s if self.randomized else nominal["actuation_latency_s"]
        self.actuation_latency_s = float(latency)
        self._latency_ns = int(round(self.actuation_latency_s * NS_PER_S))
        self._implicit_pd = ImplicitPd(self._kp, self._kd, self._effort_limit, self.params.physics.dt_s)
        if self._servo is not None:
            self._servo_max_speed = nominal["servo_max_speed"] * rand.servo_speed_scale
            self._servo_max_acceleration = nominal["servo_max_acceleration"] * rand.servo_acceleration_scale
            self._servo_gain = nominal["servo_gain"] * rand.servo_gain_scale
            self._servo_deadband = nominal["servo_deadband"]
        # Coulomb friction: a velocity motor holding zero speed with at most `friction` torque is
        # dry friction solved by the constraint solver (stable at any time step).
        self.client.setJointMotorControlArray(self.robot, self._all_idx, pybullet.VELOCITY_CONTROL,
                                              targetVelocities=[0.0] * len(self._all_idx),
                                              forces=self._friction.tolist())

    def dynamics(self) -> dict[str, Any]:
        """The active dynamics of the commanded joints (kp, kd, damping, friction, effort_limit arrays;
        actuation_latency_s [s]; gravity_compensation; with the servo model also servo_max_speed [rad/s],
        servo_max_acceleration [rad/s^2], servo_gain [1/s], servo_deadband [rad])."""
        pos = self._cmd_pos
        out = {"kp": self._kp[pos].copy(), "kd": self._kd[pos].copy(), "damping": self._damping[pos].copy(),
               "friction": self._friction[pos].copy(), "effort_limit": self._effort_limit[pos].copy(),
               "actuation_latency_s": self.actuation_latency_s,
               "gravity_compensation": self._gravity_compensation}
        if self._servo is not None:
            out.update({"servo_max_speed": self._servo_max_speed[pos].copy(),
                        "servo_max_acceleration": self._servo_max_acceleration[pos].copy(),
                        "servo_gain": self._servo_gain[pos].copy(), "servo_deadband": self._servo_deadband[pos].copy()})
        return out

    def set_dynamics(self, **overrides: Any) -> None:
        """Override nominal dynamics, e.g. for system identification; they persist across resets
        (randomization multiplies on top). Keys: kp, kd, damping, friction, effort_limit (scalar or
        (n,) over joint_names), actuation_latency_s [s], gravity_compensation; with the servo model
        servo_max_speed, servo_max_acceleration, servo_gain (> 0), servo_deadband. Effort limits can only
        tighten the URDF's. Raises ValueError for unknown keys or invalid values."""
        n = len(self.joint_names)
        for key, value in overrides.items():
            if key not in DYNAMICS_KEYS:
                raise ValueError(f"set_dynamics: unknown key {key!r} (known: {DYNAMICS_KEYS})")
            if key in SERVO_KEYS and self._servo is None:
                raise ValueError(f"set_dynamics: {key} needs actuator.model servo (this world's is "
                                 f"{self.actuator_model})")
            if key in SERVO_KEYS[:3] and np.any(np.asarray(value, dtype=float) <= 0):
                raise ValueError(f"set_dynamics: {key} must be > 0, got {value!r}")
            if key in ("actuation_latency_s", "gravity_compensation"):
                number = float(value)
                if not np.isfinite(number) or number < 0 or (key == "gravity_compensation" and number > 1):
                    raise ValueError(f"set_dynamics: {key} = {value!r} out of range")
                self._overrides[key] = number
                continue
            array = np.broadcast_to(np.asarray(value, dtype=float), (n,)).copy() if np.ndim(value) == 0 \
                else np.asarray(value, dtype=float)
            if array.shape != (n,) or not np.all(np.isfinite(array)) or np.any(array < 0):
                raise ValueError(f"set_dynamics: {key} must be >= 0, scalar or ({n},) over {self.joint_names}, "
                                 f"got {value!r}")
            self._overrides[key] = array
        self._apply_dynamics()

    # ------------------------------------------------------------------------------------------
    # episodes
    def reset(self, randomize: bool = False, seed: int | None = None) -> dict[str, Any]:
        """Start a new episode: robot at home, queued commands dropped, new target, and (randomize)
        new physics/appearance draws. Returns {episode, seed, target, randomized, randomization}, and
        with pushes enabled `pushes`: the episode's schedule [{start_s [s] after the episode start,
        link, force_n [fx, fy, fz] [N] world frame, duration_s [s]}, ...] (possibly empty).
        Raises ConfigError if pushes are enabled but the sim params have no randomization.pushes."""
        c = self.client
        if self.pushes_enabled and self.params.randomization.pushes is None:
            raise ConfigError(self.params.source, "randomization.pushes", None,
                              "missing: pushes are enabled, but these sim params define no push ranges")
        self.episode_index += 1
        self.episode_seed = int(seed) if seed is not None else episode_seed(self.base_seed, self.episode_index)
        rng = np.random.default_rng(self.episode_seed)
        n_links = c.getNumJoints(self.robot) + 1
        self.randomization = sample_episode(self.params, rng, n_links, len(self.all_joint_names), randomize)
        self.randomized = bool(randomize)
        for k, link in enumerate([-1, *range(n_links - 1)]):
            mass, inertia = self._nominal_mass[link]
            if mass > 0:
                scale = float(self.randomization.mass_scale[k])
                c.changeDynamics(self.robot, link, mass=mass * scale,
                                 localInertiaDiagonal=[v * scale for v in inertia])
        c.setGravity(*self.randomization.gravity.tolist())
        self._apply_dynamics()
        for index, q in zip(self._all_idx, self._home_all, strict=True):
            c.resetJointState(self.robot, index, float(q), 0.0)
        self._queue.reset(self._home_all[self._cmd_pos])
        self._sent.clear()
        if self._servo is not None:
            self._servo.reset(self._home_all)
        self._last_effort = np.zeros(len(self.all_joint_names))
        task_info = self.task.reset(self, rng)
        if hasattr(self.task, "set_color"):
            self.task.set_color(self, self.randomization.target_rgba)
        self._image_rng = np.random.default_rng([self.episode_seed, 1])
        # Pushes draw from a generator of their own: every other draw is the same with pushes on or off.
        self._episode_pushes = self.pushes_enabled
        self._push_schedule = [] if not self._episode_pushes else draw_push_schedule(
            self.params.randomization.pushes, np.random.default_rng([self.episode_seed, 2]), self._push_links,
            self.params.task.timeout_s, self.dt_ns)
        self._push_first = self._pushes_started = 0
        self._push_summaries: tuple[list[ScheduledPush], list[dict[str, Any]]] | None = None
        self._episode_serial += 1
        self.episode_start_ns = self.time_ns
        self._outcome = None
        info = {"episode": self.episode_index, "seed": self.episode_seed, "randomized": self.randomized,
                **task_info, "randomization": self.randomization.summary()}
        if self._episode_pushes:
            info["pushes"] = [push.summary() for push in self._push_schedule]
        return info

    def restart(self, randomize: bool = False) -> dict[str, Any]:
        """Start the seed's episode sequence over: the new episode is episode 0 of the base seed, as
        in a freshly made world (what lets the graph replay the core path's episodes, seed by seed)."""
        self.episode_index = -1
        return self.reset(randomize=randomize)

    @property
    def episode_serial(self) -> int:
        """How many episodes this world has started (restart included): unlike episode_index, which
        restart sets back to 0, it tells every episode apart."""
        return self._episode_serial

    def episode_elapsed_s(self) -> float:
        """Sim time since the episode started [s]."""
        return (self.time_ns - self.episode_start_ns) / NS_PER_S

    def episode_outcome(self) -> dict[str, Any] | None:
        """None while the episode runs; once over: {episode, seed, success, reason, duration_s [s],
        final_distance_m [m]}, with pushes enabled also pushes_applied (the pushes that had started
        by the end) (stays until the next reset)."""
        return None if self._outcome is None else dict(self._outcome)

    # ------------------------------------------------------------------------------------------
    # commands and stepping
    def set_command(self, q_target: np.ndarray) -> None:
        """Queue joint targets (n,) [rad] over joint_names; they act after actuation_latency_s of sim
        time. Raises ValueError (and changes nothing) for a wrong length or NaN/Inf."""
        q = np.asarray(q_target, dtype=float)
        if q.shape != (len(self.joint_names),):
            raise ValueError(f"command has shape {q.shape}, expected ({len(self.joint_names)},)")
        if not np.all(np.isfinite(q)):
            raise ValueError(f"command contains NaN/Inf: {q.tolist()}")
        self._queue.push(self.time_ns, self._latency_ns, q)
        self._sent.append((self.time_ns, q.copy()))

    def sent_at_or_before(self, time_ns: int) -> np.ndarray | None:
        """The last command (n,) [rad] set at or before sim time `time_ns` [ns] in this episode;
        None when none was (or it is older than the last SENT_LOG_LENGTH commands)."""
        for sent_ns, q in reversed(self._sent):
            if sent_ns <= time_ns:
                return q.copy()
        return None

    def commanded_at(self, time_ns: int) -> np.ndarray | None:
        """The commanded trajectory (n,) [rad] at sim time `time_ns` [ns]: linear between the two
        commands set around it (a control tick rarely falls on the time asked for), the last one
        after it; None before the first command of the episode (or past the log)."""
        later: tuple[int, np.ndarray] | None = None
        for sent_ns, q in reversed(self._sent):
            if sent_ns <= time_ns:
                if later is None or sent_ns == time_ns:
                    return q.copy()
                fraction = (time_ns - sent_ns) / (later[0] - sent_ns)
                return q + fraction * (later[1] - q)
            later = (sent_ns, q)
        return None

    def pending_commands(self) -> int:
        """Commands received but not yet in effect (still in the latency queue)."""
        return len(self._queue)

    def step(self, n: int = 1) -> None:
        """Advance n physics steps (n * physics dt of sim time), with the sim params' physics.loop."""
        if self.loop == "fast":
            self._step_fast(int(n))
            return
        c = self.client
        target_all = self._home_all.copy()
        zeros = [0.0] * len(self._dof_idx)
        for _ in range(int(n)):
            target_all[self._cmd_pos] = self._queue.update(self.time_ns)
            states = c.getJointStates(self.robot, self._all_idx)
            q = np.array([s[0] for s in states])
            qd = np.array([s[1] for s in states])
            feed_forward = None
            if self._gravity_compensation > 0.0:
                q_dof = q[np.argsort(self._dof_order)].tolist()
                gravity = np.asarray(c.calculateInverseDynamics(self.robot, q_dof, zeros, zeros))
                feed_forward = self._gravity_compensation * gravity[self._dof_order]
            if self._servo is None:
                tau_motor = pd_torque(q, qd, target_all, self._kp, self._kd, self._effort_limit, feed_forward)
            else:
                reference, speed = self._servo.update(
                    target_all, self.params.physics.dt_s, self._servo_max_speed, self._servo_max_acceleration,
                    self._servo_gain, self._servo_deadband)
                tau_motor = pd_torque(q, qd, reference, self._kp, self._kd, self._effort_limit, feed_forward,
                                      qd_target=speed)
            self._last_effort = tau_motor
            c.setJointMotorControlArray(self.robot, self._all_idx, pybullet.TORQUE_CONTROL,
                                        forces=(tau_motor - self._damping * qd).tolist())
            if self._push_schedule:
                self._apply_pushes()
            c.stepSimulation()
            self.time_ns += self.dt_ns
            if self._outcome is None:
                self._check_outcome()

    def _step_fast(self, n: int) -> None:
        """The fast loop (physics.loop: fast), made for a physics step of a few ms (docs/benchmarks.md):
        the same latency queue, servo loop, PD gains, effort limits, gravity feed-forward, damping and
        friction as the reference loop, with three differences. A command due inside a step acts on it
        in proportion to the part of the step left (LatencyQueue.average: the dead time keeps its
        resolution); the PD acts on the state at the end of the step (ImplicitPd, with each
        joint's inertia from the mass matrix: stable where the explicit PD is not); and the PyBullet
        calls go through pre-bound functions, one of each kind per step, with no reordering where
        PyBullet's degree-of-freedom order is already the URDF's."""
        dt = self.params.physics.dt_s
        target_all = self._home_all.copy()
        commands_all = self._cmd_identity  # the commanded joints are all joints, in order
        zeros = self._dof_zeros
        identity = self._dof_identity
        dof_order, dof_inverse = self._dof_order, self._dof_inverse
        pd = self._implicit_pd
        servo = self._servo
        # No deadband and no step that could overshoot: ServoLoop.update's branches cannot act.
        unbranched = servo is not None and not np.any(self._servo_deadband > 0.0) \
            and float(np.max(self._servo_gain)) * dt < 0.5
        speed_step = None if servo is None else self._servo_max_acceleration * dt
        for _ in range(n):
            if commands_all:
                target_all = self._queue.average(self.time_ns, self.dt_ns)
            else:
                target_all[self._cmd_pos] = self._queue.average(self.time_ns, self.dt_ns)
            states = self._raw_joint_states()
            q_list = [state[0] for state in states]
            q = np.array(q_list)
            qd = np.array([state[1] for state in states])
            q_dof = q_list if identity else q[dof_inverse].tolist()
            mass = self._raw_mass_matrix(q_dof)
            inertia = np.array([row[k] for k, row in enumerate(mass)])
            feed_forward = None
            if self._gravity_compensation > 0.0:
                feed_forward = self._gravity_compensation * np.array(self._raw_inverse_dynamics(q_dof, zeros, zeros))
            if not identity:
                inertia = inertia[dof_order]
                feed_forward = None if feed_forward is None else feed_forward[dof_order]
            if servo is None:
                reference, speed = target_all, None
            elif unbranched:
                reference, speed = servo.update_unbranched(target_all, dt, self._servo_max_speed, speed_step,
                                                           self._servo_gain)
            else:
                reference, speed = servo.update(target_all, dt, self._servo_max_speed, self._servo_max_acceleration,
                                                self._servo_gain, self._servo_deadband)
            held = None
            if self._jaw_held is not None and any(point[2] != self.robot for point in self._raw_jaw_contacts()):
                held = self._jaw_held  # the jaw touches another body (the last step's contacts)
            tau_motor = pd.torque(q, qd, reference, speed, inertia, feed_forward, held)
            self._last_effort = tau_motor
            self._raw_torques(forces=(tau_motor - self._damping * qd).tolist())
            if self._push_schedule:
                self._apply_pushes()
            self._raw_step()
            self.time_ns += self.dt_ns
            if self._outcome is None:
                self._check_outcome()

    def _check_outcome(self) -> None:
        """After a physics step of a running episode: ask the task whether it is over, and keep the outcome."""
        result = self.task.evaluate(self)
        if result is not None:
            self._outcome = {"episode": self.episode_index, "seed": self.episode_seed,
                             "duration_s": self.episode_elapsed_s(), **result}
            if self._episode_pushes:
                self._outcome["pushes_applied"] = self._pushes_started

    def _apply_pushes(self) -> None:
        """Apply the forces of the pushes active in this physics step (PyBullet clears external
        forces after each stepSimulation, so this runs every step a push lasts)."""
        schedule = self._push_schedule
        k = (self.time_ns - self.episode_start_ns) // self.dt_ns  # this step, counted from the episode start
        while self._pushes_started < len(schedule) and schedule[self._pushes_started].start_step <= k:
            self._pushes_started += 1
        while self._push_first < self._pushes_started and schedule[self._push_first].end_step <= k:
            self._push_first += 1
        for push in schedule[self._push_first:self._pushes_started]:
            if push.end_step > k:
                com = self.client.getLinkState(self.robot, push.link_index, computeForwardKinematics=True)[0]
                self.client.applyExternalForce(self.robot, push.link_index, push.force_n, com, pybullet.WORLD_FRAME)

    def push_schedule(self) -> list[dict[str, Any]]:
        """This episode's pushes (as reset's info lists them; empty when pushes were off at reset)."""
        # Summaries made once per schedule (the privileged env asks every decision); copies handed out.
        # Keyed on the schedule list itself: unstarted_pushes_withheld swaps in a shorter one.
        if self._push_summaries is None or self._push_summaries[0] is not self._push_schedule:
            self._push_summaries = (self._push_schedule, [push.summary() for push in self._push_schedule])
        return [{**push, "force_n": list(push["force_n"])} for push in self._push_summaries[1]]

    @contextlib.contextmanager
    def unstarted_pushes_withheld(self):
        """Within this block the pushes that have not started yet do not happen (those acting now go
        on). For a look-ahead from the present, as the PPO labeller's rollout: a label must not react
        to a push that starts after the observation it answers, which the student could not see
        coming. Leaves the schedule as it was (restore the world's state after such a rollout)."""
        schedule = self._push_schedule
        self._push_schedule = schedule[:self._pushes_started]
        try:
            yield
        finally:
            self._push_schedule = schedule

    def pushes_applied(self) -> int:
        """Pushes of this episode that have started so far."""
        return self._pushes_started

    # ------------------------------------------------------------------------------------------
    # snapshots
    def save_state(self) -> WorldState:
        """Snapshot everything that determines the rest of this episode (sim/snapshot.py): restoring
        it and giving the same commands gives bit-identical joint positions, outcome and time. Valid
        only within this episode on this world. Each snapshot holds a PyBullet state in memory until
        discard_state (or restore_state(discard=True)), or until the WorldState is garbage collected
        (~0.15 MiB each for arm6). Cost: saving ~0.6 ms (PyBullet serializes the world), restoring ~5 us
        (arm6, one core), against ~40 us per physics step."""
        state_id = int(self.client.saveState())
        target = np.asarray(self.task.target_position(), dtype=float).copy()
        rgba = getattr(self.task, "rgba", None)
        state = WorldState(
            world_serial=self._world_serial, episode_serial=self._episode_serial, bullet_state_id=state_id,
            time_ns=self.time_ns, episode_start_ns=self.episode_start_ns,
            outcome=None if self._outcome is None else dict(self._outcome),
            last_effort=self._last_effort.copy(), queue_active=self._queue.active.copy(),
            # the queue's pending commands: (due [ns], target) pairs, never changed in place
            queue_pending=tuple((due, q.copy()) for due, q in self._queue._pending),  # noqa: SLF001
            sent=tuple(self._sent),  # its arrays are never changed in place
            servo_reference=None if self._servo is None else self._servo.reference.copy(),
            servo_speed=None if self._servo is None else self._servo.speed.copy(),
            push_first=self._push_first, pushes_started=self._pushes_started, target=target,
            target_rgba=None if rgba is None else tuple(rgba),
            image_rng_state=self._image_rng.bit_generator.state,
            task_state=self.task.state() if hasattr(self.task, "state") else None,
        )
        self._live_states[state_id] = weakref.finalize(state, _remove_bullet_state, self.client, state_id,
                                                       self._live_states)
        return state

    def restore_state(self, state: WorldState, discard: bool = False) -> None:
        """Put the world back to `state` (from save_state in this episode; it stays usable for
        further restores unless `discard`, which frees it right away). Raises ValueError for a
        snapshot of another world or episode, or one already discarded."""
        if state.world_serial != self._world_serial or state.episode_serial != self._episode_serial:
            raise ValueError("restore_state: the snapshot is from another world or episode "
                             f"(snapshots are valid only within the episode they were taken in; now episode "
                             f"{self.episode_index})")
        if not self._is_live(state):
            raise ValueError(f"restore_state: the snapshot's PyBullet state {state.bullet_state_id} was discarded")
        self.client.restoreState(stateId=state.bullet_state_id)
        self.time_ns = state.time_ns
        self.episode_start_ns = state.episode_start_ns
        self._outcome = None if state.outcome is None else dict(state.outcome)
        self._last_effort = state.last_effort.copy()
        self._queue.reset(state.queue_active)
        for due, q in state.queue_pending:
            self._queue._pending.append((due, q.copy()))  # noqa: SLF001 - exact due times, not re-queued
        self._sent = deque(state.sent, maxlen=SENT_LOG_LENGTH)
        if self._servo is not None and state.servo_reference is not None and state.servo_speed is not None:
            self._servo.reference = state.servo_reference.copy()
            self._servo.speed = state.servo_speed.copy()
        self._push_first, self._pushes_started = state.push_first, state.pushes_started
        if hasattr(self.task, "set_target") and not np.array_equal(self.task.target_position(), state.target):
            self.task.set_target(self, state.target)
        if state.target_rgba is not None and hasattr(self.task, "set_color") \
                and tuple(getattr(self.task, "rgba", ())) != state.target_rgba:
            self.task.set_color(self, state.target_rgba)
        self._image_rng.bit_generator.state = state.image_rng_state
        if hasattr(self.task, "restore"):
            self.task.restore(state.task_state)
        if discard:
            self.discard_state(state)

    def discard_state(self, state: WorldState) -> None:
        """Free a snapshot's PyBullet state (client.removeState); restoring it afterwards raises.
        Discarding twice is harmless."""
        if self._is_live(state):
            self._live_states[state.bullet_state_id]()

    def _is_live(self, state: WorldState) -> bool:
        """Whether `state` is this world's and not yet discarded (PyBullet reuses freed state ids)."""
        finalizer = self._live_states.get(state.bullet_state_id)
        held = None if finalizer is None else finalizer.peek()
        return held is not None and held[0] is state

    # ------------------------------------------------------------------------------------------
    # observations
    def _states(self) -> list:
        return self.client.getJointStates(self.robot, self._all_idx)

    def joint_positions(self, all_joints: bool = False) -> np.ndarray:
        """Positions [rad] of joint_names (or all_joint_names)."""
        q = np.array([s[0] for s in self._states()])
        return q if all_joints else q[self._cmd_pos]

    def place_joints(self, positions: dict[str, float]) -> None:
        """Put the named joints at these positions [rad] without physics (zero velocity): a camera-only
        world showing an arm whose positions come from elsewhere. Unknown names are ignored."""
        for name, q in positions.items():
            if name in self.all_joint_names:
                self.client.resetJointState(self.robot, self._all_idx[self.all_joint_names.index(name)],
                                            float(q), 0.0)

    @property
    def home_positions(self) -> dict[str, float]:
        """Where every episode starts: {joint: [rad]} over all_joint_names (the sim params' home pose)."""
        return {n: float(q) for n, q in zip(self.all_joint_names, self._home_all, strict=True)}

    def start_followed_episode(self, time_ns: int, restart: bool = False) -> dict[str, Any]:
        """A camera-only world (no physics steps) whose arm is measured elsewhere: start the next
        episode (restart: episode 0 of the base seed) at `time_ns` [ns] of the caller's clock, which
        every later follow_measured() must share. Returns what reset() returns (target, seed)."""
        self.time_ns = int(time_ns)
        return self.restart() if restart else self.reset()

    def follow_measured(self, positions: dict[str, float], time_ns: int) -> dict[str, Any] | None:
        """Place the joints at measured `positions` [rad] at `time_ns` [ns] (the clock of
        start_followed_episode) and judge the running episode by the task's own condition, as a
        physics step would. Returns episode_outcome(): None while the episode runs."""
        self.time_ns = int(time_ns)
        self.place_joints(positions)
        if self._outcome is None:
            self._check_outcome()
        return self.episode_outcome()

    def joint_velocities(self, all_joints: bool = False) -> np.ndarray:
        """Velocities [rad/s] of joint_names (or all_joint_names)."""
        qd = np.array([s[1] for s in self._states()])
        return qd if all_joints else qd[self._cmd_pos]

    def joint_efforts(self, all_joints: bool = False) -> np.ndarray:
        """Motor torques of the last step [N*m] (what a real drive reports), joint_names order."""
        return self._last_effort.copy() if all_joints else self._last_effort[self._cmd_pos].copy()

    def link_pose(self, link: str) -> np.ndarray:
        """World pose (4, 4) of a URDF link frame [m]."""
        index = self._link_index[link]
        if index < 0:
            pos, quat = self.client.getBasePositionAndOrientation(self.robot)
            # the base's reported pose is its inertial frame; go back to the link frame
            inertial_pos, inertial_quat = self.client.getDynamicsInfo(self.robot, -1)[3:5]
            inv_pos, inv_quat = self.client.invertTransform(inertial_pos, inertial_quat)
            pos, quat = self.client.multiplyTransforms(pos, quat, inv_pos, inv_quat)
        else:
            state = self.client.getLinkState(self.robot, index, computeForwardKinematics=True)
            pos, quat = state[4], state[5]
        pose = np.eye(4)
        pose[:3, :3] = np.asarray(self.client.getMatrixFromQuaternion(quat)).reshape(3, 3)
        pose[:3, 3] = pos
        return pose

    def ee_position(self) -> np.ndarray:
        """Tool point (ee_link frame origin) (3,) [m], world frame."""
        # Pre-bound PyBullet call: the task asks every physics step.
        state = self._raw_ee_state() if self._ee_index >= 0 else None
        return np.asarray(state[4]) if state is not None else self.link_pose(self.ee_link)[:3, 3]

    def target_position(self) -> np.ndarray:
        """The task's privileged target (3,) [m], world frame."""
        return self.task.target_position()

    def camera_pose(self) -> np.ndarray:
        """World pose (4, 4) of the camera's optical frame (z forward, x right, y down), this
        episode's jitter included: from the URDF camera link (and the sim params' camera mount on it,
        where there is one: it moves with the link), else the sim params' fallback pose."""
        if self._camera_index is not None:
            pose = self.link_pose(self.params.camera.link) @ self._camera_mount
        else:
            cam = self.params.camera
            pose = np.eye(4)
            pose[:3, :3] = look_at_rotation(np.asarray(cam.fallback_position), np.asarray(cam.fallback_look_at))
            pose[:3, 3] = cam.fallback_position
        rand = self.randomization
        pose[:3, 3] = pose[:3, 3] + rand.camera_offset_m
        pose[:3, :3] = pose[:3, :3] @ rand.camera_rotation
        return pose

    def render(self, artifacts: bool = True) -> np.ndarray:
        """Camera image (H, W, 3) uint8 RGB at the camera model's resolution: a pinhole render with the
        calibration's K, then (artifacts) lens distortion, noise, blur, JPEG as configured."""
        cam = self.camera
        rand = self.randomization
        light = self.params.lighting
        _, _, rgba, _, _ = self.client.getCameraImage(
            cam.width, cam.height,
            viewMatrix=gl_list(view_matrix(self.camera_pose())),
            projectionMatrix=gl_list(projection_matrix(cam, self.params.camera.near_m, self.params.camera.far_m)),
            lightDirection=rand.light_direction.tolist(), lightColor=[1.0, 1.0, 1.0], lightDistance=3.0,
            lightAmbientCoeff=light.ambient, lightDiffuseCoeff=0.5 * rand.light_intensity,
            lightSpecularCoeff=0.05, shadow=int(light.shadow), renderer=pybullet.ER_TINY_RENDERER,
        )
        image = np.ascontiguousarray(np.asarray(rgba, dtype=np.uint8).reshape(cam.height, cam.width, 4)[:, :, :3])
        return self.finish_image(image) if artifacts else image

    def visual_state(self) -> tuple[np.ndarray, list[tuple[int, tuple, tuple]]]:
        """What a render shows that moves within an episode: the positions [rad] of all_joint_names
        and every other body's base pose (id, position [m], quaternion xyzw). With the episode's seed
        (appearance, camera jitter, objects), a world of the same construction renders the same image
        from it (sim/render_process.py)."""
        c = self.client
        bodies = [(body, *c.getBasePositionAndOrientation(body))
                  for body in (c.getBodyUniqueId(i) for i in range(c.getNumBodies())) if body != self.robot]
        return self.joint_positions(all_joints=True), bodies

    def show_visual_state(self, q_all: np.ndarray, bodies: list[tuple[int, tuple, tuple]]) -> None:
        """Put the robot and the other bodies where visual_state() of a twin world found them (no
        physics step: for rendering only; velocities are zeroed)."""
        c = self.client
        for index, q in zip(self._all_idx, q_all, strict=True):
            c.resetJointState(self.robot, index, float(q), 0.0)
        for body, position, orientation in bodies:
            c.resetBasePositionAndOrientation(body, position, orientation)

    def finish_image(self, image_rgb: np.ndarray) -> np.ndarray:
        """Apply this episode's camera artifacts (distortion, noise, blur, JPEG) to a pinhole render.

        Split from render() so a node can do this outside the physics thread (OpenCV releases the GIL).
        """
        config = replace(self.artifacts, noise_std=self.randomization.noise_std)
        return apply_artifacts(image_rgb, self.camera, config, self._image_rng)

    def close(self) -> None:
        """Disconnect the physics client and remove temporary files."""
        for finalizer in list(self._live_states.values()):
            finalizer.detach()  # saved states go with the client
        self._live_states.clear()
        with contextlib.suppress(pybullet.error):
            self.client.disconnect()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
