"""Error types of the stack. Each names what is wrong and where (file, field, value)."""
from __future__ import annotations

from typing import Any


class Sim2RealError(Exception):
    """Base class: every error the stack raises on bad input derives from this."""


class ConfigError(Sim2RealError, ValueError):
    """A configuration file or parameter is missing a field or has an invalid value.

    The message always names the source (file or node parameter), the field and the value,
    so a user can fix it without reading code.
    """

    def __init__(self, source: str, field: str, value: Any, problem: str) -> None:
        self.source = source
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{source}: field '{field}' = {value!r}: {problem}")


class CheckpointError(Sim2RealError):
    """A checkpoint is unreadable, unsafe, or its spec does not match the running graph."""


class BagError(Sim2RealError):
    """A bag is unreadable or damaged; the message names the file and what is wrong."""


class UrdfError(Sim2RealError):
    """A URDF is unreadable or lacks what the stack needs (joints, limits)."""
