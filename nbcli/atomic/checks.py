"""Output-path checks: the output's directory exists (or can be made) and is writable, its names fit
the file system, it lies outside the Hugging Face cache.

The one rule for missing folders (every command, as `nb train --out a/b/run` always did): an output
whose parent folders are missing is accepted when they can be made (the nearest existing one is a
writable directory); they are made when the output is written, not before (`check_output_dir` with
`parents="make"`, its default, which the atomic writer calls for every file it opens), so a command
that fails before writing leaves no folder behind.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from nbcli.errors import OutputError

Parents = Literal["make", "check", "exist"]


def name_max(directory: Path) -> int:
    """The longest file name (bytes) the file system of `directory` allows (255 if unknown)."""
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def check_name_length(path: Path) -> None:
    """OutputError if a component of `path` is longer than its file system allows (before anything
    asks the system about `path`: that would be an OSError, ENAMETOOLONG)."""
    absolute = Path(os.path.abspath(path))
    for part in (absolute, *absolute.parents):
        size = len(os.fsencode(part.name))
        if size > 255:
            parent = part.parent
            while not parent.is_dir() and parent != parent.parent:
                parent = parent.parent
            limit = name_max(parent)
            if size > limit:
                what = "file name" if part == absolute else f"directory name {part.name[:40]!r}..."
                raise OutputError(f"{path}: {what} is {size} bytes, longer than the file system allows ({limit})")


def check_output_dir(path: Path, *, file: bool = False, parents: Parents = "make") -> None:
    """Raise OutputError unless `path`'s directory is a writable directory and its name fits (and lies
    outside the Hugging Face cache: `refuse_hub_cache`); with `file`, also unless `path` can become a
    file (it is not an existing directory). A missing directory (module doc): `parents="make"` makes
    it and the folders above it (at write time), "check" accepts it when it can be made (before any
    work: the nearest existing folder is a writable directory), "exist" refuses it."""
    check_name_length(path)
    refuse_hub_cache(path)
    try:
        parent = path.resolve().parent
        is_dir = path.is_dir()
    except OSError as err:  # a symbolic link loop, a path too long for the system
        raise OutputError(f"{path}: cannot use this output path ({err.strerror or err})") from None
    if not parent.is_dir() and parents != "exist":
        ancestor = next(p for p in (parent, *parent.parents) if p.exists() or p == p.parent)
        if not ancestor.is_dir():
            raise OutputError(f"{path}: {ancestor} is not a directory, so the output's folder cannot be made")
        if parents == "check":
            parent = ancestor  # made when the output is written: the folder it goes in must be writable
        else:
            make_output_dir(parent, what=f"{path}: output directory")
    if not parent.is_dir():
        raise OutputError(f"{path}: output directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: output directory {parent} is not writable")
    size, limit = len(os.fsencode(path.name)), name_max(parent)
    if size > limit:  # a file system whose names are shorter than 255 bytes
        raise OutputError(f"{path}: file name is {size} bytes, longer than the file system allows ({limit})")
    if file and is_dir:
        raise OutputError(f"{path}: is a directory; give a file name for this output")


def make_output_dir(directory: Path, *, what: str | None = None) -> list[Path]:
    """mkdir -p `directory`; returns the folders it made, outermost first (`remove_made` takes them away
    again when the command fails). OutputError naming `what` (default: the directory) when it cannot."""
    made = [p for p in (*reversed(directory.parents), directory) if not p.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{what or directory}: cannot create directory {directory} ({err.strerror or err})") from None
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the folders `make_output_dir` made, innermost first, those still empty (a failed command
    leaves no folder it made)."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def refuse_hub_cache(out: Path | str) -> None:
    """OutputError if `out` lies in the Hugging Face hub cache, leads into it by a symbolic link, or is a
    hard link to one of its blobs: the cache is an input, never an output (see nbcli.resolve)."""
    from nbcli.resolve import hub_blob, hub_cache_dir, inside_hub_cache

    if inside_hub_cache(out):
        raise OutputError(f"{out}: lies in the Hugging Face cache ({hub_cache_dir()}), which nb only reads; "
                          "write the output outside it (e.g. -o out/)")
    blob = hub_blob(out)
    if blob is not None:
        raise OutputError(f"{out}: is a hard link to the Hugging Face cache blob {blob}, which nb only reads; "
                          "choose another output path")
