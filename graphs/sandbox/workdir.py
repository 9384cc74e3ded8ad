"""A run's working folder: measured while the code runs, and removed afterwards whatever the
code left in it (a tree thousands of folders deep, folders without permissions, names past
PATH_MAX). Both walk iteratively, relative to open folder descriptors, so neither recursion
depth nor path length can make them fail.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int
    """files, folders and links: every name the code made"""


def usage(path: str, *, most_files: int) -> Usage:
    """What the folder holds, counted up to one past ``most_files`` names (the count stops
    there: a run past the bound is over, and its exact size does not matter)."""
    total_bytes, files = 0, 0
    pending = [path]
    while pending and files <= most_files:
        folder = pending.pop()
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                files += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total_bytes += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
                if files > most_files:
                    break
    return Usage(total_bytes, files)


def remove(path: str) -> None:
    """Remove the folder and everything in it; never raises. Sub-folders are hoisted to the top
    level one level at a time (two descriptors open at most) and emptied there."""
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    hoisted = 0
    try:
        while _names(top):
            changed = False
            for name in _names(top):
                if not _is_dir(name, top):
                    changed |= _try(os.unlink, name, dir_fd=top)
                    continue
                try:
                    os.chmod(name, 0o700, dir_fd=top, follow_symlinks=False)
                    child = os.open(name, _DIR_FLAGS, dir_fd=top)
                except OSError:
                    continue
                try:
                    for inner in _names(child):
                        if _is_dir(inner, child):
                            hoisted += 1
                            changed |= _try(os.rename, inner, f".sparring-hoisted-{hoisted}", src_dir_fd=child,
                                            dst_dir_fd=top)
                        else:
                            changed |= _try(os.unlink, inner, dir_fd=child)
                finally:
                    os.close(child)
                changed |= _try(os.rmdir, name, dir_fd=top)
            if not changed:  # something that cannot be removed: leave it rather than spin
                break
    finally:
        os.close(top)
    _try(os.rmdir, path)


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _is_dir(name: str, fd: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _try(action, *args, **kwargs) -> bool:
    """Whether the action succeeded."""
    try:
        action(*args, **kwargs)
    except OSError:
        return False
    return True
