"""The one safetensors writer: streamed writes, held (deferred) tensors, one commit for every file.

Public API (stable; used by patch-checkpoint, train and transplant):

    save_tensors(path, tensors, metadata=None, progress=None)
        Write a dict of torch tensors (+ string metadata) as one safetensors file, atomically.
    write_safetensors(path, entries, metadata, progress=None)
        Streaming writer. `entries`: (name, torch.Tensor | TensorInfo) in output order; a TensorInfo
        is copied byte for byte from its file (copy_file_range/sendfile, nothing materialised).
    write_like(source, out, replace={}, add={}, metadata=..., in_place=False, progress=None) -> list[Path]
        Write a copy of `source` (single file or sharded: same layout, rewritten index) with some
        tensors replaced or added; untouched tensors are copied byte for byte. In place, a sharded
        source gets only the shards holding a changed or created tensor rewritten, under fresh
        names (`layout.shard_names`); the others are left as they are. All outputs are temp files
        in the target directory, renamed into place only when every one is complete, the index's
        rename being the commit point (`atomic.OutputSet`): the shards before it, the replaced
        shards removed after it. Where they go and which paths are refused (OUT == IN unless
        in_place=True, any of `other_inputs`) is `layout`.
        `deferred=Deferred(names, compute, poll)`: those source tensors are held back; every other
        tensor is copied first, then compute() gives their new values (same dtype and shape), which
        are written into the byte ranges kept for them (the rest of them copied from the source).
        This lets the caller compute them (e.g. in a thread) while the bulk copy runs.
    write_model_folder(directory, tensors, metadata, extra_files) -> list[Path]
        A new model folder (model.safetensors + config/tokenizer files), staged beside it and renamed
        into place as a whole (`nb export`): absent or complete for every reader.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from nbcli.atomic import OutputSet, atomic_write, sigint_held, staged_folder, start_writeback, swapped_folder
from nbcli.checkpoint.edits import Held, TensorData, WritePlan, checked_edits, plan_sharded, plan_single, stored
from nbcli.checkpoint.format import TensorInfo, build_header, dtype_code
from nbcli.checkpoint.layout import check_output_paths, checked_output_dir, resolve_output
from nbcli.checkpoint.reader import Checkpoint
from nbcli.errors import CheckpointError, ConfigError, OutputError
from nbcli.outputs import device_inode

if TYPE_CHECKING:
    import torch

Progress = Callable[[int], None]
"""Called with the number of bytes just written."""


@dataclass(frozen=True)
class Deferred:
    """Tensors of the source whose new values are computed while the other tensors are copied.

    `names`: source tensors to hold back (written last, into byte ranges kept for them).
    `compute()`: called once, after every other tensor is copied; returns new values for some of
    `names`, each with the stored dtype and shape (the others are copied from the source).
    `poll()`: called between copy blocks; raises to abandon the write (e.g. when the computation
    has already failed), which removes every temporary file.
    """

    names: frozenset[str]
    compute: Callable[[], Mapping[str, torch.Tensor]]
    poll: Callable[[], None] = lambda: None


_COPY_BLOCK = 1 << 28  # 256 MiB per copy_file_range / sendfile call, then its writeback is started
# (64 MiB measured ~20% slower than 1 GiB; 256 MiB measured as fast as 1 GiB)
_UNSUPPORTED = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF)


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def _header(entries: Sequence[tuple[str, TensorData]], metadata: Mapping[str, str]) -> bytes:
    return build_header([(name, stored(data)) for name, data in entries], metadata)



Copied = Callable[[int, int, int], None]
"""Called with (output fd, offset, byte count) after each block copied into the output."""


def _copy_range(src: TensorInfo, out: BinaryIO, progress: Progress | None,
                poll: Callable[[], None] | None = None, copied_block: Copied | None = None) -> None:
    """Copy src's bytes to the current position of `out` in the kernel where possible; `poll` is
    called before each block (it raises to abandon the copy), `copied_block` after each."""
    out.flush()
    dst_fd = out.fileno()
    dst_offset = out.tell()
    with open(src.file, "rb") as handle:
        src_fd = handle.fileno()
        offset, remaining = src.start, src.nbytes
        use_cfr, use_sendfile = hasattr(os, "copy_file_range"), hasattr(os, "sendfile")
        while remaining:
            if poll:
                poll()
            count = min(remaining, _COPY_BLOCK)
            copied = 0
            if use_cfr:
                try:
                    copied = os.copy_file_range(src_fd, dst_fd, count, offset)
                except OSError as err:
                    if err.errno not in _UNSUPPORTED:
                        raise
                    use_cfr = False
            if not copied and not use_cfr and use_sendfile:
                try:
                    copied = os.sendfile(dst_fd, src_fd, offset, count)
                except OSError as err:
                    if err.errno not in _UNSUPPORTED:
                        raise
                    use_sendfile = False
            if not copied and not use_cfr and not use_sendfile:
                handle.seek(offset)
                block = handle.read(count)
                out.write(block)
                out.flush()
                copied = len(block)
            if copied == 0:
                raise CheckpointError(f"{src.file}: tensor data {src.name!r} ended early (file truncated while "
                                      "copying?)")
            if copied_block:
                copied_block(dst_fd, dst_offset, copied)
            offset += copied
            dst_offset += copied
            remaining -= copied
            if progress:
                progress(copied)


def _write_entries(out: BinaryIO, entries: Sequence[tuple[str, TensorData]], metadata: Mapping[str, str],
                   progress: Progress | None, late: _LateMetadata | None = None,
                   poll: Callable[[], None] | None = None, copied_block: Copied | None = None,
                   ) -> list[tuple[int, Held]]:
    """Write the header (with `late.reserve` spare bytes) and every entry but the Held ones, whose
    byte ranges are skipped; returns (file offset, Held) for each of those."""
    header = _header(entries, metadata)
    if late is not None:  # reserve room, filled in once the data are written (see write_like)
        (n,) = struct.unpack("<Q", header[:8])
        header = struct.pack("<Q", n + late.reserve) + header[8:] + b" " * late.reserve
    out.write(header)
    held: list[tuple[int, Held]] = []
    for data in _coalesced(entries):
        if poll:
            poll()
        if isinstance(data, Held):
            out.flush()
            held.append((out.tell(), data))
            out.seek(data.info.nbytes, os.SEEK_CUR)
        elif isinstance(data, TensorInfo):
            _copy_range(data, out, progress, poll, copied_block)
        else:
            view = _tensor_bytes(data)
            out.write(view)
            if progress:
                progress(len(view))
    return held


def _coalesced(entries: Sequence[tuple[str, TensorData]]) -> list[TensorData]:
    """The entries' data with each run of source tensors that lie back to back in one file merged
    into one range: one copy_file_range per run instead of several calls (and GIL round trips,
    slow while another thread imports torch) per tensor."""
    merged: list[TensorData] = []
    for _name, data in entries:
        last = merged[-1] if merged else None
        if (isinstance(data, TensorInfo) and isinstance(last, TensorInfo) and last.file == data.file
                and last.end == data.start):
            first = last.name.split(" .. ")[0]
            merged[-1] = TensorInfo(f"{first} .. {data.name}", "U8", (data.end - last.start,), data.file,
                                    last.start, data.end)
        else:
            merged.append(data)
    return merged


def _fill_held(out: BinaryIO, held: Sequence[tuple[int, Held]], values: Mapping[str, torch.Tensor],
               progress: Progress | None) -> None:
    """Write each held tensor at its offset: its new value from `values`, else the source's bytes."""
    for offset, item in held:
        info = item.info
        out.flush()
        out.seek(offset)
        if info.name not in values:
            _copy_range(info, out, progress)
            continue
        view = _tensor_bytes(values[info.name])
        done = 0
        while done < len(view):
            done += os.pwrite(out.fileno(), view[done:], offset + done)
        if progress:
            progress(len(view))
    out.flush()
    out.seek(0, os.SEEK_END)


