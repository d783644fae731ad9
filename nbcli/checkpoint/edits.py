"""What `write_like` writes (nbcli.checkpoint.writer): the edits asked for, checked against the
source (`checked_edits` -> Edits), and the plan they make (`plan_single`, `plan_sharded` ->
WritePlan): each output file's entries in order and metadata, the index, the shards it retires.
Pure bookkeeping: no file is opened for writing here."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from nbcli.checkpoint.format import TensorInfo, stored_layout
from nbcli.checkpoint.layout import live_shards, shard_names
from nbcli.checkpoint.reader import Checkpoint
from nbcli.errors import ConfigError
from nbcli.outputs import device_inode

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Held:
    """A source tensor whose bytes are written last: from `Deferred.compute()` if it returns a new
    value for it, else copied from the source. Its byte range is kept free until then."""

    info: TensorInfo


TensorData = Union["torch.Tensor", TensorInfo, Held]
"""An output entry's data: a tensor, a source tensor copied byte for byte, or a held one."""


def stored(data: TensorData) -> torch.Tensor | TensorInfo:
    """What a held tensor stands for in the header: its source bytes' dtype and shape."""
    return data.info if isinstance(data, Held) else data


@dataclass
class WritePlan:
    """The files of one write: (path, entries, metadata) per tensor file in the order written, the
    index (path, metadata, weight map), the extra files of a model folder (path, source path or
    bytes), and the shards to remove once the index is renamed."""

    files: list[tuple[Path, list[tuple[str, TensorData]], dict[str, str]]] = field(default_factory=list)
    index: tuple[Path, dict[str, Any], dict[str, str]] | None = None
    extra: list[tuple[Path, Path | bytes]] = field(default_factory=list)
    retire: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class Edits:
    """What write_like changes in the source: tensors replaced (same name), added (after an anchor
    tensor, or at the end of the last file: None) and held back (writer.Deferred), and the metadata:
    `metadata` replaces each file's own (None: keep it), `update` is merged into it."""

    source: Checkpoint
    replace: Mapping[str, torch.Tensor]
    add: Mapping[str, tuple[torch.Tensor, str | None]]
    held: Mapping[str, Held]
    metadata: Mapping[str, str] | None
    update: Mapping[str, str]

    def data(self, name: str) -> TensorData:
        """What the output holds under `name`: held, replaced, added, or the source's bytes."""
        if name in self.held:
            return self.held[name]
        if name in self.replace:
            return self.replace[name]
        if name in self.add:
            return self.add[name][0]
        return self.source.info(name)

    def file_metadata(self, own: Mapping[str, str]) -> dict[str, str]:
        """A written file's metadata, given the source file's `own`."""
        return {**(dict(self.metadata) if self.metadata is not None else dict(own)), **self.update}

    def entries_by_file(self) -> dict[Path, list[tuple[str, TensorData]]]:
        """Each source file's output entries in order: its tensors, each followed by the tensors
        added after it; the ones added at the end go to the last file."""
        after: dict[str, list[str]] = {}
        tail: list[str] = []
        for name, (_tensor, anchor) in self.add.items():
            if anchor is None:
                tail.append(name)
            else:
                after.setdefault(anchor, []).append(name)
        names: dict[Path, list[str]] = {}
        for header in self.source.headers:
            names[header.path] = [n for name in header.tensors for n in (name, *after.get(name, []))]
        names[self.source.headers[-1].path].extend(tail)
        return {path: [(name, self.data(name)) for name in listed] for path, listed in names.items()}


def checked_edits(source: Checkpoint, replace: Mapping[str, torch.Tensor],
                  add: Mapping[str, tuple[torch.Tensor, str | None]], held_names: Collection[str],
                  metadata: Mapping[str, str] | None, update: Mapping[str, str]) -> Edits:
    """The edits, checked against the source: replaced, held and anchor tensors exist (CheckpointError
    naming the tensor), added ones do not, no tensor is both replaced and held."""
    held = {name: Held(source.info(name)) for name in sorted(held_names)}
    for name in replace:
        source.info(name)
        if name in held:
            raise ConfigError(f"tensor {name!r} is both replaced and deferred")
    for name, (_tensor, anchor) in add.items():
        if name in source:
            raise ConfigError(f"{source.path}: tensor {name!r} already exists; cannot create it")
        if anchor is not None:
            source.info(anchor)
    return Edits(source, dict(replace), dict(add), held, metadata, dict(update))


def plan_sharded(edits: Edits, target_dir: Path, in_place: bool) -> WritePlan:
    """The shards to write (in place: only those holding a changed, created or held tensor, under
    fresh names), the index (total_size and total_parameters of the output) and the shards it no
    longer names (retired once the index is renamed)."""
    source = edits.source
    assert source.index_path is not None
    # In place, a shard none of whose tensors changes is not written at all: it keeps its
    # inode, bytes and name; the new provenance lives in the index and the rewritten shards.
    # (the folder itself, or its copy of hard links that `swapped_folder` swaps in: the index is the same file)
    same_dir = in_place and device_inode(target_dir / source.index_path.name) == device_inode(source.index_path)
    entries_of = edits.entries_by_file()
    rewritten = [header.path for header in source.headers
                 if not same_dir or edits.metadata is not None
                 or any(not isinstance(item, TensorInfo) for _name, item in entries_of[header.path])]
    names = shard_names(source, target_dir, rewritten)
    plan = WritePlan()
    weight_map: dict[str, str] = {}
    total = parameters = 0
    for header in source.headers:
        entries = entries_of[header.path]
        name_out = names.get(header.path, header.path.name)
        if header.path in names:
            plan.files.append((target_dir / name_out, entries, edits.file_metadata(header.metadata)))
        for name, item in entries:
            weight_map[name] = name_out
            _dtype, shape, nbytes = stored_layout(stored(item))
            total += nbytes
            parameters += math.prod(shape)
    kept = set(weight_map.values())
    plan.retire = [target_dir / name for name in sorted(live_shards(target_dir / source.index_path.name))
                   if name not in kept]
    index_meta = {**source.index_metadata, **edits.update, "total_size": total}
    if "total_parameters" in source.index_metadata:
        index_meta["total_parameters"] = parameters
    plan.index = (target_dir / source.index_path.name, index_meta, dict(sorted(weight_map.items())))
    return plan


def plan_single(edits: Edits, target: Path) -> WritePlan:
    """The one output file of a single-file source."""
    header = edits.source.headers[0]
    entries = edits.entries_by_file()[header.path]
    return WritePlan(files=[(target, entries, edits.file_metadata(header.metadata))])
