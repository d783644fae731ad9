"""Columnar corpora as counting's documents: parquet row groups and Arrow record batches (IPC files
and streams, as `datasets` save_to_disk writes them), one string column (--field) at a time: the
units of work (`plan_columnar`, in the parent) and their reading (`read_unit`, in a worker). The files
themselves (pyarrow, magic bytes, schemas, several columns at once) are `nbcli.corpus.columnar_files`.

One row is one document. The unit of parallel work is a `RowUnit`: one parquet row group (where a
file has few row groups for the workers, and for its last row groups, a group of more than
UNIT_BYTES of text is shared by several units, each counting a slice of its rows while decoding the
pages before it: `_parts_of_groups`), or a run of Arrow record batches of about UNIT_BYTES. A worker reads its unit in batches of about
BATCH_TEXT_BYTES of text and hands counting `DocumentBatch`es: documents, never file formats.
Peak memory per worker is about one batch of text plus what pyarrow holds to decode one column
chunk page by page (parquet files are opened unbuffered-by-row-group: `pre_buffer=False`).

Every failure is a CorpusError naming the file (and row group or rows): a file that is not parquet
or Arrow (bad magic, bad footer, truncated), a missing or non-string column, invalid UTF-8, shards of
one INPUT whose schemas differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcli.corpus.columnar_files import (
    READ_BUFFER_BYTES, arrow_kind, check_field, check_parquet_magic, open_columnar, problem_text, pyarrow_module,
)
from nbcli.corpus.sources import CorpusSource
from nbcli.errors import CorpusError, InputError

UNIT_BYTES = 32 << 20  # a unit of work holds about this much data (text, or Arrow batches)
BATCH_TEXT_BYTES = 4 << 20  # a worker reads this much text at a time


@dataclass(frozen=True)
class RowUnit:
    """Rows of one file a worker reads itself: parquet row groups or Arrow record batches
    [start, stop), whose first row is `first_row` (0-based)."""

    path: str
    kind: str  # "parquet", "arrow-file" or "arrow-stream"
    field: str
    start: int
    stop: int
    first_row: int
    remote: bool = False
    progress_bytes: int = 0
    rows: tuple[int, int] | None = None  # parquet: only rows [a, b) of the row group (None: all)


@dataclass
class DocumentBatch:
    """Documents of consecutive rows: `lines` holds the non-empty documents without a line break
    (LF or CR) as UTF-8, each ending in LF; `documents` the others. Nulls are counted, not held;
    empty documents are dropped (as empty JSONL fields are)."""

    path: str
    first_row: int
    lines: bytes
    line_count: int
    documents: list[str]
    nulls: int
    text_bytes: int
    bad_utf8_lines: int = 0  # lines of the file replaced (U+FFFD) and rows skipped while reading these
    skipped_lines: int = 0   # documents (TSV/CSV: `nbcli.corpus.records.document_batches`)


# ---------------------------------------------------------------------------------------------
# Planning (in the parent process): footers and schemas, no data


def _parts_of_groups(texts: list[int], workers: int | None) -> list[int]:
    """How many units share each row group (text bytes `texts`).

    A unit that starts inside a row group decodes the pages before its slice, so sharing a group
    among P units decodes it (P + 1) / 2 times. With the workers known, a group is shared at most
    `workers` ways: P = workers already spreads one group over every worker, and a larger P decodes
    more without finishing sooner. With enough row groups for the workers (at least 3 per worker)
    groups stay whole and only the last `workers` are shared, so the work left at the end is in
    small pieces; with fewer, every group of more than UNIT_BYTES of text is. When the workers are
    not known (Dask), every such group is shared, in slices of about UNIT_BYTES."""
    split_all = [max(1, -(-text // UNIT_BYTES)) for text in texts]
    if workers is None:
        return split_all
    capped = [min(workers, parts) for parts in split_all]
    if len(texts) < 3 * workers:
        return capped
    tail = len(texts) - workers
    return [1 if i < tail else parts for i, parts in enumerate(capped)]


def _parquet_units(source: CorpusSource, field: str, workers: int | None) -> tuple[Any, list[RowUnit]]:
    pa = pyarrow_module()
    check_parquet_magic(source)
    try:
        meta = pa.parquet.ParquetFile(open_columnar(source.path, source.remote)).metadata
        schema = meta.schema.to_arrow_schema()
    except InputError:
        raise
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorpusError(f"{source.path}: not a readable parquet file ({problem_text(err)})") from None
    check_field(source.path, schema, field)
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    texts = [_column_bytes(group, field) for group in groups]
    total = max(1, sum(texts))
    units, row, done, shown = [], 0, 0, 0
    for i, (group, text, wanted) in enumerate(zip(groups, texts, _parts_of_groups(texts, workers))):
        parts = max(1, min(group.num_rows, wanted))
        for k in range(parts):
            lo, hi = group.num_rows * k // parts, group.num_rows * (k + 1) // parts
            done += text * (k + 1) // parts - text * k // parts
            progress = source.size * done // total - shown
            shown += progress
            units.append(RowUnit(source.path, "parquet", field, i, i + 1, row + lo, source.remote, progress,
                                 (lo, hi) if parts > 1 else None))
        row += group.num_rows
    return schema, units


def _column_bytes(group: Any, field: str) -> int:
    """Uncompressed bytes of column `field` in a parquet row group's metadata."""
    return sum(group.column(i).total_uncompressed_size for i in range(group.num_columns)
               if group.column(i).path_in_schema.split(".")[0] == field) or group.total_byte_size


