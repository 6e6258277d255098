"""leader_arm: an SO-101 leader arm (torque off, moved by hand) as the human's command, command/teleop.

Publishes   command/teleop (sensor_msgs/JointState: positions [rad] of the follower's joints, in `joints`
            order, clamped to the follower's URDF limits; velocities [rad/s]) at `rate_hz`, one sync read
            per period, stamped when the read completed; nothing for a period whose read failed (a
            timeout, a bad checksum, a silent servo), so a consumer's freshness watchdog holds the
            follower. The topic and message are those of a LeRobot dataset's action stream
            (datasets/lerobot.py), so a recorded leader session exports as a LeRobot dataset.
            ~/diagnostics (diagnostic_msgs/DiagnosticArray, every `diagnostics_period_s` and at once when
            the bus starts or stops failing): published samples, failed cycles, bus errors by kind,
            clamped samples per joint, servo temperatures; level ERROR with `bus_error` while reads fail.

At start it releases torque on every servo (written 0, read back) and never writes a goal position or
enables torque afterwards: the leader is read only. Calibration: the leader's own LeRobot calibration
file (it is a different arm from the follower); with `follower_calibration`, the gripper maps by
fraction of travel as LeRobot's teleoperation does. The logic is hardware/leader.py (no rclpy), reading
through the follower driver's code; this node declares, wires and paces it on its own thread against
absolute deadlines, like feetech_driver.

It issues no takeover: the supervisor's takeover and hand-back rules (docs/safety.md) are unchanged,
and a stop source (estop topic, gamepad or keyboard) stays required; docs/so101.md, "Leader arm".
"""
from __future__ import annotations

import sys
import threading
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy._rclpy_pybind11 import RCLError
from rclpy.node import Node
from sensor_msgs.msg import JointState

from .. import conversions as msgconv
from .. import topics
from ..core.report import Level
from ..hardware.bus import BusError, FeetechBus
from ..hardware.calibration import load_calibration
from ..hardware.driver import DriverConfig
from ..hardware.leader import LeaderArm
from .background import BackgroundLoop
from .common import RELIABLE_LATEST_QOS, now_ns, run_node
from .parameters import LEADER_ARM, declare_table
from .servo_arm import servo_arm_from_parameters, wait_for_next_period

NODE_NAME = "leader_arm"
TOPIC = topics.TELEOP_COMMAND.name


class LeaderArmNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        v = declare_table(self, LEADER_ARM)  # parameters.LEADER_ARM, docs/parameters.md
        source = f"{NODE_NAME} parameters"
        arm = servo_arm_from_parameters(v, source, "the leader arm's LeRobot calibration JSON")
        self.joints, maps = arm.joints, arm.maps
        follower = load_calibration(v["follower_calibration"]) if v["follower_calibration"] else None
        self._period_s = 1.0 / v["rate_hz"]
        self._bus = FeetechBus(v["port"], v["baudrate"], v["bus_timeout_s"])
        try:
            self.leader = LeaderArm(self._bus, maps, arm.lower, arm.upper,
                                    DriverConfig(check_homing_offset=v["check_homing_offset"]), follower)
            first = self.leader.start()
        except BaseException:
            self._bus.close()
            raise
        self._pub = self.create_publisher(JointState, TOPIC, RELIABLE_LATEST_QOS)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "~/diagnostics", RELIABLE_LATEST_QOS)
        self._published = 0
        self._failed_cycles = 0
        self._overruns = 0
        self._reported_failing = False
        self.get_logger().info(
            f"leader servos {self.leader.ids} on {v['port']} at {v['baudrate']} baud, torque off; "
            f"{TOPIC} at {v['rate_hz']} Hz, joints {list(self.joints)}, now "
            f"{[round(float(q), 4) for q in first.positions]} rad")
        self.create_timer(v["diagnostics_period_s"], self._publish_diagnostics)
        # An error out of the bus loop is logged and re-raised (the thread's excepthook prints it).
        self._bus_thread = BackgroundLoop(self, "leader_bus", self._bus_loop, join_timeout_s=1.0, reraise=True)

    def start_timed_work(self) -> None:
        """The bus loop starts here (common.START_TIMED_WORK: run_node calls it after the real-time
        knobs and the start-up collection, which would stall it), not in the constructor."""
        self._bus_thread.start()

    def _bus_loop(self, stop: threading.Event) -> None:
        deadline = time.monotonic() + self._period_s
        while not stop.is_set():
            try:
                sample = self.leader.read()
            except BusError as err:
                sample = None
                self._failed_cycles += 1
                self.get_logger().error(f"{err}; {TOPIC} stopped until reads succeed", throttle_duration_sec=1.0)
            if not rclpy.ok():
                return
            try:
                if sample is not None:
                    self._pub.publish(msgconv.make_joint_state(self.joints, sample.positions, now_ns(self),
                                                               sample.velocities))
                    self._published += 1
                failing = self.leader.last_error is not None
                if failing != self._reported_failing:  # at once on a transition, not per failed read
                    self._reported_failing = failing
                    self._publish_diagnostics()
            except RCLError:
                return  # the context went away between the check and the publish
            deadline, overran = wait_for_next_period(deadline, self._period_s)
            self._overruns += overran

    def _publish_diagnostics(self) -> None:
        leader = self.leader
        counters = self._bus.counters
        values: dict[str, object] = {
            "published": self._published, "failed_cycles": self._failed_cycles, "overruns": self._overruns,
            "reads": leader.counters.reads, "clamped": sum(leader.clamped.values()),
            "bus_timeouts": counters.timeouts, "bus_checksum_errors": counters.checksum_errors,
            "bus_bad_replies": counters.bad_replies,
        }
        for joint, count in leader.clamped.items():
            values[f"clamped.{joint}"] = count
        for servo_id, count in sorted(counters.by_servo.items()):
            values[f"failed_replies.id{servo_id}"] = count
        feedback = leader.last_feedback
        if feedback is not None:
            for k, joint in enumerate(self.joints):
                values[f"temperature_c.{joint}"] = f"{feedback.temperatures[k]:.0f}"
        level, message = Level.OK, "ok"
        if leader.last_error is not None:
            level, message = Level.ERROR, f"bus_error: {leader.last_error}"
            values["bus_error"] = str(leader.last_error)
        self._diagnostics_pub.publish(msgconv.diagnostic_array(NODE_NAME, values, now_ns(self), level=level,
                                                               message=message, hardware_id=self._bus.port))

    def close(self) -> None:
        """Stop the loop and close the port (nothing to hold: the leader never had torque)."""
        self._bus_thread.stop()
        self._bus.close()

    def destroy_node(self) -> None:
        self.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(lambda: LeaderArmNode(), args, num_threads=1))


if __name__ == "__main__":
    main()
