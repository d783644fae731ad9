"""Text corpora: newline-aligned byte ranges of plain files, line-aligned blocks of streams, and THE
line rule of every command (`split_lines`, `decode_lines`).

The line rule: a line ends at LF or CR LF, nothing else (a lone CR, form feed, U+0085, U+2028 and
U+2029 are characters of the line, unlike Python's `str.splitlines`); the line ending is removed and
nothing else is (no stripping); invalid UTF-8 is replaced by U+FFFD and the lines holding it are
counted (`--strict`: an error naming FILE:LINE). Counting's byte path cuts lines at LF and sends
every line holding a CR to `split_lines` (CR is in every segmenter's `line_bail`), so it keeps the
same rule.

Plain files are split into newline-aligned byte ranges that worker processes read themselves; a
line belongs to the range that holds its first byte, so ranges partition the lines exactly.
Compressed files and stdin cannot be seeked: they are decompressed in one stream and cut into
line-aligned blocks. Memory stays bounded by the block size either way.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from nbcli.corpus.sources import STDIN, CorpusSource, columnar_kind
from nbcli.errors import CorpusError, InputError
from nbcli.limits import max_line_bytes

BLOCK_BYTES = 1 << 20  # 1 MiB of lines per block
MIN_RANGE_BYTES = 1 << 20
MAX_RANGE_BYTES = 1 << 25


@dataclass(frozen=True)
class ByteRange:
    """Lines of a plain file whose first byte lies in [start, end)."""

    path: str
    start: int
    end: int


def plan_ranges(source: CorpusSource, workers: int) -> list[ByteRange]:
    """Cut a plain file into byte ranges of 1-32 MiB: about 4 per worker, shrinking towards the end
    (guided scheduling: a range is at most a quarter of what remains per worker), so that the
    workers finish together instead of one waiting on the last large range."""
    if source.size == 0:
        return []
    target = min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, source.size // max(1, workers * 4)))
    ranges, pos = [], 0
    while pos < source.size:
        step = min(target, max(MIN_RANGE_BYTES, (source.size - pos) // max(1, 2 * workers)))
        ranges.append(ByteRange(source.path, pos, min(pos + step, source.size)))
        pos += step
    return ranges


def read_range_blocks(rng: ByteRange, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, data) blocks holding exactly the lines whose first byte is in the range.

    Each block ends at a newline (or at end of file); offset is the file offset of data[0]. A line
    longer than max_line_bytes() is a CorpusError naming file and line (memory stays bounded)."""
    cap = max_line_bytes()
    block_bytes = min(block_bytes, cap)  # a line inside one read is then within the cap
    with open(rng.path, "rb") as handle:
        pos = rng.start
        if pos > 0:
            handle.seek(pos - 1)
            if handle.read(1) != b"\n":
                pos += _skip_line(handle)  # that line began in the previous range
        handle.seek(pos)
        while pos < rng.end:
            data = handle.read(min(block_bytes, rng.end - pos))
            if not data:
                return
            offset = pos
            pos += len(data)
            if not data.endswith(b"\n"):
                start = data.rfind(b"\n") + 1
                tail = handle.readline(cap + 1)  # the last line began before `end`: it is ours
                if len(data) - start + len(tail) > cap:  # `offset + start`: where the line begins
                    raise line_too_long(rng.path, line_number_at(rng.path, offset + start), offset + start)
                pos += len(tail)
                data += tail
            yield offset, data


def _skip_line(handle: BinaryIO) -> int:
    """Read past the rest of the current line in bounded pieces; the number of bytes skipped."""
    skipped = 0
    while True:
        piece = handle.readline(1 << 20)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped


def refuse_columnar(path: str, head: bytes) -> None:
    """CorpusError when a stream to be read as lines (stdin, a compressed file) is a parquet or Arrow
    file: its bytes must never be counted as text. (Plain files are sniffed when discovered.)"""
    kind = columnar_kind(head)
    if kind is not None:
        where = "standard input" if path == STDIN else path
        raise CorpusError(f"{where}: this is {'a parquet' if kind == 'parquet' else 'an Arrow'} file, not text; "
                          "give it as an uncompressed file (parquet and Arrow need random access)")




def split_lines(text: str) -> list[str]:
    """The lines of decoded whole lines `text`, line endings removed (the module's line rule):
    split at LF and CR LF only; a final line ending does not start an empty line."""
    lines = (text.replace("\r\n", "\n") if "\r" in text else text).split("\n")
    if lines[-1] == "":
        lines.pop()  # the block ends with a newline (or is empty)
    return lines


def invalid_utf8(path: str, line: int, byte: int) -> CorpusError:
    """The --strict error for a line holding invalid UTF-8."""
    return CorpusError(f"{path}:{line}: invalid UTF-8 at byte {byte} of the line (--strict)")


