"""THE reader of word vectors as they ship: GloVe text, word2vec text and binary, fastText `.vec`,
any of them compressed (paper 002 sec. 5: GloVe 300-d word vectors).

Formats (`format="auto"` decides by content, never by the name alone):

    glove            `word v1 ... vD` per line, no header (glove.6B/42B/840B.*.txt); D is the number
                     of fields of the first line minus one
    word2vec         a header line `N D`, then `word v1 ... vD` lines (word2vec -binary 0, fastText .vec)
    word2vec-binary  a header line `N D`, then N records `word<space>` + D little-endian float32
                     (+ an optional newline), as word2vec.c writes them (GoogleNews-vectors-negative300.bin)

The rule: the first bytes say the compression (gzip 1f 8b, bzip2 `BZh`, xz fd 37 7a 58 5a 00, zstd
28 b5 2f fd: a `.gz` file that is not gzip is read as what it is). After decompression, a first line
of exactly two integers is a header; the line after it is text when it splits into at least D + 1
fields whose last D are numbers, else the records are binary. No header: GloVe text.

Text lines: the LAST D fields are the vector and everything before them is the word, so GloVe 840B's
few words containing spaces (`. . .`, `at name@domain.com`) read whole. A line with another number of
numbers is an error, and so is a word with spaces whose last part is itself a number (a line with D +
1 numbers would otherwise pass as a word with a space). A blank line is an error (except after the last).

Errors (one line, `nbcli.errors.InputError`, naming FILE:LINE; binary records FILE: record K (byte B)):
a wrong dimension; a field that is not a number; NaN or infinity; fewer rows than the header says;
a truncated binary record; a duplicate word (`duplicates="error"`, the default, names the second
occurrence's line and the first's; `"keep-first"` keeps the first row and counts the rest in
`duplicates_skipped`). Bad UTF-8 in a word follows `unicode_errors`, as gensim's
`load_word2vec_format(unicode_errors=)` does: "strict" (the default of the text formats) reads the
whole file and then refuses it, naming the first such word's FILE:LINE, how many words are not UTF-8
and the choices; "replace" (U+FFFD), "ignore" (the bad bytes dropped; a word of bad bytes alone becomes "", as in gensim)
and "backslashreplace" (`\\xNN`) read them, counted in `escaped_words`. word2vec binary files default
to "backslashreplace" because word2vec.c truncates long words inside multibyte characters and
Google's GoogleNews vectors hold some; escaping keeps two different byte strings two different words,
where 'replace' or 'ignore' can make duplicates (then the duplicate error, or `duplicates="keep-first"`).

Memory is bounded by the rows kept: `limit` (the first N rows kept; reading stops there) and
`vocabulary` (keep only these words, in the file's order; others are parsed and dropped;
`read_word_list` reads one from a file: paper 002's 5893 Multi30k words, app. A.2); rows go
into a float32 array that grows by doubling (preallocated from the header when there is one); the
file is read in 1 MiB blocks, never whole. Duplicates are checked among the rows kept.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Literal

import numpy as np

from nbcli.errors import ConfigError, InputError

Format = Literal["auto", "glove", "word2vec", "word2vec-binary"]
Duplicates = Literal["error", "keep-first"]
UnicodeErrors = Literal["strict", "replace", "ignore", "backslashreplace"]
FORMATS = ("auto", "glove", "word2vec", "word2vec-binary")
DUPLICATES = ("error", "keep-first")
UNICODE_ERRORS = ("strict", "replace", "ignore", "backslashreplace")
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_HEADER = re.compile(rb"^[ \t]*(\d+)[ \t]+(\d+)[ \t]*\r?$")
_BLOCK = 1 << 20
_MAX_LINE = 1 << 26  # a 64 MiB line is not a word vector


@dataclass(frozen=True)
class WordVectors:
    """Word vectors as read: `words[i]` has the float32 row `vectors[i]`, in file order."""

    words: list[str]
    vectors: np.ndarray
    path: str
    format: str
    compression: str | None = None
    header: tuple[int, int] | None = None
    rows_read: int = 0  # rows parsed (kept or not)
    duplicates_skipped: int = 0
    escaped_words: int = 0      # words that were not UTF-8, read by `unicode_errors`
    unicode_errors: str = "strict"
    index: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def summary(self) -> dict[str, object]:
        """What a report says about the file (no rows)."""
        return {"path": self.path, "format": self.format, "compression": self.compression,
                "header": list(self.header) if self.header else None, "rows": len(self.words), "dim": self.dim,
                "rows_read": self.rows_read, "duplicates_skipped": self.duplicates_skipped,
                "escaped_words": self.escaped_words, "unicode_errors": self.unicode_errors}


def detect_compression(head: bytes) -> str | None:
    """The compression named by a file's first bytes (see the module docstring), or None."""
    for magic, name in MAGIC.items():
        if head.startswith(magic):
            return name
    return None


