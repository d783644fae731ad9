"""Names of nb's temporaries and commit journals, whose process owns one, directory fsync and the C
library's calls Python's os lacks (shared by the commit, its recovery and the folder swap: see nbcli.atomic)."""

from __future__ import annotations

import ctypes
import functools
import os
import re
import secrets
import socket
import zlib
from collections.abc import Callable
from pathlib import Path

TEMP_SUFFIX = ".nbtmp"
JOURNAL_PREFIX = ".nb-commit."
TEMP_RE = re.compile(r"^\.(?P<stem>.*)\.(?P<pid>[0-9]+)-(?P<host>[0-9a-f]{4})[0-9a-z]{4}\.nbtmp$", re.DOTALL)
JOURNAL_RE = re.compile(r"^\.nb-commit\.(?P<pid>[0-9]+)-(?P<host>[0-9a-f]{4})[0-9a-z]{4}\.json$")
_PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT


@functools.cache
def host_tag() -> str:
    """4 hex digits of this host's name (the HOST of a temporary's or journal's TAG)."""
    return f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFF:04x}"


def pid_tag() -> str:
    """`PID-TAG` of this process's temporaries and journals: the PID, the host tag, 4 random characters."""
    return f"{os.getpid()}-{host_tag()}{secrets.token_hex(2)}"


def temp_name(name: str, limit: int = 255) -> str:
    """The temporary's name for output NAME: `.NAME.PID-TAG.nbtmp`, NAME's bytes cut so that the
    whole stays within `limit` bytes (file names are bytes: a character cut in two is harmless)."""
    tail = f".{pid_tag()}{TEMP_SUFFIX}"
    return "." + os.fsdecode(os.fsencode(name)[:limit - 1 - len(tail)]) + tail


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not); a number no PID can have counts as running."""
    if not 0 < pid <= _PID_MAX:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def owned_by_dead_process(match: re.Match[str]) -> bool:
    """Whether the temporary or journal `match` (of TEMP_RE / JOURNAL_RE) belongs to a process of this
    host that no longer runs."""
    pid = int(match["pid"])
    return match["host"] == host_tag() and pid != os.getpid() and not _pid_alive(pid)


def fsync_dir(directory: Path) -> None:
    """fsync a directory (its entries: renames, new files); nothing where the system cannot."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)



@functools.cache
def libc_function(name: str, argtypes: tuple[type, ...]) -> Callable[..., int] | None:
    """The C library's function `name` (returning an int, errno kept for ctypes.get_errno) with
    `argtypes`, or None where the library has none (another system, an older glibc)."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function
