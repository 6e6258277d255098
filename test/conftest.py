"""Test-run isolation: every pytest run gets its own DDS domain and stays on localhost; each test
stands alone, so the suite runs in any order (pytest-randomly) and split over workers (pytest-xdist).

Parallel runs on one host (CI, several developers, xdist workers) would otherwise hear each other's topics.
"""
from __future__ import annotations

import os
import random
import tempfile

import pytest
from isolation import GROUP_OF_MODULE, domain_id_for, xdist_worker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "timing: closed-loop figures that need an idle machine (`make test-timing`); `make test` leaves them out",
    )
    worker = xdist_worker()
    domain = domain_id_for(os.environ, worker, os.getpid(), random.SystemRandom().randrange(232))
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # Jazzy and newer
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    if worker[1] > 1:
        # Ray's session folders (sockets, logs) of one worker apart from another's and from a run beside us.
        os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix=f"ray-{os.environ['PYTEST_XDIST_WORKER']}-"))
    # The same Fast DDS profile the launcher gives the graph (camera-sized best-effort messages).
    from sim2real_ros.paths import use_dds_profile

    use_dds_profile()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test joins its module's xdist group, or the shared one isolation.TEST_GROUPS names (`--dist loadgroup`)."""
    for item in items:
        module = item.path.name
        item.add_marker(pytest.mark.xdist_group(GROUP_OF_MODULE.get(module, module)))


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


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The random order's seed at the end of the log, where `-q` still shows it (the header does not)."""
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(f"test order: --randomly-seed={seed} (the same order again: "
                                    f"make test-kilted or test-jazzy PYTEST_ORDER=--randomly-seed={seed})")
