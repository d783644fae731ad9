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

Text lines (`text_format`): the LAST D fields are the vector and everything before them is the
word, so GloVe 840B's few words containing spaces read whole; a line with another number of numbers,
or a word with spaces whose last part is itself a number, is an error, and so is a blank line (except
after the last). Binary records: `binary_format`; the decompressed stream: `stream`; the kept rows and
the word decoding both fill: `rows`.

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
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from nbcli.errors import ConfigError, InputError
from nbcli.vectors.binary_format import read_binary_records
from nbcli.vectors.rows import Duplicates, KeptRows, WordDecoder
from nbcli.vectors.stream import MAX_LINE_BYTES, VectorStream, detect_compression
from nbcli.vectors.text_format import all_numbers, read_text_rows

Format = Literal["auto", "glove", "word2vec", "word2vec-binary"]
UnicodeErrors = Literal["strict", "replace", "ignore", "backslashreplace"]
FORMATS = ("auto", "glove", "word2vec", "word2vec-binary")
DUPLICATES = ("error", "keep-first")
UNICODE_ERRORS = ("strict", "replace", "ignore", "backslashreplace")
_HEADER = re.compile(rb"^[ \t]*(\d+)[ \t]+(\d+)[ \t]*\r?$")


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


VECTOR_SUFFIXES = (".vec", ".txt", ".bin", ".w2v")
"""How word-vector files are named (GloVe .txt, word2vec .bin/.txt, fastText .vec)."""


def sniff(first: bytes, second: bytes) -> tuple[str, tuple[int, int] | None]:
    """(format, header) from the first two lines of the decompressed file (the module's rule)."""
    match = _HEADER.match(first)
    if match is None:
        return "glove", None
    header = (int(match.group(1)), int(match.group(2)))
    fields = second.split()
    if len(fields) >= header[1] + 1 and all_numbers(fields[-header[1]:]):
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
    if len(fields) >= 2 and all_numbers(fields[-1:]):
        return True
    return os.fspath(path).lower().endswith(VECTOR_SUFFIXES)


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
    source = VectorStream(path)
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
        rows = KeptRows(dim, capacity, duplicates, (lambda n: f"{path}: record {n}") if fmt == "word2vec-binary"
                        else (lambda n: f"{path}:{n}"))
        wanted = header[0] if header else None
        errors = unicode_errors or ("backslashreplace" if fmt == "word2vec-binary" else "strict")
        words = WordDecoder(errors)
        if fmt == "word2vec-binary":
            read = read_binary_records(source, rows, dim, wanted, limit, keep, words)
        else:
            read = read_text_rows(source, rows, dim, wanted, limit, keep, words)
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
    row_max = MAX_LINE_BYTES // 2 if fmt == "word2vec" else max_read_bytes() // 4
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
