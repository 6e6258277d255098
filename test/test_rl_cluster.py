"""A two-node Ray cluster on this machine (a head and a worker node, 1 CPU each) with Ray's token
authentication on: one rollout round runs with a worker on each node, joined through `init_ray`'s
--ray-address path."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.rl.cluster import RayClusterError, init_ray, shutdown_ray
from sim2real_ros.rl.pool import RolloutPool
from sim2real_ros.rl.ppo import TeacherConfig


@pytest.fixture(scope="module")
def two_nodes():
    import os
    import uuid

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ["RAY_AUTH_TOKEN"] = uuid.uuid4().hex
    from sim2real_ros.rl.cluster import enable_token_auth

    enable_token_auth()  # every node and the driver: requests without the token are refused

    from ray.cluster_utils import Cluster

    from sim2real_ros.rl.cluster import bind_to_loopback

    bind_to_loopback(False)  # an earlier local run in this process left Ray in loopback-only mode

    os.environ.setdefault("RAY_worker_niceness", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        shutdown_ray()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_joining_a_cluster_without_token_authentication_is_refused(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(RayClusterError, match="RAY_AUTH_MODE=disabled; a cluster run needs Ray's token"):
        init_ray(1, "127.0.0.1:6379")


def test_one_collection_round_runs_on_both_nodes(two_nodes):
    info = init_ray(2, two_nodes.address)
    assert info["nodes"] == 2 and info["cpus"] == 2
    spec = TeacherConfig(source="test", env={"pushes": True}).env_spec()
    pool = RolloutPool(spec, 4, 2)
    try:
        nodes = {w["node_id"] for w in pool.worker_info}
        assert len(nodes) == 2, pool.worker_info
        result = None
        for _ in range(5):
            result = pool.step(np.zeros((4, pool.num_actions)))
        assert result.obs.shape == (4, pool.obs_dim) and np.all(np.isfinite(result.obs))
    finally:
        pool.close()
    # the same round in this process gives the same observations (the cluster changes nothing)
    serial = RolloutPool(spec, 4, 0)
    try:
        for _ in range(5):
            again = serial.step(np.zeros((4, serial.num_actions)))
        np.testing.assert_array_equal(again.obs, result.obs)
    finally:
        serial.close()
