"""Where a checkpoint write goes, and the checks made before anything is written or renamed.

    resolve_output(source, out, folder=False) -> Path   the file, or the directory if sharded
    folder_output(source, out) -> bool                  whether OUT is written as a model folder
    model_folder_files(source) -> list[Path]            the source folder's non-weight files
    output_paths(source, out, folder, extra) -> list[Path]   every file a write creates
    check_output_paths(source, out, in_place=False, other_inputs=())
        OutputError unless every input stays intact (OUT == IN needs in_place=True)
    checked_output_dir(source, target, folder) -> Path | None   the directory a write creates or
        fills, checked: its parent must allow it, an existing one must be a directory
    surgery_output(source, out, in_place=, dry_run=) -> Path | None   OUT of a patch (IN itself with
        in_place and no OUT), where it goes checked before anything is read
    live_shards(index) -> set[str]                      shard names the index on disk now names
    shard_names(source, target_dir, rewritten) -> dict  source shard -> the name it is written under
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Sequence
from pathlib import Path

from nbcli.atomic import check_name_length, check_output_dir
from nbcli.checkpoint.reader import Checkpoint
from nbcli.errors import ConfigError, OutputError


def resolve_output(source: Checkpoint, out: Path | str, folder: bool = False) -> Path:
    """Where write_like writes: a file for a single-file source (OUT, or OUT/<input name> if OUT is a
    directory), a directory for a sharded source (OUT, or OUT's directory if OUT names an index).
    `folder`: OUT is a model folder (created if absent): the file goes to OUT/<input name>."""
    out = Path(out)
    check_name_length(out)
    if source.sharded:
        if out.name.endswith(".index.json"):
            return out.parent
        if out.suffix == ".safetensors":
            raise ConfigError(f"{out}: the input is sharded, so the output is a directory of shards; "
                              "give a directory (or an index.json path)")
        return out
    if folder:
        if out.exists() and not out.is_dir():
            raise OutputError(f"{out}: exists and is not a directory (the input is a model folder, so the "
                              "output is one; end OUT with .safetensors to write the tensors alone)")
        return out / source.files[0].name
    if out.is_dir():
        return out / source.files[0].name
    return out


def folder_output(source: Checkpoint, out: Path | str) -> bool:
    """Whether OUT is written as a model folder: the source sits in a Hugging Face model folder
    (config.json beside it) and OUT names no .safetensors file or index."""
    name = Path(out).name
    return source.model_dir is not None and not name.endswith((".safetensors", ".index.json"))


#: Files of a model folder that are never copied beside a patched checkpoint: the tensors nb writes
#: itself, and weights in other formats (stale once the safetensors are patched; pickles never read).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack",
                   ".onnx", ".gguf", ".ot", ".tflite", ".nbtmp")


def model_folder_files(source: Checkpoint) -> list[Path]:
    """The non-tensor files of the source's model folder (config.json, generation_config.json,
    tokenizer files, README, ...): regular, non-hidden files at its top level that hold no weights."""
    folder = source.model_dir
    if folder is None:
        return []
    skip = {p.name for p in source.files} | ({source.index_path.name} if source.index_path else set())
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.name not in skip
                  and not p.name.lower().endswith(WEIGHT_SUFFIXES) and not p.name.endswith(".index.json"))


def output_paths(source: Checkpoint, out: Path | str, folder: bool = False, extra: Sequence[str] = ()) -> list[Path]:
    """The files write_like(source, out) writes: the shards (or the one file), the index, and in a
    folder output the `extra` file names."""
    target = resolve_output(source, out, folder)
    directory = target if source.sharded else target.parent
    if not source.sharded:
        return [target] + [directory / name for name in extra]
    assert source.index_path is not None
    return ([target / path.name for path in source.files] + [target / source.index_path.name]
            + [directory / name for name in extra])


def check_output_paths(source: Checkpoint, out: Path | str, *, in_place: bool = False,
                       other_inputs: Sequence[Path | str] = (), folder: bool = False,
                       extra: Sequence[str] | None = None) -> None:
    """OutputError unless writing `out` leaves every input intact: no output may be (a link to) a
    file of `other_inputs`, nor of the checkpoint (its model folder's files included) unless
    `in_place`. `extra`: the folder output's other file names (default: the model folder's)."""
    from nbcli.outputs import check_outputs

    folder_files = model_folder_files(source) if folder else []
    names = [p.name for p in folder_files] if extra is None else list(extra)
    outputs = output_paths(source, out, folder, names)
    ours = list(source.files) + ([source.index_path] if source.index_path else []) + folder_files
    check_outputs(outputs, other_inputs, replaceable=ours if in_place else ())
    if not in_place:
        check_outputs(outputs, ours, hint="pass --in-place to overwrite it (it stays intact until the new "
                                          "file is complete)")


def checked_output_dir(source: Checkpoint, target: Path, folder: bool) -> Path | None:
    """The directory that holds a sharded or model-folder output (`target` from resolve_output),
    checked before anything is written: a new one must be creatable, an existing one a directory.
    None for a lone file."""
    target_dir = target if source.sharded else target.parent if folder else None
    if target_dir is not None:
        if not target_dir.exists():
            check_output_dir(target_dir, parents="exist")  # the writer makes this folder alone, not its parents
        elif not target_dir.is_dir():
            raise OutputError(f"{target_dir}: exists and is not a directory")
    return target_dir


MISSING_OUTPUT = "give an output with -o OUT (or --in-place to overwrite IN, or --dry-run)"


def surgery_output(source: Checkpoint, out: Path | str | None, *, in_place: bool = False, dry_run: bool = False,
                   missing: str = MISSING_OUTPUT) -> Path | None:
    """Where a patch of `source` writes: `out`, or with `in_place` and no `out` the checkpoint itself
    (its model folder, shard directory or file); None for a dry run. ConfigError(`missing`) when
    there is no OUT and neither flag. Where OUT goes is checked now (`guard_outputs`: the directory
    exists or can be made, and is writable); whether OUT is one of the inputs, the writer checks
    (`check_output_paths`: in_place may allow it)."""
    from nbcli.outputs import guard_outputs

    if dry_run:
        return None if out is None else Path(out)
    if out is None:
        if not in_place:
            raise ConfigError(missing)
        out = source.model_dir or (source.files[0].parent if source.sharded else source.files[0])
    out = Path(out)
    folder = folder_output(source, out)
    target = resolve_output(source, out, folder)
    directory = target if source.sharded else target.parent if folder else None
    guard_outputs([] if directory else [target], folder=directory)
    return out


_FRESH_RE = re.compile(r"\.nb-[0-9a-f]{8}(?=\.safetensors$)")


def fresh_shard_name(name: str) -> str:
    """A new name for a rewritten shard: `model-00003-of-00008.safetensors` ->
    `model-00003-of-00008.nb-1a2b3c4d.safetensors` (a previous `.nb-XXXXXXXX` is replaced), so the
    new file never replaces one a reader may be using; loaders take shard names from the index."""
    stem = _FRESH_RE.sub("", name)
    base, dot, suffix = stem.rpartition(".safetensors")
    if not dot:
        base, suffix = stem, ""
    return f"{base}.nb-{secrets.token_hex(4)}.safetensors{suffix}"


def live_shards(index: Path) -> set[str]:
    """The shard names the index file at `index` names now (empty when there is none or it is
    unreadable: then no shard of that folder is known to be in use by it)."""
    from nbcli.errors import CheckpointError
    from nbcli.jsonsafe import load_file

    try:
        parsed = load_file(index, error=CheckpointError, what="index", max_bytes=100 << 20)
    except (OSError, CheckpointError):
        return set()
    weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
    if not isinstance(weight_map, dict):
        return set()
    return {Path(v).name for v in weight_map.values() if isinstance(v, str)}


def shard_names(source: Checkpoint, target_dir: Path, written: Collection[Path]) -> dict[Path, str]:
    """The name each written source shard takes in `target_dir`: its own name, unless the index
    there now names it or a file of that name exists, then a fresh one (`fresh_shard_name`): the
    index rename stays the one moment a reader sees the new set."""
    assert source.index_path is not None
    busy = live_shards(target_dir / source.index_path.name)
    names: dict[Path, str] = {}
    for shard in written:
        name = shard.name
        while name in busy or (target_dir / name).exists() or name in names.values():
            name = fresh_shard_name(shard.name)
        names[shard] = name
    return names
