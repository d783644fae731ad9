"""`nb count-unigrams`: stream a corpus through a tokenizer and write a unigram-counts file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JsonOption, SmoothingOption, TokenizerOption, WorkersOption, output_option
from nbcli.resolve_datasets import DATASET_ID_HELP

EPILOG = """\
[bold]Examples[/bold]

  nb count-unigrams corpus.txt -t openai-community/gpt2 -o counts.safetensors   # a repo's tokenizer
  nb count-unigrams corpus.txt -t spm.model -o counts.safetensors
  nb count-unigrams data/ 'more/**/*.jsonl.zst' -t tokenizer.json -o c.safetensors
  nb count-unigrams glue/SST-2/train.tsv --field sentence -t tokenizer.json -o c.safetensors
  nb count-unigrams notes.log --format jsonl -t tokenizer.json -o c.safetensors
  nb count-unigrams 'fineweb/*.parquet' my_dataset/ -t tokenizer.json -o c.safetensors
  nb count-unigrams 'hf://datasets/org/name/data/*.parquet' -t tokenizer.json -o c.safetensors
  nb count-unigrams corpus.txt -t spm.model -o c.safetensors --tsv c.tsv --smoothing add-k:0.5
  zcat big.txt.gz | nb count-unigrams - -t spm.model -o counts.safetensors --json
  nb count-unigrams shard-*.txt -t spm.model -o counts.safetensors --dask tcp://scheduler:8786
"""


def count_unigrams(
    inputs: Annotated[list[str], typer.Argument(
        metavar="INPUT...", show_default=False,
        help="Files, directories (recursed), globs, URLs (hf://, s3://, https://: the 'remote' extra), or - for "
        "stdin. Each file is read in the format its name says (.jsonl .ndjson .json: JSONL; .tsv, .csv: "
        "the --field column named by the header; .parquet, Arrow files and `datasets` save_to_disk folders: "
        "one row a document, the --field column; anything else: text), also when compressed (.gz .bz2 "
        ".xz .zst). " + DATASET_ID_HELP)],
    tokenizer: TokenizerOption,
    output: Annotated[Path, output_option("Counts file to write (int64 `counts` tensor + provenance).",
                                          "OUT.safetensors")],
    tsv: Annotated[Optional[Path], typer.Option(
        "--tsv", metavar="OUT.tsv|-", help="Also write id, piece, count, smoothed log-probability per token; - "
        "writes it to stdout (after the counts file is committed; the summary is then not printed).")] = None,
    workers: WorkersOption = 0,
    fmt: Annotated[Optional[Literal["text", "jsonl", "tsv", "csv"]], typer.Option(
        "--format", show_default=False,
        help="Read every file that is not parquet or Arrow as: text (one document per line; a line ends at "
        "LF or CRLF, the ending removed; empty lines are not documents), jsonl (one JSON object per "
        "line, the document in --field), tsv or csv (a header row, the document in the --field "
        "column). Default: each file as its name says, the rule train, eval and generate follow.")] = None,
    field: Annotated[str, typer.Option(
        "--field", help="JSONL field, TSV/CSV or parquet/Arrow column, that holds the document text.")] = "text",
    eos: Annotated[Optional[bool], typer.Option(
        "--eos/--no-eos", show_default="per template: on for causal, off for [CLS] ... [SEP]",
        help="Count one EOS per document. On by default when the tokenizer has an EOS and a causal "
        "template: a language model predicts EOS at each document end, so it belongs in its unigram "
        "distribution. Off by default for [CLS] ... [SEP] templates (BERT, RoBERTa): a masked-LM "
        "encoder never predicts [SEP] or </s>. The summary names the token.")] = None,
    bos: Annotated[bool, typer.Option(
        "--bos/--no-bos",
        help="Count one BOS per document. Off by default: BOS is given as context and never predicted.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Invalid UTF-8 is an error naming file and line (default: replace with U+FFFD, "
        "count and report the affected lines).")] = False,
    skip_bad_lines: Annotated[bool, typer.Option(
        "--skip-bad-lines", help="JSONL, TSV, CSV: skip and count lines that are not records with --field "
        "(default: error naming file and line).")] = False,
    smoothing: SmoothingOption = "add-k:1",
    dask: Annotated[Optional[str], typer.Option(
        "--dask", metavar="ADDRESS", help="Run the byte-range tasks on a Dask distributed scheduler "
        "(e.g. tcp://host:8786); inputs must be readable at the same paths on the workers.")] = None,
    exact_only: Annotated[bool, typer.Option(
        "--no-chunk-cache", help="Encode every document in full instead of each distinct chunk once "
        "(slower; same counts; for verification).")] = False,
    unigram_certificate: Annotated[bool, typer.Option(
        "--unigram-certificate", help="SentencePiece unigram models (T5, ALBERT, XLNet): count each line "
        "from its words' cached ids where a certificate proves them the line's own (each word's margin "
        "over its second-best segmentation beats the float32 rounding the line can bring), else encode "
        "the line whole. Exact either way. Off by default: it pays only on large corpora (1.1 GB of generated "
        "text: 1.18x SentencePiece's own speed, whole documents 1.04x; 60 MB of real text: 0.49x, whole "
        "documents 1.02x; see docs/design/counting.md).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Count token unigrams in a corpus and write them as a safetensors counts file.

    Documents are tokenised without template special tokens; EOS/BOS are added per document as
    --eos/--bos say. Counting is exact and identical for any --workers: each distinct
    whitespace-delimited chunk is encoded once where the tokenizer's settings make that provably
    equal to encoding whole documents, and whole documents are encoded otherwise.
    """
    from nbcli.cli.console import byte_progress, check_table_targets, print_report, print_warnings
    from nbcli.cli.render import render_count_summary
    from nbcli.counting import CountOptions, count_to_file
    from nbcli.counts import parse_smoothing

    check_table_targets(as_json, None, None if tsv is None else str(tsv))
    k = parse_smoothing(smoothing)
    options = CountOptions(format=fmt, field=field, eos=eos, bos=bos, strict=strict,
                           skip_bad_lines=skip_bad_lines, chunked=not exact_only,
                           unigram_certificate=unigram_certificate)
    with byte_progress("counting") as progress:
        report, _ = count_to_file(inputs, tokenizer, output, tsv, options, smoothing_k=k, workers=workers or None,
                                  dask_address=dask, progress=progress)
    print_warnings(report["warnings"])  # rich is imported only when there is one
    if str(tsv) != "-":  # with --tsv -, stdout holds the table alone
        print_report(report, as_json, render_count_summary)


def register(app: typer.Typer) -> None:
    app.command("count-unigrams", epilog=EPILOG, cls=NbCommand)(count_unigrams)
