"""sim_node: the PyBullet sim as the robot at the bottom of the graph (docs/design.md §2, §3).

Publishes   clock (rosgraph_msgs/Clock, `clock_rate_hz`), joint_states (sensor_msgs/JointState, all
            movable URDF joints: positions, velocities, efforts), camera/image_raw (rgb8, stamp =
            capture time) and camera/camera_info (the calibration YAML's intrinsics), sim/target
            (geometry_msgs/PointStamped, latched), sim/episode (diagnostic_msgs/DiagnosticArray, one
            status "episode" per outcome; with `pushes` also pushes_applied), sim/status (real-time
            factor, command counters, ~1 Hz).
Subscribes  forward_position_controller/commands (std_msgs/Float64MultiArray over `joints`), exactly
            what a ros2_control forward position controller accepts. Wrong-length or NaN/Inf commands
            are rejected, counted and reported; they never move the robot.
Services    sim/reset (std_srvs/Trigger): new episode (robot home, new target, new randomization).
            sim/restart (std_srvs/Trigger): the same, but the new episode is episode 0 of `seed`, so
            episode k of a graph run is the core path's episode k (eval-sim --graph uses it).
            After every episode reset (the service or auto_reset) commands are ignored, and counted
            (`commands_ignored_after_reset`), until one comes within RESYNC_TOLERANCE_RAD of the home
            pose: the commands still in flight aim at the pose before the teleport (core.control.reset_gate).

Physics runs in its own thread, paced to wall-clock time by default (`pacing`: realtime, lockstep:
each camera frame waits for a command, fast: as fast as the CPU allows). The camera renders in a
twin world of its own process (sim/render_process.py): the physics thread only hands it the frame's
visual state, once the previous frame is out (a machine too slow to render at the camera rate slows
the real-time factor rather than dropping frames).
Lens distortion and noise are applied in a camera thread, so neither stalls physics.
"""
from __future__ import annotations

import math
import queue
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from .. import conversions as msgconv
from .. import topics
from ..core.control.reset_gate import RESYNC_TOLERANCE_RAD as RESYNC_TOLERANCE_RAD  # re-exported
from ..core.control.reset_gate import gate_command, reset_moved_arm
from ..core.errors import ConfigError
from ..core.perception.camera_model import load_calibration_yaml
from ..core.robot.joint_list import resolve_joint_list
from ..core.robot.urdf import RobotModel
from ..robots import get_robot, robot_description_for, sim_params_for
from ..sim.params import load_sim_params, with_task
from ..sim.render_process import RenderedFrame, RenderProcess, RenderProcessError
from ..sim.schedule import MultiRateSchedule, RateReporter, RealtimePacer, period_ns
from ..sim.world import SimWorld
from ..topics import SimStatus
from .background import BackgroundLoop
from .common import (
    CLOCK_QOS,
    EVENTS_QOS,
    JOINT_STATE_QOS,
    LATCHED_QOS,
    RELIABLE_LATEST_QOS,
    SENSOR_QOS,
    run_node,
)
from .parameters import SIM_NODE, declare_table

NODE_NAME = "sim_node"
PACINGS = ("realtime", "lockstep", "fast")
MAX_LAG_NS = 250_000_000  # int [ns] behind wall time by more than this: stop catching up (the RTF shows it)
STATUS_PERIOD_NS = 1_000_000_000  # int [ns] wall time between sim/status messages
RTF_LOG_PERIOD_NS = 10_000_000_000  # int [ns] wall time between real-time factor log lines
RENDER_WAIT_S = 10.0  # [s] longest wait for the previous frame's render before the next frame is dropped


