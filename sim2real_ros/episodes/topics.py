"""Find the graph's topics in a bag: exact name, or the one topic ending with it (namespaced bags)."""
from __future__ import annotations

from collections.abc import Mapping

from ..core.errors import BagError


class MissingTopicsError(BagError):
    """The bag lacks topics the replay needs. `missing` names them, `available` lists the bag's."""

    def __init__(self, bag: str, missing: list[str], available: Mapping[str, str], hint: str = "") -> None:
        self.missing = missing
        self.available = dict(available)
        listing = ", ".join(f"{name} ({msgtype})" for name, msgtype in sorted(self.available.items())) or "none"
        text = f"{bag}: missing topic(s) {missing}; the bag has: {listing}"
        super().__init__(text + (f". {hint}" if hint else ""))


def resolve_topic(wanted: str, available: Mapping[str, str]) -> tuple[str | None, str]:
    """(the bag topic for graph topic `wanted`, why not) .

    `/wanted` itself wins; otherwise the single topic ending with `/wanted` (a namespace prefix
    such as `/arm1/wanted`). Several candidates without an exact match are ambiguous.
    """
    name = "/" + wanted.strip("/")
    if name in available:
        return name, ""
    candidates = sorted(t for t in available if t.endswith(name))
    if len(candidates) == 1:
        return candidates[0], ""
    if candidates:
        return None, f"{wanted} is ambiguous: {candidates} (give the full name)"
    return None, f"{wanted} is not in the bag"


def resolve_topics(bag: str, wanted: Mapping[str, str], available: Mapping[str, str],
                   expected_types: Mapping[str, tuple[str, ...]] | None = None, hint: str = "") -> dict[str, str]:
    """Resolve every `wanted` (role -> graph topic name) at once; raise MissingTopicsError naming
    all that are missing (or ambiguous, or of another type) together with what the bag has."""
    resolved: dict[str, str] = {}
    missing: list[str] = []
    for role, topic in wanted.items():
        found, why = resolve_topic(topic, available)
        if found is None:
            missing.append(why if "ambiguous" in why else topic)
            continue
        types = (expected_types or {}).get(role)
        if types and available[found] not in types:
            missing.append(f"{topic} as {' or '.join(types)} (the bag's {found} is {available[found]})")
            continue
        resolved[role] = found
    if missing:
        raise MissingTopicsError(bag, missing, available, hint)
    return resolved
