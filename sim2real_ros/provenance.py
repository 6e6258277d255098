"""Portable, honest provenance for checkpoints (docs/learning.md "Provenance").

A checkpoint travels: its provenance must not carry the training machine's paths, and it must say
which source tree trained it. So:

- a path is stored relative to the repository when it lies inside it ("config/sim_params.yaml"),
  else as its file name plus the sha256 of its bytes ({"name": ..., "sha256": ...});
- the git commit is taken when training *starts*, with a dirty flag (uncommitted changes to
  tracked files), through GitPython;
- the sim params version (the content hash in the spec) is compared with the one in use by
  eval-sim, validate and the policy node, which warn naming both.

Pure functions: the repository root is an argument (paths.share_dir() in a source tree).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import yaml

from .core.errors import ConfigError, Sim2RealError
from .core.hashing import content_hash

_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_HASH_BLOCK_BYTES = 1 << 20


def is_absolute_path(value: Any) -> bool:
    """True for a string that is an absolute path on any machine ("/x", "~/x", "C:\\x", "\\\\host\\x")."""
    if not isinstance(value, str) or not value:
        return False
    return (value.startswith(("/", "~", "\\\\")) or bool(_WINDOWS_DRIVE.match(value))
            or PureWindowsPath(value).is_absolute())


def absolute_paths(value: Any, where: str = "provenance") -> list[tuple[str, str]]:
    """(field, value) of every absolute path string anywhere in a JSON-like value (iterative)."""
    found = []
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and is_absolute_path(item):
            found.append((path, item))
        elif isinstance(item, Mapping):
            stack.extend((v, f"{path}.{k}") for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return sorted(found)


def file_sha256(path: str | Path) -> str | None:
    """sha256 of a file's bytes (16 hex digits), or None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(_HASH_BLOCK_BYTES), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()[:16]


_INSTALLED_PARTS = frozenset({"site-packages", "dist-packages"})


def portable_path(value: str | Path, roots: Iterable[str | Path]) -> str | dict[str, Any]:
    """`value` as it may be stored: relative (POSIX) to the first of `roots` it lies in (a root may
    be another machine's repository, whose files are named by the same relative paths here), else
    {"name": file name, "sha256": content hash or None when unreadable}. A relative path is kept."""
    text = str(value)
    if not is_absolute_path(text):
        return text
    pure = PurePosixPath(text) if not _WINDOWS_DRIVE.match(text) else PureWindowsPath(text)
    for root in roots:
        root_text = str(root)
        root_pure = PurePosixPath(root_text) if not _WINDOWS_DRIVE.match(root_text) else PureWindowsPath(root_text)
        try:
            relative = pure.relative_to(root_pure)
        except ValueError:
            continue
        # An installed package's file (a venv or site-packages inside the checkout) is no file of the
        # repository: another machine's venv is elsewhere, so it is named by content.
        if ".." not in relative.parts and not _INSTALLED_PARTS.intersection(relative.parts):
            return relative.as_posix()
    return {"name": pure.name, "sha256": file_sha256(text)}


def portable_provenance(value: Any, roots: Iterable[str | Path]) -> Any:
    """A copy of a JSON-like provenance with every absolute path made portable (portable_path)."""
    roots = [str(r) for r in roots]
    if isinstance(value, str):
        return portable_path(value, roots) if is_absolute_path(value) else value
    if isinstance(value, Mapping):
        return {k: portable_provenance(v, roots) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable_provenance(v, roots) for v in value]
    return value


def resolve_recorded_path(value: Any, root: str | Path) -> Path | None:
    """Where a path recorded by portable_path lies here: a relative one under `root` (None when it
    climbs out of it or is missing there), an absolute one as is when it exists. A {name, sha256}
    record cannot be resolved (None)."""
    if not isinstance(value, str) or not value:
        return None
    path = Path(value)
    if path.is_absolute():
        return path if path.is_file() else None
    if ".." in path.parts:
        return None
    candidate = Path(root) / path
    return candidate if candidate.is_file() else None


