"""What nb accepts as an input file, and how much of one it reads into memory at once.

Files that are read whole or seeked (tokenizer, checkpoint, counts, index and JSON files) must be
regular files: a FIFO would block until a writer appears, `/dev/zero` never ends. A corpus may also
be a pipe (`<(zcat x.gz)`, `-`), which is read as a stream, but not a device.

Three things are read into memory whole: a tokenizer file, a safetensors header and one JSON/JSONL
line (a corpus document, an index or state file). Each is capped at `NB_MAX_READ_MB` megabytes
(environment variable, default 256; the safetensors format itself allows headers of up to 100 MB);
beyond it the input is refused with one line that names the file and the variable.

One corpus line (a document) is held in memory whole while it is tokenised, which takes about 40
times its size; a line is therefore capped at `NB_MAX_LINE_MB` megabytes (default 16: well under 1 GB
of memory), refused beyond with one line naming file and line number, except where counting can
cut it into pieces whose chunks are the line's own (`nbcli.counting.long_lines`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from nbcli.errors import InputError

DEFAULT_MAX_READ_MB = 256
DEFAULT_MAX_LINE_MB = 16
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def _megabytes(variable: str, default: float) -> int:
    raw = os.environ.get(variable, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise InputError(f"{variable}={raw!r}: expected a number of megabytes") from None
    if not value > 0 or value == float("inf"):
        raise InputError(f"{variable}={raw!r}: expected a positive number of megabytes")
    return max(1, int(value * 1_000_000))


def max_read_bytes() -> int:
    """The cap on one piece read into memory: NB_MAX_READ_MB megabytes (default 256)."""
    return _megabytes("NB_MAX_READ_MB", DEFAULT_MAX_READ_MB)


def max_line_bytes() -> int:
    """The cap on one corpus line (document): NB_MAX_LINE_MB megabytes (default 16)."""
    return _megabytes("NB_MAX_LINE_MB", DEFAULT_MAX_LINE_MB)


def too_big(path: Path | str, what: str, size: int) -> InputError:
    """The error for a piece over the cap (`size` bytes, or at least that many)."""
    cap = max_read_bytes()
    return InputError(f"{path}: {what} is {size / 1e6:,.1f} MB or more, over the {cap / 1e6:g} MB nb reads into "
                      "memory (raise it with NB_MAX_READ_MB)")


def input_stat(path: Path | str, what: str, *, allow_dir: bool = False, allow_pipe: bool = False,
               error: type[InputError] = InputError) -> os.stat_result:
    """stat() an input, refusing what nb cannot read as `what`: missing, a symlink loop, no
    permission, or anything but a regular file (a directory if `allow_dir`, a FIFO if `allow_pipe`)."""
    try:
        st = os.stat(path)
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise error(f"{path}: {what} not found") from None
        if err.errno == errno.ELOOP:
            raise error(f"{path}: symbolic link loop (cannot resolve the {what})") from None
        raise error(f"{path}: cannot read the {what}: {err.strerror}") from None
    mode = stat.S_IFMT(st.st_mode)
    if mode == stat.S_IFREG or (allow_dir and mode == stat.S_IFDIR) or (allow_pipe and mode == stat.S_IFIFO):
        return st
    kind = _KINDS.get(mode, "not a regular file")
    raise error(f"{path}: is {kind}, not a regular file; nb reads the {what} only from a regular file")


def read_capped(path: Path | str, what: str, *, error: type[InputError] = InputError) -> bytes:
    """The bytes of a regular file that nb reads whole, at most NB_MAX_READ_MB megabytes."""
    st = input_stat(path, what, error=error)
    cap = max_read_bytes()
    if st.st_size > cap:
        raise error(str(too_big(path, what, st.st_size)))
    try:
        with open(path, "rb") as handle:
            data = handle.read(cap + 1)
    except OSError as err:
        raise error(f"{path}: cannot read the {what}: {err.strerror}") from None
    if len(data) > cap:  # it grew meanwhile
        raise error(str(too_big(path, what, len(data))))
    return data
