"""The streamed write of a surgery: OUT written while the plan runs and the inputs are hashed.

`apply_surgery` runs `nbcli.surgery.plan.run_surgery` and writes OUT through the one checkpoint
writer (`nbcli.checkpoint.writer.write_like`): touched tensors in their stored dtypes, every other
tensor copied byte for byte, metadata kept plus `nb.provenance`. Three things overlap on threads:
the sha256 of every input (abandoned when the command fails), the surgery itself (torch import
included) and, when no tensor is created, the copy of the untouched tensors into OUT. A model-folder
OUT gets the input folder's other files, config.json rewritten with the surgery's changes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.errors import CheckpointError, ConfigError, CountsError
from nbcli.jsonsafe import metadata_object
from nbcli.limits import input_stat
from nbcli.provenance import sha256_file_cached
from nbcli.surgery.options import SurgeryOptions
from nbcli.surgery.plan import (
    SurgeryResult, held_tensors, provenance_entry, resolve_options, run_surgery, surgery_result,
)
from nbcli.surgery.workspace import Workspace

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.reader import Checkpoint
    from nbcli.checkpoint.roles import Roles


class _LayoutChanged(Exception):
    """The surgery's tensors do not fit the byte ranges held back for them (see apply_surgery)."""


def apply_surgery(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions, output: Path | None, *,
                  in_place: bool = False, dry_run: bool = False, hash_checkpoint: bool = True,
                  progress: Callable[[int], None] | None = None, overlap: bool = True) -> SurgeryResult:
    """Run the operations and (unless dry_run) write OUT: touched tensors recomputed in fp32 and cast
    back to their dtype, every other tensor copied byte for byte, metadata kept plus `nb.provenance`.

    Input hashes are computed in a background thread while the output is written; with
    hash_checkpoint=False the checkpoint files are recorded by size and mtime instead (counts and
    match files are still hashed). With `overlap` (default), when the operations create no tensor
    the output layout is the input's, so the copy of every untouched tensor starts at once while
    the surgery (torch import included) runs in a thread; the touched tensors are then written into
    the byte ranges kept for them. Should the surgery touch anything else, that copy is discarded
    and the output written again (slower, same bytes). The output is the same either way."""
    from concurrent.futures import ThreadPoolExecutor

    from nbcli.checkpoint.layout import check_output_paths, folder_output, resolve_output

    options = resolve_options(checkpoint, roles, options)
    folder = output is not None and folder_output(checkpoint, output)
    checkpoint_files = {f"checkpoint:{p.name}": p for p in checkpoint.files}
    if checkpoint.index_path is not None:
        checkpoint_files[f"checkpoint:{checkpoint.index_path.name}"] = checkpoint.index_path
    inputs = dict(checkpoint_files) if hash_checkpoint else {}
    unhashed = {} if hash_checkpoint else {
        key: {"bytes": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns} for key, path in checkpoint_files.items()}
    if options.output_bias_counts is not None:
        inputs["counts"] = Path(options.output_bias_counts)
    if options.zipfian_whiten_counts is not None:
        inputs["whiten-counts"] = Path(options.zipfian_whiten_counts)
    if options.standardise is not None and options.standardise.match_file:
        inputs["match"] = Path(options.standardise.match_file)
    if options.tokenizer is not None:
        input_stat(options.tokenizer, "tokenizer", allow_dir=True, error=CountsError)
        if Path(options.tokenizer).is_file():
            inputs["tokenizer"] = Path(options.tokenizer)
    others = [path for key, path in inputs.items() if key in ("counts", "whiten-counts", "match", "tokenizer")]
    for key, path in inputs.items():  # before a hashing thread opens them (a FIFO would block it)
        if key in ("counts", "whiten-counts", "match"):
            input_stat(path, "checkpoint" if key == "match" else "counts file",
                       error=CheckpointError if key == "match" else CountsError)
    if output is not None and not dry_run:
        check_output_paths(checkpoint, output, in_place=in_place, other_inputs=others, folder=folder)
    held = held_tensors(checkpoint, roles, options) if overlap and not dry_run and output is not None else None
    # Hash the inputs from the start, overlapping torch's import, the surgery and the copy; on
    # failure the hashing stops at its next block instead of finishing a huge file.
    stop = threading.Event()
    hash_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nb-hash")
    surgery_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nb-surgery")
    futures = {} if dry_run else {key: hash_pool.submit(sha256_file_cached, path, stop) for key, path in inputs.items()}
    try:
        written: list[Path] | None = None
        if held is not None:
            assert output is not None
            resolve_output(checkpoint, output, folder)
            surgery = surgery_pool.submit(run_surgery, checkpoint, roles, options)
            written = _write_overlapped(checkpoint, roles, options, output, held, surgery, futures, unhashed,
                                        in_place=in_place, progress=progress, others=others, folder=folder)
            new_tensors, ws, warnings = surgery.result()
        else:
            new_tensors, ws, warnings = run_surgery(checkpoint, roles, options)
        result = surgery_result(roles, options, ws, warnings, dry_run=dry_run, model_folder=folder)
        if ws.config_updates and not folder and roles.architecture != "nb":
            changes = ", ".join(f"{k}={json.dumps(v)}" for k, v in ws.config_updates.items())
            where = ("OUT is a bare .safetensors file, so no config.json is written (give a directory as OUT "
                     "for a model folder)" if checkpoint.model_dir is not None else "the input has no config.json")
            warnings.append(f"{where}: load it with {changes} in its config")
        if dry_run:
            return result
        if output is None:
            raise ConfigError("an output path is required (-o OUT), or --dry-run")
        if written is None:
            written = _write_after(checkpoint, roles, options, output, new_tensors, ws, futures, unhashed,
                                   in_place=in_place, progress=progress, others=others, folder=folder)
    finally:
        stop.set()
        hash_pool.shutdown(wait=False, cancel_futures=True)
        surgery_pool.shutdown(wait=False, cancel_futures=True)
    result.outputs = [str(p) for p in written]
    return result