def _check_deferred(values: Mapping[str, torch.Tensor], held: Mapping[str, Held]) -> None:
    """Deferred values must be held source tensors with their stored dtype and shape."""
    for name, tensor in values.items():
        if name not in held:
            raise ConfigError(f"deferred tensor {name!r} was not held back from the copy")
        info = held[name].info
        if dtype_code(tensor.dtype) != info.dtype or tuple(tensor.shape) != info.shape:
            raise ConfigError(f"deferred tensor {name!r} is {dtype_code(tensor.dtype)} {list(tensor.shape)}; "
                              f"its reserved bytes hold {info.dtype} {list(info.shape)}")


def _write_late_header(out: BinaryIO, entries: Sequence[tuple[str, TensorData]], metadata: Mapping[str, str],
                       late: _LateMetadata) -> None:
    """Overwrite the header with the late metadata merged in, padded to the reserved length."""
    reserved = len(_header(entries, metadata)) + late.reserve
    final = _header(entries, {**metadata, **late.values()})
    if len(final) > reserved:
        raise OutputError(f"late metadata needs {len(final) - reserved} more header bytes than reserved")
    out.flush()
    out.seek(8)
    out.write(final[8:] + b" " * (reserved - len(final)))
    out.flush()
    out.seek(0, os.SEEK_END)


