"""The README tells the truth: every node parameter is documented, every command it shows exists
and parses its options, and the two quick-start commands are the ones CI and make use."""
import ast
import re
import shlex
from pathlib import Path

import pytest

from sim2real_ros.cli.main import available_commands

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
NODES = ("sim_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor", "recorder", "viz_node")
DECLARERS = {"declare", "declare_array", "declare_parameter", "_declare_string_array", "bounded"}


def declared_parameters(node: str) -> set[str]:
    """Parameter names a node declares (string literals passed to its declare helpers)."""
    tree = ast.parse((ROOT / "sim2real_ros" / "nodes" / f"{node}.py").read_text())
    names = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if func in DECLARERS:
            for arg in call.args[:2]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.isidentifier():
                    names.add(arg.value)
    return names - {"node", "self"}


@pytest.mark.parametrize("node", NODES)
def test_every_node_parameter_is_in_the_readme(node):
    section = README.split(f"### {node}", 1)[1].split("\n### ", 1)[0]
    missing = sorted(p for p in declared_parameters(node) if f"`{p}`" not in section)
    assert declared_parameters(node), f"found no parameters declared by {node}"
    assert not missing, f"README section of {node} lacks parameters {missing}"


def readme_commands() -> list[list[str]]:
    """`sim2real ...` invocations inside the README's code blocks (continuation lines joined)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("sim2real "):
                commands.append(shlex.split(line)[1:])
    return commands


def test_readme_commands_exist_and_parse(capsys):
    import argparse
    import importlib

    commands = readme_commands()
    assert len(commands) >= 10
    known = available_commands()
    for argv in commands:
        assert argv[0] in known, f"README shows `sim2real {argv[0]}`, which does not exist"
        if argv[0] == "node":
            continue  # its arguments are rclpy's --ros-args
        module = importlib.import_module(known[argv[0]][0])
        parser = argparse.ArgumentParser(prog=f"sim2real {argv[0]}")
        module.add_arguments(parser)
        parser.parse_args(argv[1:])  # SystemExit (test failure) on an option the command lacks


def test_quick_start_commands_are_what_make_and_ci_run():
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert "make demo" in quick and "make test" in quick
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: .*\n\t.*sim2real demo", makefile, re.M)
    assert re.search(r"^test: .*\n\t.*pytest test", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