class _Source:
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
            if len(self._buf) - self._pos > _MAX_LINE:
                raise InputError(f"{self.path}:{self.line} (byte {self.offset}): no {sep!r} within "
                                 f"{_MAX_LINE >> 20} MiB: not a word-vector file")
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
                if len(self._buf) - self._pos > _MAX_LINE:
                    raise InputError(f"{self.path}:{self.line}: line longer than {_MAX_LINE >> 20} MiB")
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
        while self._buf.find(b"\n", self._pos) < 0 and len(self._buf) - self._pos <= _MAX_LINE and self._fill():
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


def _numbers(fields: list[bytes]) -> bool:
    try:
        for f in fields:
            float(f)
    except ValueError:
        return False
    return True


VECTOR_SUFFIXES = (".vec", ".txt", ".bin", ".w2v")
"""How word-vector files are named (GloVe .txt, word2vec .bin/.txt, fastText .vec)."""


def sniff(first: bytes, second: bytes) -> tuple[str, tuple[int, int] | None]:
    """(format, header) from the first two lines of the decompressed file (the module's rule)."""
    match = _HEADER.match(first)
    if match is None:
        return "glove", None
    header = (int(match.group(1)), int(match.group(2)))
    fields = second.split()
    if len(fields) >= header[1] + 1 and _numbers(fields[-header[1]:]):
        return "word2vec", header
    return "word2vec-binary", header