class _LateMetadata:
    """Metadata known only after the data are written (e.g. input hashes computed concurrently):
    `reserve` header bytes are kept as trailing spaces (allowed by the format) and overwritten."""

    def __init__(self, compute: Callable[[], Mapping[str, str]], reserve: int) -> None:
        self._compute = compute
        self._values: dict[str, str] | None = None
        self.reserve = reserve + (-reserve % 8)

    def values(self) -> dict[str, str]:
        if self._values is None:
            self._values = dict(self._compute())
        return self._values


def write_safetensors(path: Path | str, entries: Sequence[tuple[str, TensorData]],
                      metadata: Mapping[str, str] | None = None, progress: Progress | None = None) -> None:
    """Write `entries` (name, tensor or TensorInfo to copy) as one safetensors file, atomically."""
    with atomic_write(path) as out:
        _write_entries(out, entries, metadata or {}, progress)


def save_tensors(path: Path | str, tensors: Mapping[str, torch.Tensor],
                 metadata: Mapping[str, str] | None = None, progress: Progress | None = None) -> None:
    """Save a dict of torch tensors with string metadata as one safetensors file, atomically."""
    write_safetensors(path, list(tensors.items()), metadata, progress)


def write_model_folder(directory: Path | str, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
                       extra_files: Mapping[str, Path | bytes], weights_name: str = "model.safetensors",
                       ) -> list[Path]:
    """A new model folder: DIR/`weights_name` (the tensors) and the extra files (file name -> source
    path or bytes: config.json, tokenizer files), written into a staged folder beside DIR that is
    renamed to DIR once all are complete (`atomic.staged_folder`): every reader (transformers' model
    and tokenizer loaders too) sees no folder or the complete one. DIR must not exist or be an empty
    directory; what a killed export left is recovered first. Returns the written paths. `nb export`."""
    directory = Path(directory)
    with staged_folder(directory) as staging:
        plan = WritePlan(files=[(staging / weights_name, list(tensors.items()), dict(metadata))],
                         extra=[(staging / name, content) for name, content in extra_files.items()])
        written = _execute(plan, None, None, None, None, {})
    return [directory / path.name for path in written]


