"""`nb inspect`'s report: a checkpoint's tensors, architecture, roles and metadata, from headers only.

    inspect_checkpoint(path, arch="auto", mapping=None) -> dict   what `nb inspect --json` prints
    checkpoint_report(ckpt, label, arch, mapping) -> dict        the same of an open (or in-memory) checkpoint
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcli.checkpoint.reader import open_checkpoint
from nbcli.checkpoint.roles import resolve_roles
from nbcli.errors import CheckpointError


def inspect_checkpoint(path: Path | str, arch: str = "auto", mapping: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every tensor (name, dtype, shape, bytes, shard), the architecture and roles, and the metadata
    of a .safetensors file, sharded folder or index.json; reads only the headers (no torch). An
    architecture that auto-detection does not recognise is reported under `architecture_error`;
    with an explicit `arch` or `mapping` (role -> tensor name) it is raised."""
    from nbcli.atomic import take_notes

    with open_checkpoint(path) as ckpt:
        take_notes()  # reported below, as part of the checkpoint's report
        return checkpoint_report(ckpt, str(path), arch, mapping)


def checkpoint_report(ckpt: Any, label: str, arch: str = "auto", mapping: Mapping[str, str] | None = None,
                      ) -> dict[str, Any]:
    """`inspect_checkpoint`'s report of an open checkpoint: a file's (`Checkpoint`) or a model's or
    state dict's in memory (`MemoryCheckpoint`: no files; each tensor's `file` is its label)."""
    from nbcli.resolve import hub_record

    overrides = dict(mapping or {})
    try:
        roles: dict[str, Any] | None = resolve_roles(ckpt, arch, overrides).as_dict()
        detect_error = None
    except CheckpointError as err:
        if arch != "auto" or overrides:
            raise
        roles, detect_error = None, str(err)

    def role(key: str) -> Any:
        return roles[key] if roles else None

    def shard(name: str) -> str:
        where = ckpt.shard_of(name)
        return where.name if isinstance(where, Path) else str(where)

    return {
        "checkpoint": label,
        "recovered": ckpt.recovered,
        "hub": (hub_record(ckpt.files[0]) or None) if ckpt.files else None,  # repo id + commit of a Hub snapshot
        "files": [str(p) for p in ckpt.files],
        "index": str(ckpt.index_path) if ckpt.index_path else None,
        "sharded": ckpt.sharded,
        "tensor_count": len(ckpt.names()),
        "total_bytes": ckpt.total_bytes,
        "architecture": role("architecture"),
        "architecture_error": detect_error,
        "model_type": role("model_type"),
        "tied": role("tied"),
        "head": role("head"),
        "roles": role("roles"),
        "absent": role("absent"),
        "metadata": ckpt.metadata,
        "tensors": [{"name": n, "dtype": ckpt.dtype(n), "shape": list(ckpt.shape(n)),
                     "bytes": ckpt.info(n).nbytes, "file": shard(n)} for n in ckpt.names()],
    }
