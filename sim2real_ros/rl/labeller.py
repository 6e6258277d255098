"""The PPO teacher (or a reactive scripted expert) as the vision student's DAgger labeller.

The student predicts chunks: joint targets for t, t + dt, ..., t + (K-1) dt. A PPO teacher acts one
decision at a time from the privileged state, so its chunk for the state the student reached is
found by letting it act: snapshot the world (SimWorld.save_state), run the teacher's deterministic
policy for K decisions of dt (no rendering), take the targets it commanded, restore the world
exactly. The labels thus include what the teacher does about latency, soft gains and pushes, which
the IK teacher's kinematic plan cannot. Only pushes already acting at the observation take part in
the look-ahead: one that starts later is withheld (SimWorld.unstarted_pushes_withheld), so no label
leaks a future the student could not have seen.

Latency: the deployed actuator sends the chunk's point for time s at s - L (L: the latency it
compensates), so label point j is the teacher's command at t + j dt - L (the nearest decision;
before t: the command in force).

The teacher's integrated target: acting alone, the teacher adds each action to the command it set
at its last decision, one dt ago, and sees its last action. Through a chunk, the newest command
sent is an interpolation that already leans toward the next point (sampled L ahead), so starting
from it would count most of an action twice on every chunk: the arm ran 40 % ahead of the teacher's
own pace and the pick_lift teacher, 91/100 acting alone, grasped 0/4 through the chunk path. The
look-ahead starts from the command set one decision before the observation, and the last action
is the step between the two commands before that (SimWorld.commanded_at: the commanded
trajectory at those times, between the control ticks around them): what the teacher
would have seen, whoever drove (the student too, in DAgger).

A teacher and a recoverer (RecoveringChunkTeacher): the DART clone of the timed pick expert labels
well wherever its expert went, and nowhere else: on a wrist student's failed first grasp (an open jaw
resting on the cube's top, a jaw shut on nothing) it asks to press on and close slowly, the student
copies it and stays there to the time limit. The reactive expert, which decides from the state,
labels those states "up, open, approach again"; from the first of them to the episode's end it labels.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.errors import ConfigError
from ..sim.reactive_pick_expert import RETRY, RISE
from ..sim.tasks import REACTIVE_EXPERT_TASKS, make_scripted_expert
from ..sim.world import SimWorld
from .env import EnvConfig, privileged_observation
from .teacher_checkpoint import LoadedTeacher

# [rad] per decision for an action of 1: a scripted labeller's step limit, the pick_lift teachers' env value.
EXPERT_ACTION_SCALE_RAD = 0.08


class ChunkLookAhead:
    """Labels chunks for `world` by letting a one-decision-at-a-time teacher act from a snapshot
    (module docstring); subclasses say what it does each decision (`act`). decision_s [s]: its
    decision period (the student's chunk spacing); compensated_latency_s [s]: the actuator's;
    action_scale_rad [rad]: the target change of an action of 1; source: named in errors."""

    def __init__(self, world: SimWorld, decision_s: float, compensated_latency_s: float,
                 action_scale_rad: float, source: str, decision_field: str) -> None:
        self.world = world
        physics_dt = world.params.physics.dt_s
        self.physics_per_decision = max(1, int(round(decision_s / physics_dt)))
        self.decision_s = self.physics_per_decision * physics_dt
        self.latency_steps = int(round(compensated_latency_s / self.decision_s))
        self.action_scale_rad = float(action_scale_rad)
        self.source = source
        self.decision_field = decision_field
        self.labels_made = 0

    def _check_dt(self, dt_s: float) -> None:
        if abs(dt_s - self.decision_s) > 1e-9:
            raise ConfigError(self.source, self.decision_field, round(1.0 / self.decision_s, 6),
                              f"the student's chunk spacing dt_s = {dt_s} s must equal the teacher's decision "
                              f"period {self.decision_s} s")

    def chunk(self, q: np.ndarray, target: np.ndarray | None, chunk_length: int, dt_s: float) -> np.ndarray:
        """The teacher's chunk (K, n) [rad] from the world's current state (which is left unchanged)."""
        self._check_dt(dt_s)
        w = self.world
        command, last_action = self.integrated_target()
        sent_before = command.copy()
        shift = min(self.latency_steps, chunk_length)
        commands: list[np.ndarray] = []
        snapshot = w.save_state()
        try:
            # No label may answer a push that starts after this observation (the student cannot see
            # it coming): pushes not yet started are withheld from the look-ahead; those acting now go on.
            with w.unstarted_pushes_withheld():
                self._roll_out(chunk_length - shift, command, last_action, commands)
        finally:
            w.restore_state(snapshot, discard=True)
        self.labels_made += 1
        # point j is sent at t + j dt - L: the decision j - shift (before t: the command last sent)
        return np.stack([sent_before] * shift + commands)

    def integrated_target(self) -> tuple[np.ndarray, np.ndarray]:
        """(the commanded trajectory one decision ago (n,) [rad], the action (n,) in [-1, 1] that
        the step from one decision before that amounts to). At an episode's start (nothing sent
        yet) the measured position and no action, as the teacher's own episodes begin."""
        w = self.world
        decision_ns = int(round(self.decision_s * 1e9))
        command = w.commanded_at(w.time_ns - decision_ns)
        if command is None:
            return w.joint_positions().copy(), np.zeros(len(w.joint_names))
        before = w.commanded_at(w.time_ns - 2 * decision_ns)
        if before is None:
            return command, np.zeros(len(w.joint_names))
        return command, np.clip((command - before) / self.action_scale_rad, -1.0, 1.0)

    def act(self, decision: int, command: np.ndarray, last_action: np.ndarray) -> np.ndarray:
        """The action (n,) in [-1, 1] at the look-ahead's `decision` (0, 1, ...) from the world's
        state, the integrated target `command` (n,) [rad] and the last action (n,)."""
        raise NotImplementedError

    def _roll_out(self, decisions: int, command: np.ndarray, last_action: np.ndarray,
                  commands: list[np.ndarray]) -> None:
        """Let the teacher act `decisions` times from the world's state, from the integrated target
        `command` (n,) [rad] and its last action (n,), appending each target [rad] it commands to
        `commands` (the world moves on: the caller restores it)."""
        w = self.world
        for k in range(decisions):
            action = np.clip(np.nan_to_num(self.act(k, command, last_action), nan=0.0), -1.0, 1.0)
            command = np.clip(command + self.action_scale_rad * action, w.lower, w.upper)
            commands.append(command.copy())
            last_action = action
            w.set_command(command)
            w.step(self.physics_per_decision)