def write_like(source: Checkpoint, out: Path | str, *, replace: Mapping[str, torch.Tensor] | None = None,
               add: Mapping[str, tuple[torch.Tensor, str | None]] | None = None,
               metadata: Mapping[str, str] | None = None, in_place: bool = False,
               progress: Progress | None = None, update_metadata: Mapping[str, str] | None = None,
               late_metadata: Callable[[], Mapping[str, str]] | None = None,
               late_reserve: int = 8192, deferred: Deferred | None = None,
               other_inputs: Sequence[Path | str] = (), folder: bool = False,
               extra_files: Mapping[str, Path | bytes] | None = None) -> list[Path]:
    """Write a copy of `source` with `replace`d tensors (same name, any shape/dtype) and `add`ed ones.

    `add` maps a new name to (tensor, name of an existing tensor to place it after, or None for the
    end); in a sharded checkpoint it goes into that tensor's shard. A sharded write whose OUT is
    IN (`in_place`) writes only the shards holding a replaced, added or deferred tensor, each under
    a fresh name, and keeps the others (their entries in the index unchanged). `metadata` replaces the metadata
    of every written file (default: keep each file's own); `update_metadata` is merged into it.
    `deferred` holds back some source tensors: all other data of every file are written first,
    then `deferred.compute()` gives their new values (see Deferred). `late_metadata` is called
    once, after all data are written and before anything is renamed; its entries (at most
    `late_reserve` bytes of JSON) are merged into every file's metadata and the index's. Untouched
    tensors are copied byte for byte. `other_inputs` are files the caller also reads (see
    check_output_paths). `folder`: OUT is a directory (created) even for a single-file
    source; `extra_files` (file name -> source path or bytes) are written into it with the tensors
    and renamed into place with them (a model folder's config.json and tokenizer files). The index
    metadata's total_size (and total_parameters, when the source index has it) describe the output.
    Returns the written paths (the written shards, then the index, then the extra files).
    """
    from nbcli.resolve import hub_inputs_metadata

    edits = checked_edits(source, replace or {}, add or {}, deferred.names if deferred else frozenset(), metadata,
                          update_metadata or {})
    target = resolve_output(source, out, folder)
    check_output_paths(source, out, in_place=in_place, other_inputs=other_inputs, folder=folder,
                       extra=list(extra_files or ()))
    if hub := hub_inputs_metadata([source.files[0], *other_inputs]):  # provenance: repo id + commit of Hub inputs
        edits = dataclasses.replace(edits, update={**edits.update, **hub})
    target_dir = checked_output_dir(source, target, folder)
    if extra_files and target_dir is None:
        raise ConfigError("extra files need a folder output")
    late = _LateMetadata(late_metadata, late_reserve) if late_metadata is not None else None

    def plan_in(directory: Path | None) -> WritePlan:
        if source.sharded:
            assert directory is not None
            plan = plan_sharded(edits, directory, in_place)
        else:
            plan = plan_single(edits, target if directory is None else directory / target.name)
        plan.extra = [(directory / name, content) for name, content in (extra_files or {}).items()] if directory else []
        return plan

    if target_dir is not None and not in_place and _new_folder(target_dir):
        # a new folder appears whole (`staged_folder`): no reader meets its weights without the
        # config.json and tokenizer files written after them
        with staged_folder(target_dir) as staging:
            written = _execute(plan_in(staging), None, progress, late, deferred, edits.held)
        return [target_dir / path.name for path in written]
    if target_dir is not None and folder:  # an existing model folder: committed in a copy swapped in whole
        with swapped_folder(target_dir) as copy:
            written = [] if copy is None else _execute(plan_in(copy), None, progress, late, deferred, edits.held)
        if copy is not None:
            return [target_dir / path.relative_to(copy) for path in written]
    return _execute(plan_in(target_dir), target_dir, progress, late, deferred, edits.held)


def _new_folder(directory: Path) -> bool:
    """Whether `directory` is absent or an empty directory (what `staged_folder` may create)."""
    try:
        return not directory.exists() or (directory.is_dir() and not any(directory.iterdir()))
    except OSError:
        return False


