"""Servo alarms from a servo-bus driver's diagnostics: an e-stop source while they persist.

The SO-101's `feetech_driver` reports an overloaded or overheating servo in its diagnostics (one
status, level ERROR, the key `overload` and/or `overheat` = the joints, comma-separated, once the
condition has held for `alarm_samples` reads; per-joint `temperature_c.JOINT` and `load.JOINT`
beside them). Any such alarm latches ESTOP (the coordinator), and a reset is refused while one is
active. An alarm clears only when the same status (by name and hardware id) reports again without
it: a driver that stops reporting keeps its last alarms (a dead driver cannot say its servo cooled
down; its silent `joint_states` hold the arm anyway). Pure: the caller passes each status as plain
values.
"""
from __future__ import annotations

from collections.abc import Mapping

ALARM_KINDS = ("overload", "overheat")
"""The driver's alarm keys that stop the arm (docs/so101.md)."""
# The per-joint reading shown with each alarm: (key prefix, how it reads).
_DETAIL = {"overload": ("load.", "load {}"), "overheat": ("temperature_c.", "{} degC")}


class ServoAlarms:
    """The active alarms per reporting status: {(status name, hardware id): {kind: joints text}}."""

    def __init__(self) -> None:
        self._active: dict[tuple[str, str], dict[str, str]] = {}

    def update(self, name: str, hardware_id: str, is_error: bool, values: Mapping[str, str]) -> list[str]:
        """One diagnostic status (its name, hardware id, whether its level is ERROR, its key-values):
        the alarms it reports, each said in words (empty: none; the status's earlier ones cleared).

        An alarm needs both the ERROR level and its key (the driver sets both); a status without them
        clears that status's alarms."""
        key = (str(name), str(hardware_id))
        now = {kind: str(values[kind]) for kind in ALARM_KINDS if is_error and kind in values}
        if now:
            self._active[key] = now
        else:
            self._active.pop(key, None)
        return [self._describe(key, kind, joints, values) for kind, joints in now.items()]

    def active(self) -> tuple[str, ...]:
        """Every active alarm in words, sorted (a reset is refused while any is)."""
        return tuple(sorted(f"servo alarm {kind} on {joints} ({self._where(key)}) persists"
                            for key, alarms in self._active.items() for kind, joints in alarms.items()))

    @staticmethod
    def _where(key: tuple[str, str]) -> str:
        name, hardware_id = key
        return f"{name} on {hardware_id}" if hardware_id else name

    @classmethod
    def _describe(cls, key: tuple[str, str], kind: str, joints: str, values: Mapping[str, str]) -> str:
        """'servo alarm: overheat on elbow_flex (85 degC) from feetech_driver on /dev/ttyACM0'."""
        prefix, shown = _DETAIL[kind]
        named = []
        for joint in (j.strip() for j in joints.split(",")):
            reading = values.get(prefix + joint)
            named.append(f"{joint} ({shown.format(reading)})" if reading is not None else joint)
        return f"servo alarm: {kind} on {', '.join(named)} from {cls._where(key)}"