def _arrow_units(source: CorpusSource, field: str) -> tuple[Any, list[RowUnit]]:
    """Arrow IPC files have random access to their batches; streams (what `datasets` writes) are
    scanned once here (memory-mapped: no data is copied) to cut them into units. A remote stream
    is one unit."""
    pa = pyarrow_module()
    kind = arrow_kind(source)
    try:
        handle = open_columnar(source.path, source.remote)
        if kind == "arrow-file":
            reader = pa.ipc.open_file(handle)
            schema = reader.schema
            check_field(source.path, schema, field)
            if source.remote:
                sizes = [(1, 0)] * reader.num_record_batches  # one unit per batch: no data read now
                rows_of = [-1] * reader.num_record_batches
            else:
                batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
                sizes = [(b.nbytes, b.num_rows) for b in batches]
                rows_of = [b.num_rows for b in batches]
        else:
            reader = pa.ipc.open_stream(handle)
            schema = reader.schema
            check_field(source.path, schema, field)
            if source.remote:
                return schema, [RowUnit(source.path, kind, field, 0, -1, 0, True, source.size)]
            sizes = [(b.nbytes, b.num_rows) for b in reader]
            rows_of = [n for _, n in sizes]
    except (InputError, CorpusError):
        raise
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorpusError(f"{source.path}: not a readable Arrow file ({problem_text(err)})") from None
    groups: list[tuple[int, int]] = []
    start, held = 0, 0
    for i, (nbytes, _) in enumerate(sizes):
        held += nbytes
        if held >= UNIT_BYTES or source.remote or i == len(sizes) - 1:
            groups.append((start, i + 1))
            start, held = i + 1, 0
    units, row, shown = [], 0, 0
    for n, (lo, hi) in enumerate(groups):
        progress = source.size * (n + 1) // len(groups) - shown
        shown += progress
        units.append(RowUnit(source.path, kind, field, lo, hi, row, source.remote, progress))
        row += sum(rows_of[lo:hi]) if rows_of[0:1] != [-1] else 0
    return schema, units


def _schema_difference(a: Any, b: Any) -> str:
    for f in a:
        i = b.get_field_index(f.name)
        if i < 0:
            return f"column {f.name!r} is missing here"
        if not b.field(i).type.equals(f.type):
            return f"column {f.name!r} is {b.field(i).type} here, {f.type} there"
    extra = [f.name for f in b if a.get_field_index(f.name) < 0]
    return f"column {extra[0]!r} is new here" if extra else "columns are in another order"


