"""THE reader for every command: documents, (source, target) pairs, labelled examples and CoNLL
sentences, from text, TSV/CSV, JSONL fields and parquet/Arrow columns, with one line rule, one format
rule and one error format.

    corpus_format(path, override=None)                  "text" | "jsonl" | "tsv" | "csv" | "parquet" | "arrow"
    iter_documents(inputs, format=None, field="text")   -> str, the documents `nb count-unigrams` counts
    read_documents(inputs, format=None, field="text")   -> list[str] (CorpusError when there are none)
    iter_pairs(inputs, "de", "en")                      -> Pair(source, target, origin)   translation
    iter_examples(inputs, text_field=..., label_field=...) -> Example(text, pair, label, origin)
    iter_conll(inputs)                                  -> Sentence(tokens, tags, origin)  tagging

Rules (docs/corpora.md):

- Format: by the file's name, `--format` (`format=`) overriding it for files that are not parquet or
  Arrow (`corpus_format`); a file whose first bytes are a parquet or Arrow file's is read as one.
- Lines: a line ends at LF or CR LF only; the ending is removed, nothing else is (`text.split_lines`:
  form feed, U+0085, U+2028 and lone CRs stay inside the line). Invalid UTF-8 is replaced by U+FFFD
  and the lines holding it counted in `ReadStats.bad_utf8_lines` (`strict=True`: an error).
- Documents: text, one per line; JSONL, the `field` of each object (blank lines skipped); TSV/CSV,
  the `field` column named by the header row; parquet/Arrow, the `field` column (nulls skipped and
  counted). An empty document is not a document; nothing else is dropped or changed (whitespace-only
  lines are documents, as `nb count-unigrams` counts them).
- Records of the other kinds: a blank line is no record; every other line (row) is one, with empty
  fields as they are. Benchmark inputs are never cleaned.
- TSV: one row per line (the line rule), fields split at TAB with quoting disabled, as GLUE's own
  reader does (MNLI and QQP hold unbalanced quote characters that a quoting reader would join across
  lines). CSV: Python's `csv` module (quotes, quoted line breaks), strict about malformed quoting.
  The first row names the columns (a UTF-8 byte-order mark before it is skipped); every row has as
  many fields as the first.
- Errors: one line, `FILE:LINE: problem` (parquet/Arrow: `FILE: row N: problem`; file-wide problems
  such as a missing column: `FILE: problem`), a `CorpusError`. `skip_bad_lines=True` skips and counts
  (`ReadStats.skipped_lines`) rows without a usable field instead.

Every record carries its `Origin` (`str(origin)` is `FILE:LINE`, or `FILE: row N`), so that a
consumer's own checks (an unknown label, a sentence too long) name the line too.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from nbcli.corpus.columnar import (
    BATCH_TEXT_BYTES, DocumentBatch, columnar_schema, iter_record_batches, iter_rows,
)
from nbcli.corpus.sources import COMPRESSION_SUFFIXES, CorpusSource, corpus_format, discover_inputs
from nbcli.corpus.text import decode_lines, invalid_utf8, read_stream_blocks
from nbcli.errors import CorpusError
from nbcli.jsonsafe import JsonProblem, check_text, jsonl_field, parse
from nbcli.limits import max_line_bytes

__all__ = [
    "Example", "Origin", "Pair", "ReadStats", "Sentence", "aligned_files", "corpus_format", "document_batches",
    "iter_conll", "iter_documents", "iter_examples", "iter_pairs", "jsonl_document", "read_documents",
    "source_documents",
]

Progress = Callable[[int], None]
"""Called with the bytes of each block of a line-based file as it is read."""
Column = Union[str, int]
"""A field: a name (JSONL key, header name, parquet/Arrow column; `a.b`: key or struct child `b` of
`a`) or, for TSV/CSV, a 0-based column number."""
Field = tuple[Column, ...]
"""The names one field may have, tried in order (a pair's source: `translation.de`, then `de`)."""


@dataclass(frozen=True)
class Origin:
    """Where a record comes from: `path` and its 1-based `line` (line-based formats), or its 0-based
    `row` (parquet, Arrow). `str(origin)`: `FILE:LINE` or `FILE: row N`, how errors begin."""

    path: str
    line: int = 0
    row: int = -1

    def __str__(self) -> str:
        return f"{self.path}: row {self.row}" if self.row >= 0 else f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Pair:
    """A translation pair: the source and target sentences as stored."""

    source: str
    target: str
    origin: Origin


Label = Union[str, int, float, None]


@dataclass(frozen=True)
class Example:
    """A classification example: `text`, the optional second text `pair` (NLI, paraphrase), and
    `label` as stored (TSV/CSV cells are str; JSON and parquet/Arrow values keep their type, int,
    float or str; None: no label field asked for, or a null, as in GLUE's unlabelled test splits)."""

    text: str
    pair: str | None
    label: Label
    origin: Origin


@dataclass(frozen=True)
class Sentence:
    """A CoNLL sentence: its tokens and their tags; `origin`: the line of its first token."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    origin: Origin


@dataclass
class ReadStats:
    """What a read replaced or skipped (pass one in to have it filled as records are read)."""

    bad_utf8_lines: int = 0
    skipped_lines: int = 0
    skipped_nulls: int = 0


# ---------------------------------------------------------------------------------------------
# Lines of line-based files (text, JSONL, TSV, CSV; plain, compressed, stdin, remote)


def _line_blocks(source: CorpusSource, strict: bool, stats: ReadStats,
                 progress: Progress | None) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, lines) of each block of a line-based source (the line rule)."""
    for first_line, _offset, block in read_stream_blocks(source):
        if progress is not None:
            progress(len(block))
        lines, bad = decode_lines(block)
        if bad:
            if strict:
                index, byte = bad[0]
                raise invalid_utf8(source.path, first_line + index, byte)
            stats.bad_utf8_lines += len(bad)
        yield first_line, lines


def _lines(source: CorpusSource, strict: bool, stats: ReadStats,
           progress: Progress | None) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line of a line-based source, empty lines included."""
    for first_line, lines in _line_blocks(source, strict, stats, progress):
        for index, line in enumerate(lines):
            yield first_line + index, line


def jsonl_document(line: str, field: str) -> tuple[str | None, str | None]:
    """The document of one JSONL line: (text, None); (None, None) for a blank line (no record);
    (None, why) for a line that is not a JSON object with the string `field`."""
    if not line.strip():
        return None, None
    return jsonl_field(line, field)


# ---------------------------------------------------------------------------------------------
# Documents


BAD_LINE_HINT = " (--skip-bad-lines to skip such lines)"
"""What `nb count-unigrams`' errors for a bad record add (the one command with --skip-bad-lines)."""


def _skip_or_raise(where: str, problem: str, skip_bad_lines: bool, stats: ReadStats, hint: str = "") -> None:
    """A record without a usable field: skipped and counted with `skip_bad_lines`, else an error."""
    if not skip_bad_lines:
        raise CorpusError(f"{where}: {problem}{hint}")
    stats.skipped_lines += 1


def source_documents(source: CorpusSource, field: str = "text", *, strict: bool = False,
                     skip_bad_lines: bool = False, stats: ReadStats | None = None,
                     progress: Progress | None = None, hint: str = "") -> Iterator[str]:
    """The documents of one source (`discover_inputs`), read in its `format` (module doc); `hint`
    ends the error for a bad record."""
    stats = stats if stats is not None else ReadStats()
    if source.columnar:
        for text in iter_rows(source, field):
            if text is None:
                stats.skipped_nulls += 1
            elif text:
                yield text
        return
    if source.format == "text":
        for _first, lines in _line_blocks(source, strict, stats, progress):
            yield from filter(None, lines)
        return
    if source.format == "jsonl":
        for first_line, lines in _line_blocks(source, strict, stats, progress):
            for index, line in enumerate(lines):
                text, problem = jsonl_document(line, field)
                if problem is not None:
                    _skip_or_raise(f"{source.path}:{first_line + index}", problem, skip_bad_lines, stats, hint)
                elif text:
                    yield text
        return
    for _origin, (text,) in _rows(source, [(field,)], True, strict, skip_bad_lines, stats, progress, hint=hint):
        if text is None:
            stats.skipped_nulls += 1
        elif text:
            yield text


def iter_documents(inputs: Sequence[str], format: str | None = None, field: str = "text", *,
                   strict: bool = False, skip_bad_lines: bool = False, stats: ReadStats | None = None,
                   progress: Progress | None = None) -> Iterator[str]:
    """The documents of `inputs` (files, directories, globs, '-', URLs), in order: exactly the
    documents `nb count-unigrams` counts, for every format (module doc). `format` overrides the
    names of files that are not parquet or Arrow; `field`: the JSONL key, TSV/CSV header name or
    parquet/Arrow column holding the text; `strict`: invalid UTF-8 is an error; `stats` is filled
    with what was replaced or skipped; `progress(bytes)` follows line-based files."""
    stats = stats if stats is not None else ReadStats()
    for source in discover_inputs(list(inputs), format):
        yield from source_documents(source, field, strict=strict, skip_bad_lines=skip_bad_lines, stats=stats,
                                    progress=progress)


def read_documents(inputs: Sequence[str], format: str | None = None, field: str = "text",
                   progress: Progress | None = None) -> list[str]:
    """`iter_documents` as a list; CorpusError when there are none."""
    documents = list(iter_documents(inputs, format, field, progress=progress))
    if not documents:
        raise CorpusError(f"{', '.join(inputs)}: no non-empty documents")
    return documents


def document_batches(source: CorpusSource, field: str = "text", *, strict: bool = False,
                     skip_bad_lines: bool = False) -> Iterator[DocumentBatch]:
    """`source_documents` in `DocumentBatch`es of about BATCH_TEXT_BYTES of text (what counting
    counts for formats it does not read on bytes: TSV and CSV); each batch carries the lines
    replaced or skipped since the previous one."""
    stats = ReadStats()
    reported = ReadStats()
    docs: list[str] = []
    size = rows = 0

    def batch() -> DocumentBatch:
        plain = [d for d in docs if "\n" not in d and "\r" not in d]
        broken = [d for d in docs if "\n" in d or "\r" in d] if len(plain) < len(docs) else []
        lines = "".join(d + "\n" for d in plain).encode("utf-8")
        done = DocumentBatch(path=source.path, first_row=rows, lines=lines, line_count=len(plain),
                             documents=broken, nulls=stats.skipped_nulls - reported.skipped_nulls,
                             text_bytes=len(lines) - len(plain) + sum(len(d.encode("utf-8")) for d in broken),
                             bad_utf8_lines=stats.bad_utf8_lines - reported.bad_utf8_lines,
                             skipped_lines=stats.skipped_lines - reported.skipped_lines)
        reported.__dict__.update(stats.__dict__)
        return done

    for text in source_documents(source, field, strict=strict, skip_bad_lines=skip_bad_lines, stats=stats,
                                 hint=BAD_LINE_HINT):
        docs.append(text)
        size += len(text)
        if size >= BATCH_TEXT_BYTES:
            yield batch()
            rows += len(docs)
            docs, size = [], 0
    if docs or stats != reported:
        yield batch()


# ---------------------------------------------------------------------------------------------
# Rows with named fields: TSV, CSV, JSONL, parquet/Arrow



def _csv_rows(path: str, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each CSV record (a quoted field may span lines); blank lines skipped."""
    limit = max_line_bytes()
    if csv.field_size_limit() < limit:
        csv.field_size_limit(limit)  # a document may be one long quoted field (the default is 128 KiB)
    last = [0]

    def feed() -> Iterator[str]:
        for number, line in lines:
            last[0] = number
            yield line + "\n"

    reader = csv.reader(feed(), strict=True)
    while True:
        start = last[0] + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise CorpusError(f"{path}:{last[0]}: malformed CSV row ({err})") from None
        if row:
            yield start, row


def _header_index(path: str, names: list[str], field: Field, header: bool) -> int | None:
    for name in field:
        if isinstance(name, int):
            return name
        if header and name in names:
            if names.count(name) > 1:
                raise CorpusError(f"{path}: column {name!r} appears more than once in the header")
            return names.index(name)
    return None


def _delimited_rows(source: CorpusSource, fields: list[Field], header: bool | None, strict: bool,
                    skip_bad_lines: bool, stats: ReadStats, progress: Progress | None,
                    width: int | None, hint: str) -> Iterator[tuple[Origin, list[Any]]]:
    """TSV/CSV rows. `header`: the first row names the columns (None: when it names every field);
    headerless rows must have `width` fields (default: as many as the first row)."""
    what = source.format.upper()
    lines = _lines(source, strict, stats, progress)
    rows = (_csv_rows(source.path, lines) if source.format == "csv"
            else ((number, line.split("\t")) for number, line in lines if line))
    first = next(rows, None)
    if first is None:
        return
    names = [first[1][0].removeprefix("\ufeff"), *first[1][1:]]
    if header is None:
        header = all(any(isinstance(n, str) and n in names for n in field) for field in fields)
    indices = [_header_index(source.path, names, field, header) for field in fields]
    for field, index in zip(fields, indices):
        if index is None:
            wanted = " or ".join(repr(n) for n in field if isinstance(n, str))
            raise CorpusError(f"{source.path}: no column {wanted} in the header ({', '.join(names[:12])}"
                              f"{' ...' if len(names) > 12 else ''})" if header else
                              f"{source.path}: no header naming column {wanted}; give a column number")
    width = len(names) if header or width is None else width
    body: Iterable[tuple[int, list[str]]] = rows if header else _chain(first, rows)
    for number, row in body:
        if len(row) != width:
            problem = (f"{len(row)} fields, {'the header has' if header else 'expected'} {width} "
                       f"(malformed {what} row{': a TAB inside a field?' if what == 'TSV' else ''})")
            _skip_or_raise(f"{source.path}:{number}", problem, skip_bad_lines, stats, hint)
            continue
        yield Origin(source.path, number), [row[i] for i in indices]  # type: ignore[index]


def _chain(first: tuple[int, list[str]], rest: Iterator[tuple[int, list[str]]]) -> Iterator[tuple[int, list[str]]]:
    yield first
    yield from rest


_MISSING = object()


def _lookup(record: dict[str, Any], name: str) -> Any:
    """`record[name]`, or for a dotted name `a.b` the key `b` of the object `record["a"]`."""
    if name in record:
        return record[name]
    value: Any = record
    for key in name.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _jsonl_rows(source: CorpusSource, fields: list[Field], strict: bool, skip_bad_lines: bool,
                stats: ReadStats, progress: Progress | None, hint: str) -> Iterator[tuple[Origin, list[Any]]]:
    for number, line in _lines(source, strict, stats, progress):
        if not line.strip():
            continue
        where = f"{source.path}:{number}"
        try:
            record = parse(line.removeprefix("\ufeff"), walk=False)
        except JsonProblem as err:
            _skip_or_raise(where, f"not valid JSON ({err})", skip_bad_lines, stats, hint)
            continue
        if not isinstance(record, dict):
            _skip_or_raise(where, "not a JSON object", skip_bad_lines, stats, hint)
            continue
        values, problem = [], None
        for field in fields:
            found = next((v for v in (_lookup(record, str(n)) for n in field) if v is not _MISSING), _MISSING)
            if found is _MISSING:
                problem = f"no field {' or '.join(repr(str(n)) for n in field)}"
                break
            if isinstance(found, str) and (bad := check_text(found)) is not None:
                problem = f"field {str(field[0])!r}: {bad}"
                break
            values.append(found)
        if problem is not None:
            _skip_or_raise(where, problem, skip_bad_lines, stats, hint)
            continue
        yield Origin(source.path, number), values


def _column(path: str, schema: Any, field: Field) -> tuple[str, str | None, Any]:
    """(top-level column, struct child or None, Arrow type) of the first of `field`'s names in
    `schema`; CorpusError listing the columns when none is there."""
    for name in field:
        name = str(name)
        if schema.get_field_index(name) >= 0:
            return name, None, schema.field(name).type
        top, _, child = name.partition(".")
        if child and schema.get_field_index(top) >= 0:
            dtype = schema.field(top).type
            if hasattr(dtype, "get_field_index") and dtype.get_field_index(child) >= 0:
                return top, child, dtype.field(child).type
    columns = ", ".join(f"{f.name} ({f.type})" for f in list(schema)[:8]) + (" ..." if len(schema) > 8 else "")
    wanted = " or ".join(repr(str(n)) for n in field)
    raise CorpusError(f"{path}: no column {wanted}; columns: {columns or 'none'}")


def _columnar_rows(source: CorpusSource, fields: list[Field]) -> Iterator[tuple[Origin, list[Any]]]:
    schema = columnar_schema(source)
    columns = [_column(source.path, schema, field) for field in fields]
    tops = list(dict.fromkeys(top for top, _, _ in columns))
    for first_row, batch in iter_record_batches(source, tops):
        values = []
        for top, child, _ in columns:
            array = batch.column(tops.index(top))
            if child is not None:
                array = array.field(child)
            values.append(array.to_pylist())
        for offset, row in enumerate(zip(*values)):
            yield Origin(source.path, row=first_row + offset), list(row)


def _rows(source: CorpusSource, fields: list[Field], header: bool | None, strict: bool, skip_bad_lines: bool,
          stats: ReadStats, progress: Progress | None, width: int | None = None,
          hint: str = "") -> Iterator[tuple[Origin, list[Any]]]:
    """(origin, the values of `fields`) of each record of a TSV, CSV, JSONL, parquet or Arrow source."""
    if source.columnar:
        return _columnar_rows(source, fields)
    if source.format in ("tsv", "csv"):
        return _delimited_rows(source, fields, header, strict, skip_bad_lines, stats, progress, width, hint)
    if source.format == "jsonl":
        return _jsonl_rows(source, fields, strict, skip_bad_lines, stats, progress, hint)
    raise CorpusError(f"{source.path}: plain text has no fields; give a .tsv, .csv, .jsonl, parquet or Arrow "
                      "file (or --format)")


def _text(origin: Origin, name: Column, value: Any) -> str:
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise CorpusError(f"{origin}: field {str(name)!r} is {kind}, not a string")
    return value


# ---------------------------------------------------------------------------------------------
# Translation pairs


def aligned_files(prefix: str, source_lang: str, target_lang: str) -> tuple[str, str] | None:
    """(PREFIX.src, PREFIX.tgt) when `prefix` names aligned plain files (each optionally compressed:
    `PREFIX.de.gz`), else None. CorpusError when only one side, or two copies of a side, exist."""
    found = []
    for lang in (source_lang, target_lang):
        names = [f"{prefix}.{lang}{suffix}" for suffix in ("", *COMPRESSION_SUFFIXES)]
        present = [name for name in names if Path(name).is_file()]
        if len(present) > 1:
            raise CorpusError(f"{prefix}: both {present[0]} and {present[1]} exist; keep one")
        found.append(present[0] if present else None)
    if found == [None, None]:
        return None
    if None in found:
        have, lang = (found[0], target_lang) if found[0] else (found[1], source_lang)
        raise CorpusError(f"{prefix}: {have} has no aligned {prefix}.{lang}")
    return found[0], found[1]  # type: ignore[return-value]


def _aligned_pairs(source_path: str, target_path: str, strict: bool, stats: ReadStats,
                   progress: Progress | None) -> Iterator[Pair]:
    source, target = discover_inputs([source_path], "text")[0], discover_inputs([target_path], "text")[0]
    left, right = _lines(source, strict, stats, progress), _lines(target, strict, stats, progress)
    for number, src in left:
        tgt = next(right, None)
        if tgt is None:
            raise CorpusError(f"{source_path}:{number}: {target_path} has only {number - 1} lines (aligned files "
                              "must have as many lines)")
        if src or tgt[1]:  # a blank line on both sides is no record
            yield Pair(src, tgt[1], Origin(source_path, number))
    extra = next(right, None)
    if extra is not None:
        raise CorpusError(f"{target_path}:{extra[0]}: {source_path} has only {extra[0] - 1} lines (aligned files "
                          "must have as many lines)")


def iter_pairs(inputs: Sequence[str], source_lang: str, target_lang: str, *, format: str | None = None,
               source_field: str | None = None, target_field: str | None = None, header: bool | None = None,
               strict: bool = False, stats: ReadStats | None = None, progress: Progress | None = None) -> Iterator[Pair]:
    """Translation pairs of `inputs`, in order. Each input is one of:

    - a PREFIX of aligned plain files `PREFIX.{source_lang}` and `PREFIX.{target_lang}` (Moses /
      fairseq layout; each may be compressed): line i of one is the translation of line i of the
      other; a line blank on both sides is no pair; the files must have as many lines;
    - `.tsv` / `.csv`: `source TAB target` per line, or, when the first row names the columns
      (`source_field`/`target_field`, default the language codes), those columns;
    - `.jsonl`: `{"translation": {"de": ..., "en": ...}}` (the Hugging Face WMT/IWSLT schema) or one
      key per language (`{"de": ..., "en": ...}`); `source_field`/`target_field` name others
      (`a.b`: key `b` of object `a`);
    - parquet / Arrow (files, `datasets` folders): a `translation` struct column with one child per
      language, or one string column per language.

    Files, directories and globs are expanded as for documents; `format` overrides file names."""
    stats = stats if stats is not None else ReadStats()
    src_names: Field = (source_field,) if source_field else (f"translation.{source_lang}", source_lang)
    tgt_names: Field = (target_field,) if target_field else (f"translation.{target_lang}", target_lang)
    for item in inputs:
        aligned = aligned_files(item, source_lang, target_lang) if not Path(item).exists() else None
        if aligned is not None:
            yield from _aligned_pairs(*aligned, strict, stats, progress)
            continue
        for source in discover_inputs([item], format):
            delimited = source.format in ("tsv", "csv")
            fields = [(*src_names, 0), (*tgt_names, 1)] if delimited else [src_names, tgt_names]
            if source.format == "text":
                raise CorpusError(f"{source.path}: plain text holds no pairs; give the PREFIX of aligned files "
                                  f"PREFIX.{source_lang} and PREFIX.{target_lang}, or a .tsv, .csv, .jsonl, parquet "
                                  "or Arrow file")
            for origin, (src, tgt) in _rows(source, fields, header, strict, False, stats, progress, width=2):
                yield Pair(_text(origin, src_names[0], src), _text(origin, tgt_names[0], tgt), origin)


# ---------------------------------------------------------------------------------------------
# Classification examples


def _label(origin: Origin, name: Column, value: Any) -> Label:
    if value is None or isinstance(value, (str, float)) or (isinstance(value, int) and not isinstance(value, bool)):
        return value  # type: ignore[no-any-return]
    raise CorpusError(f"{origin}: label {str(name)!r} is {type(value).__name__}, not a string or a number")


def iter_examples(inputs: Sequence[str], *, text_field: Column = "text", pair_field: Column | None = None,
                  label_field: Column | None = "label", format: str | None = None, header: bool = True,
                  strict: bool = False, stats: ReadStats | None = None,
                  progress: Progress | None = None) -> Iterator[Example]:
    """Classification examples of `inputs` (TSV with a header as GLUE ships them, CSV, JSONL,
    parquet/Arrow as the Hugging Face `glue` dataset), in order: `text_field`, the optional second
    text `pair_field` (MNLI's sentence2, QQP's question2), and `label_field` (None: no label). With
    `header=False` a TSV/CSV has no header row and fields are 0-based column numbers (CoLA's
    in_domain_train.tsv: text_field=3, label_field=1). A text that is not a string is an error naming
    the line; labels are returned as stored (`Example`)."""
    stats = stats if stats is not None else ReadStats()
    fields: list[Field] = [(text_field,)] + ([(pair_field,)] if pair_field is not None else []) + \
        ([(label_field,)] if label_field is not None else [])
    for source in discover_inputs(list(inputs), format):
        for origin, values in _rows(source, fields, header, strict, False, stats, progress):
            text = _text(origin, text_field, values[0])
            pair = _text(origin, pair_field, values[1]) if pair_field is not None else None
            label = _label(origin, label_field, values[-1]) if label_field is not None else None
            yield Example(text, pair, label, origin)


# ---------------------------------------------------------------------------------------------
# CoNLL sentences

_COLUMNS = re.compile(r"[ \t]+")


def iter_conll(inputs: Sequence[str], *, token_column: int = 0, tag_column: int = -1, docstart: bool = True,
               strict: bool = False, stats: ReadStats | None = None,
               progress: Progress | None = None) -> Iterator[Sentence]:
    """CoNLL sentences of `inputs` (CoNLL-2003, WNUT, CoNLL-U-like files; any name, read as lines):
    one token a line, columns separated by runs of spaces or TABs, `token_column` and `tag_column`
    (0-based; negative counts from the end) taken; a blank line (or one of spaces and TABs) ends a
    sentence; `-DOCSTART-` lines are skipped (`docstart=False`: kept as tokens). A line without the
    columns is an error naming FILE:LINE."""
    stats = stats if stats is not None else ReadStats()
    for source in discover_inputs(list(inputs), "text"):
        if source.columnar:
            raise CorpusError(f"{source.path}: CoNLL sentences are read from text files, not parquet or Arrow")
        tokens: list[str] = []
        tags: list[str] = []
        start = 0
        for number, line in _lines(source, strict, stats, progress):
            columns = _COLUMNS.split(line.strip(" \t"))
            if columns == [""]:
                if tokens:
                    yield Sentence(tuple(tokens), tuple(tags), Origin(source.path, start))
                tokens, tags = [], []
                continue
            if docstart and columns[0] == "-DOCSTART-":
                continue
            width = len(columns)
            if not (-width <= token_column < width and -width <= tag_column < width):
                raise CorpusError(f"{source.path}:{number}: {width} column(s), no column {token_column} and "
                                  f"{tag_column} (token and tag)")
            if not tokens:
                start = number
            tokens.append(columns[token_column])
            tags.append(columns[tag_column])
        if tokens:
            yield Sentence(tuple(tokens), tuple(tags), Origin(source.path, start))

