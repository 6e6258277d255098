"""The graph's conditions in the core path (training.graph_conditions): real PyBullet, the real
actuator and supervisor cores, the teacher (or the shipped policy) driving."""
import numpy as np
import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.perception.preprocess import ImagePipeline
from sim2real_ros.core.perception.preprocess_config import PreprocessConfig
from sim2real_ros.paths import config_path, urdf_path
from sim2real_ros.sim.params import load_sim_params
from sim2real_ros.sim.world import SimWorld
from sim2real_ros.training.graph_conditions import GraphConditions
from sim2real_ros.training.rollout import RolloutConfig, run_episode
from sim2real_ros.training.trainer import make_expert


@pytest.fixture(scope="module")
def world():
    world = SimWorld(load_sim_params(), str(urdf_path()), seed=3)
    yield world
    world.close()


@pytest.fixture(scope="module")
def pipeline():
    return ImagePipeline(PreprocessConfig.from_yaml(config_path("preprocess.yaml")))


def teacher_episode(world, pipeline, conditions, seed):
    config = RolloutConfig(graph_conditions=conditions)
    return run_episode(world, pipeline, make_expert(world), None, 10, 0.05, config, randomize=False, seed=seed)


def test_the_teacher_succeeds_through_the_graph_timing_and_the_supervisor(world, pipeline):
    conditions = GraphConditions(inference_delay_p50_s=0.03, inference_delay_p99_s=0.06)
    record = teacher_episode(world, pipeline, conditions, seed=1)
    outcome, graph = record.outcome, record.outcome["graph"]
    assert outcome["success"], outcome
    # The episode starts holding: the first chunk comes a camera phase plus an inference delay after
    # the start, and the supervisor arms on it (not before).
    assert 0.005 < graph["first_chunk_s"] < 0.2, graph
    assert graph["armed_s"] is not None and graph["armed_s"] >= graph["first_chunk_s"], graph
    # 10 Hz observations from a 30 Hz camera (every third frame).
    assert graph["observations"] == pytest.approx(outcome["duration_s"] * 10, abs=1.5), graph
    # Labels follow docs/design.md §3 here too: point 0 is where the arm was when the frame was taken.
    assert np.allclose(record.labels[0][0], record.joints[0])


def test_the_same_seed_reproduces_the_same_episode_and_another_draws_other_timing(world, pipeline):
    conditions = GraphConditions()
    first = teacher_episode(world, pipeline, conditions, seed=5).outcome
    again = teacher_episode(world, pipeline, conditions, seed=5).outcome
    other = teacher_episode(world, pipeline, conditions, seed=6).outcome
    assert first["graph"] == again["graph"] and first["duration_s"] == again["duration_s"]
    assert other["graph"]["first_chunk_s"] != first["graph"]["first_chunk_s"]


def test_a_slow_camera_still_gives_the_training_rate_and_a_slow_policy_supersedes(world, pipeline):
    slow_camera = teacher_episode(world, pipeline, GraphConditions(camera_hz=15.0), seed=2).outcome
    assert slow_camera["graph"]["observations"] == pytest.approx(slow_camera["duration_s"] * 10, abs=1.5)
    # Inference slower than the observation period: observations wait behind it and newer ones
    # replace them (superseded), none queue; the episode still runs, on fewer plans.
    slow_policy = teacher_episode(world, pipeline, GraphConditions(inference_delay_p50_s=0.25,
                                                                   inference_delay_p99_s=0.3), seed=2).outcome
    assert slow_policy["graph"]["superseded"] > 0
    assert slow_policy["graph"]["observations"] < slow_policy["duration_s"] * 10 / 2


def test_without_the_supervisor_the_actuator_drives_from_the_first_chunk(world, pipeline):
    outcome = teacher_episode(world, pipeline, GraphConditions(supervisor=False), seed=1).outcome
    assert outcome["success"] and outcome["graph"]["armed_s"] is None


@pytest.mark.parametrize("value, field", [
    ({"inference_delay_p50_s": 0.05, "inference_delay_p99_s": 0.01}, "inference_delay_p99_s"),
    ({"camera_hz": -1.0}, "camera_hz"),
    ({"handover_ramp_s": 99.0}, "handover_ramp_s"),
    ({"camera_fps": 30}, "graph_conditions.camera_fps"),
    ("yes", "graph_conditions"),
])
def test_bad_graph_conditions_name_the_field(value, field):
    with pytest.raises(ConfigError) as err:
        RolloutConfig.from_dict({"graph_conditions": value}, "train.yaml rollout")
    assert field in str(err.value) and "train.yaml rollout" in str(err.value)


def test_rollout_config_round_trips_through_plain_values():
    config = RolloutConfig.from_dict({"graph_conditions": True})
    assert config.graph_conditions == GraphConditions(source="rollout")
    again = RolloutConfig.from_dict(config.to_dict())
    assert again.graph_conditions.to_dict() == config.graph_conditions.to_dict()
    assert RolloutConfig.from_dict({"graph_conditions": None}).graph_conditions is None
