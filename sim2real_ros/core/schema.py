"""Parameter schemas in generate_parameter_library's YAML style, and the one validator they use.

A schema file maps a node name to its parameters; each parameter is a mapping with `type` (one of
TYPES), `default_value`, `description`, optional `unit`, `read_only` (default true here: every
node parameter is set at start-up), `package_file` (the default is a path under the package's
share directory), `deprecated_names`, and `validation`: {rule<>: arguments}, rules as
generate_parameter_library names them (VALIDATORS). The file itself is checked when it is read: an
unknown key, type or rule, or a default its own rules refuse, is a ConfigError naming the file and
the parameter.

`frozen_config_class` turns a schema into a frozen dataclass: the fields are the parameters, in
file order, with their defaults, and construction validates every field (ConfigError naming the
field and the value). Pure: no ROS, no files (the caller reads the YAML).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from .errors import ConfigError

# Parameter type -> the Python types a value may have (bool is refused where a number is meant).
TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "double": (float, int), "integer": (int,), "bool": (bool,),
    "string_array": (list, tuple), "double_array": (list, tuple), "integer_array": (list, tuple),
    "bool_array": (list, tuple), "string_or_string_array": (str, list, tuple),
}
_ELEMENT: dict[str, tuple[type, ...]] = {"string_array": (str,), "double_array": (float, int),
                                         "integer_array": (int,), "bool_array": (bool,),
                                         "string_or_string_array": (str,)}
KEYS = ("type", "default_value", "description", "unit", "read_only", "package_file", "deprecated_names",
        "validation")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _bounds(value: Any, low: float, high: float) -> str | None:
    return None if _number(value) and low <= value <= high else f"must be in [{low:g}, {high:g}]"


def _compare(op: str, test: Callable[[float, float], bool]) -> Callable[[Any, float], str | None]:
    def check(value: Any, limit: float) -> str | None:
        return None if _number(value) and test(value, limit) else f"must be {op} {limit:g}"
    return check


def _one_of(value: Any, choices: Sequence[Any]) -> str | None:
    return None if value in choices else f"must be one of {', '.join(map(str, choices))}"


def _subset_of(value: Any, choices: Sequence[Any]) -> str | None:
    extra = [item for item in value if item not in choices]
    return None if not extra else f"must name only {', '.join(map(str, choices))} (not {', '.join(map(str, extra))})"


def _unique(value: Any) -> str | None:
    return None if len(set(value)) == len(value) else "must name each entry once"


def _not_empty(value: Any) -> str | None:
    return None if len(value) > 0 else "must not be empty"


def _size(op: str, test: Callable[[int, int], bool]) -> Callable[[Any, int], str | None]:
    def check(value: Any, length: int) -> str | None:
        return None if test(len(value), length) else f"must have {op} {length} entries"
    return check


def _element_bounds(value: Any, low: float, high: float) -> str | None:
    bad = [item for item in value if not (_number(item) and low <= item <= high)]
    return None if not bad else f"every entry must be in [{low:g}, {high:g}] (not {bad})"


# Rule name (as written in the file, without the `<>`) -> check(value, *arguments) -> problem or None.
VALIDATORS: dict[str, Callable[..., str | None]] = {
    "bounds": _bounds,
    "gt": _compare(">", lambda v, x: v > x), "gt_eq": _compare(">=", lambda v, x: v >= x),
    "lt": _compare("<", lambda v, x: v < x), "lt_eq": _compare("<=", lambda v, x: v <= x),
    "one_of": _one_of, "subset_of": _subset_of, "unique": _unique, "not_empty": _not_empty,
    "size_gt": _size("more than", lambda n, x: n > x), "size_lt": _size("fewer than", lambda n, x: n < x),
    "fixed_size": _size("exactly", lambda n, x: n == x), "element_bounds": _element_bounds,
}


def rule_name(key: str) -> str:
    """`bounds<>` -> `bounds` (generate_parameter_library marks built-in rules with `<>`)."""
    return key[:-2] if key.endswith("<>") else key


def problem_with(value: Any, validation: Mapping[str, Any]) -> str | None:
    """The first rule of `validation` that `value` breaks, as text ("must be in [0, 1]"), or None."""
    for key, arguments in validation.items():
        args = [] if arguments is None else list(arguments)
        problem = VALIDATORS[rule_name(key)](value, *args)
        if problem is not None:
            return problem
    return None


def check_type(kind: str, value: Any) -> str | None:
    """Why `value` is not a `kind` parameter value, or None."""
    what = f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
    if isinstance(value, bool) and bool not in TYPES[kind]:
        return f"must be {what}, not a bool"
    if not isinstance(value, TYPES[kind]) or (kind == "double" and not math.isfinite(value)):
        return f"must be {what}" + (" (finite)" if kind == "double" else "")
    if kind in _ELEMENT and not isinstance(value, str):
        element = _ELEMENT[kind]
        for item in value:
            if not isinstance(item, element) or (isinstance(item, bool) and bool not in element):
                return f"must be {what} (entry {item!r})"
    return None


def validate(source: str, name: str, kind: str, value: Any, validation: Mapping[str, Any]) -> None:
    """ConfigError(source, name, value, problem) unless `value` is a `kind` that passes `validation`."""
    problem = check_type(kind, value) or problem_with(value, validation)
    if problem is not None:
        raise ConfigError(source, name, value, problem)


@dataclass(frozen=True)
class ParameterSchema:
    """One parameter as its file declares it (see the module docstring)."""

    name: str
    type: str
    default_value: Any
    description: str
    unit: str = ""
    read_only: bool = True
    package_file: bool = False
    deprecated_names: tuple[str, ...] = ()
    validation: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The inclusive (low, high) of a `bounds<>` rule, or None."""
        arguments = next((a for k, a in self.validation.items() if rule_name(k) == "bounds"), None)
        return None if arguments is None else (arguments[0], arguments[1])


