"""The `nb` command line: a thin typer layer over the core library.

Each command lives in its own module and imports heavy libraries (torch, numpy) only inside its
body, so `nb --help` and shell completion stay fast. An `NbError` from the core becomes one line on
stderr and exit code 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from typing import Annotated

import typer
from nbcli.version import __version__
from nbcli.cli.base import NbGroup


# Each command's CLI module (nbcli/cli/<module>.py, with a `register(app)`), in `nb --help` order.
COMMAND_MODULES = {
    "quickstart": "quickstart", "count-unigrams": "count_unigrams", "merge-counts": "merge_counts",
    "patch-checkpoint": "patch_checkpoint", "inspect": "inspect", "embedding-stats": "embedding_stats", "analogy": "analogy",
    "probe-bias": "probe_bias", "train": "train", "translate": "translate", "export": "export",
    "eval": "eval", "predict": "predict", "generate": "generate", "transplant-embeddings": "transplant_embeddings",
    "plot-run": "plot_run", "plot-by-frequency": "plot_by_frequency", "attention-maps": "attention_maps",
    "reproduce": "reproduce", "sweep": "sweep",
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nb {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print nb's version and exit.")
    ] = False,
) -> None:
    """nb: study and exploit how Transformers handle word frequency."""
    from nbcli.resolve import set_reporter  # notes of the resolver (repo ids, the model's tokenizer) on stderr

    seen: set[str] = set()  # each note once, though several openers resolve the same input

    def note(message: str) -> None:
        if message not in seen:
            seen.add(message)
            typer.echo(f"nb: {message}", err=True)

    set_reporter(note)


def build_app(commands: Iterable[str] | None = None) -> typer.Typer:
    """The `nb` typer app with `commands` (names of COMMAND_MODULES; None: all of them)."""
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
    app.callback()(_root)
    for name in COMMAND_MODULES if commands is None else commands:
        importlib.import_module(f"nbcli.cli.{COMMAND_MODULES[name]}").register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    """`nbcli.cli.app`: the app with every command, built on first use (PEP 562)."""
    if name == "app":
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(argv: list[str]) -> typer.Typer:
    """The app that runs `nb ARGV`. typer builds every command's parameters each time it runs an app
    (~0.2 s for all of them), so an invocation of one command builds that command alone; anything
    else (no command, --help, --version, a misspelt command) gets the whole app."""
    return build_app([argv[0]] if argv and argv[0] in COMMAND_MODULES else None)


def main() -> None:
    """Console-script entry point: `nb ARGV` through `app_for(ARGV)`."""
    app_for(sys.argv[1:])(prog_name="nb")
    sys.exit(0)