def plan_columnar(sources: list[CorpusSource], field: str, workers: int | None = None) -> dict[str, list[RowUnit]]:
    """Each columnar source's units, checking every footer and schema before any work: `field` must
    be a string column in each, and the files of one INPUT argument (a glob, a folder) must share
    one schema (a shard that differs is a different dataset, or a broken export). `workers`: how
    many processes will share the units (None: unknown, every large row group is shared)."""
    plans: dict[str, list[RowUnit]] = {}
    first: dict[str, tuple[str, Any]] = {}
    for source in sources:
        if not source.columnar:
            continue
        schema, units = (_parquet_units(source, field, workers) if source.kind == "parquet"
                         else _arrow_units(source, field))
        plain = schema.remove_metadata()
        if source.origin in first:
            other, expected = first[source.origin]
            if not plain.equals(expected):
                raise CorpusError(f"{source.path}: schema differs from {other}, another file of the input "
                                  f"{source.origin!r} ({_schema_difference(expected, plain)}); give files of "
                                  "different schemas as separate inputs")
        else:
            first[source.origin] = (source.path, plain)
        plans[source.path] = units
    return plans


# ---------------------------------------------------------------------------------------------
# Reading (in a worker): one unit -> document batches


def read_unit(unit: RowUnit) -> Iterator[DocumentBatch]:
    """The document batches of one unit, in row order. CorpusError naming the file and rows when
    the data cannot be decoded."""
    pa = pyarrow_module()
    row = unit.first_row
    where = f"{unit.path}: row group {unit.start}" if unit.kind == "parquet" else f"{unit.path}: rows from {row}"
    try:
        for column in _columns(pa, unit):
            for piece in _pieces(column):
                yield _document_batch(pa, unit.path, row, piece, where)
                row += len(piece)
    except (InputError, CorpusError):
        raise
    except (pa.ArrowException, OSError, ValueError, EOFError) as err:
        raise CorpusError(f"{where}: corrupt data ({problem_text(err)})") from None


