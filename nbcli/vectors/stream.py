"""The decompressed byte stream of a word-vector file (`nbcli.vectors.reader`), read in 1 MiB
blocks, never whole, with the line number and byte offset of what it hands out (the reader's
FILE:LINE and byte B).

The first bytes say the compression, never the name: gzip 1f 8b, bzip2 `BZh`, xz fd 37 7a 58 5a 00,
zstd 28 b5 2f fd (a `.gz` file that is not gzip is read as what it is).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from nbcli.errors import InputError

MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
MAX_LINE_BYTES = 1 << 26  # a 64 MiB line is not a word vector
_BLOCK = 1 << 20


def detect_compression(head: bytes) -> str | None:
    """The compression named by a file's first bytes (see the module docstring), or None."""
    for magic, name in MAGIC.items():
        if head.startswith(magic):
            return name
    return None


class VectorStream:
    """A decompressed byte stream read in blocks, with the line number and byte offset of what it
    hands out (the error messages' FILE:LINE and byte B)."""

    def __init__(self, path: str) -> None:
        from nbcli.corpus.sources import CorpusSource
        from nbcli.corpus.text import open_stream
        from nbcli.limits import input_stat

        size = input_stat(path, "word-vector file").st_size
        try:
            with open(path, "rb") as probe:
                head = probe.read(8)
        except OSError as err:
            raise InputError(f"{path}: cannot read the word-vector file: {err.strerror or err}") from None
        self.path, self.size, self.compression = path, size, detect_compression(head)
        self._stream: BinaryIO = open_stream(CorpusSource(path, size, self.compression))
        self._buf, self._pos, self.offset, self.line, self._eof = b"", 0, 0, 1, False

    def close(self) -> None:
        self._stream.close()

    def _fill(self) -> bool:
        """Read one more block into the buffer; False at the end of the stream."""
        if self._eof:
            return False
        import lzma
        import zlib

        try:
            data = self._stream.read(_BLOCK)
        except (EOFError, OSError, lzma.LZMAError, zlib.error) as err:
            raise InputError(f"{self.path}: corrupt or truncated {self.compression or ''} stream near line "
                             f"{self.line} ({err})".replace("  ", " ")) from None
        if not data:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + data
        self._pos = 0
        return True

    def _until(self, sep: bytes) -> bytes | None:
        """Bytes up to (not including) the next `sep`, consumed with it; at the end of the stream
        what is left (None when nothing is)."""
        while True:
            end = self._buf.find(sep, self._pos)
            if end >= 0:
                data = self._buf[self._pos:end]
                self.offset += end + 1 - self._pos
                self._pos = end + 1
                return data
            if len(self._buf) - self._pos > MAX_LINE_BYTES:
                raise InputError(f"{self.path}:{self.line} (byte {self.offset}): no {sep!r} within "
                                 f"{MAX_LINE_BYTES >> 20} MiB: not a word-vector file")
            if not self._fill():
                if self._pos >= len(self._buf):
                    return None
                data = self._buf[self._pos:]
                self.offset += len(data)
                self._pos = len(self._buf)
                return data

    def readline(self) -> bytes | None:
        """The next line without its newline; None at the end."""
        line = self._until(b"\n")
        if line is not None:
            self.line += 1
        return line

    def lines(self) -> Iterator[bytes]:
        """The remaining lines, a block at a time (self.line is the number of the line after the one
        last yielded)."""
        while True:
            end = self._buf.rfind(b"\n", self._pos)
            if end < 0:
                if len(self._buf) - self._pos > MAX_LINE_BYTES:
                    raise InputError(f"{self.path}:{self.line}: line longer than {MAX_LINE_BYTES >> 20} MiB")
                if self._fill():
                    continue
                rest = self._buf[self._pos:]
                self._pos = len(self._buf)
                if rest:
                    self.line += 1
                    yield rest
                return
            block = self._buf[self._pos:end].split(b"\n")
            self._pos = end + 1
            for line in block:
                self.line += 1
                yield line

    def peek_line(self) -> bytes:
        """The next line (at most 64 MiB), not consumed."""
        while self._buf.find(b"\n", self._pos) < 0 and len(self._buf) - self._pos <= MAX_LINE_BYTES and self._fill():
            pass
        end = self._buf.find(b"\n", self._pos)
        return self._buf[self._pos:end if end >= 0 else len(self._buf)]

    def read(self, n: int) -> bytes:
        """Exactly n bytes, or fewer at the end of the stream."""
        while len(self._buf) - self._pos < n and self._fill():
            pass
        data = self._buf[self._pos:self._pos + n]
        self._pos += len(data)
        self.offset += len(data)
        return data

    def read_until_space(self) -> bytes | None:
        """Bytes up to (not including) the next b' ', consumed with it; None at a clean end."""
        return self._until(b" ")