def git_state(directory: str | Path) -> dict[str, Any]:
    """{"git_commit": HEAD sha or None, "git_dirty": True when tracked files differ from HEAD (None
    when unknown)} of the git checkout holding `directory` (GitPython). Call it when training starts:
    a commit read at save time would name code that may not have trained the weights."""
    try:
        import git

        repo = git.Repo(str(directory), search_parent_directories=True)
        try:
            commit = repo.head.commit.hexsha
            dirty = bool(repo.is_dirty(index=True, working_tree=True, untracked_files=False))
        finally:
            repo.close()
    except Exception:  # noqa: BLE001 - no git, no checkout, detached odd states: provenance says unknown
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": commit, "git_dirty": dirty}


def sim_params_mismatch(trained_version: str, current_version: str, checkpoint: str, current_source: str) -> str | None:
    """The warning to give when a checkpoint was trained on other sim params than those in use
    (both content hashes named), or None when they agree or the checkpoint's is unknown."""
    if not trained_version or trained_version == "unknown" or trained_version == current_version:
        return None
    return (f"{checkpoint} was trained on sim params version {trained_version}, but {current_source} is version "
            f"{current_version}: results may differ from the training figures (retrain, or evaluate on the "
            f"sim params it was trained on)")


GIT_STATE_FILE = "git_at_start.json"


def training_git_state(work_dir: str | Path, source_root: str | Path, fresh: bool) -> dict[str, Any]:
    """The git state of the run in `work_dir`, taken when it started: a fresh run takes it now and
    keeps it in WORK_DIR/git_at_start.json; a resumed run reads it back, and adds
    `git_at_resume` when the tree has changed since (the weights then come from both)."""
    import json

    path = Path(work_dir) / GIT_STATE_FILE
    now = git_state(source_root)
    if not fresh and path.is_file():
        try:
            started = json.loads(path.read_text())
        except (OSError, ValueError):
            started = None
        if isinstance(started, dict) and set(started) >= {"git_commit", "git_dirty"}:
            state = {"git_commit": started["git_commit"], "git_dirty": started["git_dirty"],
                     "git_taken": "training start"}
            if now != {k: started[k] for k in ("git_commit", "git_dirty")}:
                state["git_at_resume"] = now
            return state
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(now))
    return {**now, "git_taken": "training start"}


def training_index_ranges(training_episodes: Any) -> tuple[int | None, list[tuple[int, int]]]:
    """(run seed, [(first, last) index ranges]) of a provenance's `training_episodes` record, or
    (None, []) when the checkpoint has none (trained before it was recorded)."""
    if not isinstance(training_episodes, Mapping):
        return None, []
    seed = training_episodes.get("seed")
    ranges = training_episodes.get("index_ranges")
    if isinstance(seed, bool) or not isinstance(seed, int) or not isinstance(ranges, list):
        return None, []
    parsed = []
    for row in ranges:
        if (isinstance(row, list) and len(row) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in row)
                and 0 <= row[0] <= row[1]):
            parsed.append((row[0], row[1]))
    return seed, parsed


class ReusedTrainingEpisodeError(Sim2RealError, AssertionError):
    """An evaluation would replay a world that training played."""


def assert_unseen_episodes(eval_seed: int, eval_indices: Iterable[int], training_episodes: Any,
                           source: str) -> None:
    """Raise ReusedTrainingEpisodeError when an evaluation episode (eval_seed, index) is one that
    training played (same run seed, index in a training range): its world would be a training world.
    Episodes of another run seed are other worlds (episode_seed hashes the pair)."""
    seed, ranges = training_index_ranges(training_episodes)
    if seed is None or int(eval_seed) != seed:
        return
    for index in eval_indices:
        for first, last in ranges:
            if first <= index < last:
                raise ReusedTrainingEpisodeError(
                    f"{source}: evaluation episode {index} of run seed {eval_seed} is a training episode "
                    f"(training played indices [{first}, {last}) of seed {seed}); evaluate on other seeds")


def sim_params_version(path: str | Path | None) -> str:
    """Content hash of the raw sim params YAML mapping (config/sim_params.yaml), or "unknown" when
    the file does not exist. An unreadable or non-mapping file is a ConfigError naming it."""
    if path is None or not Path(path).is_file():
        return "unknown"
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(str(path), "<file>", None, f"cannot read sim params YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(str(path), "<file>", type(data).__name__, "sim params must be a YAML mapping")
    return content_hash(data)
