"""Test-run isolation: every pytest run gets its own DDS domain and stays on localhost.

Parallel runs on one host (CI, several developers) would otherwise hear each other's topics.
"""
from __future__ import annotations

import os
import random

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "timing: closed-loop figures that need an idle machine (`make test-timing`); `make test` leaves them out",
    )
    if "SIM2REAL_TEST_DOMAIN_ID" in os.environ:
        domain = int(os.environ["SIM2REAL_TEST_DOMAIN_ID"])
    else:
        # 1..232: Fast DDS maps every one of these to valid ports; random + pid keeps concurrent runs apart.
        # SIM2REAL_TEST_DOMAIN_RANGE=LOW-HIGH narrows it, so runs started together (make test: Kilted and
        # Jazzy at once) draw from disjoint ranges and can never share a domain.
        low, high = (int(v) for v in os.environ.get("SIM2REAL_TEST_DOMAIN_RANGE", "1-232").split("-"))
        domain = low + (os.getpid() * 7919 + random.SystemRandom().randrange(232)) % (high - low + 1)
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # Jazzy and newer
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    # The same Fast DDS profile the launcher gives the graph (camera-sized best-effort messages).
    from sim2real_ros.paths import use_dds_profile

    use_dds_profile()


def pytest_report_header(config: pytest.Config) -> str:
    return f"ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID')} discovery=localhost"


@pytest.fixture
def ros():
    """A test-side rclpy node spinning in a background thread (see support.RosProbe)."""
    from support import RosProbe

    probe = RosProbe()
    try:
        yield probe
    finally:
        probe.close()


@pytest.fixture(scope="session")
def sim_recording(tmp_path_factory: pytest.TempPathFactory):
    """The sim graph's recorded bag, its checkpoints and a perturbed copy (recordings.SimRecording),
    recorded once per session for the replay tests."""
    from recordings import build_sim_recording

    return build_sim_recording(tmp_path_factory.mktemp("replay_sim_recording"))


@pytest.fixture(scope="session")
def teleop_recording(tmp_path_factory: pytest.TempPathFactory):
    """Scripted-operator episodes on the "real A" sim variant (teleop_data.TeleopRecording),
    recorded once per session for the teleop, fine-tuning and validation tests."""
    from teleop_data import build_teleop_recording

    return build_teleop_recording(tmp_path_factory.mktemp("teleop_recording"))
