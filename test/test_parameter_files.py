"""Each node parameter is declared once, in config/parameters/<node>.yaml: the node declares it from
there (checked here on real rclpy nodes), the core's configs that keep defaults agree with it,
docs/parameters.md is generated from it, and a malformed file or value is refused naming the file,
the field and the value."""
import dataclasses
import math
import shutil
from pathlib import Path

import pytest

from sim2real_ros.core.errors import ConfigError
from sim2real_ros.core.schema import frozen_config_class, parse_schema
from sim2real_ros.nodes import parameters as params

ROOT = Path(__file__).resolve().parent.parent


def _defaults(node: str) -> dict:
    return {entry.name: entry.default_value for entry in params.SCHEMAS.get(node, params.REALTIME_SCHEMA)}


def _inverse(value: float) -> float:
    return 1.0 / value


# (config class, node file, {field: parameter or (parameter, conversion from the parameter)},
# fields with a default that are not node parameters). Every defaulted field must be in one of the two,
# so a default added to a core config without its parameter fails here.
def _core_configs():
    from sim2real_ros.core.control.actuator import ActuatorConfig
    from sim2real_ros.core.control.chunk_buffer import ChunkBufferConfig
    from sim2real_ros.core.control.latency_estimator import LatencyEstimatorConfig
    from sim2real_ros.core.control.realtime import RealtimeRequest
    from sim2real_ros.core.perception.camera_capture import CameraNodeConfig
    from sim2real_ros.core.safety.joint_jump import JointJumpConfig
    from sim2real_ros.core.safety.supervision.config import SupervisorConfig
    from sim2real_ros.hardware.driver import DriverConfig

    same = lambda *names: {name: name for name in names}  # noqa: E731 - a table helper
    return [
        (ActuatorConfig, "actuator_node", same(
            "control_rate_hz", "actuation_latency_s", "interpolation", "blending", "crossfade_s", "ensemble_decay",
            "estimate_latency", "use_estimated_latency", "latency_window_s", "latency_max_s",
            "latency_min_confidence", "max_joint_jump_rad"), {"velocity_limits", "source"}),
        (ChunkBufferConfig, "actuator_node", same("interpolation", "blending", "crossfade_s", "ensemble_decay"),
         {"max_chunks", "source"}),
        (LatencyEstimatorConfig, "actuator_node", {"window_s": "latency_window_s", "max_lag_s": "latency_max_s"},
         {"min_velocity_rms", "commands_held", "max_command_gap_s", "source"}),
        (JointJumpConfig, "supervisor", {"slack_rad": "max_joint_jump_rad",
                                         "confirm_samples": "joint_jump_confirm_samples"}, {"max_dt_s", "source"}),
        (SupervisorConfig, "supervisor", {
            **same("policy_timeout_s", "joy_timeout_s", "teleop_timeout_s", "joint_state_timeout_s",
                   "estop_heartbeat_timeout_s", "auto_arm", "require_stop_source", "handover_ramp_s",
                   "handover_max_gap_rad", "max_joint_jump_rad", "shared_authority", "shared_max_offset_rad",
                   "joint_state_limit_margin_rad", "joint_jump_confirm_samples"),
            "control_period_s": ("control_rate_hz", _inverse)}, {"source"}),
        (CameraNodeConfig, "camera_node", same("diagnostics_period_s", "reopen_after_failures", "loop", "frame_id"),
         {"source"}),
        (DriverConfig, "feetech_driver", same("stall_torque_nm", "overload_fraction", "overheat_c", "alarm_samples",
                                              "check_homing_offset"), set()),
        (RealtimeRequest, "realtime", {"policy": "sched_policy", "priority": "sched_priority",
                                       "cpu_affinity": "cpu_affinity", "lock_memory": "lock_memory",
                                       "nice": "nice", "gil_switch_interval_s": "gil_switch_interval_s"}, {"source"}),
    ]


