"""Atomic outputs: a failure leaves the old file (or nothing) and no temporary file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nbcli.atomic import atomic_write, write_bytes_atomic
from nbcli.errors import OutputError


def test_success_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_exception_keeps_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as handle:
            handle.write(b"partial")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="does not exist"):
        write_bytes_atomic(tmp_path / "nope" / "out.bin", b"x")


def test_full_disk_is_one_error_and_no_file(tmp_path: Path) -> None:
    """A file-size limit makes write() fail like a full disk (EFBIG); run in a child process."""
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "from nbcli.atomic import write_bytes_atomic\n"
        "from nbcli.errors import OutputError\n"
        "try:\n"
        f"    write_bytes_atomic({str(tmp_path / 'big.bin')!r}, b'x' * 100000)\n"
        "except OutputError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "no space left" in out
    assert list(tmp_path.iterdir()) == []


def test_start_writeback_changes_nothing_and_never_raises(tmp_path: Path) -> None:
    """It only asks the kernel to begin writing (durability stays with the fsync); bad fds are ignored."""
    import os

    from nbcli.atomic import start_writeback

    with atomic_write(tmp_path / "f") as handle:
        handle.write(b"abc" * 1000)
        handle.flush()
        start_writeback(handle.fileno(), 0, 3000)
        start_writeback(handle.fileno(), 10**9, 10)  # beyond the end: nothing to do
    start_writeback(-1, 0, 10)
    assert (tmp_path / "f").read_bytes() == b"abc" * 1000
    assert os.listdir(tmp_path) == ["f"]
