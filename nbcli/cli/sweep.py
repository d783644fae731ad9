"""`nb sweep RECIPE`: your own grid of runs (any task option as an arm) with nb reproduce's machinery."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import sweep_command

EPILOG = """\
[bold]A recipe[/bold] is a TOML file (docs/reproduce.md has the schema and an example): task (an nb train task, or
analogy | lm-eval), [data.ROLE] tables (what --data binds; {ROLE} in an option is its path, {dim:ROLE} its embedding
width), [options] (the task's options by name: nb train TASK --help's flags in snake case, so any option can be an
arm), [[axes]] (each value sets options; an arm is one value of every axis), seeds or [scales.NAME] (seeds and
options over the arms'), [evaluate] (translation-test: BLEU of a test role), [[metrics]] (from summary, log-max,
log-min, log-last, log-mean, alc, epoch-at-max, epoch-at-min, evaluation or result; ± se, sd or none) and
[[published]] numbers to show beside nb's.

Runs, reuse, resume, Dask and the output folder are nb reproduce's (nb reproduce --help).

[bold]Examples[/bold]

  nb sweep bias.toml --data train=data/train --out sweeps/bias --jobs 2
  nb sweep bias.toml --data train=data/train --out sweeps/bias-4k --set steps=4000 --arms 'unigram'
  nb sweep bias.toml --data train=data/train --out /shared/bias --dask tcp://scheduler:8786 --json
"""


def sweep_arguments(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE.toml", show_default=False, help="Your recipe.")],
) -> None:
    """Run a recipe of your own: its arms x seeds of any nb train task (or analysis), resumable, locally or on Dask, aggregated over seeds."""  # noqa: E501 (one line per paragraph: help text reflows)


def sweep(recipe: Path, out: Path | None, as_json: bool, **settings: Any) -> None:
    """`nb sweep RECIPE`: the sweep of a user's recipe (settings: the sweep options)."""
    from nbcli.cli.reproduce import run_sweep_command
    from nbcli.errors import ConfigError
    from nbcli.sweeps.recipe import load_recipe

    if out is None:
        raise ConfigError("nb sweep needs --out DIR")
    run_sweep_command(load_recipe(recipe), out, as_json, settings)


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog=EPILOG, cls=NbCommand)(sweep_command(sweep_arguments, sweep))
