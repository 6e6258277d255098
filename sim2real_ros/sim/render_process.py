"""The sim camera rendered in a process of its own, off the physics loop (issue 36, part 3).

PyBullet's TinyRenderer takes 11-14 ms for a 320x240 frame (arm6; the SO-101 about as long with its
simplified meshes), and a PyBullet client is not thread-safe: rendered in the physics thread, every
camera frame held the world lock and stalled physics, commands and joint states for that long. Here
a twin world (same sim params, URDF, seed and construction) lives in a child process: the sim node
sends it each episode's seed when the episode starts (so appearance, camera jitter and objects are
the same draws) and, per frame, the main world's visual state (joint positions, body poses); the
child renders and sends the image back with the frame's stamp. The physics thread only copies the
state (tens of microseconds) and goes on; the render runs on the other core.

Messages (multiprocessing pipe, pickled): ("episode", seed, randomize) | ("frame", stamp_ns, q_all,
bodies) -> ("image", stamp_ns, rgb uint8 HxWx3) | ("error", text). One frame in flight at a time:
request() refuses a frame while the previous one renders; the sim node waits for it (wait_idle)
before the next frame, so frames keep the camera's sim-time period and a machine too slow to render
at that rate slows the sim's real-time factor, as rendering in the physics loop did, instead of
dropping frames. On a machine that keeps up (render < camera period) physics never waits.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

START_TIMEOUT_S = 60.0  # [s] the child's imports and world (PyBullet, the robot's meshes)
_POLL_S = 0.5  # [s] how often the child checks that its parent is still there


@dataclass(frozen=True)
class RenderedFrame:
    """A finished render: the sim time it shows [ns] and the pinhole image (H, W, 3) uint8 RGB."""

    stamp_ns: int
    image: np.ndarray


class RenderProcessError(RuntimeError):
    """The render process failed (its message says how) or went away."""


class RenderProcess:
    """A twin SimWorld in a child process that renders frames the physics thread asks for.

    world_kwargs: SimWorld's constructor arguments (params, robot_description, seed, joints, ee_link,
    camera, randomize, ...), all picklable; the child builds its world with render=True and pushes off.
    """

    def __init__(self, world_kwargs: dict[str, Any]) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with DDS threads
        self._conn, child_conn = context.Pipe(duplex=True)
        self._process = context.Process(target=_serve, args=(child_conn, dict(world_kwargs), os.getpid()),
                                        name="sim_render", daemon=True)
        self._process.start()
        child_conn.close()
        self._send_lock = threading.Lock()  # episodes come from the executor and the physics thread
        self._in_flight = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        if not self._conn.poll(START_TIMEOUT_S):
            self.close()
            raise RenderProcessError(f"the render process did not start within {START_TIMEOUT_S:.0f} s")
        reply = self._conn.recv()
        if reply[0] != "ready":
            self.close()
            raise RenderProcessError(f"the render process failed to start: {reply[1]}")

    def start_episode(self, seed: int, randomize: bool) -> None:
        """The main world started an episode with this seed: the twin draws the same."""
        with self._send_lock:
            self._conn.send(("episode", int(seed), bool(randomize)))

    def request(self, stamp_ns: int, q_all: np.ndarray, bodies: list) -> bool:
        """Ask for the frame of this visual state; False (nothing sent) while one still renders."""
        if self._in_flight.is_set():
            return False
        with self._send_lock:
            self._in_flight.set()
            self._idle.clear()
            self._conn.send(("frame", int(stamp_ns), np.asarray(q_all, dtype=float), list(bodies)))
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no frame is in flight (its image received); False after timeout_s [s]."""
        return self._idle.wait(timeout_s)

    def receive(self, timeout_s: float) -> RenderedFrame | None:
        """The next finished frame, or None after timeout_s. Raises RenderProcessError if the child
        reported an error or is gone."""
        try:
            if not self._conn.poll(timeout_s):
                if not self._process.is_alive():
                    raise RenderProcessError(f"the render process exited (code {self._process.exitcode})")
                return None
            reply = self._conn.recv()
        except (EOFError, OSError) as err:
            raise RenderProcessError(f"the render process went away: {err!r}") from err
        self._in_flight.clear()
        self._idle.set()
        if reply[0] == "error":
            raise RenderProcessError(f"the render process failed: {reply[1]}")
        return RenderedFrame(int(reply[1]), reply[2])

    def close(self) -> None:
        """End the child (it also ends by itself when this process goes away)."""
        with contextlib.suppress(OSError):
            self._conn.close()
        self._process.join(timeout=2.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=2.0)


def _serve(conn: Connection, world_kwargs: dict[str, Any], parent_pid: int) -> None:
    """The child: build the twin world, then answer episodes and frames until the pipe closes or the
    parent is gone."""
    from .world import SimWorld

    try:
        world = SimWorld(**{**world_kwargs, "render": True, "pushes": False})
    except Exception:  # noqa: BLE001 - reported to the parent, which names it
        conn.send(("error", traceback.format_exc(limit=3)))
        return
    conn.send(("ready", None))
    try:
        while True:
            if not conn.poll(_POLL_S):
                if os.getppid() != parent_pid:
                    return
                continue
            message = conn.recv()
            try:
                if message[0] == "episode":
                    world.reset(randomize=message[2], seed=message[1])
                elif message[0] == "frame":
                    world.show_visual_state(message[2], message[3])
                    conn.send(("image", message[1], world.render(artifacts=False)))
            except Exception:  # noqa: BLE001 - one bad frame is reported, the next may render
                conn.send(("error", traceback.format_exc(limit=3)))
    except (EOFError, OSError, KeyboardInterrupt):
        return
    finally:
        world.close()
