"""Provenance recorded in every output file: tool version, input hashes, options, time.

`sha256_file` is nb's one file hasher (stoppable, for hashing threads); `sha256_file_cached` goes
through the hash cache, which remembers the digests of large inputs under their `file_change_stamp`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import mmap
import os
import stat
import tempfile
import threading
from pathlib import Path

from nbcli.version import __version__
from nbcli.errors import Interrupted
from nbcli.jsonsafe import parse as parse_json

#: Bytes hashed per mmap of a regular file (rounded to the mmap granularity), and per read of anything else.
HASH_BLOCK = 1 << 26
_READ_BLOCK = 1 << 22


def sha256_file(path: Path | str, stop: threading.Event | None = None, block: int = HASH_BLOCK) -> str:
    """Hex sha256 of a file, in bounded memory; abandoned (Interrupted) at the next block once
    `stop` is set, so a hashing thread stops when its command fails.

    A regular file is hashed through read-only mmaps of `block` bytes (64 MiB), each unmapped after
    use: no copy into user space (~20% less CPU than reads), hashlib releases the GIL for each block,
    so a hashing thread runs beside a copy on another core, and at most one block is mapped
    (resident size stays bounded). Like every mmap reader it dies of SIGBUS if another process
    truncates the file meanwhile; an output is then never renamed into place. Anything else (a pipe,
    a device) is read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            while True:
                if stop is not None and stop.is_set():
                    raise Interrupted("hashing abandoned")
                data = handle.read(min(block, _READ_BLOCK))
                if not data:
                    return digest.hexdigest()
                digest.update(data)
        block = max(block - block % mmap.ALLOCATIONGRANULARITY, mmap.ALLOCATIONGRANULARITY)
        for start in range(0, st.st_size, block):
            if stop is not None and stop.is_set():
                raise Interrupted("hashing abandoned")
            with mmap.mmap(handle.fileno(), min(block, st.st_size - start), access=mmap.ACCESS_READ,
                           offset=start) as mapped:
                if hasattr(mapped, "madvise"):
                    mapped.madvise(mmap.MADV_SEQUENTIAL)
                with memoryview(mapped) as view:
                    digest.update(view)
    return digest.hexdigest()


def sha256_file_cached(path: Path | str, stop: threading.Event | None = None) -> tuple[str, bool]:
    """(sha256, whether it came from the hash cache) of a file: `sha256_file` through the cache.

    A checkpoint patched again (a sweep over --scale-ln-bias values, say) is not read again: the
    digest is remembered in the hash cache (`hash_cache_dir`) under the file's `file_change_stamp`
    (device, inode, size, mtime, ctime), and stored only if that did not change while hashing."""
    stamp = file_change_stamp(path)
    digest = cached_sha256(path, stamp)
    if digest is not None:
        return digest, True
    digest = sha256_file(path, stop)
    if file_change_stamp(path) == stamp:
        remember_sha256(path, stamp, digest)
    return digest, False


def hash_cache_dir() -> Path | None:
    """Where verified sha256s of large inputs are remembered: $NB_CACHE_DIR/sha256, else
    $XDG_CACHE_HOME/nb/sha256, else ~/.cache/nb/sha256; None when NB_HASH_CACHE=0 (off)."""
    if os.environ.get("NB_HASH_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    root = os.environ.get("NB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "nb")
    return Path(root) / "sha256"


def file_change_stamp(path: Path | str) -> str:
    """Device, inode, size, mtime and ctime of a file (nanoseconds): a stamp that changes whenever
    the file's bytes may have. Any write to the file changes its ctime, which no user-space call can
    set back, so an unchanged stamp means unchanged bytes (the stat check git's index and rsync rely
    on, with ctime added). Which file a path names, for the output guard, is
    `nbcli.outputs.device_inode`."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _cache_entry(path: Path | str) -> Path | None:
    root = hash_cache_dir()
    if root is None:
        return None
    st = os.stat(path)
    return root / f"{st.st_dev:x}-{st.st_ino:x}.json"


def cached_sha256(path: Path | str, stamp: str) -> str | None:
    """The sha256 remembered for `path` if its `file_change_stamp` is still `stamp`, else None."""
    entry = _cache_entry(path)
    if entry is None:
        return None
    try:
        record = parse_json(entry.read_text())
    except (OSError, ValueError):  # JsonProblem is a ValueError
        return None
    if not isinstance(record, dict) or record.get("identity") != stamp:
        return None
    digest = record.get("sha256")
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def remember_sha256(path: Path | str, stamp: str, digest: str) -> None:
    """Remember a sha256 computed while the file's `file_change_stamp` was `stamp` (best effort: a
    cache directory that cannot be written only means the next run hashes again)."""
    entry = _cache_entry(path)
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as handle:
            # the key "identity" is the cache format's, kept so that existing entries stay valid
            json.dump({"identity": stamp, "sha256": digest, "path": str(Path(path).resolve())}, handle)
        os.replace(tmp, entry)
    except OSError:
        return


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def utc_now() -> str:
    """ISO-8601 UTC timestamp with second precision."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def tool_version() -> str:
    return f"nb {__version__}"