def patch_file(path: Path | str, output: Path | str | None, options: SurgeryOptions, *, arch: str = "auto",
               mapping: Mapping[str, str] | None = None, in_place: bool = False, dry_run: bool = False,
               hash_inputs: bool = True, progress: Callable[[int, int], None] | None = None,
               missing_output: str | None = None) -> SurgeryResult:
    """`nb patch-checkpoint` on a checkpoint path: open it, settle OUT (`surgery_output`: IN itself
    with in_place and no OUT; checked before any tensor is read), resolve the roles (`arch`,
    `mapping` role -> tensor name) and `apply_surgery`. `progress(bytes_advanced, total_bytes)`;
    `missing_output`: the error when no OUT is given (default: the command's)."""
    from nbcli.checkpoint.layout import MISSING_OUTPUT, surgery_output
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.checkpoint.roles import resolve_roles

    with open_checkpoint(path) as ckpt:
        out = surgery_output(ckpt, output, in_place=in_place, dry_run=dry_run, missing=missing_output or MISSING_OUTPUT)
        roles = resolve_roles(ckpt, arch, dict(mapping or {}))
        total = ckpt.total_bytes
        return apply_surgery(ckpt, roles, options, out, in_place=in_place, dry_run=dry_run,
                             hash_checkpoint=hash_inputs, progress=None if progress is None else lambda n: progress(n, total))


def _late_provenance(options: SurgeryOptions, futures: dict[str, Future[tuple[str, bool]]], previous: str | None,
                     unhashed: dict[str, Any]) -> Callable[[], dict[str, str]]:
    """The late metadata: `nb.provenance` with the input hashes, once the hashing threads finish."""

    def late() -> dict[str, str]:
        results = {key: future.result() for key, future in futures.items()}
        hashes = {key: digest for key, (digest, _) in results.items()}
        from_cache = [key for key, (_, cached) in results.items() if cached]
        return {"nb.provenance": provenance_entry(options, hashes, previous, unhashed, from_cache)}

    return late


