"""INPUT arguments -> corpus sources: files, directories, globs, stdin and remote URLs, each with the
kind of reader it needs (text lines, parquet row groups, Arrow record batches) and the format its
records are read in (`corpus_format`: THE format rule of every command).

The kind comes from the name (`.parquet`; `.arrow`, `.feather`, `.ipc`), and a file named otherwise
whose first bytes are a parquet or Arrow file's (`PAR1`, `ARROW1`) is read as one: a parquet file is
never read as text whatever it is called (compressed copies and stdin are refused in text.py). A `datasets`
`save_to_disk` folder (state.json + data-*.arrow) contributes its Arrow files, not its JSON.
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nbcli.corpus.remote import expand_remote, is_remote
from nbcli.errors import ConfigError, InputError
from nbcli.limits import input_stat
from nbcli.resolve_datasets import dataset_files

COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}
TEXT_SUFFIXES = {".txt", ".text", ".jsonl", ".ndjson", ".json", ".raw", ".tok"}
COLUMNAR_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow"}
DATASETS_FILES = {"state.json", "dataset_info.json", "dataset_dict.json"}
STDIN = "-"
TEXT_FORMATS = ("text", "jsonl", "tsv", "csv")  # formats of line-based files: what --format may name
FORMATS = (*TEXT_FORMATS, "parquet", "arrow")
FORMAT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".csv": "csv"}
COLUMNAR_HEADS = {b"PAR1\x15": "parquet", b"ARROW1\x00": "arrow"}  # magic + the byte that always follows it


@dataclass(frozen=True)
class CorpusSource:
    """One input: a file path, URL or '-' (stdin), its size, its compression and its kind
    ("text"; "parquet"; "arrow": an Arrow IPC file or stream). `origin` is the INPUT argument it
    came from (the shards of one argument must share a schema)."""

    path: str
    size: int
    compression: str | None

    pipe: bool = False
    kind: str = "text"
    remote: bool = False
    origin: str = ""
    format: str = "text"  # what its records are read as (`corpus_format`): one of FORMATS

    @property
    def splittable(self) -> bool:
        return self.kind == "text" and self.path != STDIN and self.compression is None and not self.pipe \
            and not self.remote

    @property
    def columnar(self) -> bool:
        return self.kind != "text"


def compression_of(path: str) -> str | None:
    return COMPRESSION_SUFFIXES.get(Path(path).suffix.lower())


def kind_of_name(name: str) -> str | None:
    """"parquet"/"arrow" by suffix, "text" for a text suffix (optionally compressed), else None."""
    suffixes = [s.lower() for s in Path(name).suffixes]
    if suffixes and suffixes[-1] in COLUMNAR_SUFFIXES:
        return COLUMNAR_SUFFIXES[suffixes[-1]]
    if suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes = suffixes[:-1]
    return "text" if suffixes and suffixes[-1] in TEXT_SUFFIXES else None


def corpus_format(path: str, override: str | None = None) -> str:
    """The format a corpus file is read as, for every command: "text", "jsonl", "tsv", "csv",
    "parquet" or "arrow".

    By the name: `.parquet .pq` -> parquet and `.arrow .feather .ipc` -> arrow (whatever `override`
    says: columnar files are never read as lines); otherwise `override` (`--format`) when given,
    else the suffix before any compression suffix (`.gz .bz2 .xz .zst`): `.jsonl .ndjson .json` ->
    jsonl, `.tsv` -> tsv, `.csv` -> csv, anything else -> text. (A file whose first bytes are a
    parquet or Arrow file's is read as one however it is named: `discover_inputs` looks.)
    """
    if override is not None and override not in TEXT_FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(TEXT_FORMATS)}, got {override!r}")
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COLUMNAR_SUFFIXES:
        return COLUMNAR_SUFFIXES[suffixes[-1]]
    if override is not None:
        return override
    if suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes = suffixes[:-1]
    return FORMAT_SUFFIXES.get(suffixes[-1], "text") if suffixes else "text"


def _is_corpus_name(name: str) -> bool:
    return kind_of_name(name) is not None and not name.startswith(".")


def columnar_kind(head: bytes) -> str | None:
    """"parquet" or "arrow" when `head` (a file's first bytes) is a parquet or Arrow IPC file's."""
    return next((kind for magic, kind in COLUMNAR_HEADS.items() if head.startswith(magic)), None)


def _sniff(path: str) -> str:
    """The kind of a local uncompressed file from its first bytes (whatever its name says)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return "text"  # reported by whoever reads it
    return columnar_kind(head) or "text"


def _source(path: str, origin: str, fmt: str | None) -> CorpusSource:
    st = input_stat(path, "corpus file", allow_pipe=True)
    regular = stat.S_ISREG(st.st_mode)
    size = st.st_size if regular else 0
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: cannot read input: permission denied")
    compression = compression_of(path)
    kind = kind_of_name(path) or "text"
    if kind == "text" and regular and compression is None:
        kind = _sniff(path)
    return CorpusSource(path=path, size=size, compression=compression if kind == "text" else None,
                        pipe=stat.S_ISFIFO(st.st_mode), kind=kind, origin=origin,
                        format=corpus_format(path, fmt) if kind == "text" else kind)


def _distinct(paths: list[str]) -> list[str]:
    """`paths` without repeats of one file (a directory walk or a glob through a symlink loop
    reaches the same file under many names): the first name of each (st_dev, st_ino) is kept."""
    seen: set[tuple[int, int]] = set()
    kept = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            kept.append(path)  # reported by _source
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            kept.append(path)
    return kept


def _datasets_folder(folder: Path) -> bool:
    """A `datasets` save_to_disk folder: state.json listing its Arrow files."""
    from nbcli.errors import NbError
    from nbcli.jsonsafe import load_file

    try:
        state = load_file(folder / "state.json", what="state.json")
    except (OSError, NbError):
        return False
    return isinstance(state, dict) and isinstance(state.get("_data_files"), list)


def _walk(directory: str) -> list[str]:
    """Corpus files under `directory`, sorted; in `datasets` folders only the Arrow files."""
    found = []
    folders: dict[Path, bool] = {}
    for p in Path(directory).rglob("*"):
        if not p.is_file() or not _is_corpus_name(p.name):
            continue
        if p.name in DATASETS_FILES:
            if p.parent not in folders:
                folders[p.parent] = _datasets_folder(p.parent) or (p.parent / "dataset_dict.json").exists()
            if folders[p.parent]:
                continue
        found.append(str(p))
    return sorted(found)


def _remote_sources(item: str, fmt: str | None) -> list[CorpusSource]:
    sources = []
    for url, size in expand_remote(item, _is_corpus_name):
        kind = kind_of_name(url) or "text"
        sources.append(CorpusSource(path=url, size=size, compression=compression_of(url) if kind == "text" else None,
                                    kind=kind, remote=True, origin=item, format=corpus_format(url, fmt)))
    return sources


def discover_inputs(inputs: list[str], format: str | None = None) -> list[CorpusSource]:
    """Expand INPUT arguments into sources, in a stable order, each with the format it is read in
    (`corpus_format`; `format`: --format, for files that are not parquet or Arrow; stdin is text
    unless `format` says otherwise).

    Files are taken as given; directories are recursed for corpus files (names ending in .txt .text
    .jsonl .ndjson .json .raw .tok, optionally compressed, or .parquet .arrow); patterns with * ? [
    are globbed (`**` recurses); '-' is standard input; `scheme://` URLs go through fsspec (globs
    and folders too); a Hub dataset id `ID[@REV][:CONFIG[:SPLIT]]` that is no local path names the
    files of that split in the local Hugging Face cache (`nbcli.resolve_datasets`, offline). A file that one directory walk or glob reaches under several names (links)
    is read once.
    """
    if not inputs:
        raise InputError("no input given")
    sources: list[CorpusSource] = []
    for item in inputs:
        if item == STDIN:
            sources.append(CorpusSource(path=STDIN, size=0, compression=None, origin=item,
                                        format=corpus_format(STDIN, format)))
        elif is_remote(item):
            sources.extend(_remote_sources(item, format))
        elif os.path.isdir(item):
            found = _walk(item)
            if not found:
                raise InputError(
                    f"{item}: directory has no corpus files "
                    f"(looked for {', '.join(sorted(TEXT_SUFFIXES))}, optionally compressed, "
                    f"and {', '.join(sorted(COLUMNAR_SUFFIXES))})"
                )
            sources.extend(_source(p, item, format) for p in _distinct(found))
        elif os.path.lexists(item):
            sources.append(_source(item, item, format))
        elif any(ch in item for ch in "*?["):
            matches = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
            if not matches:
                raise InputError(f"{item}: pattern matches no files")
            sources.extend(_source(p, item, format) for p in _distinct(matches))
        elif (files := dataset_files(item)) is not None:
            sources.extend(_source(p, item, format) for p in files)
        else:
            raise InputError(f"{item}: no such file or directory")
    return sources


def corpus_files(inputs: list[str]) -> list[str]:
    """The local files INPUT arguments name (as discover_inputs expands them; '-' kept; remote
    files left out), or [] when they name nothing readable (the count itself then reports why)."""
    local = [item for item in inputs if not is_remote(item)]
    try:
        return [source.path for source in discover_inputs(local)] if local else []
    except InputError:
        return [item for item in local if item == STDIN or os.path.exists(item)]