def _execute(plan: WritePlan, created_dir: Path | None, progress: Progress | None, late: _LateMetadata | None,
             deferred: Deferred | None, held: Mapping[str, Held]) -> list[Path]:
    """Write every file to a temporary beside its target: first all data but the held tensors, then
    those (deferred.compute()), then the late metadata; rename all only when all are complete.
    `created_dir` (a folder output) is made if absent, and removed again if the write fails."""
    made_dir = False
    try:
        if created_dir is not None and not created_dir.exists():
            with sigint_held(deliver=True):  # a Ctrl-C lands once made_dir says the folder is ours
                try:
                    created_dir.mkdir()
                except OSError as err:
                    raise OutputError(f"{created_dir}: cannot create output directory: {err.strerror}") from None
                made_dir = True
        written: list[Path] = []
        # committed (shards, then index) when all are complete; the writeback thread stops first,
        # so that no writeback request outlives the files' handles
        with OutputSet() as outputs, _writeback_thread() as copied_block:
            handles = _write_data(outputs, plan, progress, late, deferred, copied_block, written)
            if deferred is not None:
                values = deferred.compute()
                _check_deferred(values, held)
                for handle, held_ranges in handles:
                    _fill_held(handle, held_ranges, values, progress)
            if late is not None:
                for (handle, _held), (_path, entries, meta) in zip(handles, plan.files):
                    _write_late_header(handle, entries, meta, late)
            if plan.index is not None:
                _write_index(outputs, plan, late, written)
            _write_extra(outputs, plan.extra, written)
    except BaseException:
        if made_dir and created_dir is not None:
            with sigint_held(deliver=True):
                for leftover in created_dir.iterdir():  # only this write's files can be here
                    leftover.unlink(missing_ok=True)
                created_dir.rmdir()
        raise
    return written


@contextlib.contextmanager
def _writeback_thread() -> Iterator[Copied]:
    """A `copied_block` callback that starts the writeback of each copied block from a helper
    thread (it may block on a busy device queue), so the copy goes on and the fsync before each
    rename has little left to do; the thread is shut down when the block ends."""
    from concurrent.futures import ThreadPoolExecutor

    writeback = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nb-writeback")

    def copied_block(fd: int, offset: int, nbytes: int) -> None:
        writeback.submit(start_writeback, fd, offset, nbytes)

    try:
        yield copied_block
    finally:
        writeback.shutdown()


def _write_data(outputs: OutputSet, plan: WritePlan, progress: Progress | None, late: _LateMetadata | None,
                deferred: Deferred | None, copied_block: Copied, written: list[Path],
                ) -> list[tuple[BinaryIO, list[tuple[int, Held]]]]:
    """Open each planned tensor file's temporary and write its header and data, the held tensors'
    byte ranges left free; (handle, held ranges) per file."""
    poll = deferred.poll if deferred else None
    handles = []
    for path, entries, meta in plan.files:
        handle = outputs.open(path)
        handles.append((handle, _write_entries(handle, entries, meta, progress, late, poll, copied_block)))
        written.append(path)
    return handles


def _write_index(outputs: OutputSet, plan: WritePlan, late: _LateMetadata | None, written: list[Path]) -> None:
    """The index (late metadata merged in), whose rename is the commit point; the shards it no
    longer names are retired after it."""
    assert plan.index is not None
    index_path, index_meta, weight_map = plan.index
    if late is not None:
        index_meta = {**index_meta, **late.values()}
    doc = {"metadata": index_meta, "weight_map": weight_map}
    handle = outputs.open(index_path, commit_point=True)  # its rename is the commit
    handle.write((json.dumps(doc, indent=2) + "\n").encode("utf-8"))
    written.append(index_path)
    for old in plan.retire:
        outputs.retire(old)


def _write_extra(outputs: OutputSet, extra: Sequence[tuple[Path, Path | bytes]], written: list[Path]) -> None:
    """A model folder's other files (config.json, tokenizer files), committed with the tensors,
    after them; in place, a file already there is left as it is."""
    for path, content in extra:
        if isinstance(content, Path) and device_inode(content) == device_inode(path):
            continue  # in place: the file is already there
        handle = outputs.open(path)
        if isinstance(content, Path):
            with open(content, "rb") as source_file:
                shutil.copyfileobj(source_file, handle, 1 << 20)
        else:
            handle.write(content)
        written.append(path)
