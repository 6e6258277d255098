"""A run's input files as data for Ray workers: nothing is read by path on a worker's disk.

The driver packs the sim params YAML (with its camera calibration), the URDF with its meshes and the
checkpoints into `ShippedFiles` (bytes keyed by role, plus the driver's software versions); Ray
carries them in the object store. Each worker checks the versions first (a worker running another
package or simulator version refuses, naming both) and writes the files into its own temporary
folder, so the driver's files may be moved or deleted once the run is submitted, and a worker on
another machine needs no copy of them.
"""
from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import Sim2RealError

MAX_TREE_BYTES = 256 * 1024 * 1024  # a robot folder larger than this is not shipped (a wrong folder)


class WorkerMismatchError(Sim2RealError):
    """A worker's software differs from the driver's (package or simulator version)."""


def software_versions() -> dict[str, str | None]:
    """What must match between the driver and a worker: this package and the simulator."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"sim2real_ros": __version__, "pybullet": installed("pybullet"), "torch": installed("torch")}


def check_versions(driver: dict[str, str | None], where: str) -> None:
    """Raise WorkerMismatchError naming every package whose version differs from the driver's."""
    mine = software_versions()
    wrong = [f"{name} {mine.get(name)} (driver: {value})" for name, value in driver.items() if mine.get(name) != value]
    if wrong:
        raise WorkerMismatchError(f"Ray worker on {where} refuses the run: {', '.join(wrong)}")


@dataclass(frozen=True)
class ShippedFiles:
    """files: role -> {relative path: bytes}; entry: role -> the file of that tree to load."""

    versions: dict[str, str | None]
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    entry: dict[str, str] = field(default_factory=dict)

    def digest(self, role: str) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files[role]):
            h.update(name.encode() + b"\0" + self.files[role][name])
        return h.hexdigest()[:16]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise Sim2RealError(f"{what} {path}: cannot read it to ship to the Ray workers ({err})") from err


def _robot_tree(urdf: Path) -> dict[str, bytes]:
    """The URDF and every regular file below its folder (meshes), by relative path; symlinks are
    not followed and the total is bounded."""
    root = urdf.parent
    tree, total = {}, 0
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        total += path.stat().st_size
        if total > MAX_TREE_BYTES:
            raise Sim2RealError(f"robot description {urdf}: its folder {root} holds over {MAX_TREE_BYTES >> 20} MiB; "
                                f"put the URDF and its meshes in a folder of their own")
        tree[path.relative_to(root).as_posix()] = _read(path, "robot file")
    return tree


def pack(sim_params: str, robot_description: str, checkpoints: dict[str, str | None] | None = None) -> ShippedFiles:
    """Read the run's inputs on the driver. robot_description: a URDF path (shipped with its folder)
    or URDF XML (shipped as it is); checkpoints: role -> path (None: absent)."""
    import yaml

    from ..sim.params import load_sim_params

    files: dict[str, dict[str, bytes]] = {}
    entry: dict[str, str] = {}
    params = load_sim_params(sim_params)
    text = yaml.safe_load(_read(Path(sim_params), "sim params"))
    calibration = params.camera.calibration_path() if params.camera is not None else None
    if calibration is not None and calibration.is_file():
        files["calibration"] = {calibration.name: _read(calibration, "camera calibration")}
        entry["calibration"] = calibration.name
        text["camera"]["calibration_file"] = "@calibration"  # rewritten to the worker's copy
    files["sim_params"] = {"sim_params.yaml": yaml.safe_dump(text, sort_keys=False).encode()}
    entry["sim_params"] = "sim_params.yaml"
    description = str(robot_description)
    if description.lstrip().startswith("<"):
        files["robot"], entry["robot"] = {"robot.urdf": description.encode()}, "robot.urdf"
    else:
        urdf = Path(description)
        files["robot"], entry["robot"] = _robot_tree(urdf), urdf.name
        if urdf.name not in files["robot"]:
            raise Sim2RealError(f"robot description {urdf}: not a regular file")
    for role, path in (checkpoints or {}).items():
        if path is not None:
            files[role] = {Path(path).name: _read(Path(path), f"{role} checkpoint")}
            entry[role] = Path(path).name
    return ShippedFiles(software_versions(), files, entry)


class Unpacked:
    """A worker's copy of the shipped files, in a temporary folder removed by close()."""

    def __init__(self, shipped: ShippedFiles) -> None:
        import socket

        import yaml

        check_versions(shipped.versions, socket.gethostname())
        self._tmp = tempfile.TemporaryDirectory(prefix="sim2real_shipped_")
        root = Path(self._tmp.name)
        self.paths: dict[str, str] = {}
        for role, tree in shipped.files.items():
            for name, data in tree.items():
                target = (root / role / name).resolve()
                if not target.is_relative_to(root.resolve()) or name.startswith("/"):
                    raise Sim2RealError(f"shipped file {role}/{name}: outside the worker's folder")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            self.paths[role] = str(root / role / shipped.entry[role])
        if "calibration" in self.paths:
            path = Path(self.paths["sim_params"])
            text = yaml.safe_load(path.read_text())
            text["camera"]["calibration_file"] = self.paths["calibration"]
            path.write_text(yaml.safe_dump(text, sort_keys=False))

    def path(self, role: str) -> str:
        return self.paths[role]

    def close(self) -> None:
        self._tmp.cleanup()


def describe(shipped: ShippedFiles) -> dict[str, Any]:
    """Sizes per role [bytes] (for logs)."""
    return {role: sum(len(b) for b in tree.values()) for role, tree in shipped.files.items()}
