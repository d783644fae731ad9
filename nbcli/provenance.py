"""Provenance recorded in every output file: tool version, input hashes, options, time."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import tempfile
from pathlib import Path

from nbcli import __version__
from nbcli.jsonsafe import parse as parse_json

_HASH_BLOCK = 1 << 22


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks (bounded memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def hash_cache_dir() -> Path | None:
    """Where verified sha256s of large inputs are remembered: $NB_CACHE_DIR/sha256, else
    $XDG_CACHE_HOME/nb/sha256, else ~/.cache/nb/sha256; None when NB_HASH_CACHE=0 (off)."""
    if os.environ.get("NB_HASH_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    root = os.environ.get("NB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "nb")
    return Path(root) / "sha256"


def file_identity(path: Path | str) -> str:
    """Device, inode, size, mtime and ctime of a file (nanoseconds). Any write to the file changes
    its ctime, which no user-space call can set back, so an unchanged identity means unchanged bytes
    (the stat check git's index and rsync rely on, with ctime added)."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _cache_entry(path: Path | str) -> Path | None:
    root = hash_cache_dir()
    if root is None:
        return None
    st = os.stat(path)
    return root / f"{st.st_dev:x}-{st.st_ino:x}.json"


def cached_sha256(path: Path | str, identity: str) -> str | None:
    """The sha256 remembered for `path` if its identity is still `identity`, else None."""
    entry = _cache_entry(path)
    if entry is None:
        return None
    try:
        record = parse_json(entry.read_text())
    except (OSError, ValueError):  # JsonProblem is a ValueError
        return None
    if not isinstance(record, dict) or record.get("identity") != identity:
        return None
    digest = record.get("sha256")
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def remember_sha256(path: Path | str, identity: str, digest: str) -> None:
    """Remember a sha256 computed while the file had `identity` (best effort: a cache directory
    that cannot be written only means the next run hashes again)."""
    entry = _cache_entry(path)
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as handle:
            json.dump({"identity": identity, "sha256": digest, "path": str(Path(path).resolve())}, handle)
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