def is_vector_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds word vectors rather than a checkpoint (`--embedding-init pretrained:FILE`,
    `nb analogy`), by content, as `read_vectors` decides formats: a regular file that is compressed
    (gzip/bzip2/xz/zstd magic), or whose first line is a `N D` header or `word v1 ... vD` (at least
    two fields, the last a number). A safetensors file (an 8-byte header length, then `{`), a folder,
    a repo id or a missing path is not. A file named as vectors ship (VECTOR_SUFFIXES: glove.6B.100d.txt,
    GoogleNews-vectors-negative300.bin, wiki.en.vec) is, unless it starts as a pickle or a zip archive
    (torch.save's formats, refused as checkpoints): empty or garbled, the vector reader names what is
    wrong with it instead of the checkpoint reader calling it no safetensors file."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as handle:
            head = handle.read(1 << 16)
    except OSError:
        return False
    if detect_compression(head):
        return True
    if len(head) >= 9 and head[8:9] == b"{":
        return False
    if head[:1] == b"\x80" or head[:4] == b"PK\x03\x04":
        return False   # a pickle (protocol 2+) or torch.save's zip: the checkpoint reader refuses it
    first = head.split(b"\n", 1)[0]
    if _HEADER.match(first):
        return True
    fields = first.split()
    if len(fields) >= 2 and _numbers(fields[-1:]):
        return True
    return os.fspath(path).lower().endswith(VECTOR_SUFFIXES)


class _Rows:
    """The kept rows: words, their index (the duplicate check), where each was read (a line or
    record number, formatted by `describe` only for an error message) and a float32 array that grows."""

    def __init__(self, dim: int, capacity: int, duplicates: Duplicates, describe: Callable[[int], str]) -> None:
        self.dim, self.duplicates, self.describe = dim, duplicates, describe
        self.words: list[str] = []
        self.index: dict[str, int] = {}
        self.at = array("q")
        self.array = np.empty((max(capacity, 1), dim), dtype=np.float32)
        self.skipped = 0

    def add(self, word: str, row: np.ndarray | list[float], at: int) -> None:
        first = self.index.get(word)
        if first is not None:
            if self.duplicates == "error":
                raise InputError(f"{self.describe(at)}: duplicate word {word!r} (first at "
                                 f"{self.describe(self.at[first])}); duplicates='keep-first' (--duplicates "
                                 "keep-first) keeps the first row")
            self.skipped += 1
            return
        n = len(self.words)
        if n == self.array.shape[0]:
            grown = np.empty((2 * n, self.dim), dtype=np.float32)
            grown[:n] = self.array
            self.array = grown
        self.array[n] = row
        self.index[word] = n
        self.words.append(word)
        self.at.append(at)

    def matrix(self) -> np.ndarray:
        """The kept rows, checked finite (the first NaN or infinity is an error naming its row)."""
        n = len(self.words)
        out = self.array[:n] if self.array.shape[0] == n else np.ascontiguousarray(self.array[:n])
        for start in range(0, n, 1 << 16):
            finite = np.isfinite(out[start:start + (1 << 16)]).all(axis=1)
            if not finite.all():
                i = start + int(np.argmin(finite))
                raise InputError(f"{self.describe(self.at[i])}: NaN or infinite value in the vector of {self.words[i]!r}")
        return out


def read_vectors(path: str | os.PathLike[str], *, format: Format = "auto", limit: int | None = None,
                 vocabulary: Collection[str] | None = None, duplicates: Duplicates = "error",
                 unicode_errors: UnicodeErrors | None = None) -> WordVectors:
    """Read a word-vector file (the module docstring: formats, the detection rule, errors, memory).
    `unicode_errors` None: "strict" for text, "backslashreplace" for word2vec binary."""
    path = os.fspath(path)
    if format not in FORMATS:
        raise ConfigError(f"unknown word-vector format {format!r}: expected {', '.join(FORMATS)}")
    if duplicates not in DUPLICATES:
        raise ConfigError(f"--duplicates must be error or keep-first, got {duplicates!r}")
    if unicode_errors is not None and unicode_errors not in UNICODE_ERRORS:
        raise ConfigError(f"--unicode-errors must be one of {', '.join(UNICODE_ERRORS)}, got {unicode_errors!r}")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {limit}")
    keep = None if vocabulary is None else set(vocabulary)
    source = _Source(path)
    try:
        first = source.peek_line()
        header_match = _HEADER.match(first)
        if header_match is not None:
            source.readline()
        second = source.peek_line()
        if header_match is not None:
            first_fmt, header = sniff(first, second)
        else:
            first_fmt, header = "glove", None
        fmt = first_fmt if format == "auto" else format
        if fmt != "glove" and header is None:
            raise InputError(f"{path}:1: no `N D` header line: not a {fmt} file (GloVe text has none: format glove)")
        if fmt == "glove" and header is not None:
            raise InputError(f"{path}:1: a `N D` header line: a word2vec/fastText file, not GloVe text")
        if fmt == "glove":
            if b"\x00" in second:
                raise InputError(f"{path}:1: binary data without a `N D` header: not a word-vector file (a fastText "
                                 ".bin model? its .vec is)")
            fields = second.split()
            if len(fields) < 2:
                raise InputError(f"{path}:1: expected `word v1 ... vD`, got {len(fields)} field(s)")
            dim = len(fields) - 1
        else:
            assert header is not None
            dim = header[1]
            if dim < 1:
                raise InputError(f"{path}:1: header `{header[0]} {header[1]}` names no dimensions")
            check_header(path, header, fmt, source.size, source.compression)
        capacity = min(header[0] if header else 1 << 16, limit or (1 << 62), 1 << 22,
                       _prealloc_rows(fmt, dim, source.size, source.compression))
        if keep is not None:
            capacity = min(capacity, max(len(keep), 1))
        rows = _Rows(dim, capacity, duplicates, (lambda n: f"{path}: record {n}") if fmt == "word2vec-binary"
                     else (lambda n: f"{path}:{n}"))
        wanted = header[0] if header else None
        errors = unicode_errors or ("backslashreplace" if fmt == "word2vec-binary" else "strict")
        words = _Words(errors)
        if fmt == "word2vec-binary":
            read = _read_binary(source, rows, dim, wanted, limit, keep, words)
        else:
            read = _read_text(source, rows, dim, wanted, limit, keep, words)
    finally:
        source.close()
    words.check(path)
    matrix = rows.matrix()
    if not rows.words:
        raise InputError(f"{path}: no word vectors kept ({read} read" + (", none in the vocabulary asked for)"
                                                                        if keep is not None else ")"))
    return WordVectors(rows.words, matrix, path, fmt, source.compression, header, read, rows.skipped,
                       words.escaped, errors, rows.index)


def escaped_note(wv: WordVectors) -> str:
    """The warning a report gives when words that were not UTF-8 were read (`unicode_errors`)."""
    how = {"replace": "with U+FFFD", "ignore": "without their bad bytes", "backslashreplace": "escaped as \\xNN"}
    return (f"{wv.path}: {wv.escaped_words:,} word(s) with invalid UTF-8, read {how.get(wv.unicode_errors, '')} "
            f"(unicode_errors {wv.unicode_errors!r})")


class _Words:
    """Words decoded from UTF-8 by the `unicode_errors` rule (module doc): "strict" counts the words that
    are not UTF-8 (the first one's place kept) and `check` refuses the file once it is read; the other
    rules decode them and count them in `escaped`."""

    def __init__(self, errors: str) -> None:
        self.errors = errors
        self.escaped = 0
        self.refused = 0
        self.first: tuple[str, int] | None = None

    def decode(self, raw: bytes, where: Callable[[], str]) -> str | None:
        """The word, or None for a word "strict" refuses (counted; the read goes on to count them all)."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if self.errors == "strict":
                self.refused += 1
                if self.first is None:
                    self.first = (where(), err.start)
                return None
            self.escaped += 1
            return raw.decode("utf-8", self.errors)   # "ignore" may leave "" (a word of bad bytes alone), as gensim

    def check(self, path: str) -> None:
        if self.first is not None:
            where, byte = self.first
            raise InputError(f"{where}: invalid UTF-8 in the word at byte {byte}; {self.refused:,} word(s) of {path} "
                             "are not UTF-8: read them with unicode_errors 'replace', 'ignore' or 'backslashreplace' "
                             "(--unicode-errors), as gensim's load_word2vec_format(unicode_errors=) does")


_COMPRESSED_RATIO = 16
"""Rows preallocated from the header of a compressed file: at most what 16 times its size holds
(word vectors compress 2-4 times); beyond that the array grows with the rows actually read."""


def _row_bytes(fmt: str, dim: int) -> int:
    """The fewest bytes a row takes: text `w 0 ... 0` 2D + 1, a binary record 4D + 1 (one-byte word)."""
    return 2 * dim + 1 if fmt == "word2vec" else 4 * dim + 1


def check_header(path: str, header: tuple[int, int], fmt: str, size: int, compression: str | None) -> None:
    """Refuse a `N D` header's D before anything is allocated from it: a row wider than a line nb
    reads (text) or than NB_MAX_READ_MB (binary), or, in an uncompressed file, than the file. (Its N
    only bounds the preallocation, `_prealloc_rows`: fewer rows is the reader's truncation error.)"""
    from nbcli.limits import max_read_bytes

    rows, dim = header
    row_max = _MAX_LINE // 2 if fmt == "word2vec" else max_read_bytes() // 4
    if dim > row_max:
        raise InputError(f"{path}:1: header `{rows} {dim}` says {dim:,} dimensions, more than a row nb reads holds "
                         f"({row_max:,}" + (": raise NB_MAX_READ_MB)" if fmt != "word2vec" else ")"))
    if compression is None and _row_bytes(fmt, dim) > size:
        raise InputError(f"{path}:1: header `{rows} {dim}` says rows of {dim:,} dimensions (at least "
                         f"{_row_bytes(fmt, dim):,} bytes each) but the file has {size:,} bytes: not this file's header")


def _prealloc_rows(fmt: str, dim: int, size: int, compression: str | None) -> int:
    """Most rows to preallocate: those the file can hold, or of a compressed file 4-byte values of
    `_COMPRESSED_RATIO` times its size; the array grows beyond with the rows actually read."""
    if compression is None:
        return max(1, size // _row_bytes(fmt, dim))
    return max(1, (size * _COMPRESSED_RATIO + (1 << 20)) // (4 * dim))


def _short(field: bytes) -> str:
    text = repr(field[:40].decode("utf-8", "backslashreplace"))
    return text + ("..." if len(field) > 40 else "")


def _text_row(line: bytes, dim: int, path: str, number: int, words: _Words) -> tuple[str | None, list[float]]:
    """(word, values) of one text line: the last `dim` fields are the numbers, the rest the word (None:
    not UTF-8, refused by `words`)."""
    where = f"{path}:{number}"  # only for the messages: cheap next to parsing 300 numbers
    parts = line.rsplit(None, dim)
    if len(parts) != dim + 1 or not parts[0].strip():
        raise InputError(f"{where}: {max(len(line.split()) - 1, 0)} numbers, expected {dim} (the dimension of the "
                         "first row)")
    word_bytes = parts[0].strip()
    if len(word_bytes.split()) > 1 and _numbers(word_bytes.split()[-1:]):
        raise InputError(f"{where}: {len(line.split()) - 1} numbers, expected {dim} (the dimension of the first row)")
    try:
        values = list(map(float, parts[1:]))
    except ValueError:
        bad = next(f for f in parts[1:] if not _numbers([f]))
        raise InputError(f"{where}: {_short(bad)} is not a number") from None
    return words.decode(word_bytes, lambda: where), values


def _read_text(source: _Source, rows: _Rows, dim: int, wanted: int | None, limit: int | None,
               keep: set[str] | None, words: _Words) -> int:
    read = 0
    path = source.path
    blank: int | None = None
    for line in source.lines():
        if wanted is not None and read == wanted:
            if line.strip():
                raise InputError(f"{path}:{source.line - 1}: more rows than the header's {wanted}")
            continue
        if not line.strip():
            blank = blank or source.line - 1
            continue
        if blank is not None:
            raise InputError(f"{path}:{blank}: blank line inside the word vectors")
        number = source.line - 1
        word, values = _text_row(line, dim, path, number, words)
        read += 1
        if word is not None and (keep is None or word in keep):
            rows.add(word, values, number)
            if limit is not None and len(rows.words) >= limit:
                break
    else:
        if wanted is not None and read < wanted:
            raise InputError(f"{path}:{source.line}: the file ends after {read} rows; its header says {wanted} "
                             "(truncated?)")
    return read


def _read_binary(source: _Source, rows: _Rows, dim: int, wanted: int | None, limit: int | None,
                 keep: set[str] | None, words: _Words) -> int:
    assert wanted is not None
    width = 4 * dim
    path = source.path
    for record in range(1, wanted + 1):
        start = source.offset
        raw = source.read_until_space()
        raw = b"" if raw is None else raw.lstrip(b"\n")
        data = source.read(width) if raw else b""
        where = f"{path}: record {record} (byte {start})" if not raw or len(data) < width else ""
        if not raw:
            raise InputError(f"{where}: the file ends after {record - 1} records; its header says {wanted} (truncated)")
        if len(data) < width:
            raise InputError(f"{where}: truncated: {len(data)} of the vector's {width} bytes")
        word = words.decode(raw, lambda: f"{path}: record {record} (byte {start})")
        if word is not None and (keep is None or word in keep):
            rows.add(word, np.frombuffer(data, dtype="<f4"), record)
            if limit is not None and len(rows.words) >= limit:
                return record
    return wanted


def read_word_list(path: str | os.PathLike[str]) -> list[str]:
    """The words of a vocabulary file: the first whitespace-separated field of each non-blank line
    (a word list, or a `word count` TSV such as a counts export), UTF-8; FILE:LINE on bad UTF-8."""
    from nbcli.limits import input_stat

    path = os.fspath(path)
    input_stat(path, "vocabulary file")
    words: list[str] = []
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                fields = raw.split()
                if not fields:
                    continue
                try:
                    words.append(fields[0].decode("utf-8"))
                except UnicodeDecodeError as err:
                    raise InputError(f"{path}:{number}: invalid UTF-8 at byte {err.start} of the word") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the vocabulary file: {err.strerror or err}") from None
    if not words:
        raise InputError(f"{path}: no words in the vocabulary file")
    return words
