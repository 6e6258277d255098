"""Every node's parameters, declared once: one YAML file per node under config/parameters/.

Each file (generate_parameter_library's style: per parameter `type`, `default_value`, `unit`,
`description`, `validation` rules such as `bounds<>`, `one_of<>`; format in core/schema.py and
docs/parameters.md) is read at import into
- the node's table of ParamSpec, which the node declares (`declare_table`: descriptions, read-only,
  `bounds<>` as FloatingPointRange/IntegerRange so rclpy refuses a value outside them, every other
  rule checked right after; a wrongly typed, out-of-range or refused value is one ConfigError line
  naming the parameter and the value), and
- a frozen dataclass of the node's parameters (config_class_of, core.schema.frozen_config_class):
  fields, types and defaults from the file; constructing one validates every field.
docs/parameters.md is generated from the same files:

    python -m sim2real_ros.nodes.parameters            # writes docs/parameters.md
    python -m sim2real_ros.nodes.parameters --check    # exit 1 when the committed file differs

A renamed parameter keeps its old name for one release (`deprecated_names`): given, it is
used (unless the new name is given too) and a warning naming the new name is logged once.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import ConfigError
from ..core.schema import ParameterSchema, frozen_config_class, parse_schema, problem_with, rule_name
from ..paths import config_path, share_dir

TYPES = ("string", "double", "integer", "bool", "string_array", "double_array", "integer_array",
         "string_or_string_array")
DOC_PATH = Path(__file__).resolve().parent.parent.parent / "docs" / "parameters.md"
PARAMETER_DIR = "parameters"  # under config/
# Node name -> its file under config/parameters/, in the order of the graph (docs/parameters.md follows it).
NODE_NAMES = ("sim_node", "camera_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor",
              "recorder", "viz_node", "feetech_driver", "leader_arm", "sim_camera")
REALTIME_NAME = "realtime"  # every node's real-time knobs (core.realtime; nodes/realtime.py via common.run_node)


@dataclass(frozen=True)
class ShareFile:
    """A default that is a file of the package (config/, urdf/, policies/): the node gets its full
    path on this machine, the docs show `relative`."""

    relative: str

    def resolve(self) -> str:
        return str(share_dir() / self.relative)


@dataclass(frozen=True)
class ParamSpec:
    """One node parameter, as its file under config/parameters/ declares it.

    name; type: one of TYPES; default: the value (a ShareFile for a package file; () for an empty
    array); description: what `ros2 param describe` shows; unit: e.g. "s", "Hz", "rad" ("" for
    none); value_range: inclusive (low, high) bounds enforced by rclpy (the file's `bounds<>`);
    validation: every rule of the file ({rule<>: arguments}); read_only: set at start-up only;
    deprecated_names: earlier names still accepted (with a warning) for one release.
    """

    name: str
    type: str
    default: Any
    description: str
    unit: str = ""
    value_range: tuple[float, float] | None = None
    read_only: bool = True
    deprecated_names: tuple[str, ...] = ()
    validation: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"parameter {self.name}: type {self.type!r} is not one of {TYPES}")
        if self.value_range is not None and self.type not in ("double", "integer"):
            raise ValueError(f"parameter {self.name}: only a double or integer parameter has a range")

    @classmethod
    def from_schema(cls, entry: ParameterSchema) -> ParamSpec:
        default = ShareFile(entry.default_value) if entry.package_file else entry.default_value
        return cls(entry.name, entry.type, default, entry.description, entry.unit, value_range=entry.bounds,
                   read_only=entry.read_only, deprecated_names=entry.deprecated_names,
                   validation=dict(entry.validation))

    def default_value(self) -> Any:
        """The default as the node declares it (a package file as its full path)."""
        if isinstance(self.default, ShareFile):
            return self.default.resolve()
        if isinstance(self.default, tuple):
            return list(self.default)
        return self.default

    def shown_default(self) -> str:
        """The default as the docs show it."""
        if isinstance(self.default, ShareFile):
            return self.default.relative
        value = list(self.default) if isinstance(self.default, tuple) else self.default
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return value if value else "''"
        return repr(value)

    def other_rules(self) -> dict[str, Any]:
        """The rules rclpy does not enforce itself (all but `bounds<>`), checked after declaring."""
        return {key: args for key, args in self.validation.items() if rule_name(key) != "bounds"}


def parameter_file(name: str) -> Path:
    """config/parameters/<name>.yaml."""
    return config_path(f"{PARAMETER_DIR}/{name}.yaml")


def load_schema(name: str, path: Path | None = None) -> tuple[ParameterSchema, ...]:
    """The parameters of node `name` from its file (`path`: another file, e.g. in a test);
    ConfigError naming the file when it is unreadable or malformed, or declares another node."""
    path = path or parameter_file(name)
    try:
        # libyaml's loader where PyYAML has it: every node process reads its file at start-up.
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(str(path), "(file)", None, f"cannot read the parameter file: {err}") from err
    schemas = parse_schema(data, str(path))
    if list(schemas) != [name]:
        raise ConfigError(str(path), "(file)", list(schemas), f"must declare exactly the node {name!r}")
    return schemas[name]


def load_table(name: str, path: Path | None = None) -> tuple[ParamSpec, ...]:
    """Node `name`'s table of ParamSpec, from its file."""
    return tuple(ParamSpec.from_schema(entry) for entry in load_schema(name, path))


def config_class(name: str, schema: tuple[ParameterSchema, ...]) -> type:
    """The frozen dataclass of node `name`'s parameters (package files resolved to full paths)."""
    class_name = "".join(part.title() for part in name.split("_")) + "Parameters"
    resolved = {entry.name: str(share_dir() / entry.default_value) for entry in schema if entry.package_file}
    return frozen_config_class(class_name, schema, f"{name} parameter", defaults=resolved)


@cache
def schema(name: str) -> tuple[ParameterSchema, ...]:
    """Node `name`'s parameters from its file, read once per process (a node reads only its own
    file and realtime.yaml)."""
    return load_schema(name)


@cache
def table(name: str) -> tuple[ParamSpec, ...]:
    """Node `name`'s declaration table (`realtime`: every node's real-time knobs)."""
    return tuple(ParamSpec.from_schema(entry) for entry in schema(name))


@cache
def config_class_of(name: str) -> type:
    """The frozen dataclass of node `name`'s parameters, built from its file."""
    return config_class(name, schema(name))


# Module attributes read lazily (PEP 562), so importing one table reads one file.
_TABLES = {"SIM_NODE": "sim_node", "CAMERA_NODE": "camera_node", "CAMERA_PREPROCESSOR": "camera_preprocessor",
           "POLICY_NODE": "policy_node", "ACTUATOR_NODE": "actuator_node", "SUPERVISOR": "supervisor",
           "RECORDER": "recorder", "VIZ_NODE": "viz_node", "FEETECH_DRIVER": "feetech_driver",
           "LEADER_ARM": "leader_arm", "SIM_CAMERA": "sim_camera", "REALTIME": REALTIME_NAME}


def __getattr__(attribute: str) -> Any:
    if attribute in _TABLES:
        return table(_TABLES[attribute])
    if attribute == "NODES":  # node name -> its table, in the order of the graph (docs/parameters.md's)
        return {name: table(name) for name in NODE_NAMES}
    if attribute == "SCHEMAS":
        return {name: schema(name) for name in NODE_NAMES}
    if attribute == "REALTIME_SCHEMA":
        return schema(REALTIME_NAME)
    if attribute == "CONFIG_CLASSES":  # node name -> the frozen dataclass of its parameters
        return {name: config_class_of(name) for name in NODE_NAMES}
    if attribute in ("SUPERVISOR_CONTROL_RATE_RANGE", "SUPERVISOR_STATE_RATE_RANGE"):
        # [Hz] the supervisor's control_rate_hz and state_rate_hz bounds
        name = "control_rate_hz" if attribute == "SUPERVISOR_CONTROL_RATE_RANGE" else "state_rate_hz"
        return spec(table("supervisor"), name).value_range
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def spec(table: tuple[ParamSpec, ...], name: str) -> ParamSpec:
    """The entry `name` of a table (KeyError naming it when there is none)."""
    for entry in table:
        if entry.name == name:
            return entry
    raise KeyError(f"no parameter {name!r} in the table")


# ----------------------------------------------------------------------------------------------
# Declaring (rclpy is imported here only, so the tables and the docs need no ROS)
def declare_table(node: Any, table: tuple[ParamSpec, ...], range_source: str | None = None) -> dict[str, Any]:
    """Declare every parameter of `table` on `node` and return {name: value}.

    Ranges go into the descriptor (rclpy refuses values outside them); a wrongly typed or
    out-of-range override raises a ConfigError naming the parameter (range_source: what that error
    names as the origin for ranged parameters; default "<node name> parameter"). A deprecated name
    that is set is used unless the new name is set too, with a warning naming the new name.
    """
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.parameter import Parameter

    from .common import declare, declare_array

    arrays = {"string_array": Parameter.Type.STRING_ARRAY, "double_array": Parameter.Type.DOUBLE_ARRAY,
              "integer_array": Parameter.Type.INTEGER_ARRAY}
    values: dict[str, Any] = {}
    for entry in table:
        if entry.type == "string_or_string_array":
            node.declare_parameter(entry.name, entry.default_value(), ParameterDescriptor(
                description=entry.description, read_only=entry.read_only, dynamic_typing=True))
            values[entry.name] = node.get_parameter(entry.name).value
        elif entry.type in arrays and not entry.default:
            values[entry.name] = declare_array(node, entry.name, arrays[entry.type], entry.description)
        else:
            source = range_source if entry.value_range is not None else None
            values[entry.name] = declare(node, entry.name, entry.default_value(), entry.description,
                                         read_only=entry.read_only, value_range=entry.value_range, source=source)
        for old in entry.deprecated_names:
            value = _declare_deprecated(node, entry, old)
            if value is not None and entry.name not in getattr(node, "_parameter_overrides", {}):
                values[entry.name] = value
        rules = entry.other_rules()
        problem = problem_with(values[entry.name], rules) if rules else None
        if problem is not None:
            raise ConfigError(range_source or f"{node.get_name()} parameter", entry.name, values[entry.name], problem)
    return values


def declare_config(node: Any, name: str, range_source: str | None = None) -> Any:
    """Declare node `name`'s parameters (declare_table) and return them as its frozen dataclass
    (config_class_of(name): typed, every rule of its file checked; errors name `range_source`, default
    "<node name> parameter")."""
    values = declare_table(node, table(name), range_source)
    return config_class_of(name)(**values, config_source=range_source or f"{node.get_name()} parameter")


_WARNED: set[tuple[str, str]] = set()  # (node, deprecated name) already warned about in this process
_KIND = {"string": "STRING", "double": "DOUBLE", "integer": "INTEGER", "bool": "BOOL"}


def _declare_deprecated(node: Any, entry: ParamSpec, old: str) -> Any:
    """Declare the deprecated name `old` of `entry` (typed, no default); its value when it was
    set (with a warning logged once), else None."""
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.exceptions import InvalidParameterTypeException, ParameterUninitializedException
    from rclpy.parameter import Parameter

    from ..core.errors import ConfigError

    kind = getattr(Parameter.Type, _KIND[entry.type])
    descriptor = ParameterDescriptor(description=f"deprecated: use {entry.name}", read_only=True)
    try:
        node.declare_parameter(old, kind, descriptor)
        value = node.get_parameter(old).value
    except ParameterUninitializedException:
        return None
    except InvalidParameterTypeException as err:
        raise ConfigError(f"{node.get_name()} parameter", old,
                          None, f"must be a {type(entry.default).__name__} (e.g. {entry.default!r}); "
                          f"deprecated: use {entry.name}: {err.args[0]}") from err
    if value is None:
        return None
    ignored = entry.name in getattr(node, "_parameter_overrides", {})
    # rclpy's `once` is per call site (this line, for every name): keep our own once per node and name.
    key = (node.get_fully_qualified_name(), old)
    if key not in _WARNED:
        _WARNED.add(key)
        node.get_logger().warning(
            f"parameter '{old}' is deprecated and will be removed in the next release: use '{entry.name}'"
            + (f" (both are set: '{entry.name}' wins)" if ignored else ""))
    return value


# ----------------------------------------------------------------------------------------------
# docs/parameters.md
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _args(arguments: Any) -> str:
    if arguments is None or arguments == []:
        return ""
    items = arguments[0] if len(arguments) == 1 and isinstance(arguments[0], list) else arguments
    return ", ".join(f"{item:g}" if isinstance(item, float) else str(item) for item in items)


def _validation(entry: ParamSpec) -> str:
    """The rules as the docs show them: `[low, high]` for bounds, `rule: arguments` for the others."""
    shown = []
    for key, arguments in entry.validation.items():
        rule = rule_name(key)
        if rule == "bounds":
            shown.append(f"[{_args(arguments)}]")
        else:
            text = _args(arguments)
            shown.append(f"{rule}: {text}" if text else rule)
    return "; ".join(shown)


HEADER = ["| parameter | type | default | unit | validation | description |", "|---|---|---|---|---|---|"]


def _row(entry: ParamSpec) -> str:
    description = entry.description
    if entry.deprecated_names:
        olds = ", ".join(f"`{old}`" for old in entry.deprecated_names)
        description += f" (formerly {olds}: still accepted, with a warning, for one release)"
    if not entry.read_only:
        description += " (can be changed at run time)"
    return (f"| `{entry.name}` | {entry.type} | `{_cell(entry.shown_default())}` | {entry.unit} | "
            f"{_cell(_validation(entry))} | {_cell(description)} |")


def render_markdown(nodes: Mapping[str, tuple[ParamSpec, ...]] | None = None,
                    realtime: tuple[ParamSpec, ...] | None = None) -> str:
    """docs/parameters.md: one table per node, from its file under config/parameters/ (`nodes`,
    `realtime`: other tables, e.g. in a test)."""
    nodes = {name: table(name) for name in NODE_NAMES} if nodes is None else nodes
    realtime = table(REALTIME_NAME) if realtime is None else realtime
    lines = [
        "# Node parameters",
        "",
        "Generated from the parameter files `config/parameters/<node>.yaml` (each node declares its",
        "parameters from its file); do not edit by hand: run `python -m sim2real_ros.nodes.parameters`.",
        "A `[low, high]` range is enforced by rclpy (the node exits 2 naming a value outside it); the other",
        "rules are checked right after the parameters are declared, and every other value is validated by",
        "the node at start-up. All parameters are read-only (set at start-up).",
        "",
        "## The parameter files",
        "",
        "One YAML file per node, in the style of generate_parameter_library (ros2_controllers): the node",
        "name, then per parameter `type` (string, double, integer, bool, string_array, double_array,",
        "integer_array, string_or_string_array), `default_value`, `description`, optional `unit`,",
        "`package_file: true` (the default is a path under the package's share directory, given to the node",
        "in full), `deprecated_names` and `validation` with generate_parameter_library's rule names: `bounds<>:",
        "[low, high]` (inclusive), `gt<>`, `gt_eq<>`, `lt<>`, `lt_eq<>`, `one_of<>: [[a, b]]`, `subset_of<>`,",
        "`unique<>`, `not_empty<>`, `size_gt<>`, `size_lt<>`, `fixed_size<>`, `element_bounds<>`.",
        "",
        "From a file come, at import (`sim2real_ros/nodes/parameters.py`): the node's declarations, and a",
        "frozen dataclass of its parameters (`config_class_of(node)`, built by `core.schema.frozen_config_class`:",
        "fields, types and defaults from the file; constructing one checks every field and names the field and",
        "the value it refuses). Dataclasses and a small validator rather than pydantic: no new dependency, the",
        "core stays importable without ROS or extra packages, and the rule names stay generate_parameter_library's.",
        "The core's own configs (ActuatorConfig, SupervisorConfig and its CONFIG_RANGES, CameraNodeConfig,",
        "DriverConfig, PairingConfig, RealtimeConfig) keep defaults for callers without a node (tests, sim",
        "loops); `test/test_parameter_files.py` fails when one differs from its file, or this page from the files.",
        "",
    ]
    for node, entries in nodes.items():
        lines += [f"## {node}", "", *HEADER]
        lines += [_row(entry) for entry in entries]
        lines.append("")
    lines += ["## every node: real-time knobs", "",
              "Declared on every node by `common.run_node` (docs/deployment.md) from",
              "`config/parameters/realtime.yaml`: applied at start-up where the process may, otherwise one",
              "warning and the node runs as before; reported on `~/realtime`.", "", *HEADER]
    lines += [_row(entry) for entry in realtime]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim2real_ros.nodes.parameters", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="file to write (default: docs/parameters.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from the generated text")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run python -m sim2real_ros.nodes.parameters", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
