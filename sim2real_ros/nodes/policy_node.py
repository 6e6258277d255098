"""policy_node: policy/image + joint_states -> policy/action_chunk (docs/design.md §2, §3).

With `image_input: camera` it takes the source camera (camera/image_raw + camera/camera_info)
instead and preprocesses in its own process (nodes/camera_front_end.py, camera_preprocessor's code):
no camera_preprocessor, one image hop and one process wake-up fewer on the camera path, and only
the images it observes are preprocessed (a third of a 30 Hz camera's for a 10 Hz policy). It then
publishes the images it observed on policy/image and policy/camera_info (after their chunk), for
viewers and recorders; the source camera's refusals (no camera_info yet, malformed, size mismatch)
count as bad_image, with their detail as camera_preprocessor reports it (`dropped_<reason>`).

Each image is paired with the joint state nearest its capture stamp (joint states are read from
the reader's history when an observation needs them, nodes/polled_subscription.py, rather than
taken one callback per message at 100 Hz), the checkpoint's policy runs
on the pair, and the chunk is published with header.stamp = the image stamp and point k at
time_from_start = k * dt. A fast policy (its last forward pass at most `inline_inference_max_ms`,
5 ms by default) runs in the image callback itself: no hand-off to another thread on the camera path
(chunks_inline counts those). A slower one, the first one, and an image waiting for its joint state
run in a thread of their own, so receiving (a single-threaded executor: no thread pool to dispatch
through, a third less CPU than the multi-threaded one) never waits for them; when inference falls
behind it takes the newest observation and counts the skipped ones ("superseded"), it never queues.
It observes at the rate the policy was trained at (`observation_period_s`, by default the
checkpoint's training observation period): images that come before the next observation is due are
dropped on arrival ("throttled", core.observation_pairing.ObservationThrottle); a policy trained on
10 Hz observations replans at 10 Hz from a 30 Hz camera (every third frame) or a 15 Hz one (two
frames, then one), as it did in training, and the machine does a third of the inference. Drops
(stale, unpaired, superseded, throttled, malformed input) are counted by reason and reported with
inference time, observation-to-chunk latency and the image-to-joint-state stamp offset of each
pairing on ~/diagnostics (policy_node/diagnostics) about once a second.

Every image is accounted for exactly once, in every report (core.policy_ledger.ImageLedger):
images_received = chunks_published + image drops (stale, unpaired, superseded, throttled, bad_image,
inference_error) + observations_waiting, where observations_waiting (0 or 1) is the image held for
its joint state or in inference at the moment of the report.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image, JointState
from trajectory_msgs.msg import JointTrajectory

from .. import topics
from ..conversions import (
    MessageError,
    array_to_image,
    camera_model_to_info,
    chunk_to_trajectory,
    diagnostic_array,
    image_to_array,
    joint_state_to_sample,
    reorder,
    stamp_to_ns,
)
from ..core.control.action_chunk import ActionChunk
from ..core.control.joint_history import buffer_length
from ..core.control.observation_pairing import (
    NS_PER_S,
    DropCounter,
    DropReason,
    ObservationPairer,
    ObservationThrottle,
    PairingConfig,
)
from ..core.errors import ConfigError
from ..core.perception.image_drops import DropLedger
from ..core.perception.preprocess_config import PreprocessConfig
from ..core.policy.backend import BACKENDS, load_policy
from ..core.policy.ledger import ImageLedger
from ..core.robot.joint_list import resolve_joint_list
from ..core.robot.urdf import RobotModel
from ..provenance import sim_params_mismatch, sim_params_version
from .background import BackgroundLoop
from .camera_front_end import CameraFrontEnd, ImageRefusedError
from .common import LATCHED_QOS, RELIABLE_LATEST_QOS, SENSOR_QOS, now_ns, run_node
from .parameters import POLICY_NODE, declare_table
from .polled_subscription import PolledSubscription

NODE_NAME = "policy_node"
POLICY_ENCODING = "rgb8"
IMAGE_INPUTS = ("policy", "camera")  # policy/image from camera_preprocessor | the source camera, preprocessed here
# A malformed-input warning per drop reason at most this often [s]: a broken publisher at 30 Hz
# must not flood the log, but must stay visible.
LOG_THROTTLE_S = 5.0
# joint_states as ros2_control's broadcaster publishes them (reliable), with the history to hold
# 1 s at 100 Hz between reads: images come at 10-30 Hz and the diagnostics timer reads at 1 Hz.
JOINT_STATE_POLL_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE)
JOINT_STATE_POLL_S = 0.002  # [s] between reads while an image waits for its joint state


@dataclass(frozen=True)
class PolicyNodeConfig:
    """Validated parameters of policy_node.

    checkpoint: checkpoint or exported ONNX policy file path. backend: what runs it, "auto" (by the
    file: checkpoint -> torch, .onnx -> onnxruntime, without importing torch), "torch" or
    "onnxruntime" (core/policy_backend.py). image_input: "policy" (policy/image, from
    camera_preprocessor) or "camera" (the source camera, preprocessed in this process).
    preprocess_config: preprocessing YAML the graph runs (the checkpoint must have been trained with
    the same). robot_description: URDF XML or path, source
    of the graph's joint names unless `joints` is given. device: "cpu" or "cuda[:i]".
    num_threads: torch (or onnxruntime intra-op) threads (0: the runtime's default).
    pairing_tolerance_s [s]: largest image/joint stamp difference paired.
    max_observation_age_s [s]: older observations are dropped.
    observation_period_s [s]: least time between the capture stamps of observations used (0: every
    image; < 0: the checkpoint's training observation period, or every image if it has none).
    inline_inference_max_ms [ms]: a policy whose last forward pass took at most this runs in the
    image callback itself: no hand-off to the inference thread (a wake-up and the interpreter changing
    hands, ~0.7 ms p50 of the camera path on the 2-core VM), while the images that come during it wait
    in the reader's queue (5 deep for the camera, newest only for policy/image) no longer than that. A
    slower one runs in the inference thread, so receiving never waits behind it (0: always there).
    diagnostics_period_s [s]: diagnostics publishing period.
    sim_params_file: the sim params of the sim this graph runs ("" on a robot): a version other than
    the checkpoint's training one is warned about, naming both.
    """

    checkpoint: str
    backend: str
    image_input: str
    preprocess_config: str
    robot_description: str
    joints: tuple[str, ...]
    device: str
    num_threads: int
    pairing_tolerance_s: float
    max_observation_age_s: float
    observation_period_s: float
    inline_inference_max_ms: float
    diagnostics_period_s: float
    sim_params_file: str

    def __post_init__(self) -> None:
        source = f"{NODE_NAME} parameter"
        if not self.checkpoint:
            raise ConfigError(source, "checkpoint", self.checkpoint, "must name a checkpoint file")
        if self.backend not in BACKENDS:
            raise ConfigError(source, "backend", self.backend, f"must be one of {list(BACKENDS)}")
        if self.image_input not in IMAGE_INPUTS:
            raise ConfigError(source, "image_input", self.image_input, f"must be one of {list(IMAGE_INPUTS)}")
        if not self.preprocess_config:
            raise ConfigError(source, "preprocess_config", self.preprocess_config, "must name a preprocess YAML")
        if not self.joints and not self.robot_description:
            raise ConfigError(source, "robot_description", self.robot_description,
                              "needed (URDF XML or path) unless 'joints' is set")
        if len(set(self.joints)) != len(self.joints):
            raise ConfigError(source, "joints", list(self.joints), "contains duplicate names")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(source, "device", self.device, "must be 'cpu' or 'cuda[:index]'")
        if self.num_threads < 0:
            raise ConfigError(source, "num_threads", self.num_threads, "must be >= 0 (0: torch default)")
        if not (math.isfinite(self.pairing_tolerance_s) and self.pairing_tolerance_s >= 0):
            raise ConfigError(source, "pairing_tolerance_s", self.pairing_tolerance_s, "must be >= 0 [s]")
        if not (math.isfinite(self.max_observation_age_s) and self.max_observation_age_s > 0):
            raise ConfigError(source, "max_observation_age_s", self.max_observation_age_s, "must be > 0 [s]")
        if self.sim_params_file and not Path(self.sim_params_file).is_file():
            raise ConfigError(source, "sim_params_file", self.sim_params_file, "file not found")
        if not (math.isfinite(self.observation_period_s) and self.observation_period_s <= 10.0):
            raise ConfigError(source, "observation_period_s", self.observation_period_s,
                              "must be a finite number <= 10 [s] (0: every image, < 0: the checkpoint's)")
        if not (math.isfinite(self.inline_inference_max_ms) and self.inline_inference_max_ms >= 0):
            raise ConfigError(source, "inline_inference_max_ms", self.inline_inference_max_ms,
                              "must be a finite number >= 0 [ms] (0: every inference in the inference thread)")
        if not (math.isfinite(self.diagnostics_period_s) and self.diagnostics_period_s > 0):
            raise ConfigError(source, "diagnostics_period_s", self.diagnostics_period_s, "must be > 0 [s]")


def _joint_list(value: object) -> tuple[str, ...]:
    """The `joints` parameter: a string array, or one comma-separated string ("" = from URDF)."""
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"{NODE_NAME} parameter", "joints", value, "must be a list of joint names")


@dataclass
class _PendingObservation:
    stamp_ns: int
    image: np.ndarray
    frame_id: str
    received_ns: int  # the image callback's time, the node's clock [ns]


class PolicyNode(Node):
    """Thin shell around core.checkpoint.LoadedPolicy (or core.onnx_policy.OnnxPolicy) and
    core.observation_pairing."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.config = self._read_parameters()
        cfg = self.config
        graph_joints = list(resolve_joint_list(cfg.joints, RobotModel.from_description(cfg.robot_description),
                                               f"{NODE_NAME} parameter")) if cfg.robot_description else list(cfg.joints)
        preprocess = PreprocessConfig.from_yaml(cfg.preprocess_config)
        # The checkpoint is checked against the graph before its model is built and warmed up: an
        # incompatible or hostile file costs the start-up nothing but reading its header.
        self.policy = load_policy(
            cfg.checkpoint, backend=cfg.backend, device=cfg.device, num_threads=cfg.num_threads or None, warmup=True,
            joint_names=graph_joints, preprocess=preprocess,
        )
        spec = self.policy.spec
        if cfg.sim_params_file:
            self._warn_on_sim_params(cfg.sim_params_file)
        self._joint_names = spec.joint_names
        self._times_s = np.arange(spec.chunk_length, dtype=float) * spec.dt_s
        self.observation_period_s = self._observation_period(cfg.observation_period_s)
        self._throttle = ObservationThrottle(self.observation_period_s)

        self._lock = threading.Lock()
        self._pairer = ObservationPairer(PairingConfig(
            tolerance_ns=int(round(cfg.pairing_tolerance_s * NS_PER_S)),
            max_age_ns=int(round(cfg.max_observation_age_s * NS_PER_S)),
            # Long enough to reach the policy's oldest history lag back at up to 1 kHz joint states.
            history=buffer_length(spec.joint_history_s),
        ))
        # Counts, drops, timing and the pending observation; every change under self._lock.
        self._ledger: ImageLedger[_PendingObservation] = ImageLedger()
        self._last_log_s: dict[DropReason, float] = {}
        self._last_camera_info_log_s = -math.inf

        # Inference in a thread of its own, woken by an event: a slow inference never delays taking
        # in the next image, and the executor stays single-threaded (cheap).
        receive_group = MutuallyExclusiveCallbackGroup()
        self._chunk_pub = self.create_publisher(JointTrajectory, topics.ACTION_CHUNK.name, RELIABLE_LATEST_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, "~/diagnostics", LATCHED_QOS)
        self._front_end: CameraFrontEnd | None = None
        if cfg.image_input == "camera":
            self._subscribe_to_camera(preprocess, receive_group)
        else:
            self.create_subscription(Image, topics.POLICY_IMAGE.name, self._on_image, RELIABLE_LATEST_QOS,
                                     callback_group=receive_group)
        # Joint states are read when an observation needs them, not taken per message (polled_subscription.py).
        self._joint_states = PolledSubscription(self, JointState, self.resolve_topic_name(topics.JOINT_STATES.name),
                                                JOINT_STATE_POLL_QOS, topics.JOINT_STATES.name)
        self._inference_wake = threading.Event()
        # One observation in inference at a time, whichever thread runs it (the callback or the loop).
        self._inference_running = threading.Lock()
        self._last_inference_ms = math.inf  # the latest forward pass [ms]; inf: none yet (the loop runs it)
        self._inference = BackgroundLoop(self, "policy_inference", self._inference_loop)
        self._inference.start()
        self.create_timer(cfg.diagnostics_period_s, self._on_diagnostics_timer, callback_group=receive_group)
        self.get_logger().info(
            f"policy {cfg.checkpoint} (hash {self.policy.checkpoint_hash}, {spec.architecture}) on "
            f"{self.policy.backend} {cfg.device}: "
            f"{spec.image_width}x{spec.image_height} image + {len(self._joint_names)} joints"
            + (f" (and their history at {list(spec.joint_history_s)} s)" if spec.joint_history_s else "")
            + f" -> {spec.chunk_length} points every {spec.dt_s} s; observing every "
            f"{self.observation_period_s:g} s" + (" (every image)" if self.observation_period_s == 0 else "")
            + (f"; preprocessing {self.resolve_topic_name(topics.CAMERA_IMAGE.name)} here"
               if self._front_end is not None else "")
        )

    def _subscribe_to_camera(self, preprocess: PreprocessConfig, group: MutuallyExclusiveCallbackGroup) -> None:
        """image_input camera: the source camera's topics (sensor-data QoS, as camera_preprocessor),
        the front end that preprocesses, and the policy/image publishers of what is observed."""
        self._front_end = CameraFrontEnd(
            preprocess, on_warning=lambda text: self.get_logger().warning(f"POLICY VIEW NOT COVERED: {text}"))
        self._image_drops = DropLedger()  # the source camera's refusals by reason (all count as bad_image)
        self._bad_camera_infos = 0
        self._policy_info = camera_model_to_info(preprocess.policy_camera, 0)
        self._policy_image_pub = self.create_publisher(Image, topics.POLICY_IMAGE.name, RELIABLE_LATEST_QOS)
        self._policy_info_pub = self.create_publisher(CameraInfo, topics.POLICY_CAMERA_INFO.name, RELIABLE_LATEST_QOS)
        self.create_subscription(CameraInfo, topics.CAMERA_INFO.name, self._on_camera_info, SENSOR_QOS,
                                 callback_group=group)
        self.create_subscription(Image, topics.CAMERA_IMAGE.name, self._on_image, SENSOR_QOS, callback_group=group)

    def _warn_on_sim_params(self, sim_params_file: str) -> None:
        """Warn (naming both versions) when the sim this graph runs is not the one the checkpoint
        was trained on: the policy still runs, its training figures may not hold."""
        current = sim_params_version(sim_params_file)
        warning = sim_params_mismatch(self.policy.spec.sim_params_version, current, self.config.checkpoint,
                                      sim_params_file)
        if warning:
            self.get_logger().warning(warning)

    def _observation_period(self, configured_s: float) -> float:
        """[s] between observations: the parameter, or (< 0) the checkpoint's training period."""
        if configured_s >= 0:
            return configured_s
        # Provenance is free-form (whatever trained the checkpoint wrote): any other shape means "none".
        config = self.policy.spec.provenance.get("config")
        rollout = config.get("rollout") if isinstance(config, dict) else None
        trained = rollout.get("obs_period_s") if isinstance(rollout, dict) else None
        if isinstance(trained, bool) or not isinstance(trained, (int, float)):
            return 0.0
        return float(trained) if 0 < trained <= 10 else 0.0

    # -- parameters -------------------------------------------------------------------------------
    def _read_parameters(self) -> PolicyNodeConfig:
        """Declare parameters.POLICY_NODE (docs/parameters.md) and validate them."""
        v = declare_table(self, POLICY_NODE)  # typed by rclpy: a double given as 1 is refused there
        return PolicyNodeConfig(**{**v, "joints": _joint_list(v["joints"])})

    @property
    def drops(self) -> DropCounter:
        """Drops by reason so far."""
        return self._ledger.drops

    # -- receiving ----------------------------------------------------------------------------------
    def _drop(self, count: Callable[[ImageLedger], None], reason: DropReason, detail: str = "") -> None:
        """Count a drop in the ledger (`count(ledger)` under the lock: image_refused,
        inference_dropped or input_dropped) and log it, at most once per LOG_THROTTLE_S per reason."""
        with self._lock:
            count(self._ledger)
        self._log_drop(reason, detail)

    def _log_drop(self, reason: DropReason, detail: str) -> None:
        """Log a counted drop, at most once per LOG_THROTTLE_S per reason."""
        now = time.monotonic()
        if now - self._last_log_s.get(reason, -math.inf) >= LOG_THROTTLE_S:
            self._last_log_s[reason] = now
            self.get_logger().warning(f"dropped ({reason.value}, {self.drops[reason]} so far): {detail}")

    def _on_image(self, msg: Image) -> None:
        received_ns = now_ns(self)
        stamp_ns = stamp_to_ns(msg.header.stamp)
        with self._lock:
            # An image arriving sooner than the observation period is dropped before any decoding
            # (two of every three frames of a 30 Hz camera for a 10 Hz policy). Every image is
            # counted in the same critical section as its outcome, so a report never sees one that
            # is neither waiting nor published nor dropped.
            throttled = not self._throttle.accept(stamp_ns)
            if throttled:
                self._ledger.image_throttled()
        if throttled:
            # Awake anyway: read the joint states now, so the next observation has few left to read.
            self._joint_states.drain(self._on_joint_state)
            return
        try:
            image = self._policy_image(msg)
        except ImageRefusedError as refused:
            with self._lock:
                self._image_drops.add(refused.reason)
            self._drop(lambda ledger: ledger.image_refused(DropReason.BAD_IMAGE), DropReason.BAD_IMAGE,
                       f"{refused} ({refused.reason.value})")
            return
        except MessageError as err:
            self._drop(lambda ledger: ledger.image_refused(DropReason.BAD_IMAGE), DropReason.BAD_IMAGE, str(err))
            return
        with self._lock:
            superseded = self._ledger.image_accepted(_PendingObservation(stamp_ns, image, msg.header.frame_id,
                                                                                 received_ns))
            joint_states = self._ledger.joint_states_received
        if superseded and joint_states == 0:
            # Images come but no joint state ever has: each image waits for its joint state and the
            # next one replaces it, so nothing is published; say so rather than stay silent.
            self._log_drop(DropReason.SUPERSEDED, f"no joint state received on {self._joint_states.topic_name} "
                                                  "yet; each image waits for one and the next replaces it")
        if self._last_inference_ms <= self.config.inline_inference_max_ms \
                and self._inference_running.acquire(blocking=False):
            try:
                waiting = self._on_inference(inline=True)
            finally:
                self._inference_running.release()
            if not waiting:
                return
        self._inference_wake.set()  # the loop: a slow policy, one in inference now, or a joint state to wait for

    def _policy_image(self, msg: Image) -> np.ndarray:
        """The policy's rgb8 image of an image message: preprocessed here (image_input camera;
        raises ImageRefusedError), else checked as policy/image (raises MessageError)."""
        if self._front_end is not None:
            return self._front_end.to_policy_image(msg)
        spec = self.policy.spec
        if msg.encoding != POLICY_ENCODING:
            raise MessageError(f"encoding '{msg.encoding}', policy/image must be {POLICY_ENCODING}")
        image = image_to_array(msg)
        if image.shape != (spec.image_height, spec.image_width, 3):
            raise MessageError(f"image is {msg.width}x{msg.height}, the policy needs "
                               f"{spec.image_width}x{spec.image_height}")
        return image

    def _on_camera_info(self, msg: CameraInfo) -> None:
        assert self._front_end is not None  # subscribed only with image_input camera
        try:
            camera = self._front_end.on_camera_info(msg)
        except MessageError as err:
            self._bad_camera_infos += 1
            self._log_camera_info_drop(str(err))
            return
        if camera is not None:
            self.get_logger().info(f"source camera {camera.width}x{camera.height} {camera.distortion_model}")

    def _log_camera_info_drop(self, detail: str) -> None:
        now = time.monotonic()
        if now - self._last_camera_info_log_s >= LOG_THROTTLE_S:
            self._last_camera_info_log_s = now
            self.get_logger().warning(f"camera_info dropped ({self._bad_camera_infos} so far): {detail}")

    def _on_joint_state(self, msg: JointState) -> None:
        with self._lock:
            self._ledger.joint_state_received()
        try:
            sample = joint_state_to_sample(msg, use_velocities=False)  # positions only (NaN velocity ok)
            positions = np.array(reorder(sample, self._joint_names), dtype=float)
        except MessageError as err:
            self._drop(lambda ledger: ledger.input_dropped(DropReason.BAD_JOINT_STATE), DropReason.BAD_JOINT_STATE,
                       str(err))
            return
        with self._lock:
            self._pairer.add_joint_state(sample.stamp_ns, positions)

    # -- inference ----------------------------------------------------------------------------------
    def _inference_loop(self, stop: threading.Event) -> None:
        waiting = False  # an image waits for its joint state: look again soon, not only on the next image
        while not stop.is_set():
            if not self._inference_wake.wait(JOINT_STATE_POLL_S if waiting else 0.1) and not waiting:
                continue
            self._inference_wake.clear()
            try:
                with self._inference_running:
                    waiting = self._on_inference()
            except Exception as err:  # noqa: BLE001 - the context shutting down under us ends the loop
                if self._inference.step_failed(err, "inference thread"):
                    return

    def destroy_node(self) -> None:
        if hasattr(self, "_inference"):
            self._inference.stop()
        if hasattr(self, "_joint_states"):
            self._joint_states.close()
        super().destroy_node()

    def _on_inference(self, inline: bool = False) -> bool:
        """Pair the pending image and run the policy on it; True if it waits for its joint state.
        Called with self._inference_running held; inline: from the image callback."""
        self._joint_states.drain(self._on_joint_state)
        with self._lock:
            observation = self._ledger.pending
            if observation is None:
                return False
            pairing = self._pairer.pair(observation.stamp_ns, now_ns(self))
            if pairing.wait:
                return True  # it stays pending: the matching joint state may still arrive
            # The joint positions before the image, for a policy with history (its spec's lags).
            history = self._pairer.history(observation.stamp_ns, self.policy.spec.joint_history_s) \
                if pairing.positions is not None and self.policy.spec.joint_history_s else None
            self._ledger.start_inference()
        if pairing.drop is not None or pairing.positions is None:
            reason = pairing.drop or DropReason.UNPAIRED
            self._drop(lambda ledger: ledger.inference_dropped(reason), reason,
                       f"image stamped {observation.stamp_ns * 1e-9:.3f} s")
            return False
        start = time.perf_counter()
        started_ns = now_ns(self)
        try:
            targets = self.policy.select_action(observation.image, pairing.positions, history)
        except (ValueError, RuntimeError) as err:
            self._drop(lambda ledger: ledger.inference_dropped(DropReason.INFERENCE_ERROR), DropReason.INFERENCE_ERROR,
                       str(err))
            return False
        inference_ms = (time.perf_counter() - start) * 1e3
        self._last_inference_ms = inference_ms
        chunk = ActionChunk(self._joint_names, observation.stamp_ns, self._times_s, targets)
        self._chunk_pub.publish(chunk_to_trajectory(chunk))
        latency_ms = (now_ns(self) - observation.stamp_ns) / 1e6
        offset_ms = (observation.stamp_ns - pairing.joint_stamp_ns) / 1e6
        with self._lock:  # the diagnostics timer reads these from the other thread
            self._ledger.chunk_published(inference_ms, latency_ms, offset_ms,
                                         (observation.received_ns - observation.stamp_ns) / 1e6,
                                         (started_ns - observation.received_ns) / 1e6, inline=inline)
        if self._front_end is not None:
            # What the policy saw, for viewers and recorders: after its chunk, off the camera path.
            out = array_to_image(observation.image, POLICY_ENCODING, observation.stamp_ns, observation.frame_id)
            self._policy_info.header = out.header
            self._policy_image_pub.publish(out)
            self._policy_info_pub.publish(self._policy_info)
        return False

    # -- diagnostics --------------------------------------------------------------------------------
    def _on_diagnostics_timer(self) -> None:
        self._joint_states.drain(self._on_joint_state)  # keeps the count and the history current without images
        with self._lock:
            pending = self._ledger.pending is not None
            diagnostics = self.diagnostics()
        if pending:
            # Re-examine a waiting image: it may have gone stale while no joint state came.
            self._inference_wake.set()
        self._diag_pub.publish(diagnostics)

    def diagnostics(self) -> DiagnosticArray:
        """The node's DiagnosticArray: chunks, inference time, latency, drops by reason (call with
        the lock held; it also starts the next reporting period)."""
        report = self._ledger.report()
        values = {
            "checkpoint": self.config.checkpoint,
            "checkpoint_hash": self.policy.checkpoint_hash,
            "backend": self.policy.backend,
            "device": self.config.device,
            **report.values,
        }
        if self._front_end is not None:
            values.update({"image_input": "camera", **self._image_drops.values(),
                           "bad_camera_info": self._bad_camera_infos, **self._front_end.coverage_values()})
        return diagnostic_array(f"{self.get_name()}: inference", values, now_ns(self), level=report.level,
                                message=report.message, hardware_id=self.policy.checkpoint_hash)


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(lambda: PolicyNode(), args, num_threads=1))


if __name__ == "__main__":
    main()