def default_mismatches(cls, defaults: dict, mapping: dict, not_parameters: set) -> list[str]:
    """Where the defaults of dataclass `cls` differ from a node file's (`defaults`: {parameter: value}),
    and defaulted fields that are neither mapped nor listed as not being parameters."""
    problems = []
    for item in dataclasses.fields(cls):
        if item.default is dataclasses.MISSING:
            continue
        if item.name not in mapping:
            if item.name not in not_parameters:
                problems.append(f"{cls.__name__}.{item.name} has a default but no parameter")
            continue
        parameter, convert = mapping[item.name] if isinstance(mapping[item.name], tuple) else (mapping[item.name],
                                                                                                None)
        expected = defaults[parameter] if convert is None else convert(defaults[parameter])
        ours = tuple(item.default) if isinstance(item.default, list) else item.default
        if not (ours == expected and type(ours) is type(expected)) and not (
                isinstance(expected, float) and isinstance(ours, float) and math.isclose(ours, expected)):
            problems.append(f"{cls.__name__}.{item.name} = {item.default!r}, but {parameter} defaults to "
                            f"{defaults[parameter]!r}")
    return problems


CORE_CONFIG_NAMES = ["ActuatorConfig", "ChunkBufferConfig", "LatencyEstimatorConfig", "JointJumpConfig",
                     "SupervisorConfig", "CameraNodeConfig", "DriverConfig", "RealtimeRequest"]


@pytest.mark.parametrize("index", range(len(CORE_CONFIG_NAMES)), ids=CORE_CONFIG_NAMES)
def test_core_config_defaults_equal_the_node_files(index):
    cls, node, mapping, not_parameters = _core_configs()[index]
    assert cls.__name__ == CORE_CONFIG_NAMES[index]
    assert default_mismatches(cls, _defaults(node), mapping, not_parameters) == []


def test_a_core_default_that_drifts_from_its_file_is_caught():
    """The check above can fail: a file whose control_rate_hz default moved, and a config field with a
    default but no parameter, are both reported."""
    from sim2real_ros.core.control.actuator import ActuatorConfig

    cls, node, mapping, not_parameters = _core_configs()[0]
    assert cls is ActuatorConfig
    moved = {**_defaults(node), "control_rate_hz": 50.0}
    assert default_mismatches(cls, moved, mapping, not_parameters) == [
        "ActuatorConfig.control_rate_hz = 100.0, but control_rate_hz defaults to 50.0"]
    unmapped = {k: v for k, v in mapping.items() if k != "crossfade_s"}
    assert default_mismatches(cls, _defaults(node), unmapped, not_parameters) == [
        "ActuatorConfig.crossfade_s has a default but no parameter"]


def test_supervisor_ranges_are_the_file_bounds():
    """core.safety CONFIG_RANGES (the core refuses values outside them) equal the bounds rclpy enforces;
    the control period's range is the control rate's, inverted."""
    from sim2real_ros.core.safety.supervision.config import CONFIG_RANGES

    table = params.SUPERVISOR
    for name, bounds in CONFIG_RANGES.items():
        if name == "control_period_s":
            low, high = params.spec(table, "control_rate_hz").value_range
            assert (1.0 / high, 1.0 / low) == pytest.approx(bounds)
        else:
            assert params.spec(table, name).value_range == bounds, name
            assert type(params.spec(table, name).value_range[0]) is type(bounds[0]), name


def test_constants_the_code_keeps_equal_the_files():
    """Enumerations and defaults that other code reads from Python constants agree with the files."""
    from sim2real_ros.core.control.chunk_buffer import BLENDINGS, INTERPOLATIONS
    from sim2real_ros.core.policy.backend import BACKENDS
    from sim2real_ros.nodes.sim_node import PACINGS
    from sim2real_ros.robots import DEFAULT_ROBOT, ROBOT_NAMES
    from sim2real_ros.viz.defaults import DEFAULT_BACKLOG, DEFAULT_HOST, DEFAULT_PORT

    def one_of(node, name):
        return tuple(params.spec(params.NODES[node], name).validation["one_of<>"][0])

    assert one_of("sim_node", "pacing") == PACINGS
    assert one_of("actuator_node", "interpolation") == INTERPOLATIONS
    assert one_of("actuator_node", "blending") == BLENDINGS
    assert one_of("policy_node", "backend") == BACKENDS
    viz = _defaults("viz_node")
    assert (viz["host"], viz["port"], viz["client_backlog"]) == (DEFAULT_HOST, DEFAULT_PORT, DEFAULT_BACKLOG)
    for node in ("sim_node", "supervisor", "sim_camera"):
        entry = params.spec(params.NODES[node], "robot")
        assert entry.default == DEFAULT_ROBOT
        assert " | ".join(ROBOT_NAMES) in entry.description, f"{node}.robot does not list every robot"


