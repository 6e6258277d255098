"""viz core and `sim2real bag export-foxglove`: forward kinematics against PyBullet, the exported
MCAP read back with the `mcap` library (schemas, robot model, transforms, counts), bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
from mcap.reader import make_reader
from viz_bags import MODEL, MS, N_CHUNKS, N_IMAGES, N_JOINTS, NAMES, T0, URDF, q, write_bag

from sim2real_ros.cli.main import main as cli_main
from sim2real_ros.paths import urdf_path
from sim2real_ros.viz import channels as ch
from sim2real_ros.viz.kinematics import ArmKinematics, LinkTransform, compose, matrix_to_quaternion
from sim2real_ros.viz.layout import layout, panel_ids
from sim2real_ros.viz.source import open_bag_view, tool_link_for


def _read_mcap(path):
    with open(path, "rb") as handle:
        reader = make_reader(handle)
        summary = reader.get_summary()
        schemas = {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values()}
        counts = {summary.channels[cid].topic: n for cid, n in summary.statistics.channel_message_counts.items()}
        messages = [(channel.topic, message) for _, channel, message in reader.iter_messages()]
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    return schemas, counts, messages, metadata, summary


def _decoder(summary, topic):
    """A protobuf class for `topic` from the schema stored in the MCAP (as Foxglove decodes it)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    channel = next(c for c in summary.channels.values() if c.topic == topic)
    schema = summary.schemas[channel.schema_id]
    files = descriptor_pb2.FileDescriptorSet.FromString(schema.data)
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(schema.name))


def test_forward_kinematics_matches_pybullet_and_quaternions_round_trip():
    from sim2real_ros.sim.params import load_sim_params
    from sim2real_ros.sim.world import SimWorld

    world = SimWorld(load_sim_params(), str(urdf_path()), render=False)
    try:
        tool = tool_link_for(MODEL)
        assert tool == world.ee_link
        kin = ArmKinematics(MODEL, tool)
        indices = {world.client.getJointInfo(world.robot, j)[1].decode(): j
                   for j in range(world.client.getNumJoints(world.robot))}
        rng = np.random.default_rng(3)
        limits = MODEL.limits_arrays()
        for _ in range(20):
            q = rng.uniform(limits["lower"], limits["upper"])
            for name, value in zip(NAMES, q, strict=True):
                world.client.resetJointState(world.robot, indices[name], float(value))
            kin.update(NAMES, q)
            via_tf = compose(kin.transforms(), "world", tool)[:3, 3]
            assert np.linalg.norm(via_tf - world.ee_position()) < 1e-4  # 0.1 mm
            assert np.linalg.norm(kin.tool_position() - world.ee_position()) < 1e-4
    finally:
        world.close()
    rotation = MODEL.forward_kinematics(np.full(len(NAMES), 0.7), tool)[0][:3, :3]
    back = compose([LinkTransform("a", "b", (0, 0, 0), matrix_to_quaternion(rotation))], "a", "b")[:3, :3]
    assert np.allclose(back, rotation, atol=1e-9)


