"""Provenance recorded in every output file: tool version, input hashes, options, time."""

from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path

from nbcli import __version__

_HASH_BLOCK = 1 << 22


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks (bounded memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def utc_now() -> str:
    """ISO-8601 UTC timestamp with second precision."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def tool_version() -> str:
    return f"nb {__version__}"
