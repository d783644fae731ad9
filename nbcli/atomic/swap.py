"""Rewriting files of an existing folder so that every reader sees the old folder or the new one.

A per-file commit into a model folder (`OutputSet`) renames its files one by one: a reader that is not
nb (transformers loads the weights, config.json and the tokenizer files, none naming the others) may
meet new weights beside the old config.json between two renames. `swapped_folder` stages a copy of the
folder beside it instead (`.NAME.PID-TAG.nbtmp`: each file a hard link to the folder's own, so nothing
is copied and the old files' inodes, which readers and nb's own reader may hold, are never written),
the caller commits its new files inside that copy, and one `renameat2(RENAME_EXCHANGE)` swaps the
copy and the folder: the commit point for every reader. The old folder, now under the staging name,
is then removed (the links to files the new folder still holds cost nothing).

A crash before the swap leaves the folder old and the staged copy; after it, the folder new and the
old one under the staging name: in both cases the staging folder of a process that no longer runs is
what `recover_directory` removes from the parent (nb's next write there, or the next in-place patch).

Where the swap cannot be made (not Linux, a file system without RENAME_EXCHANGE or hard links, a
mount point, a parent folder nb may not write, this process's own working folder, an entry that is
not a file, link or folder), `swapped_folder` yields None and the caller commits file by file (the
journal of nbcli.atomic: complete for nb, which finishes an interrupted commit before reading).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from nbcli.atomic.checks import name_max
from nbcli.atomic.commit import fault, sigint_held
from nbcli.atomic.recovery import recover_directory, remove_staged_folder
from nbcli.atomic.temporaries import JOURNAL_PREFIX, TEMP_SUFFIX, fsync_dir, libc_function, temp_name
from nbcli.errors import OutputError

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # <linux/fs.h>


def exchange(first: Path, second: Path) -> None:
    """Swap two existing paths in one atomic step (renameat2 RENAME_EXCHANGE); OSError where the
    system or file system cannot (ENOSYS, EINVAL, ...)."""
    function = libc_function("renameat2", (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint))
    if function is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", str(first))
    if function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(first))


def _mirror(source: Path, copy: Path) -> None:
    """Fill the empty folder `copy` with hard links to `source`'s files (symbolic links copied as
    links, sub-folders made and filled alike, modes kept); nb's own temporaries and journals are
    left out. OSError where an entry cannot be linked or is none of those."""
    for entry in os.scandir(source):
        if entry.name.endswith(TEMP_SUFFIX) or entry.name.startswith(JOURNAL_PREFIX):
            continue
        target = copy / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            target.mkdir()
            _mirror(Path(entry.path), target)
            os.chmod(target, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode))
        elif entry.is_file(follow_symlinks=False):
            os.link(entry.path, target, follow_symlinks=False)
        else:
            raise OSError(errno.EINVAL, "neither a file, a link nor a folder", entry.path)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _staged_copy(target: Path) -> Path | None:
    """The staging folder beside `target`, filled with links to its entries, once a swap of two
    empty folders there has shown the file system can exchange; None where anything fails (then
    nothing is left)."""
    parent = target.parent
    with contextlib.suppress(OSError):
        if os.path.ismount(target) or _inside(Path.cwd().resolve(), target):
            return None
    made: list[Path] = []
    try:
        for _ in range(2):
            path = parent / temp_name(target.name, name_max(parent))
            path.mkdir()
            made.append(path)
        exchange(made[0], made[1])  # two empty folders: proves the exchange, changes nothing
        made[1].rmdir()
        made.pop()
        staging = made[0]
        _mirror(target, staging)
        os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
        return staging
    except OSError:
        for path in made:
            remove_staged_folder(path)
        return None


@contextlib.contextmanager
def swapped_folder(folder: Path | str) -> Iterator[Path | None]:
    """Yield a staged copy of the existing folder `folder` (hard links to its entries) in which to
    commit the new files; leaving the block without an exception swaps the copy in (one atomic
    rename: every reader sees the old folder or the new one) and removes the old. With an exception
    the copy is removed and the folder is as it was. Yields None where no swap can be made (see the
    module doc): the caller then writes into `folder` itself."""
    target = Path(folder).resolve()
    recover_directory(target.parent)  # the staged copies and old folders of killed swaps
    with sigint_held(deliver=True):  # a Ctrl-C lands once the staging folder is ours to remove
        staging = _staged_copy(target)
    if staging is None:
        yield None
        return
    try:
        yield staging
        fsync_dir(staging)
        fault("swap-staged")
        with sigint_held(deliver=False):  # the swap is the commit: once decided, see it through
            try:
                exchange(staging, target)
            except OSError as err:
                raise OutputError(f"{folder}: cannot swap the new folder into place: {err.strerror}") from None
            fsync_dir(target.parent)
            fault("folder-swapped")
            remove_staged_folder(staging)  # the old folder now
    except BaseException:
        with sigint_held(deliver=True):
            remove_staged_folder(staging)
        raise
