"""`nb quickstart`: count the bundled sample corpus with the bundled tokenizer and print the report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JsonOption, WorkersOption, output_option

EPILOG = """\
[bold]Examples[/bold]

  nb quickstart
  nb quickstart -o botchan-counts.safetensors --json
"""


def quickstart(
    output: Annotated[Optional[Path], output_option(
        "Where to write the counts file (default: a temporary directory, removed afterwards).",
        "OUT.safetensors")] = None,
    workers: WorkersOption = 0,
    as_json: JsonOption = False,
) -> None:
    """Count unigrams of a bundled sample (Botchan, 280 kB of English) with a bundled 2k BPE model.

    Shows what `nb count-unigrams` does without any download: the same code path, a real corpus,
    a real SentencePiece tokenizer.
    """
    import tempfile

    from nbcli.cli.console import print_json
    from nbcli.cli.render import render_count_summary
    from nbcli.counting import CountOptions, build_counts_file, count_corpus, count_report, write_count_outputs
    from nbcli.counts import DEFAULT_SMOOTHING_K
    from nbcli.samples import SAMPLE_CORPUS, SAMPLE_TOKENIZER
    from nbcli.outputs import guard_outputs
    from nbcli.tokenizers import load_tokenizer

    guard_outputs([output], [SAMPLE_CORPUS, SAMPLE_TOKENIZER])  # before counting, not after
    tok = load_tokenizer(SAMPLE_TOKENIZER)
    with tempfile.TemporaryDirectory(prefix="nb-quickstart-") as tmp:
        target = output or Path(tmp) / "botchan-counts.safetensors"
        result = count_corpus([str(SAMPLE_CORPUS)], tok, CountOptions(), workers=workers or None)
        write_count_outputs(build_counts_file(result, tok, DEFAULT_SMOOTHING_K), target, None, tok,
                            DEFAULT_SMOOTHING_K)
        report = count_report(result, tok, target, None)
        if output is None:
            report["output"] = None  # the file was temporary: JSON says null, never a sentence
        if as_json:
            print_json(report)
        else:
            render_count_summary({**report, "output": report["output"] or "(temporary; pass -o to keep it)"})


def register(app: typer.Typer) -> None:
    app.command("quickstart", epilog=EPILOG, cls=NbCommand)(quickstart)