def _columns(pa: Any, unit: RowUnit) -> Iterator[Any]:
    handle = open_columnar(unit.path, unit.remote)
    if unit.kind == "parquet":
        pf = pa.parquet.ParquetFile(handle, pre_buffer=False, buffer_size=READ_BUFFER_BYTES,
                                    page_checksum_verification=True)
        meta = pf.metadata.row_group(unit.start)
        rows = max(64, min(1 << 16, BATCH_TEXT_BYTES * max(1, meta.num_rows) // max(1, _column_bytes(meta, unit.field))))
        lo, hi = unit.rows if unit.rows is not None else (0, meta.num_rows)
        position = 0
        for batch in pf.iter_batches(batch_size=rows, row_groups=list(range(unit.start, unit.stop)),
                                     columns=[unit.field], use_threads=False):
            start, position = position, position + batch.num_rows
            if position > lo:
                yield batch.column(0).slice(max(0, lo - start), hi - max(lo, start))
            if position >= hi:
                break
    elif unit.kind == "arrow-file":
        reader = pa.ipc.open_file(handle)
        index = reader.schema.get_field_index(unit.field)
        for i in range(unit.start, unit.stop):
            yield reader.get_batch(i).column(index)
    else:
        reader = pa.ipc.open_stream(handle)
        index = reader.schema.get_field_index(unit.field)
        for i, batch in enumerate(reader):
            if unit.stop >= 0 and i >= unit.stop:
                break
            if i >= unit.start:
                yield batch.column(index)


def _pieces(column: Any) -> Iterator[Any]:
    """`column` in slices of about BATCH_TEXT_BYTES (Arrow batches can be large)."""
    n = len(column)
    rows = max(64, int(BATCH_TEXT_BYTES * n // max(1, column.nbytes))) if n else 1
    for start in range(0, n, rows):
        yield column.slice(start, rows)


def _document_batch(pa: Any, path: str, first_row: int, column: Any, where: str) -> DocumentBatch:
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = column.cast(pa.large_string())  # string_view
    try:
        column.validate(full=True)
    except pa.ArrowInvalid as err:
        raise CorpusError(f"{path}: rows {first_row}-{first_row + len(column) - 1}: column holds invalid "
                          f"string data ({problem_text(err)})") from None
    n = len(column)
    _validity, offsets_buffer, data_buffer = column.buffers()
    wide = pa.types.is_large_string(column.type)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32, count=n + 1,
                            offset=column.offset * (8 if wide else 4)).astype(np.int64)
    lengths = np.diff(offsets)
    valid = np.ones(n, dtype=bool) if column.null_count == 0 else _validity_mask(_validity, column.offset, n)
    keep = valid & (lengths > 0)
    base = int(offsets[0]) if n else 0
    data = np.frombuffer(data_buffer, dtype=np.uint8)[base:int(offsets[-1])] if n and data_buffer is not None \
        else np.zeros(0, dtype=np.uint8)
    breaks = np.flatnonzero(data < 14)  # one pass; few bytes below 14 are not LF or CR
    breaks = breaks[(data[breaks] == 10) | (data[breaks] == 13)]
    documents: list[str] = []
    if breaks.size:
        broken = np.zeros(n, dtype=bool)
        broken[np.searchsorted(offsets, breaks + base, side="right") - 1] = True
        broken &= keep
        documents = column.take(_arrow_array(pa, pa.int64(), np.flatnonzero(broken).astype(np.int64))).to_pylist()
        keep_lines = keep & ~broken
    else:
        keep_lines = keep
    line_count = int(np.count_nonzero(keep_lines))
    lines = _joined_lines(pa, column if line_count == n else
                          column.filter(_arrow_array(pa, pa.bool_(), np.packbits(keep_lines, bitorder="little"), n)))
    return DocumentBatch(path=path, first_row=first_row, lines=lines, line_count=line_count,
                         documents=documents, nulls=int(n - np.count_nonzero(valid)),
                         text_bytes=int(lengths[keep].sum()))


# A worker builds its Arrow arrays from numpy buffers (`Array.from_buffers`): pa.array, pa.scalar and
# BooleanArray.to_numpy import pandas where it is installed, ~0.45 s in every worker (issue 44: that
# was most of parquet's lag behind the same text with 2 workers).


def _arrow_array(pa: Any, type_: Any, values: np.ndarray, length: int | None = None) -> Any:
    """A null-free Arrow array of `type_` over a numpy buffer (bit-packed for booleans: pass `length`)."""
    return pa.Array.from_buffers(type_, len(values) if length is None else length, [None, pa.py_buffer(values)])


def _validity_mask(bitmap: Any, offset: int, n: int) -> np.ndarray:
    """Arrow's validity bitmap (LSB first) of rows [offset, offset + n) as booleans (only the bytes
    holding them are unpacked: a slice of a large batch shares its whole bitmap)."""
    first, last = offset // 8, (offset + n + 7) // 8
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8)[first:last], bitorder="little")
    return bits[offset - 8 * first:offset - 8 * first + n].astype(bool)


def _joined_lines(pa: Any, column: Any) -> bytes:
    """The strings of `column` (no nulls), each followed by a newline, as one bytes object: what
    counting reads as text lines. Arrow appends the newlines in one pass (`binary_join_element_wise`
    with an empty separator): 2.7 ms per 4 MB batch, numpy's insert 11 ms."""
    if len(column) == 0:
        return b""
    bounds = np.array([0, 1, 1], np.int64 if pa.types.is_large_string(column.type) else np.int32)
    separators = pa.Array.from_buffers(column.type, 2, [None, pa.py_buffer(bounds), pa.py_buffer(b"\n")])
    newline, nothing = separators[0], separators[1]  # "\n" and ""
    joined = pa.compute.binary_join_element_wise(column, newline, nothing)
    wide = pa.types.is_large_string(joined.type) or pa.types.is_large_binary(joined.type)
    _validity, offsets_buffer, data_buffer = joined.buffers()
    bounds = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32, count=len(joined) + 1,
                           offset=joined.offset * (8 if wide else 4))
    start, stop = int(bounds[0]), int(bounds[-1])
    return data_buffer.slice(start, stop - start).to_pybytes()


def iter_rows(source: CorpusSource, field: str) -> Iterator[str | None]:
    """Every row's document (None for a null) of a columnar source, in order (`nbcli.corpus.records`)."""
    for unit in plan_columnar([source], field)[source.path]:
        pa = pyarrow_module()
        try:
            for column in _columns(pa, unit):
                if pa.types.is_dictionary(column.type):
                    column = column.dictionary_decode()
                yield from column.to_pylist()
        except (pa.ArrowException, OSError, ValueError, EOFError) as err:
            raise CorpusError(f"{unit.path}: corrupt data ({problem_text(err)})") from None