def decode_lines(data: bytes) -> tuple[list[str], list[tuple[int, int]]]:
    """(lines, bad) of a block of whole lines: its lines by `split_lines`, invalid UTF-8 replaced by
    U+FFFD, and for each line that held some, (its index in the block, the byte of the line where
    the first bad sequence starts). A caller counts the bad lines or refuses the first
    (`invalid_utf8`)."""
    try:
        return split_lines(data.decode("utf-8")), []
    except UnicodeDecodeError:
        pass
    bad = []
    for index, raw in enumerate(data.split(b"\n")):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:
            bad.append((index, err.start))
    return split_lines(data.decode("utf-8", errors="replace")), bad


class LineTooLong(CorpusError):
    """A line over NB_MAX_LINE_MB; `offset`: the file offset where it begins (None in a stream),
    so that a reader able to count it in pieces (`nbcli.counting.long_lines`) can go on from there."""

    def __init__(self, message: str, path: str = "", line: int = 0, offset: int | None = None) -> None:
        super().__init__(message)
        self.path, self.line, self.offset = path, line, offset

    def __reduce__(self) -> tuple[type, tuple[str, str, int, int | None]]:  # crosses worker processes
        return LineTooLong, (str(self), self.path, self.line, self.offset)


def line_too_long(path: str, line: int, offset: int | None = None) -> LineTooLong:
    cap = max_line_bytes()
    return LineTooLong(f"{path}:{line}: line is longer than {cap / 1e6:g} MB, the most nb holds in memory as one "
                       "document (raise it with NB_MAX_LINE_MB)", path, line, offset)


class _ZstdReader:
    """A minimal streaming Zstandard reader that detects truncated (unfinished) frames."""

    def __init__(self, raw: BinaryIO, name: str) -> None:
        import zstandard

        self._raw, self._name = raw, name
        self._dctx = zstandard.ZstdDecompressor()
        self._dobj = self._dctx.decompressobj()
        self._pending = False
        self._error = zstandard.ZstdError

    def read(self, size: int) -> bytes:
        while True:
            compressed = self._raw.read(1 << 20)
            if not compressed:
                if self._pending:
                    raise EOFError("Zstandard frame ended before its end marker")
                return b""
            out = []
            while compressed:
                try:
                    out.append(self._dobj.decompress(compressed))
                except self._error as err:
                    raise OSError(f"invalid Zstandard data: {err}") from None
                self._pending = not self._dobj.eof
                compressed = self._dobj.unused_data if self._dobj.eof else b""
                if self._dobj.eof:
                    self._dobj = self._dctx.decompressobj()
            data = b"".join(out)
            if data:
                return data

    def close(self) -> None:
        self._raw.close()


def open_stream(source: CorpusSource) -> BinaryIO:
    """Open a source for sequential binary reading, decompressing as needed."""
    if source.path == STDIN:
        return sys.stdin.buffer
    try:
        if source.remote:
            from nbcli.corpus.remote import open_remote

            target: str | BinaryIO = open_remote(source.path)  # closed with the decompressor or by GC
        else:
            target = source.path
        if source.compression == "gzip":
            return gzip.open(target, "rb")  # type: ignore[return-value]
        if source.compression == "bz2":
            return bz2.open(target, "rb")  # type: ignore[return-value]
        if source.compression == "xz":
            return lzma.open(target, "rb")  # type: ignore[return-value]
        raw = open(target, "rb") if isinstance(target, str) else target
        if source.compression == "zstd":
            return _ZstdReader(raw, source.path)  # type: ignore[return-value]
        return raw
    except OSError as err:
        raise InputError(f"{source.path}: cannot read input: {err.strerror or err}") from None


def read_stream_blocks(source: CorpusSource, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, int, bytes]]:
    """Yield (first_line_number, decompressed_offset, data) line-aligned blocks of a whole stream."""
    cap = max_line_bytes()
    block_bytes = min(block_bytes, cap)  # a line inside one read is then within the cap
    stream = open_stream(source)
    carry = b""
    offset = 0
    line = 1
    try:
        while True:
            try:
                data = stream.read(block_bytes)
            except (EOFError, OSError, lzma.LZMAError, zlib.error) as err:
                raise CorpusError(f"{source.path}: corrupt or truncated {source.compression} stream ({err})") from None
            if not data:
                break
            data = carry + data
            cut = data.rfind(b"\n") + 1
            if (data.find(b"\n") + 1 or len(data)) > cap:  # the line that began in `carry`
                raise line_too_long(source.path, line)
            if cut == 0:
                carry = data
                continue
            block, carry = data[:cut], data[cut:]
            if offset == 0:
                refuse_columnar(source.path, block)
            yield line, offset, block
            line += block.count(b"\n")
            offset += len(block)
        if carry:
            if offset == 0:
                refuse_columnar(source.path, carry)
            yield line, offset, carry
    finally:
        if source.path != STDIN:
            stream.close()


def line_number_at(path: str, offset: int) -> int:
    """1-based line number of the byte at `offset` in a plain file (used only to report errors)."""
    line = 1
    with open(path, "rb") as handle:
        remaining = offset
        while remaining > 0:
            data = handle.read(min(remaining, BLOCK_BYTES))
            if not data:
                break
            line += data.count(b"\n")
            remaining -= len(data)
    return line
