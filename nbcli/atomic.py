"""Atomic output files: write to a temporary file beside the target, rename into place on success.

A failure (exception, Ctrl-C, full disk) removes the temporary file and leaves any existing target
untouched. This is the only place nb creates output files.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from nbcli.errors import OutputError


def check_output_dir(path: Path) -> None:
    """Raise OutputError unless `path`'s directory exists and is writable."""
    parent = path.resolve().parent
    if not parent.is_dir():
        raise OutputError(f"{path}: output directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: output directory {parent} is not writable")


_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the dirty pages in the range, do not wait


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range (Linux), or None where the C library has none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing bytes [offset, offset + nbytes) of `fd` to disk, without
    waiting (Linux sync_file_range(SYNC_FILE_RANGE_WRITE)), so that the fsync before the rename
    has little left to do. Durability still comes from that fsync, which reports any I/O error;
    this only starts the work earlier. A no-op where sync_file_range does not exist."""
    function = _sync_file_range()
    if function is not None:
        function(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def _os_error_message(path: Path, err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"{path}: no space left to write the output ({err.strerror}); nothing was written"
    return f"{path}: cannot write output: {err.strerror or err}"


@contextlib.contextmanager
def atomic_write(path: Path | str) -> Iterator[BinaryIO]:
    """Yield a binary file handle whose content replaces `path` only if the block succeeds."""
    path = Path(path)
    check_output_dir(path)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".nbtmp", dir=path.resolve().parent)
    except OSError as err:
        raise OutputError(_os_error_message(path, err)) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OutputError(_os_error_message(path, err)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_write(path) as handle:
        handle.write(data)


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))
