"""Write a sysid bag straight from a SimWorld (no ROS): the commands of an excitation sequence and the
joint_states the sim would publish, as `sim2real record` would store them. For benchmarks and for
trying `sysid fit` without a robot. No rclpy.

Commands are logged at the sim time they are applied; joint_states carry the sim time as header
stamp and are logged `transport_delay_s` later (plus jitter), on a recorder clock that starts at
`log_origin_ns`. With `publish_times`, every message's MCAP publish time is its send time (what
`sim2real record` stores from the DDS source timestamp) and commands are logged with jitter too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_typestore

from ..bags.writer import BagWriter
from ..sim.params import SimParams
from ..sim.world import SimWorld
from ..topics import JOINT_STATES, ROBOT_COMMAND
from .excite import ExcitationSequence

COMMAND_TOPIC = ROBOT_COMMAND.absolute
STATE_TOPIC = JOINT_STATES.absolute


def record_sim_bag(path: str | Path, params: SimParams, robot_description: str, sequence: ExcitationSequence,
                   dynamics: dict[str, Any] | None = None, joint_state_hz: float = 100.0,
                   transport_delay_s: float = 0.001, jitter_s: float = 0.0005, settle_s: float = 0.5,
                   log_origin_ns: int = 1_700_000_000 * 10**9, seed: int = 0, publish_times: bool = False) -> Path:
    """Play `sequence` (commands over all of the world's movable joints or the sequence's joints) in
    a SimWorld with `dynamics` overrides (SimWorld.set_dynamics keys) and write the bag to `path`."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    joint_state = store.types["sensor_msgs/msg/JointState"]
    header_t = store.types["std_msgs/msg/Header"]
    time_t = store.types["builtin_interfaces/msg/Time"]
    array_t = store.types["std_msgs/msg/Float64MultiArray"]
    layout_t = store.types["std_msgs/msg/MultiArrayLayout"]
    rng = np.random.default_rng(seed)
    world = SimWorld(params, robot_description, seed=seed, render=False, joints=list(sequence.joint_names))
    try:
        if dynamics:
            world.set_dynamics(**dynamics)
        # Move to the sequence's first target and settle before anything is recorded.
        world.set_command(sequence.positions[0])
        world.step(int(round(2.0 / params.physics.dt_s)))
        dt_ns = world.dt_ns
        state_period = int(round(1e9 / joint_state_hz / dt_ns))
        delay_ns = int(transport_delay_s * 1e9)
        commands = [(int(round(t * 1e9 / dt_ns)) + int(round(settle_s * 1e9 / dt_ns)), q)
                    for t, q in zip(sequence.times_s, sequence.positions, strict=True)]
        end_step = commands[-1][0] + int(round(settle_s * 1e9 / dt_ns))
        with BagWriter(Path(path)) as writer:
            writer.add_topic(COMMAND_TOPIC, "std_msgs/msg/Float64MultiArray")
            writer.add_topic(STATE_TOPIC, "sensor_msgs/msg/JointState")
            rows: list[tuple[int, str, bytes, int | None]] = []
            next_command = 0
            for step in range(end_step + 1):
                while next_command < len(commands) and commands[next_command][0] <= step:
                    q = commands[next_command][1]
                    world.set_command(q)
                    msg = array_t(layout=layout_t(dim=[], data_offset=0), data=np.asarray(q, dtype=np.float64))
                    sent = log_origin_ns + world.time_ns
                    jitter = int(abs(rng.normal(0.0, jitter_s)) * 1e9) if publish_times else 0
                    rows.append((sent + delay_ns + jitter, COMMAND_TOPIC,
                                 store.serialize_cdr(msg, "std_msgs/msg/Float64MultiArray"),
                                 sent if publish_times else None))
                    next_command += 1
                if step % state_period == 0:
                    stamp = world.time_ns
                    msg = joint_state(
                        header=header_t(stamp=time_t(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id=""),
                        name=list(world.all_joint_names), position=world.joint_positions(all_joints=True),
                        velocity=world.joint_velocities(all_joints=True), effort=world.joint_efforts(all_joints=True))
                    log = log_origin_ns + stamp + delay_ns + int(abs(rng.normal(0.0, jitter_s)) * 1e9)
                    rows.append((log, STATE_TOPIC, store.serialize_cdr(msg, "sensor_msgs/msg/JointState"),
                                 log_origin_ns + stamp if publish_times else None))
                world.step(1)
            for log, topic, data, published in sorted(rows, key=lambda r: r[0]):
                writer.write(topic, log, data, publish_time_ns=published)
    finally:
        world.close()
    return Path(path)
