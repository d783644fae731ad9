"""`nb predict`: labels (by name) and probabilities of a fine-tuned classifier or tagger."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import BatchSizeOption, JsonOption, ThreadsOption, corpus_option, on_threads, output_option

EPILOG = """\
RUN_OR_CKPT is a classifier or tagger run (nb train --task classification|tagging; its last
step-N.safetensors) or one of its step-N.safetensors: the labels are in the checkpoint, the tokenizer
and config beside it.

The output has one JSON object a line, in the input's order: classification {"label": NAME, "probs":
{NAME: p, ...}}; tagging {"tokens": [...], "tags": [...], "probs": [{NAME: p, ...} per token]}. Labels
are the names of the training data (or of --label-names), so any metric can be recomputed.

[bold]Examples[/]

  nb predict runs/sst2 --corpus dev.tsv -o preds.jsonl
  nb predict runs/ner/step-300.safetensors --corpus test.conll -o tags.jsonl --json
"""


@on_threads
def predict(
    checkpoint: Annotated[Path, typer.Argument(metavar="RUN_OR_CKPT", show_default=False,
                                               help="A classifier run directory or its step-N.safetensors.")],
    corpus: Annotated[list[str], corpus_option(
        "Records to label: TSV/CSV with a header, JSONL, parquet/Arrow "
        "(the run's text fields; a label column is not needed); for a tagger CoNLL (one token a line: tag columns "
        "are not needed), or JSONL/parquet/Arrow records "
        "with a token list (tokens; tags not needed) (repeatable); also Hub dataset ids ID[:CONFIG[:SPLIT]] from the "
        "local cache.")],
    output: Annotated[Optional[Path], output_option(
        "The predictions, one JSON object a line; - for stdout (then nothing else is printed there).",
        "FILE.jsonl")] = None,
    batch_size: BatchSizeOption = 32,
    device: Annotated[str, typer.Option("--device", metavar="cpu|cuda|auto", help="Where the model runs.")] = "cpu",
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Label every record of a corpus with a fine-tuned classifier or tagger (labels by name, with probabilities)."""
    from nbcli.cli.console import one_stdout, print_report, print_warnings
    from nbcli.tasks.runs import predict_run

    one_stdout(as_json, {"-o": output})
    report = predict_run(checkpoint, corpus, output, batch_size=batch_size, device=device)   # the run's task
    if str(output) != "-":  # with -o -, stdout holds the predictions alone
        print_report(report, as_json, _render)
    print_warnings(report["warnings"])


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console
    from nbcli.cli.render import num

    where = f"wrote {esc(report['output'])}" if report["output"] else "(no -o: predictions only in --json)"
    stdout_console().print(f"{num(report['records'])} records labelled by {esc(report['checkpoint'])} "
                           f"({report['task']}; labels {esc(', '.join(report['labels']))}); {where}",
                           highlight=False)


def register(app: typer.Typer) -> None:
    app.command("predict", epilog=EPILOG, cls=NbCommand)(predict)
