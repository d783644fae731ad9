"""The `nb` command line: a thin typer layer over the core library.

Each command lives in its own module and imports heavy libraries (torch, numpy) only inside its
body, so `nb --help` and shell completion stay fast. An `NbError` from the core becomes one line on
stderr and exit code 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from nbcli import __version__
from nbcli.cli.base import NbGroup


app = typer.Typer(
    name="nb",
    cls=NbGroup,
    help="nb: study and exploit how Transformers handle word frequency.\n\n"
    "Count unigrams, patch checkpoints (log-unigram output bias, rescaled W, standardised "
    "embeddings, scaled final-LayerNorm bias), probe frequency directions, and train a reference "
    "Transformer with the papers' initialisations and losses.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,  # static scripts in completions/ (nb completions are generated, not typer's)
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print nb's version and exit.")
    ] = False,
) -> None:
    """nb: study and exploit how Transformers handle word frequency."""


def _register() -> None:
    from nbcli.cli import count_unigrams, merge_counts, probe_bias, quickstart
    from nbcli.cli import eval as eval_cmd
    from nbcli.cli import generate as generate_cmd
    from nbcli.cli import inspect as inspect_cmd
    from nbcli.cli import patch_checkpoint, plot_run
    from nbcli.cli import train as train_cmd
    from nbcli.cli import transplant_embeddings

    for module in (quickstart, count_unigrams, merge_counts, patch_checkpoint, inspect_cmd, probe_bias, train_cmd,
                   eval_cmd, generate_cmd, transplant_embeddings, plot_run):
        module.register(app)


_register()


def main() -> None:
    """Console-script entry point."""
    app(prog_name="nb")
    sys.exit(0)
