"""The README and docs tell the truth: every node parameter is documented (docs/parameters.md, generated
from the tables the nodes declare from), every command they show exists and parses its options, every
document they link exists, and the two quick-start commands are the ones CI and make use."""
import ast
import re
import shlex
from pathlib import Path

import pytest

from sim2real_ros.cli.main import available_commands

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_parameters_doc_is_generated_from_the_declaration_tables():
    """docs/parameters.md is what `python -m sim2real_ros.nodes.parameters` writes from the files
    the nodes declare from (config/parameters/); the README links to it for every node."""
    from sim2real_ros.nodes.parameters import DOC_PATH, NODES, render_markdown

    assert DOC_PATH == ROOT / "docs" / "parameters.md"
    assert DOC_PATH.read_text() == render_markdown(), (
        "docs/parameters.md is out of date: run `python -m sim2real_ros.nodes.parameters`")
    for node in NODES:
        assert f"(docs/parameters.md#{node})" in README, f"README does not link the parameters of {node}"


DECLARERS = {"declare", "declare_array", "declare_parameter", "declare_parameters"}


@pytest.mark.parametrize("node", ["sim_node", "camera_preprocessor", "policy_node", "actuator_node", "supervisor",
                                  "recorder", "viz_node", "feetech_driver", "camera_node"])
def test_nodes_declare_parameters_only_from_their_table(node):
    """No parameter is declared by name in a node's source: each comes from its file under
    config/parameters/ through nodes/parameters.py."""
    from sim2real_ros.nodes.parameters import NODES

    tree = ast.parse((ROOT / "sim2real_ros" / "nodes" / f"{node}.py").read_text())
    by_name = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call):
            func = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if func in DECLARERS and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                         for a in call.args[:2]):
                by_name.append(ast.unparse(call)[:80])
    assert not by_name, f"{node} declares parameters outside its table: {by_name}"
    source = ast.unparse(tree)
    assert ("declare_table(" in source or "declare_config(" in source) and NODES[node]


DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}


def shown_commands(text: str) -> list[list[str]]:
    """`sim2real ...` invocations inside the code blocks of `text` (continuation lines joined)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("sim2real "):
                commands.append(shlex.split(line)[1:])
    return commands


@pytest.mark.parametrize("document", ["README.md", *DOCS])
def test_shown_commands_exist_and_parse(document, capsys):
    """Every `sim2real` command in the README's and the docs' bash blocks exists and takes its options."""
    import argparse
    import importlib

    commands = shown_commands(README if document == "README.md" else DOCS[document])
    if document == "README.md":
        assert len(commands) >= 8
    known = available_commands()
    for argv in commands:
        assert argv[0] in known, f"{document} shows `sim2real {argv[0]}`, which does not exist"
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
    # make test: the lint, then the Kilted and Jazzy suites (test-kilted, test-jazzy)
    test_rule = re.search(r"^test: (.*)\n((?:\t.*\n)+)", makefile, re.M)
    assert test_rule and "lint" in test_rule.group(1)
    assert "test-kilted" in test_rule.group(2) and "test-jazzy" in test_rule.group(2)
    for target in ("test-kilted", "test-jazzy"):
        assert re.search(rf"^{target}: .*\n\t.*pytest test", makefile, re.M), target
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("document", ["README.md", "CHANGELOG.md", *DOCS])
def test_linked_files_exist(document):
    """Relative links ([text](path) and [text](path#anchor)) point at files of the repository."""
    path = ROOT / document if document in ("README.md", "CHANGELOG.md") else ROOT / "docs" / document
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        if not (path.parent / target.split("#", 1)[0]).exists():
            missing.append(target)
    assert not missing, f"{document} links to files that do not exist: {missing}"


def test_readme_is_a_first_page():
    """The README is what a newcomer needs first (the reference lives in docs/)."""
    assert len(README.splitlines()) < 250
