"""Corpus sources: what INPUT arguments name, and readers that hand counting documents or byte blocks.

    sources.py         INPUT arguments -> CorpusSource (files, directories, globs, stdin, URLs), by kind
    text.py            plain text: newline-aligned byte ranges; compressed files and stdin as line blocks
    columnar.py        parquet row groups and Arrow record batches (IPC files, `datasets` folders) -> documents
    columnar_files.py  those files through pyarrow: opened, told apart by magic, schemas, a string
                       column checked, several columns at once (for `rows`)
    remote.py          fsspec URLs (hf://, s3://, https://, ...) and the extras they need
    records.py         THE reader for every command: documents, translation pairs, labelled examples,
                       CoNLL sentences, from any format above (and TSV/CSV), with one line and format rule
    sentences.py       its tagged sentences: CoNLL text, or records with a token list and a tag list
    rows.py            its lines and rows with named fields (TSV, CSV, JSONL, parquet/Arrow), with origins
    conll.py           its token-per-line CoNLL files (tagging), checked line by line
    features.py        the `datasets` ClassLabel names stored with a file (schema metadata, dataset_info.json)
    folders.py         a folder per class (scikit-learn's load_files layout): a file a document, its folder
                       its label

Counting (`nbcli.counting`) sees byte ranges, line blocks and `DocumentBatch`es, never file formats;
every other command reads through `records`.
"""

from nbcli.corpus.columnar import DocumentBatch, RowUnit, iter_rows, plan_columnar, read_unit
from nbcli.corpus.columnar_files import load_columnar_reader
from nbcli.corpus.records import (
    Example, Origin, Pair, ReadStats, Sentence, iter_conll, iter_documents, iter_examples, iter_pairs, iter_sentences,
    read_documents,
)
from nbcli.corpus.sources import (
    COLUMNAR_SUFFIXES, COMPRESSION_SUFFIXES, FORMATS, STDIN, TEXT_FORMATS, TEXT_SUFFIXES, CorpusSource, compression_of,
    corpus_files, corpus_format, discover_inputs,
)
from nbcli.corpus.text import (
    BLOCK_BYTES, MAX_RANGE_BYTES, MIN_RANGE_BYTES, ByteRange, LineTooLong, decode_lines, invalid_utf8, line_number_at,
    line_too_long, open_stream, plan_ranges, read_range_blocks, read_stream_blocks, split_lines,
)

__all__ = [
    "BLOCK_BYTES", "COLUMNAR_SUFFIXES", "COMPRESSION_SUFFIXES", "FORMATS", "MAX_RANGE_BYTES", "MIN_RANGE_BYTES",
    "STDIN", "TEXT_FORMATS", "TEXT_SUFFIXES", "ByteRange", "CorpusSource", "DocumentBatch", "Example",
    "LineTooLong", "Origin", "Pair", "ReadStats", "RowUnit", "Sentence", "compression_of", "corpus_files",
    "corpus_format", "decode_lines", "discover_inputs", "invalid_utf8", "iter_conll", "iter_documents",
    "iter_examples", "iter_pairs", "iter_rows", "iter_sentences", "line_number_at", "load_columnar_reader", "line_too_long",
    "open_stream", "plan_columnar", "plan_ranges", "read_documents", "read_range_blocks", "read_stream_blocks",
    "read_unit", "split_lines",
]
