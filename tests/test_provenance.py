"""The one file hasher (stoppable) and the sha256 cache behind patch-checkpoint's input hashes: hits
only for unchanged files."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import numpy
import pytest

from nbcli.errors import Interrupted
from nbcli.provenance import (
    cached_sha256, file_change_stamp, hash_cache_dir, remember_sha256, sha256_file, sha256_file_cached,
)


@pytest.fixture
def cache_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NB_HASH_CACHE", "1")
    monkeypatch.setenv("NB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "sha256"


def test_remembered_digest_is_returned_while_the_file_is_unchanged(tmp_path: Path, cache_on: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(os.urandom(4096))
    stamp = file_change_stamp(path)
    assert cached_sha256(path, stamp) is None
    remember_sha256(path, stamp, sha256_file(path))
    assert cached_sha256(path, file_change_stamp(path)) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert hash_cache_dir() == cache_on and len(list(cache_on.iterdir())) == 1


@pytest.mark.parametrize("change", ["append", "same-size-rewrite", "restored-mtime"])
def test_any_write_invalidates(tmp_path: Path, cache_on: Path, change: str) -> None:
    """Appending, rewriting in place with the same size, even restoring the old mtime: ctime moves."""
    path = tmp_path / "w.bin"
    path.write_bytes(b"a" * 4096)
    before = os.stat(path)
    remember_sha256(path, file_change_stamp(path), sha256_file(path))
    if change == "append":
        with open(path, "ab") as handle:
            handle.write(b"b")
    else:
        with open(path, "r+b") as handle:
            handle.write(b"b")
        if change == "restored-mtime":
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cached_sha256(path, file_change_stamp(path)) is None


def test_off_and_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"x")
    monkeypatch.setenv("NB_HASH_CACHE", "0")
    assert hash_cache_dir() is None
    remember_sha256(path, file_change_stamp(path), sha256_file(path))
    assert cached_sha256(path, file_change_stamp(path)) is None
    monkeypatch.setenv("NB_HASH_CACHE", "1")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("NB_CACHE_DIR", str(blocker))  # mkdir fails: the cache is best effort
    remember_sha256(path, file_change_stamp(path), sha256_file(path))
    assert cached_sha256(path, file_change_stamp(path)) is None


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5])
def test_sha256_file_is_sha256_and_stops(tmp_path: Path, size: int) -> None:
    """Block by block through mmaps (block 64 is rounded up to the 4 KiB mmap granularity)."""
    data = numpy.random.default_rng(size).integers(0, 256, size=size, dtype=numpy.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f", threading.Event(), block=64) == hashlib.sha256(data).hexdigest()
    stop = threading.Event()
    stop.set()
    if size:
        with pytest.raises(Interrupted):
            sha256_file(tmp_path / "f", stop, block=64)


def test_sha256_file_of_a_pipe(tmp_path: Path) -> None:
    """A FIFO cannot be mmapped: it is read in blocks, same digest."""
    data = bytes(range(256)) * 70_000  # 17.9 MB: more than one 4 MiB read
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    assert sha256_file(fifo) == hashlib.sha256(data).hexdigest()
    writer.join()


def test_sha256_file_cached_hashes_once_per_unchanged_file(tmp_path: Path, cache_on: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256_file_cached(path) == (digest, False)
    assert sha256_file_cached(path) == (digest, True)
    path.write_bytes(b"other")
    assert sha256_file_cached(path) == (hashlib.sha256(b"other").hexdigest(), False)