@dataclass(frozen=True)
class SimNodeConfig:
    """Validated parameters of the sim node (parameters.SIM_NODE, docs/parameters.md, give their meaning).
    robot_description and sim_params_file are resolved: an empty parameter became the robot's file."""

    robot: str
    robot_description: str
    sim_params_file: str
    task: str
    camera_calibration: str
    ee_link: str
    joints: tuple[str, ...]
    seed: int
    randomize: bool
    auto_reset: bool
    pacing: str
    camera_render: str
    real_time_factor: float
    joint_state_rate_hz: float
    camera_rate_hz: float
    clock_rate_hz: float
    camera_enabled: bool
    lockstep_timeout_s: float
    world_frame_id: str
    camera_frame_id: str
    pushes: bool
    source: str = NODE_NAME

    def __post_init__(self) -> None:
        def bad(field: str, problem: str) -> ConfigError:
            return ConfigError(f"{self.source} parameter", field, getattr(self, field), problem)

        get_robot(self.robot, f"{self.source} parameter")
        if not self.robot_description.strip():
            raise bad("robot_description", "must be URDF XML or a URDF file path")
        if self.pacing not in PACINGS:
            raise bad("pacing", f"must be one of {PACINGS}")
        for name in ("real_time_factor", "lockstep_timeout_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise bad(name, "must be a finite number > 0")
        for name in ("joint_state_rate_hz", "camera_rate_hz", "clock_rate_hz"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise bad(name, "must be >= 0 (0 = the sim params' rate)")
        if self.seed < 0:
            raise bad("seed", "must be >= 0")


class SimNode(Node):
    """Thin ROS shell around sim.world.SimWorld."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.config = self._declare()
        cfg = self.config
        params = load_sim_params(cfg.sim_params_file or None)
        if cfg.task:  # a student's own task on a sim params file of another (its robot's reach by default)
            params = with_task(params, cfg.task, f"{NODE_NAME} parameter task")
        camera_file = cfg.camera_calibration or str(params.camera.calibration_path())
        camera = load_calibration_yaml(camera_file)
        world_kwargs = {"params": params, "robot_description": cfg.robot_description, "seed": cfg.seed,
                        "joints": list(cfg.joints) or None, "ee_link": cfg.ee_link or None, "camera": camera,
                        "randomize": cfg.randomize}
        self.world = SimWorld(**world_kwargs, render=cfg.camera_enabled, pushes=cfg.pushes)
        # The camera renders in a twin world of its own process, off the physics loop (render_process.py)
        self._renderer = RenderProcess(world_kwargs) if cfg.camera_enabled and cfg.camera_render == "process" else None
        self._inline_frames: queue.Queue = queue.Queue(maxsize=2)  # camera_render inline: physics -> camera
        if self._renderer is not None:
            self._renderer.start_episode(self.world.episode_seed, cfg.randomize)
        self.params = params
        rates = params.rates
        self._js_period_ns = period_ns(cfg.joint_state_rate_hz or rates.joint_states_hz)
        self._cam_period_ns = period_ns(cfg.camera_rate_hz or rates.camera_hz)
        self._clock_period_ns = period_ns(cfg.clock_rate_hz or rates.clock_hz)
        self._lock = threading.Lock()  # guards the world: physics thread vs command/reset callbacks
        self._stop = threading.Event()
        self._command_after_frame = threading.Event()
        self._frames_started = 0  # captures begun (only the first keeps an earlier command)
        self._counters = {"commands_accepted": 0, "commands_rejected": 0, "frames_published": 0,
                          "frames_dropped": 0, "wall_lag_resets": 0, "episodes_finished": 0,
                          "commands_ignored_after_reset": 0, "render_errors": 0}
        self._resync = False  # an episode reset moved the arm; commands wait until one rejoins it
        self._last_rejection = ""
        self._last_command_ns = -1
        # The reset (world.episode_serial) whose outcome was published: episode indices repeat after a
        # sim/restart, so an index alone would hide the outcome of a restarted episode 0 once episode
        # 0's was published (the graph evaluation then waited forever when it armed in episode 1).
        self._published_outcome_serial = -1
        self._rtf = 0.0

        self._clock_pub = self.create_publisher(Clock, topics.CLOCK.name, CLOCK_QOS)
        self._js_pub = self.create_publisher(JointState, topics.JOINT_STATES.name, JOINT_STATE_QOS)
        self._image_pub = self.create_publisher(Image, topics.CAMERA_IMAGE.name, SENSOR_QOS)
        self._info_pub = self.create_publisher(CameraInfo, topics.CAMERA_INFO.name, SENSOR_QOS)
        self._target_pub = self.create_publisher(PointStamped, topics.SIM_TARGET.name, LATCHED_QOS)
        self._episode_pub = self.create_publisher(DiagnosticArray, topics.SIM_EPISODE.name, EVENTS_QOS)
        self._status_pub = self.create_publisher(DiagnosticArray, topics.SIM_STATUS.name, LATCHED_QOS)
        self.create_subscription(Float64MultiArray, topics.ROBOT_COMMAND.name, self._on_command,
                                 RELIABLE_LATEST_QOS)
        self.create_service(Trigger, topics.SIM_RESET, self._on_reset)
        self.create_service(Trigger, topics.SIM_RESTART, self._on_restart)

        log = self.get_logger()
        log.info(f"sim params {params.source} version {params.version}; robot {cfg.robot} {self.world.model.source} "
                 f"joints {self.world.joint_names} ee_link {self.world.ee_link}; camera {camera_file} "
                 f"{camera.width}x{camera.height} rendered {cfg.camera_render}; pacing {cfg.pacing}; "
                 f"randomize {cfg.randomize}; "
                 f"pushes {cfg.pushes}; seed {cfg.seed}")
        self._publish_target()
        # Physics and the camera's finishing touches share one stop event.
        self._loops = [BackgroundLoop(self, "sim_physics", lambda _stop: self._run_physics(), reraise=True,
                                      stop_event=self._stop).start()]
        if cfg.camera_enabled:
            camera = BackgroundLoop(self, "sim_camera", lambda _stop: self._camera_loop(camera), stop_event=self._stop)
            self._loops.append(camera.start())

    # ------------------------------------------------------------------------------------------
    def _declare(self) -> SimNodeConfig:
        config = self._declare_parameters()
        # The command array maps by index: each joint named once, each one the URDF moves.
        model = RobotModel.from_description(config.robot_description)
        return replace(config, joints=resolve_joint_list(config.joints, model, f"{NODE_NAME} parameter"))

    def _declare_parameters(self) -> SimNodeConfig:
        """Declare parameters.SIM_NODE (docs/parameters.md) and validate them into a SimNodeConfig."""
        v = declare_table(self, SIM_NODE)
        source = f"{NODE_NAME} parameter"
        robot = str(v["robot"])
        # The parameters are the config's fields (typed by rclpy); an empty robot_description or
        # sim_params_file becomes the robot's file.
        return SimNodeConfig(**{
            **v, "robot_description": robot_description_for(robot, v["robot_description"], source),
            "sim_params_file": sim_params_for(robot, v["sim_params_file"], source), "joints": tuple(v["joints"])})

    # ------------------------------------------------------------------------------------------
    # callbacks (executor threads)
    def _on_command(self, msg: Float64MultiArray) -> None:
        try:
            q = msgconv.position_command_to_array(msg, len(self.world.joint_names))
        except msgconv.MessageError as err:
            self._reject(str(err))
            return
        with self._lock:
            follow = True
            if self._resync:  # only after a reset that moved the arm: reading the arm is a sim query
                gate = gate_command(self._resync, q, self.world.joint_positions())
                self._resync, follow = gate.awaiting, gate.follow
            if not follow:
                self._counters["commands_ignored_after_reset"] += 1
            else:
                self.world.set_command(q)
                self._last_command_ns = self.world.time_ns
                self._counters["commands_accepted"] += 1
        self._command_after_frame.set()

    def _reset_world(self, restart: bool = False) -> dict[str, Any]:
        """A new episode (call with the lock held); restart: episode 0 of the seed again. When it moved
        the arm, commands wait until one rejoins it (core.control.reset_gate)."""
        before = self.world.joint_positions()
        reset = self.world.restart if restart else self.world.reset
        info = reset(randomize=self.config.randomize)
        if self._renderer is not None:  # under the lock: the twin starts it before the next frame
            self._renderer.start_episode(self.world.episode_seed, self.config.randomize)
        self._resync = reset_moved_arm(before, self.world.joint_positions())
        return info

    def _reject(self, reason: str) -> None:
        self._counters["commands_rejected"] += 1
        self._last_rejection = reason
        self.get_logger().warning(f"rejected command ({self._counters['commands_rejected']} so far): {reason}",
                                  throttle_duration_sec=2.0)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        del request
        return self._new_episode(response, restart=False)

    def _on_restart(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        del request
        return self._new_episode(response, restart=True)

    def _new_episode(self, response: Trigger.Response, restart: bool) -> Trigger.Response:
        with self._lock:
            info = self._reset_world(restart)
        self._publish_target()
        response.success = True
        target = np.round(info["target"], 4).tolist()
        response.message = f"episode {info['episode']} seed {info['seed']} target {target}"
        self.get_logger().info(f"{'restart' if restart else 'reset'}: {response.message}")
        return response

    # ------------------------------------------------------------------------------------------
    # physics thread
    def _run_physics(self) -> None:
        """The multi-rate loop (core.sim_schedule): publish what is due at the world's time, step
        to the next output, pace against the wall clock."""
        world, cfg = self.world, self.config
        dt_ns = world.dt_ns
        schedule = MultiRateSchedule(world.time_ns, self._clock_period_ns, self._js_period_ns,
                                     self._cam_period_ns if cfg.camera_enabled else None)
        wall = time.monotonic_ns()
        pacer = RealtimePacer(cfg.real_time_factor, MAX_LAG_NS, wall, world.time_ns)
        reporter = RateReporter(STATUS_PERIOD_NS, RTF_LOG_PERIOD_NS, wall, world.time_ns)
        while not self._stop.is_set():
            now = world.time_ns
            due = schedule.due(now)
            if due.clock:
                self._clock_pub.publish(Clock(clock=msgconv.ns_to_stamp(now)))
            if due.joint_states:
                self._publish_joint_states()
            self._handle_episode()
            if due.camera:
                self._capture_frame()
                if cfg.pacing == "lockstep":
                    self._command_after_frame.wait(cfg.lockstep_timeout_s)
                    pacer.rebase(time.monotonic_ns(), world.time_ns)
            report = reporter.poll(time.monotonic_ns(), world.time_ns)
            if report is not None:
                self._rtf = report.real_time_factor
                self._publish_status()
                if report.log:
                    self.get_logger().info(f"real-time factor {self._rtf:.2f}, sim time {world.time_ns / 1e9:.1f} s")
            steps = schedule.steps(world.time_ns, dt_ns)
            with self._lock:
                world.step(steps)
            if cfg.pacing == "realtime":
                pace = pacer.after_step(world.time_ns, time.monotonic_ns())
                if pace.wait_ns > 0:
                    self._stop.wait(pace.wait_ns / 1e9)
                    continue
                if pace.lag_reset:
                    # Too slow to keep up: run on from here rather than racing to catch up.
                    self._counters["wall_lag_resets"] += 1
            # Behind (or not pacing): give the command/reset callbacks waiting on the world lock a turn
            # (a Python lock is not fair: this thread would otherwise take it straight back).
            time.sleep(0)

    def _publish_joint_states(self) -> None:
        world = self.world
        with self._lock:
            stamp = world.time_ns
            q = world.joint_positions(all_joints=True)
            qd = world.joint_velocities(all_joints=True)
            effort = world.joint_efforts(all_joints=True)
        self._js_pub.publish(msgconv.make_joint_state(world.all_joint_names, q, stamp, qd, effort))

    def _capture_frame(self) -> None:
        # Lockstep: a command that arrives while this frame renders already answers it. The first
        # frame keeps a command that came before it: the physics thread and the executor start
        # together, and a command taken before this thread reached frame 0 (a test's, published as
        # soon as the subscription matched; seen once in CI under load) would otherwise be thrown
        # away and the sim would wait lockstep_timeout_s for another.
        if self._frames_started:
            self._command_after_frame.clear()
        self._frames_started += 1
        if self._renderer is None:  # camera_render inline: in this thread, under the world lock
            with self._lock:
                stamp = self.world.time_ns
                image = self.world.render(artifacts=False)
            try:
                self._inline_frames.put_nowait(RenderedFrame(stamp, image))
            except queue.Full:
                self._counters["frames_dropped"] += 1
            return
        # The previous frame must be out first (frames keep the camera's sim-time period); a machine
        # that renders within the period never waits here. A render process gone silent drops frames.
        if not self._renderer.wait_idle(RENDER_WAIT_S):
            self._counters["frames_dropped"] += 1
            return
        with self._lock:
            stamp = self.world.time_ns
            q_all, bodies = self.world.visual_state()
            # sent under the lock, so an episode reset is always sent before or after the whole frame
            sent = self._renderer.request(stamp, q_all, bodies)
        if not sent:
            self._counters["frames_dropped"] += 1

    def _handle_episode(self) -> None:
        world = self.world
        with self._lock:
            outcome = world.episode_outcome()
            serial = world.episode_serial
            if outcome is None or serial == self._published_outcome_serial:
                return
            stamp = world.time_ns
            # the task's category (missed_grasp, dropped, ...): what validate compares with real runs
            outcome = {**outcome, "failure": world.task.classify_failure(world, outcome)}
        self._published_outcome_serial = serial
        self._counters["episodes_finished"] += 1
        self._episode_pub.publish(msgconv.episode_outcome_message(outcome, stamp, NODE_NAME))
        self.get_logger().info(
            f"episode {outcome['episode']}: {outcome['reason']} after {outcome['duration_s']:.2f} s "
            f"(final distance {outcome['final_distance_m']:.3f} m, seed {outcome['seed']})")
        if self.config.auto_reset:
            with self._lock:
                self._reset_world()
            self._publish_target()

    def _publish_target(self) -> None:
        with self._lock:
            target = self.world.target_position()
            stamp = self.world.time_ns
        msg = PointStamped()
        msg.header.stamp = msgconv.ns_to_stamp(stamp)
        msg.header.frame_id = self.config.world_frame_id
        msg.point.x, msg.point.y, msg.point.z = (float(v) for v in target)
        self._target_pub.publish(msg)

    def _publish_status(self) -> None:
        world = self.world
        status = SimStatus(
            real_time_factor=self._rtf, sim_time_s=world.time_ns / 1e9, pacing=self.config.pacing,
            episode=world.episode_index, sim_params_version=self.params.version,
            actuation_latency_s=world.actuation_latency_s, last_command_sim_ns=self._last_command_ns,
            last_rejection=self._last_rejection, counters=dict(self._counters))
        self._status_pub.publish(msgconv.payload_to_diagnostics(status.to_status(NODE_NAME), world.time_ns))

    # ------------------------------------------------------------------------------------------
    # camera thread
    def _camera_loop(self, loop: BackgroundLoop) -> None:
        model = self.world.camera
        frame_id = self.config.camera_frame_id
        while not self._stop.is_set():
            try:
                frame = self._next_frame(timeout_s=0.1)
            except RenderProcessError as err:
                if self._stop.is_set() or not self.context.ok():
                    return
                self._counters["render_errors"] += 1
                self.get_logger().error(f"camera: {err}", throttle_duration_sec=5.0)
                if "exited" in str(err) or "went away" in str(err):
                    return  # no camera any more: the policy's image watchdog holds the arm
                continue
            if frame is None:
                continue
            stamp = frame.stamp_ns
            try:
                image = self.world.finish_image(frame.image)
                self._image_pub.publish(msgconv.array_to_image(image, "rgb8", stamp, frame_id))
                self._info_pub.publish(msgconv.camera_model_to_info(model, stamp, frame_id))
                self._counters["frames_published"] += 1
            except Exception as err:  # noqa: BLE001 - a failed frame is logged, the next one tried
                if loop.step_failed(err, "camera thread"):
                    return

    # ------------------------------------------------------------------------------------------
    def _next_frame(self, timeout_s: float) -> RenderedFrame | None:
        """The next rendered frame (from the render process, or inline from the physics thread)."""
        if self._renderer is not None:
            return self._renderer.receive(timeout_s)
        try:
            return self._inline_frames.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def destroy_node(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
            self._command_after_frame.set()
        for loop in getattr(self, "_loops", []):
            loop.stop()
        if getattr(self, "_renderer", None) is not None:
            self._renderer.close()
        if hasattr(self, "world"):
            self.world.close()
        super().destroy_node()


def main(args: Sequence[str] | None = None) -> None:
    # Physics and camera have threads of their own; the executor's callbacks (commands, reset) share
    # the default mutually exclusive group, where a thread pool adds overhead and no parallelism.
    sys.exit(run_node(lambda: SimNode(), list(args) if args is not None else None, num_threads=1))


if __name__ == "__main__":
    main()
