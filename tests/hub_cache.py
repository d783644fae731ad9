"""Build a Hugging Face hub cache on disk, in the layout huggingface_hub writes, without any network.

    <cache>/models--org--name/
        refs/main                    the commit hash (no newline), refs/<branch or tag> likewise
        blobs/<sha>                  each file's bytes, named by its hash: the sha256 for LFS files
                                     (weights), the git blob sha1 otherwise (what the Hub's etag is)
        snapshots/<commit>/<file>    a relative symbolic link ../../blobs/<sha>

tests/cli/test_hub.py builds tiny transformers models with `save_pretrained` and files them here.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin", ".model", ".parquet", ".arrow")


def blob_name(name: str, data: bytes) -> str:
    """The blob file name huggingface_hub gives a file: sha256 for LFS files, git's sha1 otherwise."""
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit_hash(seed: str) -> str:
    """A 40-hex commit id (any 40 hex digits is one, as far as the cache is concerned)."""
    return hashlib.sha1(seed.encode()).hexdigest()


def repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def add_snapshot(cache: Path, repo_id: str, source: Path, commit: str, refs: Iterable[str] = ("main",)) -> Path:
    """File every regular file of the folder `source` as snapshot `commit` of `repo_id`, point each
    of `refs` (branches or tags) at it, and return the snapshot folder."""
    repo = repo_folder(cache, repo_id)
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(source.iterdir()):
        if not file.is_file():
            continue
        data = file.read_bytes()
        blob = repo / "blobs" / blob_name(file.name, data)
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / file.name
        if link.is_symlink():
            link.unlink()
        os.symlink(os.path.join("..", "..", "blobs", blob.name), link)
    for ref in refs:
        path = repo / "refs" / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(commit)
    return snapshot


def dataset_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("datasets--" + repo_id.replace("/", "--"))


def add_dataset_snapshot(cache: Path, repo_id: str, files: dict[str, bytes], commit: str,
                         refs: Iterable[str] = ("main",)) -> Path:
    """File `files` (path in the repo -> bytes, in sub-folders too) as snapshot `commit` of the dataset
    repo `repo_id`, each a relative link into blobs/ (as huggingface_hub lays a dataset repo out), point
    each of `refs` at it, and return the snapshot folder."""
    repo = dataset_folder(cache, repo_id)
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / blob_name(name, data)
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        os.symlink(os.path.relpath(blob, link.parent), link)
    for ref in refs:
        path = repo / "refs" / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(commit)
    return snapshot
