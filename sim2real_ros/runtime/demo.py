"""The main job: the full graph against the PyBullet sim with the shipped policy.

Autonomous episodes; a scripted joystick takes over mid-episode and hands back; the e-stop is
pressed and reset; everything is recorded to an MCAP bag; then the replay evaluator compares the
policy with what the "human" did on that bag. Writes demo_out/ (bag, report.md, report.json, plots).

The graph runs the checkpoint as it was trained, as `sim2real launch sim --checkpoint` does: its
robot (an SO-101 student on the SO-101), its task, its sim params (a wrist camera) and its
preprocessing (evaluation/checkpoint_graph.follow_checkpoint).
"""
from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.policy.checkpoint import read_checkpoint
from ..core.robot.urdf import RobotModel
from ..core.safety.joystick import load_joystick_mapping
from ..core.stats import summary, wilson_interval
from ..evaluation.checkpoint_graph import follow_checkpoint
from ..graph import GraphArgs
from ..paths import config_path, default_policy_path
from ..robots import robot_for_checkpoint, sim_params_for_checkpoint
from ..sim.expert import ReachExpert
from ..sim.params import load_sim_params
from ..topics import SUPERVISOR_ARM, SUPERVISOR_RESET, Intervention
from .graph_session import SimGraphSession
from .scripted_joystick import ScriptedJoystick


@dataclass(frozen=True)
class DemoConfig:
    """episodes: autonomous episode outcomes to collect. takeover_episode / estop_episode: 1-based
    episode during which the joystick takes over / the e-stop is pressed. max_wall_s: give up after
    this long [s]. joy_rate_hz: scripted joystick rate [Hz]."""

    out_dir: Path = Path("demo_out")
    checkpoint: Path = field(default_factory=default_policy_path)
    episodes: int = 6
    takeover_episode: int = 2
    estop_episode: int = 4
    takeover_s: float = 2.5
    estop_hold_s: float = 1.0
    max_wall_s: float = 480.0
    joy_rate_hz: float = 20.0
    seed: int = 0


def checkpoint_robot_and_sim_params(checkpoint: Path) -> tuple[str, str | None]:
    """The robot a demo runs `checkpoint` on (the one it was trained for) and the sim params file it
    was trained on (None: the default robot's own, also for a file that is not there yet: run()
    names it)."""
    if not checkpoint.is_file():
        return robot_for_checkpoint(None, [], {}, str(checkpoint)), None
    spec = read_checkpoint(checkpoint)[0]
    robot = robot_for_checkpoint(None, spec.joint_names, spec.provenance, str(checkpoint))
    return robot, sim_params_for_checkpoint(robot, None, spec.provenance)[0]