def parse_schema(data: Any, source: str) -> dict[str, tuple[ParameterSchema, ...]]:
    """{node: its parameters in file order} from a parsed schema file; ConfigError naming `source`
    (the file) and the parameter for anything malformed."""
    if not isinstance(data, dict) or not data:
        raise ConfigError(source, "(file)", type(data).__name__, "must map a node name to its parameters")
    schemas: dict[str, tuple[ParameterSchema, ...]] = {}
    for node, parameters in data.items():
        if not isinstance(parameters, dict) or not parameters:
            raise ConfigError(source, str(node), parameters, "must map parameter names to their declarations")
        entries = []
        for name, declaration in parameters.items():
            where = f"{node}.{name}"
            if not isinstance(declaration, dict):
                raise ConfigError(source, where, declaration, "must be a mapping (type, default_value, ...)")
            unknown = sorted(set(declaration) - set(KEYS))
            if unknown:
                raise ConfigError(source, where, unknown, f"unknown keys; allowed: {', '.join(KEYS)}")
            for key in ("type", "default_value", "description"):
                if key not in declaration:
                    raise ConfigError(source, where, None, f"needs `{key}`")
            kind = declaration["type"]
            if kind not in TYPES:
                raise ConfigError(source, f"{where}.type", kind, f"must be one of {', '.join(TYPES)}")
            validation = dict(declaration.get("validation") or {})
            for key, arguments in validation.items():
                if rule_name(key) not in VALIDATORS:
                    raise ConfigError(source, f"{where}.validation", key, f"must be one of {', '.join(VALIDATORS)}")
                if arguments is not None and not isinstance(arguments, list):
                    raise ConfigError(source, f"{where}.validation.{key}", arguments, "must be a list of arguments")
            default = declaration["default_value"]
            if isinstance(default, list):
                default = tuple(default)
            if kind == "double" and isinstance(default, int) and not isinstance(default, bool):
                default = float(default)
            entry = ParameterSchema(
                name=str(name), type=kind, default_value=default, description=str(declaration["description"]),
                unit=str(declaration.get("unit", "")), read_only=bool(declaration.get("read_only", True)),
                package_file=bool(declaration.get("package_file", False)),
                deprecated_names=tuple(declaration.get("deprecated_names") or ()), validation=validation)
            # The file's own default must pass its rules (a package file's path as text).
            try:
                problem = check_type(kind, default) or problem_with(default, validation)
            except TypeError as err:  # a rule given the wrong number of arguments
                raise ConfigError(source, f"{where}.validation", validation, f"wrong arguments: {err}") from err
            if problem is not None:
                raise ConfigError(source, f"{where}.default_value", default, problem)
            entries.append(entry)
        schemas[str(node)] = tuple(entries)
    return schemas


_PYTHON_TYPES: dict[str, Any] = {"string": str, "double": float, "integer": int, "bool": bool,
                                 "string_array": tuple[str, ...], "double_array": tuple[float, ...],
                                 "integer_array": tuple[int, ...], "bool_array": tuple[bool, ...],
                                 "string_or_string_array": Any}


def frozen_config_class(class_name: str, schema: Sequence[ParameterSchema], source: str,
                        defaults: Mapping[str, Any] | None = None) -> type:
    """A frozen dataclass with one field per parameter of `schema` (its default: the file's, or
    `defaults[name]`, e.g. a package file's resolved path), plus `config_source` (what errors name as
    the origin; default `source`); constructing one validates every field (types and `validation`
    rules) and raises a ConfigError naming the origin, the field and the value. Arrays are stored as
    tuples."""
    defaults = dict(defaults or {})
    by_name = {entry.name: entry for entry in schema}

    def post_init(self: Any) -> None:
        for entry in schema:
            value = getattr(self, entry.name)
            if isinstance(value, list):
                value = tuple(value)
                object.__setattr__(self, entry.name, value)
            elif entry.type == "double" and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                object.__setattr__(self, entry.name, value)
            problem = check_type(entry.type, value) or problem_with(value, entry.validation)
            if problem is not None:
                raise ConfigError(self.config_source, entry.name, value, problem)

    fields = [(entry.name, _PYTHON_TYPES[entry.type],
               field(default=defaults.get(entry.name, entry.default_value))) for entry in schema]
    if "config_source" in by_name:
        raise ValueError(f"{class_name}: a parameter may not be called config_source (the field naming the origin)")
    fields.append(("config_source", str, field(default=source, compare=False, repr=False)))
    cls = make_dataclass(class_name, fields, frozen=True, namespace={"__post_init__": post_init})
    cls.__doc__ = f"{class_name}: parameters {', '.join(by_name)} (generated from their schema; {source})."
    return cls