def test_every_node_has_its_file_and_the_install_ships_them():
    setup = (ROOT / "setup.py").read_text()
    for node in params.NODE_NAMES:
        assert f'"{node}"' in setup, f"{node} is no entry point of setup.py"
        assert params.parameter_file(node).is_file()
    assert 'glob("config/parameters/*.yaml")' in setup
    files = {path.stem for path in (ROOT / "config" / "parameters").glob("*.yaml")}
    assert files == {*params.NODE_NAMES, params.REALTIME_NAME}


def test_docs_are_generated_from_the_files_and_go_stale_when_a_file_changes(tmp_path):
    """docs/parameters.md equals the text generated from the files; a changed default makes the
    generated text differ (and `--check` exit 1) until the page is written again."""
    assert params.DOC_PATH.read_text() == params.render_markdown()
    assert params.main(["--check"]) == 0

    copy = tmp_path / "actuator_node.yaml"
    shutil.copy(params.parameter_file("actuator_node"), copy)
    copy.write_text(copy.read_text().replace("default_value: 0.05\n", "default_value: 0.07\n", 1))
    changed = {**params.NODES, "actuator_node": params.load_table("actuator_node", copy)}
    assert params.spec(changed["actuator_node"], "crossfade_s").default == 0.07
    text = params.render_markdown(changed)
    assert text != params.DOC_PATH.read_text()
    assert "| `crossfade_s` | double | `0.07` | s |" in text
    stale = tmp_path / "parameters.md"
    stale.write_text(text)
    assert params.main(["--check", "--out", str(stale)]) == 1
    assert params.main(["--out", str(stale)]) == 0 and params.main(["--check", "--out", str(stale)]) == 0


def test_nodes_declare_the_file_defaults_on_real_rclpy():
    """Every node's table declared on an rclpy node gives the file's defaults (package files as full
    paths), with bounds as descriptor ranges; the generated config class has the same defaults."""
    import rclpy
    from rclpy.node import Node

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        for name, table in [*params.NODES.items(), (params.REALTIME_NAME, params.REALTIME)]:
            node = Node(f"declares_{name}", context=context, start_parameter_services=False)
            try:
                values = params.declare_table(node, table)
                for entry in table:
                    expected = entry.default_value()
                    assert values[entry.name] == expected, (name, entry.name)
                    if expected != []:  # an empty array is declared typed and unset (Humble's rclpy)
                        declared = node.get_parameter(entry.name).value
                        assert (list(declared) if isinstance(declared, (list, tuple)) else declared) == expected
                    descriptor = node.describe_parameter(entry.name)
                    assert descriptor.description == entry.description
                    assert descriptor.read_only
                    if entry.value_range is not None:
                        declared_range = descriptor.integer_range or descriptor.floating_point_range
                        assert (declared_range[0].from_value, declared_range[0].to_value) == entry.value_range
                if name in params.CONFIG_CLASSES:
                    config = params.CONFIG_CLASSES[name](**values)
                    assert config == params.CONFIG_CLASSES[name](), name
            finally:
                node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_a_value_a_rule_refuses_stops_the_start_naming_the_field_and_value():
    """A `one_of<>` rule (not enforced by rclpy) is checked right after declaring: the ConfigError
    names the parameter and the value, before any node code runs."""
    import rclpy
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = Node("actuator_node", context=context, start_parameter_services=False,
                    parameter_overrides=[Parameter("interpolation", value="quadratic")])
        with pytest.raises(ConfigError) as caught:
            params.declare_table(node, params.ACTUATOR_NODE)
        node.destroy_node()
        assert caught.value.field == "interpolation" and caught.value.value == "quadratic"
        assert "must be one of linear, cubic" in str(caught.value)
        node = Node("camera_preprocessor", context=context, start_parameter_services=False,
                    parameter_overrides=[Parameter("log_throttle_s", value=-1.0)])
        with pytest.raises(ConfigError, match=r"log_throttle_s' = -1.0: must be >= 0"):
            params.declare_config(node, "camera_preprocessor")
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_generated_config_class_is_typed_frozen_and_validates():
    cls = params.CONFIG_CLASSES["camera_node"]
    config = cls()
    assert (config.fps, config.reopen_after_failures, config.frame_id) == (30.0, 30, "camera_link")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.fps = 10.0
    with pytest.raises(ConfigError, match=r"field 'fps' = 0.0: must be in \[0.1, 1000\]"):
        cls(fps=0.0)
    with pytest.raises(ConfigError, match=r"field 'reopen_after_failures' = 2.5: must be an integer"):
        cls(reopen_after_failures=2.5)
    assert cls(fps=60).fps == 60.0 and isinstance(cls(fps=60).fps, float)
    assert cls(source="1").source == "1"  # a parameter may be called `source`


