"""The counting command as a function: `count_unigrams` (`nb count-unigrams`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from nbcli.api.inputs import input_paths, local_path, optional_path
from nbcli.api.reports import CountReport, PathLike
from nbcli.arguments import public


@public
def count_unigrams(inputs: PathLike | Sequence[PathLike], tokenizer: PathLike, output: PathLike, *,
                   tsv: PathLike | None = None, workers: int = 0,
                   format: Literal["text", "jsonl", "tsv", "csv"] | None = None,
                   field: str = "text", eos: bool | None = None, bos: bool = False, strict: bool = False,
                   skip_bad_lines: bool = False, smoothing: str = "add-k:1", dask: str | None = None,
                   chunk_cache: bool = True, unigram_certificate: bool = False) -> CountReport:
    """Count token unigrams of a corpus and write the counts file (`nb count-unigrams`).

    `inputs`: files, directories, globs (or a list of them), each read in the format its name says
    (`format` overrides it for files that are not parquet or Arrow: `nbcli.corpus.corpus_format`);
    `field`: the JSONL key or TSV/CSV/parquet/Arrow column of the text; `tokenizer`: a SentencePiece .model, a
    tokenizer.json or a model folder; `output`: the .safetensors counts file; `tsv`: also id, piece,
    count, smoothed log-probability per token. `eos`: one EOS per document (None: the tokenizer
    template's default); `workers=0`: all cores; `unigram_certificate`: count SentencePiece unigram
    models from cached chunks under the per-line certificate (exact; faster than whole documents
    only on large corpora: docs/design/counting.md). Counts are exact for any `workers`.
    """
    from nbcli.counting import CountOptions, count_to_file
    from nbcli.counts import parse_smoothing

    k = parse_smoothing(smoothing)
    options = CountOptions(format=format, field=field, eos=eos, bos=bos, strict=strict,
                           skip_bad_lines=skip_bad_lines, chunked=chunk_cache,
                           unigram_certificate=unigram_certificate)
    report, counts_file = count_to_file(input_paths(inputs), local_path(tokenizer), local_path(output), optional_path(tsv), options,
                                        smoothing_k=k, workers=workers or None, dask_address=dask)
    return CountReport(report, counts=counts_file.counts)

