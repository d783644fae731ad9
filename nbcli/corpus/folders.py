"""Folder-per-class corpora: a classification data set laid out as one sub-folder per label, one
document per file, as scikit-learn's `load_files` and torchvision's `ImageFolder` read it (BBC News:
`bbc/business/001.txt`; IMDB: `aclImdb/train/pos/0_9.txt`; 20 Newsgroups).

    class_folders(path)   -> [(label, [file, ...]), ...], or None when `path` is not such a folder
    folder_examples(path) -> Example(text, None, label, origin), the documents in label order

The rules, `load_files`'s:
- The labels are the names of the folder's sub-folders, sorted; the documents of a label are the
  regular files directly inside its sub-folder, sorted by name; a document is a whole file (its line
  breaks are part of the text). Files at the top level (BBC's README.TXT) are not documents, and
  hidden entries (names starting with `.`) are skipped.
- A folder is read this way when it holds at least one sub-folder, every sub-folder holds files and
  no folder, and none of those files is a record file (TSV, CSV, JSONL, parquet, Arrow) or a
  `datasets` folder's: a folder of record files is read by `discover_inputs` as before.
- A folder whose sub-folders are splits of such folders (`aclImdb/` holding `train/pos`, `test/neg`)
  is refused in one line naming the split folders to give (`--corpus aclImdb/train --valid
  test=aclImdb/test`).
- A document is held whole, as a line is: at most NB_MAX_LINE_MB (16) megabytes.
- Text is UTF-8 (a leading byte-order mark dropped): invalid bytes are replaced by U+FFFD and the documents holding them counted
  (`ReadStats.bad_utf8_lines`, a warning), or with `strict` an error naming the file and byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from nbcli.corpus.rows import Origin, Progress, ReadStats
from nbcli.corpus.remote import is_remote
from nbcli.corpus.sources import COLUMNAR_SUFFIXES, DATASETS_FILES, FORMAT_SUFFIXES
from nbcli.errors import CorpusError
from nbcli.limits import input_stat, max_line_bytes

__all__ = ["class_folders", "folder_examples"]

SPLITS = ("train", "valid", "validation", "dev", "test")
_RECORD_SUFFIXES = {*FORMAT_SUFFIXES, ".tsv", ".csv", *COLUMNAR_SUFFIXES}


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise CorpusError(f"{folder}: cannot read the folder: {err.strerror}") from None


def _is_record_file(name: str) -> bool:
    stem = name
    for suffix in (".gz", ".bz2", ".xz", ".zst"):
        stem = stem.removesuffix(suffix)
    return name in DATASETS_FILES or Path(stem).suffix.lower() in _RECORD_SUFFIXES


def _documents(folder: Path) -> list[Path] | None:
    """The files of a class folder, None when it holds a folder or a record file (not a class folder)."""
    files = []
    for entry in _entries(folder):
        if entry.is_dir() or _is_record_file(entry.name):
            return None
        if entry.is_file():
            files.append(Path(entry.path))
    return files


def class_folders(path: str) -> list[tuple[str, list[Path]]] | None:
    """(label, documents) of the folder-per-class corpus `path`, labels sorted (module doc); None when
    `path` is not one (a file, a remote path, a folder of record files). CorpusError for a folder of
    splits, or a label folder without a document."""
    if is_remote(path) or not os.path.isdir(path):
        return None
    folder = Path(path)
    entries = _entries(folder)
    if any(e.is_file() and e.name in DATASETS_FILES for e in entries):
        return None
    subfolders = [Path(e.path) for e in entries if e.is_dir()]
    if not subfolders:
        return None
    classes = [(sub.name, _documents(sub)) for sub in subfolders]
    if any(docs is None for _name, docs in classes):
        splits = [sub for sub in subfolders if sub.name.lower() in SPLITS and class_folders(str(sub)) is not None]
        if splits:
            raise CorpusError(f"{path}: a folder of splits ({', '.join(s.name for s in splits)}), each a folder per "
                              f"class: give the split folders, e.g. --corpus {splits[0]} --valid NAME=FOLDER")
        return None
    for name, docs in classes:
        if not docs:
            raise CorpusError(f"{folder / name}: a class folder with no document (a file per document)")
    return [(name, docs) for name, docs in classes if docs is not None]


def _read_document(path: Path) -> bytes:
    """A document file's bytes: a regular file of at most NB_MAX_LINE_MB (a document is held whole, as a line)."""
    cap = max_line_bytes()
    if input_stat(path, "document", error=CorpusError).st_size > cap:
        raise CorpusError(f"{path}: a document over the {cap / 1e6:g} MB nb holds at once (raise it with NB_MAX_LINE_MB)")
    try:
        return path.read_bytes()
    except OSError as err:
        raise CorpusError(f"{path}: cannot read the document: {err.strerror}") from None


def folder_examples(path: str, classes: list[tuple[str, list[Path]]], *, labelled: bool = True,
                    strict: bool = False, stats: ReadStats | None = None,
                    progress: Progress | None = None) -> Iterator[tuple[str, str | None, Origin]]:
    """(text, label, origin) of each document of `classes` (`class_folders(path)`), in label then file
    order; the label None when not `labelled` (nb predict). The origin is `FILE:1`."""
    stats = stats if stats is not None else ReadStats()
    for label, documents in classes:
        for document in documents:
            data = _read_document(document)
            if progress is not None:
                progress(len(data))
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as err:
                if strict:
                    raise CorpusError(f"{document}: invalid UTF-8 at byte {err.start}") from None
                text = data.decode("utf-8", "replace")
                stats.bad_utf8_lines += 1
            yield text.removeprefix("\ufeff"), label if labelled else None, Origin(str(document), 1)
