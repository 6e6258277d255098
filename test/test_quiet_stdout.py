"""Commands that print JSON print nothing else on stdout: PyBullet's C-level prints (`argv[0]=`
on connect, b3Warning lines while loading a URDF) go to stderr (sim/quiet_stdout.py)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import yaml
from support import REPO_ROOT

from sim2real_ros.paths import config_path


def run_python(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


def test_stdout_to_stderr_moves_c_prints_and_restores_stdout_when_the_last_nested_use_leaves(tmp_path):
    done = run_python("""
        import ctypes, os, sys
        from sim2real_ros.sim.quiet_stdout import stdout_to_stderr
        libc = ctypes.CDLL(None)
        print("before", flush=True)
        libc.printf(b"c-buffered-before ")  # still in C's buffer: must leave on stdout, not later
        with stdout_to_stderr():
            with stdout_to_stderr():
                libc.printf(b"c-inner\\n")
                print("py-inner")
            os.write(1, b"fd-outer\\n")
        print("after", flush=True)
        libc.printf(b"c-after\\n")
        libc.fflush(None)
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "before\nc-buffered-before after\nc-after\n"
    assert "c-inner" in done.stderr and "py-inner" in done.stderr and "fd-outer" in done.stderr


def test_a_sim_world_prints_nothing_on_stdout(tmp_path):
    # The robot without inertial data makes PyBullet warn while loading (b3Warning, C printf).
    urdf = (REPO_ROOT / "urdf" / "arm6.urdf").read_text()
    bare = tmp_path / "bare.urdf"
    bare.write_text(re.sub(r"<inertial>.*?</inertial>", "", urdf, flags=re.S))
    done = run_python(f"""
        from sim2real_ros.sim.params import load_sim_params
        from sim2real_ros.sim.world import SimWorld
        params = load_sim_params(None)
        for description in ({str(REPO_ROOT / "urdf" / "arm6.urdf")!r}, {str(bare)!r}):
            world = SimWorld(params, description, seed=0, render=False, randomize=True)
            world.step(5)
            world.reset(randomize=True)
            world.close()
        print("done")
        """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    assert "argv[0]=" in done.stderr and "b3Warning" in done.stderr  # moved, not lost


def test_validate_json_stdout_is_json_only(tmp_path):
    raw = yaml.safe_load(config_path("sim_params.yaml").read_text())
    raw["task"]["timeout_s"] = 0.5
    raw["camera"]["calibration_file"] = str(config_path(raw["camera"]["calibration_file"]))
    sim_config = tmp_path / "sim_short.yaml"
    sim_config.write_text(yaml.safe_dump(raw))
    done = subprocess.run(
        [sys.executable, "-m", "sim2real_ros.cli.main", "validate", "--core-only", "--episodes", "1", "--json",
         "--no-plots", "--sim-config", str(sim_config), "--report", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 1, done.stderr[-3000:]  # not ready: --core-only has no graph figure
    out = json.loads(done.stdout)
    assert out["verdict"] == "not_ready" and "graph figure missing" in out["reason"]
    assert "argv[0]=" in done.stderr
