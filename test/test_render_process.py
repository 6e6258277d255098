"""The sim camera rendered off the physics loop (sim/render_process.py): a twin world in a child
process renders, from the main world's visual state and episode seed, the same image the main world
renders itself, bit for bit, for arm6 and the SO-101, across randomized episodes and moving arms."""
from __future__ import annotations

import numpy as np
import pytest

from sim2real_ros.robots import get_robot
from sim2real_ros.sim.params import load_sim_params, with_task
from sim2real_ros.sim.render_process import RenderProcess, RenderProcessError
from sim2real_ros.sim.world import SimWorld


def _kwargs(robot: str, task: str | None = None) -> dict:
    spec = get_robot(robot)
    params = load_sim_params(spec.sim_params_path())
    return {"params": params if task is None else with_task(params, task), "robot_description": str(spec.urdf_path()),
            "seed": 7, "randomize": True}


@pytest.mark.parametrize("robot, task", [("arm6", None), ("so101", None), ("so101", "pick_lift")])
def test_the_twin_renders_what_the_world_renders(robot, task):
    kwargs = _kwargs(robot, task)
    world = SimWorld(**kwargs, render=True)
    renderer = RenderProcess(kwargs)
    try:
        rng = np.random.default_rng(0)
        compared = 0
        for _ in range(3):
            world.reset(randomize=True)
            renderer.start_episode(world.episode_seed, True)
            for _ in range(2):
                world.set_command(world.joint_positions() + rng.uniform(-0.3, 0.3, len(world.joint_names)))
                world.step(150)
                q_all, bodies = world.visual_state()
                assert renderer.request(world.time_ns, q_all, bodies)
                assert not renderer.request(world.time_ns, q_all, bodies)  # one frame in flight
                frame = renderer.receive(30.0)
                assert frame is not None and frame.stamp_ns == world.time_ns
                np.testing.assert_array_equal(frame.image, world.render(artifacts=False))
                compared += 1
        assert compared == 6
    finally:
        renderer.close()
        world.close()


def test_a_twin_that_cannot_be_built_names_why():
    kwargs = {**_kwargs("arm6"), "robot_description": "/nonexistent/robot.urdf"}
    with pytest.raises(RenderProcessError, match="failed to start"):
        RenderProcess(kwargs)
