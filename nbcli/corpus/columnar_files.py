"""Parquet and Arrow files through pyarrow: importing it (`load_columnar_reader`), opening a file
(memory-mapped, or remote through fsspec), what a file is (its magic bytes), its schema, the check of
a string column (`check_field`), and the record batches of several columns at once
(`iter_record_batches`: `nbcli.corpus.rows`' pairs and labelled examples). One string column read as
counting's documents is `nbcli.corpus.columnar`.

Every failure is a CorpusError (or an InputError) naming the file: not parquet or Arrow (bad magic,
bad footer, truncated), a missing or non-string column, invalid UTF-8 in a batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nbcli.corpus.sources import CorpusSource
from nbcli.errors import CorpusError, InputError

READ_BUFFER_BYTES = 1 << 20  # parquet column chunks are streamed through a buffer of this size
ARROW_FILE_MAGIC = b"ARROW1"
PARQUET_MAGIC = b"PAR1"
RECORD_BATCH_ROWS = 4096  # rows per record batch of several columns (`iter_record_batches`)


def load_columnar_reader() -> None:
    """Import pyarrow now (it starts no thread on import): a parent that forks workers calls this
    first, so that they inherit it."""
    pyarrow_module()


def pyarrow_module() -> Any:
    """pyarrow with the submodules nb uses (compute, ipc, parquet); InputError naming the extra when it
    is not installed."""
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise InputError("reading parquet or Arrow needs pyarrow: pip install pyarrow") from None
    return pyarrow


def problem_text(err: BaseException) -> str:
    """An exception's message on one line, at most 300 characters (what an error message quotes)."""
    return " ".join(str(err).split())[:300] or type(err).__name__


def open_columnar(path: str, remote: bool) -> Any:
    """A pyarrow file of `path`: memory-mapped, or a remote (fsspec) file."""
    pa = pyarrow_module()
    if remote:
        from nbcli.corpus.remote import open_remote

        return pa.PythonFile(open_remote(path), mode="r")
    try:
        return pa.memory_map(path, "r")
    except OSError as err:
        raise InputError(f"{path}: cannot read input: {problem_text(err)}") from None


def head_bytes(source: CorpusSource, size: int) -> bytes:
    """The first `size` bytes of a source (its magic)."""
    handle = open_columnar(source.path, source.remote)
    try:
        return bytes(handle.read(size))
    finally:
        handle.close()


def check_parquet_magic(source: CorpusSource) -> None:
    """CorpusError naming the file when it does not start as parquet does (pyarrow checks only the
    footer's magic)."""
    head = head_bytes(source, len(PARQUET_MAGIC))
    if head and head != PARQUET_MAGIC:
        raise CorpusError(f"{source.path}: not a parquet file (it starts with {head!r}, not {PARQUET_MAGIC!r})")


def arrow_kind(source: CorpusSource) -> str:
    """The Arrow IPC format of a source: "arrow-file" (random access to its batches) or "arrow-stream"."""
    return "arrow-file" if head_bytes(source, len(ARROW_FILE_MAGIC)) == ARROW_FILE_MAGIC else "arrow-stream"


def _is_string(pa: Any, dtype: Any) -> bool:
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    is_view = getattr(pa.types, "is_string_view", lambda t: False)
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or is_view(dtype))


def check_field(path: str, schema: Any, field: str) -> int:
    """The index of the string column `field` in `schema`; CorpusError naming the file, the column
    and its type otherwise."""
    pa = pyarrow_module()
    index = schema.get_field_index(field)
    if index < 0:
        if schema.get_all_field_indices(field):
            raise CorpusError(f"{path}: column {field!r} appears more than once")
        columns = ", ".join(f"{f.name} ({f.type})" for f in list(schema)[:8]) + (" ..." if len(schema) > 8 else "")
        raise CorpusError(f"{path}: no column {field!r} (--field); columns: {columns or 'none'}")
    dtype = schema.field(index).type
    if not _is_string(pa, dtype):
        raise CorpusError(f"{path}: column {field!r} is {dtype}, not a string column (--field)")
    return int(index)


def columnar_schema(source: CorpusSource) -> Any:
    """The Arrow schema of a parquet or Arrow source; CorpusError naming the file when it is not one."""
    pa = pyarrow_module()
    what = "parquet" if source.kind == "parquet" else "Arrow"
    if source.kind == "parquet":
        check_parquet_magic(source)
    try:
        handle = open_columnar(source.path, source.remote)
        if source.kind == "parquet":
            return pa.parquet.ParquetFile(handle).schema_arrow
        if arrow_kind(source) == "arrow-file":
            return pa.ipc.open_file(handle).schema
        return pa.ipc.open_stream(handle).schema
    except (InputError, CorpusError):
        raise
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorpusError(f"{source.path}: not a readable {what} file ({problem_text(err)})") from None


def iter_record_batches(source: CorpusSource, columns: list[str]) -> Iterator[tuple[int, Any]]:
    """(first row, record batch of the top-level `columns`) of a parquet or Arrow source, in row
    order, each batch validated (invalid UTF-8 is a CorpusError naming the file and rows). Only
    those columns are read from disk (parquet's column projection)."""
    pa = pyarrow_module()
    row = 0
    try:
        handle = open_columnar(source.path, source.remote)
        if source.kind == "parquet":
            pf = pa.parquet.ParquetFile(handle, pre_buffer=False, buffer_size=READ_BUFFER_BYTES,
                                        page_checksum_verification=True)
            batches = pf.iter_batches(batch_size=RECORD_BATCH_ROWS, columns=columns, use_threads=False)
        elif arrow_kind(source) == "arrow-file":
            reader = pa.ipc.open_file(handle)
            batches = (reader.get_batch(i).select(columns) for i in range(reader.num_record_batches))
        else:
            batches = (batch.select(columns) for batch in pa.ipc.open_stream(handle))
        for batch in batches:
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid as err:
                raise CorpusError(f"{source.path}: rows {row}-{row + batch.num_rows - 1}: invalid data "
                                  f"({problem_text(err)})") from None
            yield row, batch
            row += batch.num_rows
    except (InputError, CorpusError):
        raise
    except (pa.ArrowException, OSError, ValueError, EOFError) as err:
        raise CorpusError(f"{source.path}: rows from {row}: corrupt data ({problem_text(err)})") from None
