"""Corpus sources: what INPUT arguments name, and readers that hand counting documents or byte blocks.

    sources.py   INPUT arguments -> CorpusSource (files, directories, globs, stdin, URLs), by kind
    text.py      plain text: newline-aligned byte ranges; compressed files and stdin as line blocks
    columnar.py  parquet row groups and Arrow record batches (IPC files, `datasets` folders) -> documents
    remote.py    fsspec URLs (hf://, s3://, https://, ...) and the extras they need

Counting (`nbcli.counting`) sees byte ranges, line blocks and `DocumentBatch`es, never file formats.
"""

from nbcli.corpus.columnar import DocumentBatch, RowUnit, iter_rows, load_columnar_reader, plan_columnar, read_unit
from nbcli.corpus.sources import (
    COLUMNAR_SUFFIXES, COMPRESSION_SUFFIXES, STDIN, TEXT_SUFFIXES, CorpusSource, compression_of, corpus_files,
    discover_inputs,
)
from nbcli.corpus.text import (
    BLOCK_BYTES, MAX_RANGE_BYTES, MIN_RANGE_BYTES, ByteRange, LineTooLong, line_number_at, line_too_long,
    open_stream, plan_ranges, read_range_blocks, read_stream_blocks,
)

__all__ = [
    "BLOCK_BYTES", "COLUMNAR_SUFFIXES", "COMPRESSION_SUFFIXES", "MAX_RANGE_BYTES", "MIN_RANGE_BYTES", "STDIN",
    "TEXT_SUFFIXES", "ByteRange", "CorpusSource", "DocumentBatch", "LineTooLong", "RowUnit", "compression_of",
    "corpus_files", "discover_inputs", "iter_rows", "line_number_at", "load_columnar_reader", "line_too_long",
    "open_stream", "plan_columnar", "plan_ranges", "read_range_blocks", "read_stream_blocks", "read_unit",
]
