"""The shipped SO-101 reach policy (policies/reach_so101.safetensors) and `validate` on the SO-101: the policy
loads for robot so101 and is refused on arm6 by name; validate takes the robot from the checkpoint
(its sim params in every sim stage) and refuses a checkpoint for the other robot before any stage."""
from __future__ import annotations

import subprocess
import sys

import pytest
from support import REPO_ROOT

from sim2real_ros.core.errors import CheckpointError
from sim2real_ros.core.policy.checkpoint import load_checkpoint
from sim2real_ros.paths import config_path, default_policy_path
from sim2real_ros.robots import get_robot, robot_for_checkpoint

SO101 = get_robot("so101")
SHIPPED = REPO_ROOT / "policies" / "reach_so101.safetensors"


def test_the_shipped_so101_policy_loads_for_so101_and_is_refused_on_arm6() -> None:
    assert SHIPPED.stat().st_size < 600_000  # small, like the other shipped policies
    policy = load_checkpoint(SHIPPED, warmup=False)
    spec = policy.spec
    assert list(spec.joint_names) == list(SO101.joints) and spec.provenance["robot"] == "so101"
    assert robot_for_checkpoint(None, spec.joint_names, spec.provenance, str(SHIPPED)) == "so101"
    assert robot_for_checkpoint("so101", spec.joint_names, spec.provenance, str(SHIPPED)) == "so101"
    # Trained on the SO-101's sim params (the STS3215 servo model) and its training config.
    assert spec.provenance["sim_params_file"].endswith("sim_params_so101.yaml")
    assert spec.provenance["config"]["robot"] == "so101"
    with pytest.raises(CheckpointError, match=r"trained for robot 'so101' .* not for 'arm6'"):
        robot_for_checkpoint("arm6", spec.joint_names, spec.provenance, str(SHIPPED))
    # The command line refuses it on arm6 before any episode, naming both, without a traceback.
    result = subprocess.run([sys.executable, "-m", "sim2real_ros.cli.main", "eval-sim", "--checkpoint", str(SHIPPED),
                             "--robot", "arm6", "--episodes", "1"],
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 2, result.stderr
    assert "trained for robot 'so101'" in result.stderr and "not for 'arm6'" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_refuses_a_checkpoint_for_the_other_robot_before_any_stage(tmp_path) -> None:
    from sim2real_ros.validation.validate import validate

    with pytest.raises(CheckpointError, match=r"trained for robot 'arm6' .* not for 'so101'"):
        validate(default_policy_path(), [], report_dir=tmp_path / "report", episodes=1, sim_paths="core",
                 robot="so101", log=lambda text: None)
    assert not (tmp_path / "report" / "report.json").exists()


def test_validate_runs_the_so101_policy_on_the_so101_sim_params(tmp_path) -> None:
    from sim2real_ros.validation.validate import validate

    report = validate(SHIPPED, [], report_dir=tmp_path / "report", episodes=2, sim_paths="core", plots=False,
                      log=lambda text: None)
    assert report["robot"] == "so101"
    assert report["sim_params_file"] == str(SO101.sim_params_path())
    # Stage 2's perturbed params are the SO-101's with the gates' perturbations, not arm6's.
    text = (tmp_path / "report" / "sim_params_perturbed.yaml").read_text()
    assert text.startswith(f"# {SO101.sim_params_path()}") and "model: servo" in text
    nominal = report["stages"][0]
    assert nominal["stage"] == "nominal_sim" and nominal["paths"]["core"]["episodes"] == 2, nominal
    assert report["stages"][1]["paths"]["core"]["episodes"] == 2
    assert config_path("sim_params_so101.yaml") == SO101.sim_params_path()