class PPOChunkTeacher(ChunkLookAhead):
    """Labels chunks for `world` with a loaded PPO teacher; `chunk(q, target, K, dt_s)` like the IK
    teacher's (q and target are read from the world itself, which holds the truth)."""

    def __init__(self, teacher: LoadedTeacher, world: SimWorld, compensated_latency_s: float) -> None:
        spec = teacher.spec
        if list(spec.joint_names) != list(world.joint_names):
            raise ConfigError(teacher.source, "joint_names", spec.joint_names,
                              f"the teacher was trained for other joints than this world's {world.joint_names}")
        env = EnvConfig.from_dict(spec.env, teacher.source)
        task = env.task or "reach"  # teachers before env.task were all trained on reach
        if task != world.task.name:
            raise ConfigError(teacher.source, "env.task", task,
                              f"the teacher was trained on task {task!r}; this world runs {world.task.name!r} "
                              f"(the training config's task:)")
        super().__init__(world, 1.0 / env.policy_hz, compensated_latency_s, env.action_scale_rad,
                         teacher.source, "env.policy_hz")
        self.teacher = teacher
        self.env = env
        home = world.params.home_pose(world.joint_names)
        self.home_q = np.clip([home.get(n, 0.0) for n in world.joint_names], world.lower, world.upper)
        self._base_inverse = np.eye(4)
        self._steps_done = 0

    def chunk(self, q: np.ndarray, target: np.ndarray | None, chunk_length: int, dt_s: float) -> np.ndarray:
        w = self.world
        self._base_inverse = np.linalg.inv(w.link_pose(w._root_link_name()))  # noqa: SLF001 - the world's own root
        self._steps_done = int(round(w.episode_elapsed_s() / self.decision_s))
        return super().chunk(q, target, chunk_length, dt_s)

    def act(self, decision: int, command: np.ndarray, last_action: np.ndarray) -> np.ndarray:
        max_steps = max(1, int(round(self.env.episode_s / self.decision_s)))
        time_left = self.env.time_term(max(0.0, 1.0 - (self._steps_done + decision) / max_steps))
        obs = privileged_observation(self.world, self.home_q, self._base_inverse, command, last_action, time_left)
        with torch.inference_mode():
            return self.teacher.policy(torch.from_numpy(obs)[None])[0].double().numpy()


