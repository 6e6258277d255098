"""What each node process loads: the supervisor (the safety path) must start without torch, opencv,
onnxruntime, the Foxglove SDK or PyBullet, so that its start-up and its memory do not depend on the
learning stack (docs/design.md §6). Checked in a fresh interpreter, the way a node process starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import REPO_ROOT

HEAVY = ("torch", "cv2", "onnx", "onnxruntime", "foxglove", "pybullet", "ray")


def loaded_top_level(module: str) -> set[str]:
    """Top-level packages in sys.modules after `import module` in a fresh interpreter."""
    code = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["sim2real_ros.nodes.supervisor", "sim2real_ros.core.safety.supervisor"])
def test_the_safety_path_loads_no_learning_stack(module):
    heavy = loaded_top_level(module) & set(HEAVY)
    assert not heavy, f"{module} loads {sorted(heavy)}"


def test_the_check_sees_a_heavy_import():
    # the same check on a module that does load torch: it must find it (the check can fail)
    assert "torch" in loaded_top_level("sim2real_ros.core.policy.model")
