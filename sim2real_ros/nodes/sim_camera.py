"""sim_camera: the sim's camera in a camera-only role, showing the arm where `joint_states` says it is.

Publishes   camera/image_raw (sensor_msgs/Image rgb8, stamped when the render started) and
            camera/camera_info (the calibration YAML's intrinsics, same stamp), sensor-data QoS, at
            `rate_hz`; nothing until the first joint_states arrives (no picture of an arm whose
            position is unknown).
Subscribes  joint_states (sensor_msgs/JointState): the measured positions of the arm.

What `sim2real launch robot --robot so101 --emulate` uses as its camera: the emulated servo bus is the
only model of where the arm is, and this node draws the sim's scene (table, target of the seed's
first episode, the sim camera with its artifacts) with the arm placed kinematically at the measured
positions. No physics runs here, so the picture cannot disagree with the bus. Rendering runs on its
own thread against absolute deadlines; a frame that is late is skipped, not queued.

With `episodes` on (`sim2real eval-sim --emulate`) it also runs the task's episodes on the measured
arm, as sim_node does on its simulated one: `sim/start_episode` (std_srvs/Trigger) starts the seed's
next episode from now (episode k has the seed eval-sim's episode k has: the same target), refused
unless the arm is within HOME_TOLERANCE_RAD of the home pose on every joint (where every sim episode
starts); every joint_states message then places the arm and asks the task's own condition (success
radius, timeout on this node's clock), and the outcome goes to `sim/episode` (the sim node's format)
once, with the target on `sim/target` (latched) at the start. No physics runs, so the judge sees
exactly the positions the servos reported.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_srvs.srv import Trigger

from .. import conversions as msgconv
from .. import topics
from ..core.errors import ConfigError
from ..core.perception.camera_model import load_calibration_yaml
from ..robots import get_robot, robot_description_for, sim_params_for
from ..sim.params import load_sim_params
from ..sim.world import SimWorld
from .background import BackgroundLoop
from .common import EVENTS_QOS, JOINT_STATE_QOS, LATCHED_QOS, SENSOR_QOS, now_ns, run_node
from .parameters import SIM_CAMERA, declare_table

NODE_NAME = "sim_camera"
# [rad] an episode starts only with the arm this near the home pose on every joint (sim episodes
# start exactly there; the servo's deadband and a teleoperated return leave a few ticks).
HOME_TOLERANCE_RAD = 0.05


class SimCameraNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        v = declare_table(self, SIM_CAMERA)  # parameters.SIM_CAMERA, docs/parameters.md
        source = f"{NODE_NAME} parameter"
        robot = str(v["robot"])
        get_robot(robot, source)
        params = load_sim_params(sim_params_for(robot, v["sim_params_file"], source))
        camera_file = v["camera_calibration"] or str(params.camera.calibration_path())
        camera = load_calibration_yaml(camera_file)
        rate_hz = float(v["rate_hz"]) or params.rates.camera_hz
        if rate_hz <= 0:
            raise ConfigError(source, "rate_hz", v["rate_hz"], "and the sim params' rates.camera_hz are 0")
        self.world = SimWorld(params, robot_description_for(robot, v["robot_description"], source),
                              seed=int(v["seed"]), render=True, camera=camera)
        self._period_s = 1.0 / rate_hz
        self._artifacts = bool(v["artifacts"])
        self._frame_id = str(v["frame_id"])
        self._lock = threading.Lock()
        self._world_lock = threading.Lock()  # one PyBullet client: the render thread and the episode judge
        self._positions: dict[str, float] | None = None
        self.frames = 0
        self.rejected = 0
        self._episodes = bool(v["episodes"])
        self._episode_running = False
        self.episodes_started = 0
        if self._episodes:
            self._episode_pub = self.create_publisher(DiagnosticArray, topics.SIM_EPISODE.name, EVENTS_QOS)
            self._target_pub = self.create_publisher(PointStamped, topics.SIM_TARGET.name, LATCHED_QOS)
            self.create_service(Trigger, topics.SIM_START_EPISODE, self._on_start_episode)
        self._image_pub = self.create_publisher(Image, topics.CAMERA_IMAGE.name, SENSOR_QOS)
        self._info_pub = self.create_publisher(CameraInfo, topics.CAMERA_INFO.name, SENSOR_QOS)
        self.create_subscription(JointState, topics.JOINT_STATES.name, self._on_joint_state, JOINT_STATE_QOS)
        self.get_logger().info(
            f"robot {robot} joints {self.world.all_joint_names}; camera {camera_file} {camera.width}x{camera.height} "
            f"at {rate_hz:g} Hz; scene of seed {int(v['seed'])}; following joint_states"
            + ("; episodes on sim/start_episode" if self._episodes else ""))
        self._loop = BackgroundLoop(self, "sim_camera", self._render_loop)
        self._loop.start()

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            sample = msgconv.joint_state_to_sample(msg)
        except msgconv.MessageError as err:
            self.rejected += 1
            self.get_logger().warning(f"joint_states rejected ({self.rejected} so far): {err}",
                                      throttle_duration_sec=5.0)
            return
        positions = dict(zip(sample.names, (float(q) for q in sample.positions), strict=True))
        with self._lock:
            self._positions = positions
        if self._episode_running:
            self._judge(positions)

    def _judge(self, positions: dict[str, float]) -> None:
        """The running episode with the arm at the measured `positions` [rad]: publish its outcome once over."""
        stamp = now_ns(self)
        with self._world_lock:
            if not self._episode_running:
                return
            outcome = self.world.follow_measured(positions, stamp)
            if outcome is None:
                return
            self._episode_running = False
        self._episode_pub.publish(msgconv.episode_outcome_message(outcome, stamp, NODE_NAME))
        self.get_logger().info(
            f"episode {outcome['episode']}: {outcome['reason']} after {outcome['duration_s']:.2f} s "
            f"(final distance {outcome['final_distance_m']:.3f} m, seed {outcome['seed']})")

    def _on_start_episode(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            positions = self._positions
        response.success = False
        if positions is None:
            response.message = "no joint_states yet: where the arm is is unknown"
            return response
        home = self.world.home_positions
        far = {n: q - home[n] for n, q in positions.items() if n in home and abs(q - home[n]) > HOME_TOLERANCE_RAD}
        if far:
            response.message = ("bring the arm home first: " + ", ".join(f"{n} {d:+.3f} rad" for n, d in far.items())
                                + f" from the home pose (tolerance {HOME_TOLERANCE_RAD} rad)")
            return response
        stamp = now_ns(self)
        with self._world_lock:
            info = self.world.start_followed_episode(stamp, restart=self.episodes_started == 0)
            self.world.place_joints(positions)
            target = self.world.target_position()
            self.episodes_started += 1
            self._episode_running = True
        point = PointStamped()
        point.header.stamp = msgconv.ns_to_stamp(stamp)
        point.header.frame_id = "world"
        point.point.x, point.point.y, point.point.z = (float(c) for c in target)
        self._target_pub.publish(point)
        response.success = True
        response.message = (f"episode {info['episode']} (seed {info['seed']}) started, target "
                            f"[{', '.join(f'{c:.3f}' for c in target)}] m")
        self.get_logger().info(response.message)
        return response

    def _render_loop(self, stop: threading.Event) -> None:
        deadline = time.monotonic()
        while not stop.is_set():
            deadline += self._period_s
            with self._lock:
                positions = self._positions
            if positions is not None:
                try:
                    self._render(positions)
                except Exception as err:  # noqa: BLE001 - a failed frame is logged, the next one tried
                    if self._loop.step_failed(err, "render failed"):
                        return
            wait = deadline - time.monotonic()
            if wait > 0:
                stop.wait(wait)
            else:
                deadline = time.monotonic()  # late: skip, do not burst to catch up

    def _render(self, positions: dict[str, float]) -> None:
        stamp = now_ns(self)
        with self._world_lock:
            self.world.place_joints(positions)
            image = self.world.render(artifacts=self._artifacts)
        if self._loop.stop_event.is_set():
            return
        self._image_pub.publish(msgconv.array_to_image(image, "rgb8", stamp, self._frame_id))
        self._info_pub.publish(msgconv.camera_model_to_info(self.world.camera, stamp, self._frame_id))
        self.frames += 1

    def destroy_node(self) -> None:
        if hasattr(self, "_loop"):
            self._loop.stop()
        if hasattr(self, "world"):
            self.world.close()
        super().destroy_node()


def main(args: Sequence[str] | None = None) -> None:
    sys.exit(run_node(lambda: SimCameraNode(), list(args) if args is not None else None, num_threads=1))


if __name__ == "__main__":
    main()