class ScriptedChunkTeacher(ChunkLookAhead):
    """Labels chunks for `world` with the task's reactive scripted expert (sim/reactive_pick_expert.py:
    it decides from the state alone, so it labels any state a student reaches): each decision moves
    the integrated target toward the expert's joint targets by at most action_scale_rad [rad] per
    joint, as an env action would (rl/bc.expert_action). decision_s [s]: the student's chunk spacing."""

    def __init__(self, world: SimWorld, decision_s: float, compensated_latency_s: float,
                 action_scale_rad: float, source: str) -> None:
        if world.task.name not in REACTIVE_EXPERT_TASKS:
            raise ConfigError(source, "teacher", "expert", f"task {world.task.name!r} has no reactive scripted "
                              f"expert ({', '.join(REACTIVE_EXPERT_TASKS)} have)")
        super().__init__(world, decision_s, compensated_latency_s, action_scale_rad, source, "dt_s")
        self.expert = make_scripted_expert(world, "reactive")

    def act(self, decision: int, command: np.ndarray, last_action: np.ndarray) -> np.ndarray:
        return (self.expert.command(self.world) - command) / self.action_scale_rad


# The reactive expert's phases that say an episode's first grasp failed (sim/reactive_pick_expert.py).
_FAILED_GRASP_PHASES = (RETRY,)
# [s] a failed grasp must last this long before the recoverer takes over: on 30 randomized episodes
# with pushes of the 71/100 wrist student, an open jaw brushed the cube's top or a closing jaw read as
# "shut on nothing" for up to 1.1 s on the way to 24 successes, and its 6 failures stalled for 2.3-7.8 s.
RECOVERY_STALL_S = 1.5


class RecoveringChunkTeacher:
    """`teacher` (the PPO teacher's labels) until the episode's first failed grasp has lasted
    stall_s [s], `recoverer` (the reactive expert's) from then on to the episode's end (module
    docstring). A failed grasp: the expert's phase is retry (a jaw shut or shutting on nothing, low
    near the cube) or rise with a jaw on the cube (an open jaw on its top), at every call for stall_s.
    One instance per episode; recovering_since_s [s]: the episode time it took over (None: never)."""

    def __init__(self, teacher: PPOChunkTeacher, recoverer: ScriptedChunkTeacher,
                 stall_s: float = RECOVERY_STALL_S) -> None:
        self.teacher = teacher
        self.recoverer = recoverer
        self.stall_s = float(stall_s)
        self.recovering_since_s: float | None = None
        self._failed_since_s: float | None = None

    @property
    def labels_made(self) -> int:
        return self.teacher.labels_made + self.recoverer.labels_made

    def failed_grasp(self) -> bool:
        """Whether the reactive expert reads the world now as a failed grasp."""
        expert = self.recoverer.expert
        state = expert.state(self.recoverer.world)
        phase = expert.expert.phase(state)[0]
        return phase in _FAILED_GRASP_PHASES or (phase == RISE and state.jaw_touches_cube)

    def chunk(self, q: np.ndarray, target: np.ndarray | None, chunk_length: int, dt_s: float) -> np.ndarray:
        if self.recovering_since_s is None:
            now_s = self.recoverer.world.episode_elapsed_s()
            if not self.failed_grasp():
                self._failed_since_s = None
            elif self._failed_since_s is None:
                self._failed_since_s = now_s
            elif now_s - self._failed_since_s >= self.stall_s - 1e-9:
                self.recovering_since_s = now_s
        labeller = self.teacher if self.recovering_since_s is None else self.recoverer
        return labeller.chunk(q, target, chunk_length, dt_s)
