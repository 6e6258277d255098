"""The supervisor in parts, one concern each, under one coordinator (`coordinator.Supervisor`).

- `modes`: the modes, the events and the explicit transition table (docs/safety.md shows it);
- `config`: `SupervisorConfig` and its declared ranges;
- `outputs`: what the supervisor hands back (commands, intervention events, status);
- `plausibility`: which measured or commanded positions are physical at all;
- `estop`: the e-stop sources (topic, joystick button, heartbeat, unheard publishers) and the
  stop-source check; the latch itself is the ESTOP mode, left only by a reset;
- `watchdogs`: input freshness, the clock watch (time only goes forward) and the stale-input check;
- `command_output`: the step limiter every command passes, holds included;
- `handover`: the hand-over ramp and its gap check;
- `shared_control`: the human's bounded correction in SHARED;
- `interventions`: takeover and hand-back events;
- `leader_follow`: following a leader arm's command/teleop in TELEOP (aligned first, stale holds);
- `servo_alarms`: a servo-bus driver's overload/overheat alarms, an e-stop source while they persist;
- `coordinator`: the `Supervisor`, which drives the table and the parts.

`sim2real_ros.core.safety.supervisor` re-exports the public names.
"""
