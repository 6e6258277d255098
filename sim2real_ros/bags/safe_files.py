"""Files inside a bag folder, written without ever following a link.

Bags travel as tarballs, and tarballs keep symbolic links: a bag folder may hold
`metadata.yaml.tmp -> ~/.bashrc`. So every tool that writes into a bag folder (repair, the writer)
first refuses a folder holding links, naming them, and then creates each new file exclusively
(O_CREAT | O_EXCL | O_NOFOLLOW: a name that exists, as a file or a link, is never opened for
writing) and puts it in place with rename(2), which replaces a name and never writes through it.
Backups are hard links of the original (no copy; an existing backup is never overwritten).
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import BinaryIO

from ..core.errors import BagError

# Exclusive creation: fails with EEXIST on any existing name, a dangling link included (POSIX).
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_MODE = 0o644  # before the umask
MAX_BACKUPS = 99  # backups of one file (name.bak, name.bak.2, ... name.bak.99)
# link(2) failures that mean "this file system has no hard links", not "something is wrong".
_NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


def links_in(folder: Path) -> list[str]:
    """Names of the symbolic links directly inside `folder`, sorted."""
    with os.scandir(folder) as entries:
        return sorted(entry.name for entry in entries if entry.is_symlink())


def refuse_links(folder: Path, action: str) -> None:
    """BagError naming every symbolic link inside the bag folder `folder`: a link would make
    `action` ("repair", "reading") read or write a file outside the bag. The folder path itself may
    be a link (the user chose it); what is inside it comes with the bag."""
    links = links_in(folder)
    if links:
        shown = ", ".join(links[:10]) + (f" and {len(links) - 10} more" if len(links) > 10 else "")
        raise BagError(f"{folder}: holds symbolic link(s) {shown}; a bag folder must hold regular files only "
                       f"(a link could make {action} read or write outside the bag), refused")


def create_exclusive(path: Path) -> BinaryIO:
    """A new file at `path` open for writing; FileExistsError when the name exists in any form
    (file, folder, link: never followed)."""
    return os.fdopen(os.open(path, _CREATE_FLAGS, _FILE_MODE), "wb")


def create_temp(path: Path) -> BinaryIO:
    """A new, empty temp file at `path` (a name only our tools use: `metadata.yaml.tmp`,
    `<file>.repairing`). A stale one left by a killed run is removed first; unlink(2) removes a
    link itself, never its target. A folder of that name is an OSError naming it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return create_exclusive(path)


def replace(tmp: Path, target: Path) -> None:
    """Put the finished `tmp` at `target` atomically (rename(2): a link at `target` is replaced,
    not written through)."""
    os.replace(tmp, target)


def keep_backup(original: Path, suffix: str) -> Path:
    """Keep the current `original` as `<name><suffix>` (or `<name><suffix>.2`, ... when that name
    is taken: no backup is ever overwritten) and return the backup's path. A hard link: instant,
    no copy, and the original's name can then be replaced while the backup keeps the old content.
    A copy on file systems without hard links."""
    for i in range(1, MAX_BACKUPS + 1):
        backup = original.with_name(original.name + suffix + ("" if i == 1 else f".{i}"))
        try:
            os.link(original, backup, follow_symlinks=False)
            return backup
        except FileExistsError:
            continue
        except OSError as err:
            if err.errno not in _NO_HARD_LINKS:
                raise
        try:
            copy = create_exclusive(backup)
        except FileExistsError:
            continue
        try:
            with os.fdopen(os.open(original, _READ_FLAGS), "rb") as source, copy:
                shutil.copyfileobj(source, copy, 1 << 20)
        except BaseException:
            backup.unlink(missing_ok=True)  # a half copy is no backup
            raise
        return backup
    raise BagError(f"{original}: already has {MAX_BACKUPS} backups ({original.name}{suffix}...); "
                   "remove some before repairing again")
