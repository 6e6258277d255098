"""training/allocator.py: the student's trainer keeps freed memory instead of faulting it in again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# In a fresh process (the thresholds are per process): what keep_freed_memory says, and the minor
# page faults of 20 cycles that each allocate, touch and free what one minibatch's first conv
# outputs (four 64 x 16 x 48 x 48 float tensors at once, as forward and backward hold them).
_PROBE = """
import json, resource, sys
import numpy as np
result = None
if sys.argv[1] == "keep":
    from sim2real_ros.training.allocator import keep_freed_memory
    result = keep_freed_memory()
def cycle():
    arrays = [np.ones(64 * 16 * 48 * 48, dtype=np.float32) for _ in range(4)]
    del arrays
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
print(json.dumps({"result": result, "faults_per_cycle": faults}))
"""


def _probe(mode: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")}
    environment.update(env)
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], cwd=REPO_ROOT, env=environment,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_activation_memory_is_reused_without_page_faults():
    plain = _probe("plain")
    kept = _probe("keep")
    assert kept["result"] == "set"
    # 4 x 9.4 MB touched per cycle: about 9,200 pages; glibc gives them back and faults them in again.
    assert plain["faults_per_cycle"] > 1000, plain
    assert kept["faults_per_cycle"] < 50, kept


def test_a_users_own_glibc_setting_is_left_alone():
    kept = _probe("keep", MALLOC_TRIM_THRESHOLD_="0")
    assert kept["result"] == "left to the environment"
    assert kept["faults_per_cycle"] > 1000, kept  # trim at once: the user's choice stands