def test_export_foxglove_writes_schemas_model_transforms_and_counts(tmp_path):
    bag, out, layout_file = tmp_path / "run", tmp_path / "run.foxglove.mcap", tmp_path / "layout.json"
    write_bag(bag)
    assert cli_main(["bag", "export-foxglove", str(bag), "--out", str(out), "--layout", str(layout_file)]) == 0
    schemas, counts, messages, metadata, summary = _read_mcap(out)
    assert schemas[ch.TF] == "foxglove.FrameTransforms"
    assert schemas[ch.ROBOT_MODEL] == "foxglove.SceneUpdate"
    assert schemas[ch.ROBOT_DESCRIPTION] == "std_msgs/msg/String"
    assert schemas[ch.CAMERA_IMAGE] == "foxglove.CompressedImage"
    assert schemas[ch.CAMERA_INFO] == "foxglove.CameraCalibration"
    assert schemas[ch.PLANNED_PATH] == "foxglove.SceneUpdate"
    assert schemas[ch.SUPERVISOR_STATE] == "sim2real.SupervisorState"
    # counts match the bag: one transform set per joint state, every image, chunk and command, both
    # supervisor states
    assert counts[ch.TF] == N_JOINTS
    assert counts[ch.MEASURED] == N_JOINTS
    assert counts[ch.CAMERA_IMAGE] == N_IMAGES
    assert counts[ch.PLANNED_PATH] == N_CHUNKS
    assert counts[ch.COMMANDED] == 50
    assert counts[ch.SUPERVISOR_STATE] == 2
    assert counts[ch.ROBOT_MODEL] == 1 and counts[ch.ROBOT_DESCRIPTION] == 1
    by_topic: dict[str, list] = {}
    for topic, message in messages:
        by_topic.setdefault(topic, []).append(message)
    assert json.loads(by_topic[ch.ROBOT_DESCRIPTION][0].data)["data"] == URDF
    model = _decoder(summary, ch.ROBOT_MODEL).FromString(by_topic[ch.ROBOT_MODEL][0].data)
    assert {e.frame_id for e in model.entities} >= {"base_link", "link2", "link6"}
    # the transforms put the tool point where the URDF's kinematics put it, at each joint state's stamp
    tf_class = _decoder(summary, ch.TF)
    tool = tool_link_for(MODEL)
    for i in (0, 57, N_JOINTS - 1):
        decoded = tf_class.FromString(by_topic[ch.TF][i].data)
        assert decoded.transforms[1].timestamp.ToNanoseconds() == T0 + i * 10 * MS
        tfs = [LinkTransform(t.parent_frame_id, t.child_frame_id, (t.translation.x, t.translation.y, t.translation.z),
                             (t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w)) for t in decoded.transforms]
        expected = MODEL.forward_kinematics(q(i), tool)[0][:3, 3]
        assert np.linalg.norm(compose(tfs, "world", tool)[:3, 3] - expected) < 1e-6
    path = _decoder(summary, ch.PLANNED_PATH).FromString(by_topic[ch.PLANNED_PATH][3].data)
    points = path.entities[0].lines[0].points
    assert len(points) == 10
    first = MODEL.forward_kinematics(q(30), tool)[0][:3, 3]
    assert np.allclose([points[0].x, points[0].y, points[0].z], first, atol=1e-6)
    assert json.loads(by_topic[ch.SUPERVISOR_STATE][-1].data)["mode"] == "AUTONOMOUS"
    stats = json.loads(by_topic[ch.STATS][-1].data)["topics"]
    assert stats["joint_states"]["received"] == N_JOINTS and stats["joint_states"]["rate_hz"] == pytest.approx(100, 1)
    assert metadata["sim2real_ros"]["tool_link"] == tool
    saved = json.loads(layout_file.read_text())
    assert set(panel_ids(saved["layout"])) == set(saved["configById"]) == set(layout(NAMES)["configById"])


def test_bag_view_errors_name_what_is_missing(tmp_path, capsys):
    no_joints, no_urdf = tmp_path / "no_joints", tmp_path / "no_urdf"
    write_bag(no_joints, joints=False)
    write_bag(no_urdf, description=False)
    assert cli_main(["bag", "export-foxglove", str(no_joints), "--out", str(tmp_path / "a.mcap")]) == 1
    assert "no joint_states topic (sensor_msgs/msg/JointState)" in capsys.readouterr().err
    assert cli_main(["bag", "export-foxglove", str(no_urdf), "--out", str(tmp_path / "b.mcap")]) == 1
    err = capsys.readouterr().err
    assert "no robot_description" in err and "--urdf" in err
    assert not (tmp_path / "a.mcap").exists() and not (tmp_path / "b.mcap").exists()
    # with --urdf the same bag exports
    out = tmp_path / "c.mcap"
    assert cli_main(["bag", "export-foxglove", str(no_urdf), "--out", str(out), "--urdf", str(urdf_path())]) == 0
    assert _read_mcap(out)[1][ch.TF] == N_JOINTS
    assert cli_main(["bag", "export-foxglove", str(no_urdf), "--out", str(out), "--urdf", str(urdf_path())]) == 1
    assert "exists already" in capsys.readouterr().err
    with pytest.raises(Exception, match="tool_link"):
        open_bag_view(no_urdf, urdf=str(urdf_path()), tool_link="nope")
