"""Records with named fields, for `nbcli.corpus.records`: the lines of line-based files (the line
rule of `text.split_lines`, invalid UTF-8 replaced and counted), and rows of TSV, CSV, JSONL and
parquet/Arrow files as the values of the fields asked for, each with its `Origin` (FILE:LINE or
FILE: row N). The rules are stated in records.py's docstring and docs/corpora.md.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Union

from nbcli.corpus.columnar_files import columnar_schema, iter_record_batches
from nbcli.corpus.sources import CorpusSource
from nbcli.corpus.text import decode_lines, invalid_utf8, read_stream_blocks
from nbcli.errors import CorpusError
from nbcli.jsonsafe import JsonProblem, check_text, parse
from nbcli.limits import max_line_bytes

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


@dataclass
class ReadStats:
    """What a read replaced or skipped (pass one in to have it filled as records are read)."""

    bad_utf8_lines: int = 0
    skipped_lines: int = 0
    skipped_nulls: int = 0
    skipped_empty: int = 0     # token-classification records with no tokens (no sentence)

    def add(self, other: ReadStats) -> None:
        """Count what another read replaced or skipped into this one."""
        self.bad_utf8_lines += other.bad_utf8_lines
        self.skipped_lines += other.skipped_lines
        self.skipped_nulls += other.skipped_nulls
        self.skipped_empty += other.skipped_empty

    def notes(self, where: str) -> list[str]:
        """The report's warnings for what the read of `where` changed: the one phrasing every command
        uses (nothing is replaced or skipped silently)."""
        notes = []
        if self.bad_utf8_lines:
            notes.append(f"{where}: {self.bad_utf8_lines} line(s) held invalid UTF-8 (replaced by U+FFFD)")
        if self.skipped_lines:
            notes.append(f"{where}: {self.skipped_lines} malformed line(s) skipped")
        if self.skipped_nulls:
            notes.append(f"{where}: {self.skipped_nulls} null record(s) skipped")
        if self.skipped_empty:
            notes.append(f"{where}: {self.skipped_empty} record(s) with no tokens skipped (no sentence to tag)")
        return notes


# ---------------------------------------------------------------------------------------------
# Lines of line-based files (text, JSONL, TSV, CSV; plain, compressed, stdin, remote)


def line_blocks(source: CorpusSource, strict: bool, stats: ReadStats,
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


def numbered_lines(source: CorpusSource, strict: bool, stats: ReadStats,
                   progress: Progress | None) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line of a line-based source, empty lines included."""
    for first_line, lines in line_blocks(source, strict, stats, progress):
        for index, line in enumerate(lines):
            yield first_line + index, line


BAD_LINE_HINT = " (--skip-bad-lines to skip such lines)"
"""What `nb count-unigrams`' errors for a bad record add (the one command with --skip-bad-lines)."""


def skip_or_raise(where: str, problem: str, skip_bad_lines: bool, stats: ReadStats, hint: str = "") -> None:
    """A record without a usable field: skipped and counted with `skip_bad_lines`, else an error."""
    if not skip_bad_lines:
        raise CorpusError(f"{where}: {problem}{hint}")
    stats.skipped_lines += 1


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
    lines = numbered_lines(source, strict, stats, progress)
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
    for field, index in zip(fields, indices):
        if not -width <= index < width:  # type: ignore[operator]
            raise CorpusError(f"{source.path}: no column {index} ({field[0]!r}): rows have {width} fields")
    body: Iterable[tuple[int, list[str]]] = rows if header else itertools.chain([first], rows)
    for number, row in body:
        if len(row) != width:
            problem = (f"{len(row)} fields, {'the header has' if header else 'expected'} {width} "
                       f"(malformed {what} row{': a TAB inside a field?' if what == 'TSV' else ''})")
            skip_or_raise(f"{source.path}:{number}", problem, skip_bad_lines, stats, hint)
            continue
        yield Origin(source.path, number), [row[i] for i in indices]  # type: ignore[index]


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
    for number, line in numbered_lines(source, strict, stats, progress):
        if not line.strip():
            continue
        where = f"{source.path}:{number}"
        try:
            record = parse(line.removeprefix("\ufeff"), walk=False)
        except JsonProblem as err:
            skip_or_raise(where, f"not valid JSON ({err})", skip_bad_lines, stats, hint)
            continue
        if not isinstance(record, dict):
            skip_or_raise(where, "not a JSON object", skip_bad_lines, stats, hint)
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
            skip_or_raise(where, problem, skip_bad_lines, stats, hint)
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


def field_rows(source: CorpusSource, fields: list[Field], header: bool | None, strict: bool, skip_bad_lines: bool,
               stats: ReadStats, progress: Progress | None, width: int | None = None,
               hint: str = "") -> Iterator[tuple[Origin, list[Any]]]:
    """(origin, the values of `fields`) of each record of a TSV, CSV, JSONL, parquet or Arrow source.
    TSV/CSV: `header` says whether the first row names the columns (None: when it names a name of
    every field), `width` how many fields a headerless row has (default: the first row's); a
    missing field or a row of another width is an error (`skip_bad_lines`: skipped, counted in
    `stats`; `hint` ends the error). Values are as stored (JSON/Arrow types; None for a null)."""
    if source.columnar:
        return _columnar_rows(source, fields)
    if source.format in ("tsv", "csv"):
        return _delimited_rows(source, fields, header, strict, skip_bad_lines, stats, progress, width, hint)
    if source.format == "jsonl":
        return _jsonl_rows(source, fields, strict, skip_bad_lines, stats, progress, hint)
    raise CorpusError(f"{source.path}: plain text has no fields; give a .tsv, .csv, .jsonl, parquet or Arrow "
                      "file (the format is read from the file's name)")
