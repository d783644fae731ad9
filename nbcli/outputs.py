"""The one output-versus-inputs guard: no command writes over one of its own inputs.

Every command calls `check_outputs` with all the paths it will write and all the files it reads
before it writes anything. Files are compared by identity, (st_dev, st_ino) of the file a path
resolves to, so a hard link, a symbolic link, `./x` or a bind mount of an input is caught as well
as the same name. Two outputs of one command that are the same file (`--tsv` equal to `-o`) are
refused the same way (by resolved path where neither exists yet).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nbcli.errors import OutputError

PathLike = Path | str


def file_identity(path: PathLike) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the existing file or directory `path` names (links followed), else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def stdin_identity() -> tuple[int, int] | None:
    """Identity of the regular file standard input is redirected from (`< file`), else None."""
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
    skip = {ident for ident in map(file_identity, replaceable) if ident is not None}
    known: dict[tuple[int, int], str] = {}
    for item in inputs:
        if item is None:
            continue
        ident = stdin_identity() if str(item) == "-" else file_identity(item)
        if ident is not None and ident not in skip:
            known.setdefault(ident, "standard input" if str(item) == "-" else str(item))
    seen_ident: dict[tuple[int, int], Path] = {}
    seen_name: dict[str, Path] = {}
    for out in outs:
        refuse_hub_cache(out)
        ident = file_identity(out)
        if ident is not None and ident in known:
            same = "" if known[ident] == str(out) else f" {known[ident]}"
            raise OutputError(f"{out}: output is the same file as the input{same}; {hint}")
        other = seen_ident.get(ident) if ident is not None else None
        name = _resolved(out)
        other = other or seen_name.get(name)
        if other is not None:
            raise OutputError(f"{out}: output is the same file as the output {other}; give each output its own path")
        if ident is not None:
            seen_ident[ident] = out
        seen_name[name] = out


def refuse_hub_cache(out: PathLike) -> None:
    """OutputError if `out` lies in the Hugging Face hub cache, leads into it by a symbolic link, or is a
    hard link to one of its blobs: the cache is an input, never an output (see nbcli.resolve)."""
    from nbcli.resolve import hub_blob, hub_cache_dir, inside_hub_cache

    if inside_hub_cache(out):
        raise OutputError(f"{out}: lies in the Hugging Face cache ({hub_cache_dir()}), which nb only reads; "
                          "write the output outside it (e.g. -o out/)")
    blob = hub_blob(out)
    if blob is not None:
        raise OutputError(f"{out}: is a hard link to the Hugging Face cache blob {blob}, which nb only reads; "
                          "choose another output path")


def inputs_inside(directory: PathLike, inputs: Iterable[PathLike | None]) -> Path | None:
    """The first input file that lies inside `directory` (by identity of its parent directories)."""
    target = file_identity(directory)
    if target is None:
        return None
    for item in inputs:
        if item is None or str(item) == "-":
            continue
        parent = Path(_resolved(item)).parent
        for folder in (parent, *parent.parents):
            if file_identity(folder) == target:
                return Path(item)
    return None