def _write_overlapped(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions, output: Path,
                      held: frozenset[str], surgery: Future[tuple[dict[str, torch.Tensor], Workspace, list[str]]],
                      futures: dict[str, Future[tuple[str, bool]]], unhashed: dict[str, Any], *, in_place: bool,
                      progress: Callable[[int], None] | None, others: list[Path],
                      folder: bool = False) -> list[Path] | None:
    """Copy every tensor but `held` while `surgery` runs, then write its tensors into the ranges kept
    for them. Returns None (nothing written) when the surgery's tensors do not fit those ranges."""
    from nbcli.checkpoint.format import dtype_code
    from nbcli.checkpoint.writer import Deferred, write_like

    previous = checkpoint.metadata.get("nb.provenance")
    placeholder = provenance_entry(options, {k: "0" * 64 for k in futures}, previous, unhashed)

    def poll() -> None:
        if surgery.done() and surgery.exception() is not None:
            surgery.result()  # raises the surgery's error in this thread

    def compute() -> dict[str, torch.Tensor]:
        new_tensors, _ws, _warnings = surgery.result()
        for name, tensor in new_tensors.items():
            if (name not in held or tuple(tensor.shape) != checkpoint.shape(name)
                    or dtype_code(tensor.dtype) != checkpoint.dtype(name)):
                raise _LayoutChanged(name)
        return new_tensors

    try:
        return write_like(checkpoint, output, update_metadata={"nb.provenance": placeholder}, in_place=in_place,
                          progress=progress, other_inputs=others, late_metadata=_late_provenance(options, futures, previous, unhashed),
                          late_reserve=1024 + sum(128 + len(key) for key in futures), deferred=Deferred(held, compute, poll),
                          folder=folder, extra_files=_folder_files(checkpoint, {}) if folder else None)
    except _LayoutChanged:  # the temporaries are gone; apply_surgery writes again from the result
        return None


def _write_after(checkpoint: Checkpoint, roles: Roles, options: SurgeryOptions, output: Path,
                 new_tensors: dict[str, torch.Tensor], ws: Workspace, futures: dict[str, Future[tuple[str, bool]]],
                 unhashed: dict[str, Any], *, in_place: bool, progress: Callable[[int], None] | None,
                 others: list[Path], folder: bool = False) -> list[Path]:
    """Write OUT from the finished surgery (new tensors placed after their anchors)."""
    from nbcli.checkpoint.layout import resolve_output
    from nbcli.checkpoint.writer import write_like

    resolve_output(checkpoint, output, folder)
    update: dict[str, str] = {}
    if roles.architecture == "nb" and any(t.role == "output_weight" and t.created for t in ws.touched.values()):
        config = metadata_object(checkpoint.metadata, "nb.config", checkpoint.path, error=CheckpointError) or {}
        config["tie_embeddings"] = False
        update["nb.config"] = json.dumps(config, sort_keys=True)
    previous = checkpoint.metadata.get("nb.provenance")
    update["nb.provenance"] = provenance_entry(options, {k: "0" * 64 for k in futures}, previous, unhashed)
    replace = {n: t for n, t in new_tensors.items() if n in checkpoint}
    add = {n: (t, ws.anchor.get(n)) for n, t in new_tensors.items() if n not in checkpoint}
    return write_like(checkpoint, output, replace=replace, add=add, update_metadata=update, in_place=in_place,
                      progress=progress, other_inputs=others, late_metadata=_late_provenance(options, futures, previous, unhashed),
                      late_reserve=1024 + sum(128 + len(key) for key in futures), folder=folder,
                      extra_files=_folder_files(checkpoint, ws.config_updates) if folder else None)


def _folder_files(checkpoint: Checkpoint, config_updates: dict[str, Any]) -> dict[str, Path | bytes]:
    """The model folder's other files for OUT: copied as they are, config.json with the surgery's
    changes (indented and key-sorted as transformers writes it)."""
    from nbcli.checkpoint.layout import model_folder_files

    files: dict[str, Path | bytes] = {p.name: p for p in model_folder_files(checkpoint)}
    if config_updates and checkpoint.model_config is not None:
        config = {**checkpoint.model_config, **config_updates}
        files["config.json"] = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return files
