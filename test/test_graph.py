"""The one graph declaration: node set, parameters and remaps of each mode (docs/design.md §2, §6)."""
import pytest

from sim2real_ros.graph import MODES, GraphArgs, declare_graph


def by_name(mode, args=None):
    return {d.name: d for d in declare_graph(mode, args)}


def test_node_sets_per_mode():
    assert list(by_name("sim")) == ["sim_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor"]
    # The robot graph is lean by default (graph.LEAN_MODES): the policy node preprocesses the camera.
    assert list(by_name("robot")) == ["policy_node", "actuator_node", "supervisor"]
    assert list(by_name("robot", GraphArgs(preprocess_in_policy=False))) == [
        "camera_preprocessor", "policy_node", "actuator_node", "supervisor"]
    assert list(by_name("replay")) == ["camera_preprocessor", "policy_node", "actuator_node"]
    with pytest.raises(ValueError, match="unknown graph mode"):
        declare_graph("orbit")


def test_sim_time_and_arming_defaults():
    for mode in MODES:
        for decl in declare_graph(mode):
            assert decl.parameters["use_sim_time"] is (mode != "robot")
    assert by_name("sim")["supervisor"].parameters["auto_arm"] is True
    assert by_name("robot")["supervisor"].parameters["auto_arm"] is False  # a human arms a real robot


def test_robot_topics_plug_in_by_remapping():
    args = GraphArgs(camera_image_topic="/camera/color/image_raw", camera_info_topic="/camera/color/camera_info",
                     joint_states_topic="/arm/joint_states", command_topic="/arm/fpc/commands", checkpoint="/p.pt",
                     robot_description="/arm.urdf", params_file="/params.yaml")
    nodes = by_name("replay", args)
    assert dict(nodes["camera_preprocessor"].remappings) == {
        "camera/image_raw": "/camera/color/image_raw", "camera/camera_info": "/camera/color/camera_info"}
    nodes = by_name("robot", args)
    assert dict(nodes["policy_node"].remappings) == {  # lean: the policy node takes the camera
        "camera/image_raw": "/camera/color/image_raw", "camera/camera_info": "/camera/color/camera_info",
        "joint_states": "/arm/joint_states"}
    assert dict(nodes["supervisor"].remappings) == {"joint_states": "/arm/joint_states",
                                                    "forward_position_controller/commands": "/arm/fpc/commands"}
    assert nodes["policy_node"].parameters["checkpoint"] == "/p.pt"
    for decl in nodes.values():
        assert decl.params_files == ("/params.yaml",)
        if decl.name != "camera_preprocessor":
            assert decl.parameters["robot_description"] == "/arm.urdf"
    # Default names need no remap at all.
    assert all(not d.remappings for d in declare_graph("sim"))


def test_preprocessing_in_the_policy_process_drops_the_preprocessor_and_remaps_the_camera_to_the_policy():
    args = GraphArgs(preprocess_in_policy=True, camera_image_topic="/cam/image_raw", camera_info_topic="/cam/info",
                     joint_states_topic="/arm/joint_states")
    for mode in MODES:
        nodes = by_name(mode, args)
        assert "camera_preprocessor" not in nodes
        policy = nodes["policy_node"]
        assert policy.parameters["image_input"] == "camera"
        assert dict(policy.remappings) == {"camera/image_raw": "/cam/image_raw", "camera/camera_info": "/cam/info",
                                           "joint_states": "/arm/joint_states"}
    for mode in ("sim", "replay"):  # their default: policy/image from camera_preprocessor
        assert "image_input" not in by_name(mode)["policy_node"].parameters
    assert "image_input" not in by_name("robot", GraphArgs(preprocess_in_policy=False))["policy_node"].parameters
    assert by_name("robot")["policy_node"].parameters["image_input"] == "camera"


def test_extra_parameters_override_per_executable():
    args = GraphArgs(extra_parameters={"sim_node": {"randomize": True}})
    assert by_name("sim", args)["sim_node"].parameters["randomize"] is True


def test_namespaced_sim_publishes_the_clock_every_node_listens_to():
    sim = by_name("sim", GraphArgs(namespace="arm1"))["sim_node"]
    assert ("clock", "/clock") in sim.remappings
    assert ("clock", "/clock") not in by_name("sim")["sim_node"].remappings


def test_ee_link_reaches_sim_and_supervisor():
    nodes = by_name("sim", GraphArgs(ee_link="panda_grasptarget"))
    assert nodes["sim_node"].parameters["ee_link"] == "panda_grasptarget"
    assert nodes["supervisor"].parameters["ee_link"] == "panda_grasptarget"
    assert "ee_link" not in by_name("sim")["sim_node"].parameters


def test_robot_supervisor_requires_a_live_stop_source_and_the_sim_one_does_not():
    """docs/design.md §4: on a robot, arming needs a live stop source (an `estop` heartbeat or a joystick)."""
    robot_args = GraphArgs(robot_description="/arm.urdf", checkpoint="/p.pt", namespace="arm1", ee_link="tool")
    for args in (None, robot_args):
        assert by_name("robot", args)["supervisor"].parameters["require_stop_source"] is True
    # The sim has no e-stop hardware: its supervisor keeps the default (false).
    assert "require_stop_source" not in by_name("sim")["supervisor"].parameters


def test_robot_graph_realtime_knobs():
    """Issue 36: supervisor above actuator above the camera path; no real-time priority on a process
    that can spin (policy, camera path); the sim and replay graphs ask for nothing."""
    from sim2real_ros.core.control.realtime import RealtimeRequest

    robot = by_name("robot", GraphArgs(preprocess_in_policy=False))  # every node of either camera path
    request = {name: RealtimeRequest.from_values(decl.parameters, name) for name, decl in robot.items()}
    assert request["supervisor"].priority > request["actuator_node"].priority > 0
    assert request["supervisor"].policy == request["actuator_node"].policy == "fifo"
    # The servo-bus drivers (sleeping to a deadline every period) too, below the supervisor and actuator.
    bringup = by_name("robot", GraphArgs(robot="so101", port="/dev/ttyACM0", calibration="c.json", camera="0",
                                         leader_port="/dev/ttyACM1", leader_calibration="l.json"))
    for driver in ("feetech_driver", "leader_arm"):
        driven = RealtimeRequest.from_values(bringup[driver].parameters, driver)
        assert driven.policy == "fifo" and 0 < driven.priority < request["actuator_node"].priority
        assert driven.gil_switch_interval_s == 0.0005
    # The processes with an event thread beside another Python thread hand over the interpreter quickly.
    assert request["supervisor"].gil_switch_interval_s == request["actuator_node"].gil_switch_interval_s == 0.0005
    # The policy node too: its inference thread waits for the executor's otherwise (a 5 ms camera path tail).
    assert request["policy_node"].gil_switch_interval_s == 0.0005
    assert request["camera_preprocessor"].gil_switch_interval_s == 0.0  # one Python thread: Python's own
    camera = RealtimeRequest.from_values(bringup["camera_node"].parameters, "camera_node")
    assert camera.policy == "other" and camera.nice < 0
    for spinning in ("policy_node", "camera_preprocessor"):  # a larger CPU share, never a real-time priority
        assert request[spinning].policy == "other" and request[spinning].priority == 0 and request[spinning].nice < 0
    for mode in ("sim", "replay"):
        assert all("sched_policy" not in decl.parameters for decl in declare_graph(mode))
    # A user's own parameters still win.
    args = GraphArgs(extra_parameters={"actuator_node": {"sched_policy": "other", "sched_priority": 0}})
    assert by_name("robot", args)["actuator_node"].parameters["sched_policy"] == "other"
