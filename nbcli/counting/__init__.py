"""Counting token unigrams in a corpus, in parallel, bit-exactly.

`blocks` counts one block of lines in one process; `run` plans tasks and runs them in worker
processes or on a Dask cluster; `report` turns a count into its file and its summary.

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