@pytest.mark.parametrize(("declaration", "field", "problem"), [
    ({"n": {"x": {"type": "double", "default_value": 1.0}}}, "n.x", "needs `description`"),
    ({"n": {"x": {"type": "float", "default_value": 1.0, "description": ""}}}, "n.x.type", "must be one of"),
    ({"n": {"x": {"type": "double", "default_value": 1.0, "description": "", "units": "s"}}}, "n.x",
     "unknown keys"),
    ({"n": {"x": {"type": "double", "default_value": 5.0, "description": "",
                  "validation": {"bounds<>": [0.0, 1.0]}}}}, "n.x.default_value", "must be in [0, 1]"),
    ({"n": {"x": {"type": "double", "default_value": 0.5, "description": "",
                  "validation": {"between<>": [0.0, 1.0]}}}}, "n.x.validation", "must be one of"),
    ({"n": {"x": {"type": "integer", "default_value": True, "description": ""}}}, "n.x.default_value",
     "not a bool"),
    ({"n": {"x": {"type": "double", "default_value": 0.5, "description": "",
                  "validation": {"bounds<>": [0.0]}}}}, "n.x.validation", "wrong arguments"),
    ({"n": {"x": {"type": "double", "default_value": 0.5, "description": "",
                  "validation": {"gt<>": 0.0}}}}, "n.x.validation.gt<>", "must be a list"),
    ([1, 2], "(file)", "must map a node name"),
])
def test_a_malformed_file_names_the_file_and_the_parameter(declaration, field, problem):
    with pytest.raises(ConfigError) as caught:
        parse_schema(declaration, "config/parameters/n.yaml")
    assert caught.value.source == "config/parameters/n.yaml" and caught.value.field == field
    assert problem in caught.value.problem


def test_a_file_of_another_node_or_unreadable_yaml_is_refused(tmp_path):
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("other_node:\n  x: {type: bool, default_value: false, description: x}\n")
    with pytest.raises(ConfigError, match="must declare exactly the node 'sim_node'"):
        params.load_table("sim_node", wrong)
    broken = tmp_path / "broken.yaml"
    broken.write_text("sim_node: [unclosed\n")
    with pytest.raises(ConfigError, match=str(broken)):
        params.load_table("sim_node", broken)


def test_validators_cover_generate_parameter_library_rules():
    schema = parse_schema({"n": {
        "names": {"type": "string_array", "default_value": ["a"], "description": "",
                  "validation": {"unique<>": None, "not_empty<>": [], "subset_of<>": [["a", "b"]]}},
        "gains": {"type": "double_array", "default_value": [0.5], "description": "",
                  "validation": {"element_bounds<>": [0.0, 1.0], "size_lt<>": [3]}},
        "rate": {"type": "double", "default_value": 1.0, "description": "", "validation": {"gt<>": [0.0]}},
    }}, "n.yaml")["n"]
    cls = frozen_config_class("N", schema, "n parameter")
    assert cls(names=["a", "b"]).names == ("a", "b")
    for field, value, problem in [("names", ["a", "a"], "each entry once"), ("names", [], "must not be empty"),
                                  ("names", ["c"], "must name only a, b"), ("gains", [2.0], "every entry"),
                                  ("gains", [0.1] * 3, "fewer than 3"), ("rate", 0.0, "must be > 0"),
                                  ("rate", float("nan"), "must be a double")]:
        with pytest.raises(ConfigError) as caught:
            cls(**{field: value})
        assert caught.value.field == field and problem in caught.value.problem, (field, caught.value)
