"""Input discovery, compression, and byte-range splitting."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nbcli.corpus import ByteRange, discover_inputs, line_number_at, read_range_blocks, read_stream_blocks
from nbcli.errors import CorpusError, InputError


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=40),
    trailing_newline=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
    block=st.integers(min_value=1, max_value=64),
)
def test_byte_ranges_partition_lines(tmp_path: Path, lines: list[bytes], trailing_newline: bool,
                                     cuts: list[int], block: int) -> None:
    """Any set of range boundaries yields every line exactly once, in order."""
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    seen = b""
    for start, end in zip(bounds, bounds[1:]):
        for offset, chunk in read_range_blocks(ByteRange(str(path), start, end), block_bytes=block):
            assert data[offset:offset + len(chunk)] == chunk
            seen += chunk
    assert seen == data


def test_discover_files_dirs_globs(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("a\n")
    (tmp_path / "d" / "sub" / "b.jsonl.gz").write_bytes(gzip.compress(b'{"text": "b"}\n'))
    (tmp_path / "d" / "image.png").write_bytes(b"\x89PNG")
    found = [s.path for s in discover_inputs([str(tmp_path / "d")])]
    assert found == [str(tmp_path / "d" / "a.txt"), str(tmp_path / "d" / "sub" / "b.jsonl.gz")]
    globbed = discover_inputs([str(tmp_path / "d" / "**" / "*.gz")])
    assert [s.compression for s in globbed] == ["gzip"]


def test_discover_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        discover_inputs([str(tmp_path / "missing.txt")])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.bin").write_bytes(b"x")
    with pytest.raises(InputError, match="directory has no corpus files"):
        discover_inputs([str(tmp_path / "empty")])
    with pytest.raises(InputError, match="pattern matches no files"):
        discover_inputs([str(tmp_path / "*.nothing")])


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permission bits do not stop root (CI runs as root), so the access check is simulated."""
    import os

    path = tmp_path / "secret.txt"
    path.write_text("x\n")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    with pytest.raises(InputError, match="secret.txt: cannot read input: permission denied"):
        discover_inputs([str(path)])


def test_truncated_gzip_names_file(tmp_path: Path) -> None:
    blob = gzip.compress(b"hello world\n" * 50000)
    path = tmp_path / "t.txt.gz"
    path.write_bytes(blob[: len(blob) // 2])
    (source,) = discover_inputs([str(path)])
    with pytest.raises(CorpusError, match="t.txt.gz: corrupt or truncated gzip"):
        list(read_stream_blocks(source))


def test_truncated_zstd_names_file(tmp_path: Path) -> None:
    import zstandard

    blob = zstandard.ZstdCompressor().compress(b"hello world\n" * 50000)
    path = tmp_path / "t.txt.zst"
    path.write_bytes(blob[: len(blob) // 2])
    (source,) = discover_inputs([str(path)])
    with pytest.raises(CorpusError, match="t.txt.zst: corrupt or truncated zstd"):
        list(read_stream_blocks(source))


def test_stream_blocks_are_line_aligned(tmp_path: Path) -> None:
    data = b"".join(b"line %d\n" % i for i in range(1000)) + b"no newline at end"
    path = tmp_path / "s.txt.gz"
    path.write_bytes(gzip.compress(data))
    (source,) = discover_inputs([str(path)])
    blocks = list(read_stream_blocks(source, block_bytes=100))
    assert b"".join(b for _, _, b in blocks) == data
    for first_line, offset, block in blocks:
        assert data[:offset].count(b"\n") + 1 == first_line
        assert offset == 0 or data[offset - 1:offset] == b"\n"


def test_line_number_at(tmp_path: Path) -> None:
    path = tmp_path / "n.txt"
    path.write_bytes(b"a\nbb\nccc\n")
    assert [line_number_at(str(path), o) for o in (0, 2, 5)] == [1, 2, 3]