class Demo:
    def __init__(self, config: DemoConfig, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.log = log
        robot, sim_params = checkpoint_robot_and_sim_params(Path(config.checkpoint))
        self.args = GraphArgs(robot=robot, checkpoint=str(config.checkpoint),
                              extra_parameters={"sim_node": {"seed": config.seed}})
        params = load_sim_params(sim_params)
        self.model = RobotModel.from_description(self.args.description())
        self.ee_link = params.robot.ee_link
        self.joint_names = self.model.joint_names
        mapping = load_joystick_mapping(config_path("joystick.yaml"))
        self.joystick = ScriptedJoystick(mapping)
        # The scripted person knows where the target is (privileged) and uses the IK teacher.
        home = params.home_pose(self.joint_names)
        limits = self.model.limits_arrays(self.joint_names)
        home_q = np.clip([home.get(n, 0.0) for n in self.joint_names], limits["lower"], limits["upper"])
        self.expert = ReachExpert(self.model, self.joint_names, self.ee_link, np.asarray(home_q))
        self.jog_speed = mapping.joint_speed_fraction * limits["velocity"]  # full stick [rad/s]
        self.events: list[dict[str, Any]] = []

    # ------------------------------------------------------------------------------------------
    def _event(self, kind: str, **data: Any) -> None:
        self.events.append({"t_s": round(time.monotonic() - self._start, 3), "event": kind, **data})
        details = ", ".join(f"{k}={v}" for k, v in data.items())
        self.log(f"[demo] {kind}" + (f": {details}" if details else ""))

    def _wait_for_episode_start(self, session: SimGraphSession, index: int, settle_s: float = 0.8) -> None:
        """Block until `index - 1` outcomes have arrived (episode `index` is running), then settle."""
        if not session.wait_for_outcomes(index - 1, self._remaining()):
            raise TimeoutError(f"episode {index} never started")
        time.sleep(settle_s)

    def _remaining(self) -> float:
        return max(1.0, self.config.max_wall_s - (time.monotonic() - self._start))

    # ------------------------------------------------------------------------------------------
    def takeover(self, session: SimGraphSession) -> dict[str, Any]:
        """Deadman + takeover, jog the first joint group toward the IK goal of the target (a person
        helping the robot along), then hand back (arm, ramped). Joint-space jogging of the arm joints
        keeps the robot in poses the policy was trained on; wrist roll, which the reach teacher never
        moves, stays where it is."""
        j = self.joystick
        period = 1.0 / self.config.joy_rate_hz
        stamp = lambda: time.time_ns()  # noqa: E731 - Joy stamps are informational
        group = list(j.mapping.groups_for(len(self.joint_names))[0])
        session.publish_joy(j.message(stamp()))  # buttons up first: presses act on edges
        time.sleep(period)
        session.publish_joy(j.message(stamp(), ("deadman", "takeover")))
        took = session.wait_for_mode("TELEOP", 3.0)
        self._event("takeover", accepted=took, mode=session.mode(), reason=session.mode_reason())
        end = time.monotonic() + self.config.takeover_s
        closest = np.inf
        while time.monotonic() < end:
            q, target = session.latest_joint_positions(self.joint_names), session.target_position()
            if q is not None and target is not None:
                closest = min(closest, float(np.linalg.norm(self.expert.ee_position(q) - target)))
                velocity = 2.0 * (self.expert.solve_ik(target) - q)[group]
                session.publish_joy(j.message(stamp(), ("deadman",), j.joint_axes(velocity, self.jog_speed[group])))
            time.sleep(period)
        back = False
        for _ in range(4):  # like a person, press START again if the supervisor refused (it says why)
            session.publish_joy(j.message(stamp(), ("deadman",)))
            time.sleep(period)
            held_until = time.monotonic() + 1.0
            while not back and time.monotonic() < held_until:  # keep the joystick alive while waiting
                session.publish_joy(j.message(stamp(), ("deadman", "arm")))  # hand back (ramped)
                back = session.wait_for_mode("AUTONOMOUS", period)
            if back:
                break
            self._event("handback refused", reason=session.mode_reason())
        session.publish_joy(j.message(stamp()))
        self._event("handback", accepted=back, mode=session.mode(), reason=session.mode_reason())
        return {"accepted": took, "handed_back": back, "closest_approach_m": closest}

    def estop(self, session: SimGraphSession) -> dict[str, Any]:
        """Press the e-stop, measure the reaction on the robot topic, release, reset, re-arm."""
        before = len(session.commands)
        pressed_at = session.press_estop(True)
        latched = session.wait_for_mode("ESTOP", 3.0)
        time.sleep(self.config.estop_hold_s)
        during = [(t, np.asarray(m.data)) for t, m in list(session.commands)[before:] if t >= pressed_at]
        reaction_ms, reached_ms, held = float("nan"), float("nan"), False
        if during:
            hold = during[-1][1]
            # Holds are step-limited (docs/design.md §4): from the first hold command on, every command
            # comes nearer the final hold (the measured position at the press) until it is there;
            # before it the policy's commands lead away from it.
            distance = [float(np.max(np.abs(c - hold))) for _, c in during]
            first = next(i for i in range(len(during))
                         if all(b <= a + 1e-12 for a, b in zip(distance[i:], distance[i + 1:], strict=False)))
            reached = next(i for i in range(len(during)) if all(np.array_equal(c, hold) for _, c in during[i:]))
            reaction_ms = (during[first][0] - pressed_at) * 1e3
            reached_ms = (during[reached][0] - pressed_at) * 1e3
            held = len(during) - reached >= 2
        refused, refused_msg = session.call(SUPERVISOR_RESET)  # e-stop still pressed: must refuse
        session.press_estop(False)
        time.sleep(0.2)
        reset_ok, reset_msg = session.call(SUPERVISOR_RESET)
        rearmed = session.wait_for_mode("AUTONOMOUS", 2.0)
        if not rearmed:
            session.call(SUPERVISOR_ARM)
            rearmed = session.wait_for_mode("AUTONOMOUS", 5.0)
        result = {"latched": latched, "reaction_ms": round(reaction_ms, 2),
                  "hold_reached_ms": round(reached_ms, 2), "held_position": held,
                  "reset_refused_while_pressed": not refused, "refusal": refused_msg, "reset": reset_ok,
                  "reset_message": reset_msg, "rearmed": rearmed}
        self._event("estop", **result)
        return result

    # ------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.config
        if not Path(c.checkpoint).is_file():
            raise FileNotFoundError(f"checkpoint {c.checkpoint} not found: train one (`sim2real train`) "
                                    "or make an untrained one (`sim2real policy init`)")
        if c.out_dir.exists():
            shutil.rmtree(c.out_dir)
        c.out_dir.mkdir(parents=True)
        bag = c.out_dir / "bag"
        self._start = time.monotonic()
        self.args, followed = follow_checkpoint("sim", self.args, c.out_dir)
        self.log(f"[demo] starting the sim graph ({self.args.robot}) with {c.checkpoint}"
                 + (f", following {', '.join(followed)}" if followed else "")
                 + f"; node output in {c.out_dir / 'graph.log'}")
        with SimGraphSession(self.args, c.out_dir / "graph.log", record_to=bag) as session:
            if not session.wait_for_mode("AUTONOMOUS", 180.0):
                session.check_nodes()
                raise TimeoutError(f"the supervisor never armed (mode {session.mode()!r}: {session.mode_reason()})")
            self._event("armed", mode=session.mode())
            self._wait_for_episode_start(session, c.takeover_episode)
            takeover = self.takeover(session)
            self._wait_for_episode_start(session, c.estop_episode)
            estop = self.estop(session)
            while len(session.outcomes) < c.episodes and time.monotonic() - self._start < c.max_wall_s:
                session.check_nodes()
                n = len(session.outcomes)
                session.wait_for_outcomes(n + 1, min(5.0, self._remaining()))
            outcomes = session.outcomes
            interventions = [event.as_dict() for m in list(session.interventions)
                             for event in Intervention.all_from_msg(m)]
            session.check_nodes()
        self._event("graph stopped", bag=str(bag))
        for o in outcomes:
            self.log(f"[demo] episode {o.episode}: {'success' if o.success else o.reason} "
                     f"in {o.duration_s:.1f} s (final distance {o.final_distance_m * 100:.1f} cm)")
        replay = self._replay(bag)
        foxglove = self._foxglove(bag)
        return self._report(outcomes, interventions, takeover, estop, replay, foxglove)

    def _foxglove(self, bag: Path) -> dict[str, Any]:
        """demo.foxglove.mcap (the bag with the 3D arm, docs/viz.md) and demo.layout.json beside it."""
        from ..viz.export import export_foxglove
        from ..viz.layout import write_layout

        out = self.config.out_dir
        try:
            exported = export_foxglove(bag, out / "demo.foxglove.mcap", overwrite=True)
            layout = write_layout(out / "demo.layout.json", exported.joint_names)
        except Exception as err:  # noqa: BLE001 - the demo reports what failed and keeps its other results
            self.log(f"[demo] Foxglove export failed: {type(err).__name__}: {err}")
            return {"error": f"{type(err).__name__}: {err}"}
        self.log(f"[demo] Foxglove: open {exported.output} (layout {layout}), or `sim2real view {bag}`")
        return {"mcap": str(exported.output), "layout": str(layout), "messages": dict(exported.shown)}

    def _replay(self, bag: Path) -> dict[str, Any]:
        from ..evaluation import evaluate_bag

        self.log("[demo] replaying the recorded bag through the policy (offline evaluator)")
        try:
            return evaluate_bag(bag, Path(self.config.checkpoint), mode="offline",
                                report_dir=self.config.out_dir / "replay")
        except Exception as err:  # noqa: BLE001 - the demo reports what failed and keeps its other results
            self.log(f"[demo] replay failed: {type(err).__name__}: {err}")
            return {"error": f"{type(err).__name__}: {err}"}

    def _report(self, outcomes, interventions, takeover, estop, replay, foxglove=None) -> dict[str, Any]:
        wins = sum(o.success for o in outcomes)
        report = {
            "checkpoint": str(self.config.checkpoint), "robot": self.args.robot,
            "episodes": len(outcomes), "successes": wins,
            "success_ci95": list(wilson_interval(wins, len(outcomes))),
            "episode_duration_s": summary([o.duration_s for o in outcomes]),
            "outcomes": [o.__dict__ for o in outcomes],
            "interventions": interventions, "takeover": takeover, "estop": estop,
            "replay": replay, "foxglove": foxglove or {},
            "events": self.events, "wall_time_s": round(time.monotonic() - self._start, 1),
        }
        out = self.config.out_dir
        (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
        (out / "report.md").write_text(render_markdown(report))
        return report


def replay_error_rad(replay: dict[str, Any]) -> float | None:
    """The headline replay error: MAE over every compared point and joint [rad] (None if none)."""
    overall = replay.get("metrics", {}).get("overall", {}) if isinstance(replay, dict) else {}
    mae = overall.get("mae")
    return float(mae) if isinstance(mae, (int, float)) and np.isfinite(mae) else None


def render_markdown(report: dict[str, Any]) -> str:
    lo, hi = report["success_ci95"]
    estop, takeover = report["estop"], report["takeover"]
    replay_err = replay_error_rad(report["replay"])
    lines = [
        "# sim2real_ros demo", "",
        f"Checkpoint: `{report['checkpoint']}` on the {report.get('robot', 'arm6')}", "",
        "| figure | value |", "|---|---|",
        f"| episodes | {report['episodes']} |",
        f"| successes | {report['successes']} (95% CI {lo:.2f}-{hi:.2f}) |",
        f"| interventions (events) | {len(report['interventions'])} |",
        f"| takeover accepted / handed back | {takeover['accepted']} / {takeover['handed_back']} |",
        f"| e-stop reaction [ms] (first hold command; hold reached) | {estop['reaction_ms']}; "
        f"{estop.get('hold_reached_ms')} (latched {estop['latched']}, held {estop['held_position']}) |",
        f"| reset refused while pressed / reset after release | {estop['reset_refused_while_pressed']} / "
        f"{estop['reset']} |",
        f"| replay error: policy vs human (TELEOP) commands, MAE [rad] | "
        f"{'n/a' if replay_err is None else f'{replay_err:.4f}'} |",
        f"| wall time [s] | {report['wall_time_s']} |", "",
        "## Episodes", "", "| episode | result | duration [s] | final distance [cm] |", "|---|---|---|---|",
    ]
    for o in report["outcomes"]:
        lines.append(f"| {o['episode']} | {'success' if o['success'] else o['reason']} | {o['duration_s']:.2f} | "
                     f"{o['final_distance_m'] * 100:.1f} |")
    lines += ["", "## Events", ""] + [f"- {e['t_s']:.1f} s: {e['event']}" for e in report["events"]]
    lines += ["", "Replay report: `replay/report.md` (plots in `replay/`). Bag: `bag/`. Foxglove: "
              "`demo.foxglove.mcap` with the layout `demo.layout.json` (docs/viz.md).", ""]
    return "\n".join(lines)
