"""`nb merge-counts`: sum counts files made with the same tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JsonOption, output_option

EPILOG = """\
[bold]Examples[/bold]

  nb merge-counts shard-0.safetensors shard-1.safetensors -o counts.safetensors
  nb merge-counts shards/*.safetensors -o counts.safetensors --json
"""


def merge_counts(
    inputs: Annotated[list[Path], typer.Argument(metavar="COUNTS...", help="Counts files to sum.")],
    output: Annotated[Path, output_option("Merged counts file.", "OUT.safetensors")],
    as_json: JsonOption = False,
) -> None:
    """Sum counts files. Refuses files made with another tokenizer (by fingerprint: a re-saved copy counts as the same) or of another vocabulary size, so counts made on shards (machines, jobs, days) combine into exactly the counts of the whole corpus."""  # noqa: E501 (one line per paragraph: help text reflows)
    from nbcli.cli.console import esc, print_json, stdout_console
    from nbcli.cli.render import num
    from nbcli.counts import merge_counts_files

    report = merge_counts_files(inputs, output)
    if as_json:
        print_json(report)
    else:
        stdout_console().print(f"merged {num(len(report['inputs']))} files: {num(report['tokens'])} tokens, "
                               f"vocab {num(report['vocab_size'])} -> {esc(output)}")


def register(app: typer.Typer) -> None:
    app.command("merge-counts", epilog=EPILOG, cls=NbCommand)(merge_counts)
