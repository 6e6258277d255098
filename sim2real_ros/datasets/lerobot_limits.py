"""What an untrusted LeRobot dataset may declare, and how its files are opened (docs/datasets.md, Limits).

A dataset is a folder somebody else wrote (a download, a tarball): its metadata is checked against
a schema with caps before anything is sized from it, every file it names is opened inside its folder
only (relative path, no `..`, no symlink on the way, a regular file), and its path templates are
filled by a formatter that knows only LeRobot's fields. Each check raises DatasetError naming the
file and the field, so a hostile dataset ends in one clear line, never a traceback, a hang or
unbounded memory.

Pure: no rclpy, no numpy.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import string
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ..core.errors import Sim2RealError

# Caps on what the metadata may declare. Generous for real datasets (the largest public LeRobot
# datasets have tens of thousands of episodes, 30-60 fps, cameras up to 1920x1080), small enough that
# a lie cannot make us allocate or loop without bound.
MAX_META_BYTES = 64 * 1024 * 1024  # info.json, episodes.jsonl, tasks.jsonl [bytes]
MAX_EPISODES = 100_000  # episodes listed in the metadata
MAX_TASKS = 100_000
MAX_TEXT = 4096  # a task string, a feature name [characters]
MAX_FEATURES = 1024
MAX_CAMERAS = 8  # video features
MAX_FPS = 1000.0  # [Hz]
MAX_CHUNKS_SIZE = 1_000_000
MAX_INDEX = 1_000_000_000  # episode, chunk, file and task indices
MAX_EPISODE_FRAMES = 2_000_000  # one episode's declared length (18 h at 30 fps)
MAX_VECTOR = 4096  # state and action width
MAX_IMAGE_SIDE = 4096  # declared and decoded video height and width [px]
MAX_TEMPLATE = 1024  # data_path / video_path [characters]
MAX_FIELD_WIDTH = 20  # `{episode_index:06d}`: at most 20 digits
MAX_TIMESTAMP_S = 1e7  # v3.0 from_timestamp in a shared video file [s]
MAX_EPISODE_VALUES = 8_000_000  # numbers in one episode's rows (state, action, index columns)
MAX_ROW_GROUP_ROWS = 4_000_000
# Containers a LeRobot video may be in: demuxed by this name, never probed (no playlists, no concat).
VIDEO_FORMATS = {".mp4": "mp4", ".mov": "mov", ".m4v": "mp4", ".mkv": "matroska", ".webm": "matroska"}
VIDEO_DEMUXERS = {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", *VIDEO_FORMATS.values()}

V2_FIELDS = {"data_path": ("episode_chunk", "episode_index"),
             "video_path": ("episode_chunk", "episode_index", "video_key")}
V3_FIELDS = {"data_path": ("chunk_index", "file_index"),
             "video_path": ("chunk_index", "file_index", "video_key")}


class DatasetError(Sim2RealError):
    """A dataset is unreadable, unsafe or lacks what was asked for; the message names the file and field."""


# ----------------------------------------------------------------------------------------------
# Files inside the dataset only
def relative_parts(rel: str, source: str) -> tuple[str, ...]:
    """The components of a dataset-relative path; refuses absolute paths, `..`, NUL and empty names."""
    if not rel or "\x00" in rel or "\\" in rel:
        raise DatasetError(f"{source}: path {rel[:200]!r} is empty or holds NUL or backslash")
    path = PurePosixPath(rel)
    if path.is_absolute():
        raise DatasetError(f"{source}: path {rel[:200]!r} is absolute; a dataset names its files relative to itself")
    parts = tuple(p for p in path.parts if p != ".")
    if not parts or ".." in parts:
        raise DatasetError(f"{source}: path {rel[:200]!r} leaves the dataset folder ('..')")
    return parts


def _walk(root: Path, parts: tuple[str, ...], display: Path) -> int | None:
    """An O_NOFOLLOW descriptor of `root/parts` opened one component at a time (no symlink followed
    anywhere below root); None when a component does not exist. A symlink or a non-regular file is refused."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise DatasetError(f"{root}: cannot open the dataset folder ({err.strerror})") from err
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                # O_NONBLOCK: a FIFO planted in the dataset must not block the open
                child = os.open(part, flags | (os.O_NONBLOCK if last else os.O_DIRECTORY), dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as err:
                if os.path.islink(root.joinpath(*parts[:i + 1])):
                    raise DatasetError(f"{display}: '{root.joinpath(*parts[:i + 1])}' is a symlink; files of a "
                                       "dataset are read only inside its folder") from err
                if err.errno == 20:  # ENOTDIR: a file where a folder should be
                    return None
                raise DatasetError(f"{display}: cannot open ({err.strerror})") from err
            os.close(fd)
            fd = child
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DatasetError(f"{display}: not a regular file")
        os.set_blocking(fd, True)
        out, fd = fd, -1
        return out
    finally:
        if fd >= 0:
            os.close(fd)


def open_inside(root: Path, rel: str, source: str) -> IO[bytes] | None:
    """The dataset file `rel` opened for reading (binary), or None when absent."""
    fd = _walk(root, relative_parts(rel, source), root / rel)
    return None if fd is None else os.fdopen(fd, "rb")


def exists_inside(root: Path, rel: str, source: str) -> bool:
    """Whether `rel` is a regular file inside the dataset (a symlink on the way is an error)."""
    handle = open_inside(root, rel, source)
    if handle is None:
        return False
    handle.close()
    return True


def read_text_inside(root: Path, rel: str, source: str, max_bytes: int = MAX_META_BYTES) -> str | None:
    """A metadata text file of at most `max_bytes`, or None when absent."""
    handle = open_inside(root, rel, source)
    if handle is None:
        return None
    with handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DatasetError(f"{root / rel}: larger than {max_bytes} bytes (metadata)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"{root / rel}: not UTF-8 text ({err.reason} at byte {err.start})") from err


def parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError; so is a 5000-digit int
        raise DatasetError(f"{source}: not valid JSON ({str(err)[:200]})") from err


# ----------------------------------------------------------------------------------------------
# Path templates: only LeRobot's fields, integers of bounded width
_SPEC = re.compile(r"(0?)([0-9]{0,2})d?")


class PathTemplate:
    """info.json's `data_path` / `video_path`, parsed once: literal text and `{name}` / `{name:0Nd}`
    fields of the known names only. Any other field, an attribute or index access, a conversion, or
    a width above MAX_FIELD_WIDTH is an error (str.format would run them with the dataset's text)."""

    def __init__(self, template: str, known: tuple[str, ...], source: str, field: str) -> None:
        self.text, self.source, self.field = template, source, field
        where = f"{source}: field '{field}' = {template[:200]!r}"
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as err:
            raise DatasetError(f"{where}: {err}") from err
        # (literal, field name or None, width, zero padded)
        self.pieces: list[tuple[str, str | None, int, bool]] = []
        for literal, name, spec, conversion in parsed:
            if name is None:
                self.pieces.append((literal, None, 0, False))
                continue
            if name not in known:
                raise DatasetError(f"{where}: unknown field {{{name[:50]}}} (known: {', '.join(sorted(known))})")
            if conversion or (spec and "{" in spec):
                raise DatasetError(f"{where}: only plain {{name}} or {{name:0Nd}} fields are allowed")
            match = _SPEC.fullmatch(spec or "")
            if match is None or (name == "video_key" and spec):
                raise DatasetError(f"{where}: format {spec[:50]!r} of {{{name}}} is not allowed (only an integer "
                                   "width, e.g. 03d)")
            width = int(match.group(2) or 0)
            if width > MAX_FIELD_WIDTH:
                raise DatasetError(f"{where}: width {width} of {{{name}}} is above {MAX_FIELD_WIDTH}")
            self.pieces.append((literal, name, width, bool(match.group(1))))

    def fill(self, values: dict[str, int | str]) -> str:
        out = []
        for literal, name, width, zero in self.pieces:
            out.append(literal)
            if name is not None:
                value = values[name]
                text = str(value)
                out.append(text.rjust(width, "0" if zero else " ") if isinstance(value, int) else text)
        return "".join(out)

    def check_inside(self, keys: list[str]) -> None:
        """The filled path stays inside the dataset for every video key. Integers add digits only, so
        one sample per key decides it for every episode."""
        for key in keys or [""]:
            sample = {name: (key if name == "video_key" else 0) for _, name, _, _ in self.pieces if name}
            relative_parts(self.fill(sample), f"{self.source}: field '{self.field}'")


def format_template(template: str, values: dict[str, int | str], source: str, field: str) -> str:
    """`template` filled with `values` (PathTemplate's rules; the fields known are the keys of `values`)."""
    return PathTemplate(template, tuple(values), source, field).fill(values)


# ----------------------------------------------------------------------------------------------
# Schema
def check_int(value: Any, source: str, field: str, low: int, high: int) -> int:
    """An integer in [low, high] (a JSON float with an integer value counts; bool does not)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DatasetError(f"{source}: field '{field}' = {_short(value)}: must be an integer in [{low}, {high}]")
    return value


def check_number(value: Any, source: str, field: str, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DatasetError(f"{source}: field '{field}' = {_short(value)}: must be a number")
    number = float(value)
    if not (math.isfinite(number) and (number > low if low_open else number >= low) and number <= high):
        raise DatasetError(f"{source}: field '{field}' = {_short(value)}: must be in "
                           f"{'(' if low_open else '['}{low:g}, {high:g}]")
    return number


def check_text(value: Any, source: str, field: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise DatasetError(f"{source}: field '{field}' = {_short(value)}: must be text of at most {limit} characters")
    return value


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10 ** 30 else f"<{value.bit_length()}-bit int>"
    return text if len(text) <= 80 else text[:77] + "..."


def check_shape(value: Any, source: str, field: str, dims: int, high: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) != dims:
        raise DatasetError(f"{source}: field '{field}' = {_short(value)}: must be a list of {dims} integer(s)")
    return tuple(check_int(v, source, f"{field}[{i}]", 1, high) for i, v in enumerate(value))


def check_vector_names(feature: dict[str, Any], key: str, source: str) -> tuple[str, ...]:
    """Joint names of a vector feature: `names` as a list, LeRobot v2's nested `[[...]]` or
    {"motors": [...]}; `<key>_<i>` when it has none. Its shape must be [n], n <= MAX_VECTOR."""
    (width,) = check_shape(feature.get("shape"), source, f"features.{key}.shape", 1, MAX_VECTOR)
    names = feature.get("names")
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        names = names[0]
    if names is None or names == []:
        return tuple(f"{key}_{i}" for i in range(width))
    if not isinstance(names, list) or not all(isinstance(n, str | int | float) for n in names):
        raise DatasetError(f"{source}: field 'features.{key}.names' = {_short(names)}: must be a list of names")
    if len(names) != width:
        raise DatasetError(f"{source}: feature '{key}' has {len(names)} names for shape [{width}]")
    return tuple(check_text(str(n), source, f"features.{key}.names", 256) for n in names)


def check_image_shape(feature: dict[str, Any], key: str, source: str) -> tuple[int, int]:
    """(height, width) [px] of a video feature: shape [h, w, c] as `names` orders it (default
    height, width, channel), each side at most MAX_IMAGE_SIDE."""
    shape = check_shape(feature.get("shape"), source, f"features.{key}.shape", 3, max(MAX_IMAGE_SIDE, 4))
    names = feature.get("names")
    if not isinstance(names, list) or len(names) != 3 or not all(isinstance(n, str) for n in names):
        names = ["height", "width", "channel"]
    dims = dict(zip(names, shape, strict=True))
    height, width = dims.get("height", shape[0]), dims.get("width", shape[1])
    for name, side in (("height", height), ("width", width)):
        if side > MAX_IMAGE_SIDE:
            raise DatasetError(f"{source}: field 'features.{key}.shape' = {list(shape)}: {name} {side} is above "
                               f"{MAX_IMAGE_SIDE} px")
    return int(height), int(width)


def check_info(info: Any, source: str) -> dict[str, Any]:
    """info.json's fields this importer reads, type- and range-checked; returns info with `features` a
    dict of dicts. Fields it does not read are left as they are."""
    if not isinstance(info, dict):
        raise DatasetError(f"{source}: expected a JSON object")
    for key in ("codebase_version", "fps", "features", "data_path"):
        if key not in info:
            raise DatasetError(f"{source}: field '{key}' is missing")
    check_number(info["fps"], source, "fps", 0.0, MAX_FPS, low_open=True)
    if "chunks_size" in info:
        check_int(info["chunks_size"], source, "chunks_size", 1, MAX_CHUNKS_SIZE)
    check_text(info["data_path"], source, "data_path", MAX_TEMPLATE)
    if info.get("video_path") is not None:
        check_text(info["video_path"], source, "video_path", MAX_TEMPLATE)
    features = info["features"]
    if not isinstance(features, dict) or len(features) > MAX_FEATURES:
        raise DatasetError(f"{source}: field 'features' = {_short(features)}: must be an object of at most "
                           f"{MAX_FEATURES} features")
    for key, feature in features.items():
        check_text(key, source, "features", 256)
        if not isinstance(feature, dict):
            raise DatasetError(f"{source}: field 'features.{key}' = {_short(feature)}: must be an object")
        if "dtype" in feature and not isinstance(feature["dtype"], str):
            raise DatasetError(f"{source}: field 'features.{key}.dtype' = {_short(feature['dtype'])}: must be text")
    return info
