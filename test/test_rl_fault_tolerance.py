"""Ray runs that survive a lost worker, ship their inputs as data and stay on this machine (real Ray,
real PyBullet, real processes killed by PID).

Ray is started once for this module (2 CPUs, loopback only, no dashboard) and shut down at the end.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sim2real_ros.paths import default_policy_path
from sim2real_ros.rl.cluster import init_ray, shutdown_ray
from sim2real_ros.rl.ppo import TeacherConfig, TeacherTrainer
from sim2real_ros.rl.shipping import WorkerMismatchError, check_versions, software_versions
from sim2real_ros.robots import get_robot
from sim2real_ros.training.evaluation import evaluate_in_sim


@pytest.fixture(scope="module")
def ray_local():
    info = init_ray(2)
    yield info
    shutdown_ray()


def _descendants(pid: int) -> set[int]:
    out = {pid}
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in children:
        out |= _descendants(int(child))
    return out


def _ray_actor_pids(prefix: str) -> set[int]:
    """Processes of this test run whose title starts with `prefix` (Ray names actors ray::Class)."""
    pids = set()
    for pid in _descendants(os.getpid()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(prefix):
            pids.add(pid)
    return pids


def _wait_gone(pids: set[int], within_s: float = 20.0) -> set[int]:
    deadline = time.monotonic() + within_s
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if Path(f"/proc/{p}").exists()
                 and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1].split()[:1]}
        time.sleep(0.2)
    return alive


def test_a_local_run_listens_on_loopback_only(ray_local):
    from sim2real_ros.rl.pool import RolloutPool

    assert ray_local["node_ip"] == "127.0.0.1"
    pool = RolloutPool(TeacherConfig(source="test", env={"pushes": False}).env_spec(), 2, 2)
    try:
        ours = _descendants(os.getpid())
        listening = []
        for line in subprocess.run(["ss", "-ltnupH"], capture_output=True, text=True, check=True).stdout.splitlines():
            pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            if pids & ours:
                listening.append(line.split()[4])  # local address:port
        assert len(listening) >= 3, listening  # GCS, raylet, workers: the check sees them
        for address in listening:
            host = address.rsplit(":", 1)[0].strip("[]")
            assert host in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), f"Ray listens on {address}: {listening}"
    finally:
        pool.close()


def test_a_worker_with_another_simulator_version_refuses_naming_it():
    driver = dict(software_versions(), pybullet="0.0.1")
    with pytest.raises(WorkerMismatchError, match=r"pybullet .* \(driver: 0.0.1\)"):
        check_versions(driver, "this-host")
    check_versions(software_versions(), "this-host")  # the same versions pass
    # a rollout worker given a run packed by another simulator version refuses it when asked anything
    import dataclasses

    from sim2real_ros.rl.pool import _Worker
    from sim2real_ros.rl.shipping import pack

    spec = TeacherConfig(source="test", env={"pushes": False}).env_spec()
    shipped = dataclasses.replace(pack(spec.sim_params, spec.robot_description), versions=driver)
    with pytest.raises(WorkerMismatchError, match="refuses the run: pybullet"):
        _Worker(spec, 0, 1, shipped).info()


def _copied_inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The policy, the sim params (with its camera calibration) and the URDF folder, copied where the
    test can delete them while the run goes on."""
    robot = get_robot("arm6", "test")
    checkpoint = tmp_path / "policy.pt"
    shutil.copy(default_policy_path(), checkpoint)
    sim_params = tmp_path / "sim_params.yaml"
    shutil.copy(robot.sim_params_path(), sim_params)
    text = sim_params.read_text()
    calibration = re.search(r"calibration_file:\s*(\S+)", text).group(1)
    shutil.copy(robot.sim_params_path().parent / calibration, tmp_path / calibration)
    sim_params.write_text(text.replace(calibration, str(tmp_path / calibration)))
    urdf = robot.urdf_path()
    shutil.copytree(urdf.parent, tmp_path / "robot")
    return checkpoint, sim_params, tmp_path / "robot" / urdf.name


def test_a_worker_killed_mid_eval_sim_after_its_files_are_deleted_changes_no_result(ray_local, tmp_path):
    checkpoint, sim_params, urdf = _copied_inputs(tmp_path)
    kwargs = dict(perturb=True, seed=777, workers=2, block=2, sim_config=str(sim_params),
                  robot_description=str(urdf), robot="arm6")
    undisturbed = evaluate_in_sim(str(checkpoint), 8, **kwargs)

    log: list[str] = []
    killed: list[int] = []

    def on_block(n: int) -> None:
        if killed:
            return
        # the driver's files go away: workers (and the replacement) run on what was shipped
        shutil.rmtree(tmp_path)
        pid = sorted(_ray_actor_pids("ray::_EpisodeWorker"))[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    disturbed = evaluate_in_sim(str(checkpoint), 8, log=log.append, on_block=on_block, **kwargs)
    assert killed and not tmp_path.exists()
    assert any(f"pid {killed[0]}" in line and "died" in line for line in log), log
    assert disturbed["per_episode"] == undisturbed["per_episode"]
    assert not _wait_gone(_ray_actor_pids("ray::_EpisodeWorker")), "episode workers left running"


def test_a_hung_worker_is_replaced_and_named(ray_local):
    log: list[str] = []
    stopped: list[int] = []

    def on_block(n: int) -> None:
        if not stopped:
            pid = sorted(_ray_actor_pids("ray::_EpisodeWorker"))[-1]
            os.kill(pid, signal.SIGSTOP)  # alive but silent: a hung worker
            stopped.append(pid)

    reference = evaluate_in_sim(default_policy_path(), 4, seed=31, workers=0, block=1)
    result = evaluate_in_sim(default_policy_path(), 4, seed=31, workers=2, block=1, timeout_s=20.0,
                             log=log.append, on_block=on_block)
    try:
        assert any(f"pid {stopped[0]}" in line and "hung" in line and "seeds" in line for line in log), log
        assert result["per_episode"] == reference["per_episode"]
        assert not _wait_gone({stopped[0]}), "the hung worker is still running"
    finally:
        if Path(f"/proc/{stopped[0]}").exists():
            os.kill(stopped[0], signal.SIGKILL)


def test_a_worker_killed_mid_ppo_iteration_does_not_stop_the_run(ray_local, tmp_path):
    import io

    config = TeacherConfig(source="test", env={"pushes": False}, num_envs=4, steps_per_env=8, iterations=3,
                           eval_episodes=0, workers=2, seed=3)
    lines: list[str] = []
    killed: list[int] = []

    class KillAfterFirstIteration(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith("[ppo] it 1/") and not killed:  # between iterations 1 and 2
                pid = sorted(_ray_actor_pids("ray::_Worker"))[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return super().write(text)

    result = TeacherTrainer(config, tmp_path / "t.pt", tmp_path / "work", workers=2, log=lines.append,
                            stream=KillAfterFirstIteration()).run(resume=False)
    assert killed
    assert any(f"pid {killed[0]}" in line and "died" in line for line in lines), lines
    assert result["iterations"] == 3 and (tmp_path / "t.pt").is_file()
    assert not _wait_gone(_ray_actor_pids("ray::_Worker")), "rollout workers left running"
