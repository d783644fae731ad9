"""Counting token unigrams in a corpus, in parallel, bit-exactly.

    blocks.py       BlockCounter: one block of lines (or a batch of documents) in one process
    keys.py         pure numpy: a block's parts keyed exactly and grouped, slice by slice
    table.py        ChunkTable: the token ids of each distinct part a worker has encoded (bounded)
    tally.py        token ids to exact counts (small pure functions)
    long_lines.py   a byte range's lines (count_range), a line over NB_MAX_LINE_MB in pieces
    run.py          tasks, worker processes (forked or spawned) or a Dask cluster; run_task
    report.py       a count to its counts file (provenance) and the summary count-unigrams prints

The work is cut into tasks (byte ranges of plain files, line-aligned blocks of compressed files and
stdin). Each task returns an int64 count vector; integer sums do not depend on order, so the result
is identical for any number of workers, local or on a Dask cluster.

Speed comes from the tokenizer family's segmenter (`nbcli.tokenizers.segment`), the only thing
counting knows of a tokenizer besides whole-document encoding: each distinct chunk of a Zipfian
corpus is encoded once per worker and its ids multiplied by its frequency. Tokenizers for which no
rule is provably exact are counted by encoding whole documents.
"""

from nbcli.counting.blocks import CACHE_LIMIT, BlockCounter, ChunkTable, CountOptions, TaskResult, document_markers
from nbcli.counting.report import build_counts_file, count_report, count_to_file, write_count_outputs
from nbcli.counting.run import CountResult, ProgressCallback, count_corpus, default_workers, throughput

__all__ = [
    "CACHE_LIMIT", "BlockCounter", "ChunkTable", "CountOptions", "CountResult", "ProgressCallback", "TaskResult",
    "build_counts_file", "count_corpus", "count_report", "count_to_file", "default_workers", "document_markers", "throughput",
    "write_count_outputs",
]
