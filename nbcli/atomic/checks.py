"""Output-path checks: the output's directory exists and is writable, its names fit the file system,
it lies outside the Hugging Face cache."""

from __future__ import annotations

import os
from pathlib import Path

from nbcli.errors import OutputError


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


def check_output_dir(path: Path, *, file: bool = False) -> None:
    """Raise OutputError unless `path`'s directory exists and is writable and its name fits (and lies
    outside the Hugging Face cache: `refuse_hub_cache`); with `file`, also unless `path` can become a
    file (it is not an existing directory)."""
    check_name_length(path)
    refuse_hub_cache(path)
    try:
        parent = path.resolve().parent
        is_dir = path.is_dir()
    except OSError as err:  # a symbolic link loop, a path too long for the system
        raise OutputError(f"{path}: cannot use this output path ({err.strerror or err})") from None
    if not parent.is_dir():
        raise OutputError(f"{path}: output directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: output directory {parent} is not writable")
    size, limit = len(os.fsencode(path.name)), name_max(parent)
    if size > limit:  # a file system whose names are shorter than 255 bytes
        raise OutputError(f"{path}: file name is {size} bytes, longer than the file system allows ({limit})")
    if file and is_dir:
        raise OutputError(f"{path}: is a directory; give a file name for this output")


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
