"""The main job (`sim2real demo`, runtime/demo.py) runs a checkpoint on the robot and task it was
trained for: an SO-101 pick_lift student on the SO-101, through its wrist camera, with the takeover,
the e-stop, the replay and the Foxglove export as for the arm6 reach policy."""
from __future__ import annotations

import json
from pathlib import Path

from support import REPO_ROOT

from sim2real_ros.paths import config_path, default_policy_path
from sim2real_ros.runtime.demo import Demo, DemoConfig, checkpoint_robot_and_sim_params

WRIST_STUDENT = REPO_ROOT / "policies" / "so101_pick_lift_wrist.safetensors"


def test_the_demo_takes_the_robot_and_sim_params_from_the_checkpoint(tmp_path):
    assert checkpoint_robot_and_sim_params(WRIST_STUDENT) == ("so101", str(config_path("sim_params_so101_wrist.yaml")))
    robot, params = checkpoint_robot_and_sim_params(default_policy_path())
    assert robot == "arm6" and Path(params).name == "sim_params.yaml"
    reach = REPO_ROOT / "policies" / "reach_so101.safetensors"
    assert checkpoint_robot_and_sim_params(reach) == ("so101", str(config_path("sim_params_so101.yaml")))
    # A file not there yet: the default robot; run() names the missing file.
    assert checkpoint_robot_and_sim_params(tmp_path / "none.safetensors") == ("arm6", None)


def test_the_demo_runs_the_so101_pick_lift_student_with_takeover_and_estop(tmp_path):
    """Three episodes of the wrist pick_lift student in the sim graph: the graph follows the
    checkpoint (SO-101, pick_lift, wrist camera), the joystick takes over and hands back, the
    e-stop latches, holds, refuses a reset while pressed and re-arms after release; the bag replays
    through the policy and exports to Foxglove. The policy may fail an episode; the safety chain may not."""
    out = tmp_path / "demo_out"
    config = DemoConfig(out_dir=out, checkpoint=WRIST_STUDENT, episodes=3, takeover_episode=1, estop_episode=2,
                        max_wall_s=400.0)
    demo = Demo(config, log=print)
    assert demo.args.robot == "so101" and demo.joint_names[-1] == "gripper"
    report = demo.run()
    followed = demo.args.extra_parameters
    assert followed["sim_node"]["task"] == "pick_lift"
    assert Path(followed["sim_node"]["sim_params_file"]).name == "sim_params_so101_wrist.yaml"
    assert report["robot"] == "so101" and report["episodes"] == 3
    assert report["takeover"]["accepted"] and report["takeover"]["handed_back"]
    estop = report["estop"]
    assert estop["latched"] and estop["held_position"] and estop["reset_refused_while_pressed"]
    assert estop["reset"] and estop["rearmed"]
    assert "error" not in report["replay"] and "error" not in report["foxglove"]
    assert Path(report["foxglove"]["mcap"]).is_file()
    assert json.loads((out / "report.json").read_text())["robot"] == "so101"
    assert "on the so101" in (out / "report.md").read_text()
