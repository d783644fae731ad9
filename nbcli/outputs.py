"""The one output guard: no command writes over one of its own inputs, or where it cannot write.

Every command calls `guard_outputs` with all the paths it will write and all the files it reads
before it reads or writes anything; `check_outputs` is its identity part. The rule for where an output
may go is one for every command: missing parent folders are made when the output is written
(`nbcli.atomic.checks`), and `-` is standard output for a file of text (`stdout=True`;
`write_text_output` writes it) and refused for any other output, never a file named `-`. Files are compared by
identity, (st_dev, st_ino) of the file a path resolves to, so a hard link, a symbolic link, `./x` or
a bind mount of an input is caught as well as the same name. Two outputs of one command that are the same file (`--tsv` equal to `-o`) are
refused the same way (by resolved path where neither exists yet). An input that is a folder (a run
directory, a model folder) protects every file in it: an existing output that resolves into it is
refused, a new file written there is not (`model_inputs` names what reading a model reads).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nbcli.atomic import check_name_length, check_output_dir
from nbcli.atomic.checks import refuse_hub_cache
from nbcli.errors import OutputError

PathLike = Path | str
STDOUT = "-"


def device_inode(path: PathLike) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the existing file or directory `path` names (links followed), else None:
    equal for two paths that name the same file. (Whether a file's bytes changed is
    `nbcli.provenance.file_change_stamp`.)"""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def stdin_device_inode() -> tuple[int, int] | None:
    """(st_dev, st_ino) of the regular file standard input is redirected from (`< file`), else None."""
    try:
        st = os.fstat(0)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _resolved(path: PathLike) -> str:
    return os.path.realpath(os.path.abspath(path))


def check_outputs(outputs: Iterable[PathLike | None], inputs: Iterable[PathLike | None], *,
                  replaceable: Iterable[PathLike] = (), hint: str = "choose another output path") -> None:
    """Raise OutputError naming both paths if an output is the same file as an input or as another output.

    `inputs` may hold "-" (standard input: its file, when redirected from one, counts as an input).
    `replaceable` lists inputs an output may replace (`--in-place`): they are not compared.
    """
    outs = [Path(p) for p in outputs if p is not None]
    skip = {ident for ident in map(device_inode, replaceable) if ident is not None}
    known: dict[tuple[int, int], str] = {}
    folders: dict[tuple[int, int], str] = {}
    for item in inputs:
        if item is None:
            continue
        ident = stdin_device_inode() if str(item) == "-" else device_inode(item)
        if ident is not None and ident not in skip:
            known.setdefault(ident, "standard input" if str(item) == "-" else str(item))
            if str(item) != "-" and os.path.isdir(item):
                folders.setdefault(ident, str(item))
    seen_ident: dict[tuple[int, int], Path] = {}
    seen_name: dict[str, Path] = {}
    for out in outs:
        refuse_hub_cache(out)
        ident = device_inode(out)
        if ident is not None and ident in known:
            same = "" if known[ident] == str(out) else f" {known[ident]}"
            raise OutputError(f"{out}: output is the same file as the input{same}; {hint}")
        folder = _input_folder_holding(out, folders) if ident is not None and folders else None
        if folder is not None:
            raise OutputError(f"{out}: output would overwrite a file of the input folder {folder}; {hint}")
        other = seen_ident.get(ident) if ident is not None else None
        name = _resolved(out)
        other = other or seen_name.get(name)
        if other is not None:
            raise OutputError(f"{out}: output is the same file as the output {other}; give each output its own path")
        if ident is not None:
            seen_ident[ident] = out
        seen_name[name] = out


def _input_folder_holding(out: Path, folders: dict[tuple[int, int], str]) -> str | None:
    """The input folder (a run directory, a model folder, a corpus folder) that the existing file `out`
    resolves into, by identity of the resolved path's parent directories; else None."""
    parent = Path(_resolved(out)).parent
    for folder in (parent, *parent.parents):
        ident = device_inode(folder)
        if ident in folders:
            return folders[ident]
    return None


def model_inputs(path: PathLike | None) -> list[Path]:
    """What reading the model `path` reads: a run directory or model folder as itself (every file in it
    is an input: checkpoints, config.json, tokenizers), a checkpoint file with the folder it lies in
    (its config and tokenizer are read from there). For `guard_outputs`' `inputs`."""
    if path is None or str(path) == "-":
        return []
    path = Path(path)
    return [path, path.parent] if path.is_file() else [path]


def inputs_inside(directory: PathLike, inputs: Iterable[PathLike | None]) -> Path | None:
    """The first input file that lies inside `directory` (by identity of its parent directories)."""
    target = device_inode(directory)
    if target is None:
        return None
    for item in inputs:
        if item is None or str(item) == "-":
            continue
        parent = Path(_resolved(item)).parent
        for folder in (parent, *parent.parents):
            if device_inode(folder) == target:
                return Path(item)
    return None


def is_stdout(path: PathLike | None) -> bool:
    """Whether an output path is `-`, standard output."""
    return path is not None and str(path) == STDOUT


def guard_outputs(outputs: Iterable[PathLike | None], inputs: Iterable[PathLike | None] = (), *,
                  folder: PathLike | None = None, option: str = "-o", stdout: bool = False) -> None:
    """The checks every writing command makes before any work: OutputError naming the path if an
    output is (a link to) an input or another output (`check_outputs`), if `folder` (the directory a
    command writes its files into, created when missing) exists and is not a directory, or if an
    output's directory is not writable or cannot be made (missing folders are made when the output is
    written: module doc), its name is too long, or it is an existing directory (outputs are files;
    `folder` is the one directory). `-` is standard output where `stdout` (the outputs are text), else
    refused; `option` names the folder's option in the message."""
    given = [Path(p) for p in outputs if p is not None]
    for path in [*given, *([Path(folder)] if folder is not None else [])]:
        if is_stdout(path) and not (stdout and path in given):
            raise OutputError(f"{option if path not in given else 'output'} -: standard output takes text, and this "
                              "output is a file or folder of another kind; give a path (./- for a file named -)")
    outs = [p for p in given if not is_stdout(p)]
    for path in [*outs, *([Path(folder)] if folder is not None else [])]:
        check_name_length(path)
    if folder is not None:
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"{option} {folder}: exists and is not a directory")
    check_outputs(outs, inputs)
    if folder is not None and not folder.is_dir():
        check_output_dir(folder, parents="check")  # the command makes it (and missing parents)
        return
    if folder is not None and not outs:
        check_output_dir(folder / "x", parents="check")  # an existing folder must be writable
    for out in outs:
        check_output_dir(out, file=True, parents="check")  # a file output: not an existing directory


def write_text_output(path: PathLike, text: str) -> str:
    """A command's file of text: to standard output for `-` (never a file named `-`), else to `path`
    atomically (missing folders made). Returns what a report calls it ("-" or the path)."""
    import sys

    from nbcli.atomic import write_text_atomic

    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return STDOUT
    write_text_atomic(Path(path), text)
    return str(path)
