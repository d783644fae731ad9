"""`nb reproduce ITEM`: a paper's table or figure from the recipe nb ships, beside the published numbers."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import sweep_command

EPILOG = """\
[bold]Items[/bold]: 000-fig2 000-fig3 000-fig4 001-table1 001-table4 001-table7 002-table1 002-table1-mt 002-table3
002-table4 002-fig1 003-fig1. nb reproduce --list says what each reproduces, whether nb runs it yet, the data it
needs and where to get it (docs/reproduce.md).

[bold]Output[/bold] (--out DIR) runs/ID: every run, an nb run directory (nb plot-run, nb eval read it); runs/ID.json:
its settings, their hash and its evaluation; ITEM/results.json, results.csv, results.md: each arm's mean ± SE or σ
over seeds (as the paper reports) beside the paper's number and the difference; ITEM/figures/: the runs' curves
(nb plot-run) and results.png; sweep.json: what each invocation did. Items whose runs are the same share them
in one --out (000-fig3 aggregates 000-fig2's runs). The results are computed from the run
directories alone: run the same command again after a crash, Ctrl-C or SIGKILL and only unfinished runs train
(stopped ones resume from their saved state), to the same results.

[bold]Examples[/bold]

  nb reproduce --list
  nb reproduce 000-fig2 --scale smoke --data train=data/train --data valid=data/valid --data test=data/test \\
      --data tokenizer=joint.model --out repro/000-fig2
  nb reproduce 002-table1 --arms 'SST2/BERT/*' --data sst2_train=sst2/train.parquet \\
      --data sst2_valid=sst2/validation.parquet --data bert=bert-base-uncased --out repro/002-table1 --jobs 2
  nb reproduce 000-fig2 --data train=iwslt/train ... --out /shared/repro --dask tcp://scheduler:8786 --resources GPU=1
"""


def reproduce_arguments(
    item: Annotated[Optional[str], typer.Argument(
        metavar="ITEM", show_default=False, help="The table or figure, e.g. 000-fig2 (nb reproduce --list).")] = None,
    list_items: Annotated[bool, typer.Option(
        "--list", help="List the items (or ITEM alone): what each reproduces, whether nb runs it, the data it "
        "needs, its scales and where nb's settings differ from the paper's.")] = False,
) -> None:
    """Reproduce a table or figure of the papers: run its recipe's arms x seeds, aggregate them beside the published numbers."""  # noqa: E501 (one line per paragraph: help text reflows)


def reproduce(item: str | None, list_items: bool, out: Path | None, as_json: bool, **settings: Any) -> None:
    """`nb reproduce`: the item list, or one item's sweep (settings: the sweep options)."""
    from nbcli.cli.console import print_report
    from nbcli.errors import ConfigError
    from nbcli.sweeps.items import describe, item_recipe, list_items as every_item

    if list_items:
        items = [describe(item_recipe(item))] if item else every_item()
        print_report({"items": items}, as_json, render_items)
        return
    if item is None or out is None:
        raise ConfigError("nb reproduce needs ITEM and --out DIR (nb reproduce --list shows the items)")
    run_sweep_command(item_recipe(item), out, as_json, settings)


def run_sweep_command(recipe: Any, out: Path, as_json: bool, settings: dict[str, Any]) -> None:
    """One sweep with a progress bar by runs, its report rendered (nb reproduce, nb sweep)."""
    from nbcli.cli.console import print_report
    from nbcli.sweeps.sweep import run_sweep

    from nbcli.errors import ConfigError

    given = {k: (() if v is None and k in ("data", "sets", "resources") else v) for k, v in settings.items()}
    if given.get("seeds") is not None:
        try:
            given["seeds"] = [int(s) for s in given["seeds"].split(",")]
        except ValueError:
            raise ConfigError(f"--seeds {given['seeds']}: expected seeds as integers, e.g. 0,1,2") from None
    report = run_with_progress(lambda **hooks: run_sweep(recipe, out, **given, **hooks), as_json)
    print_report(report, as_json, render_sweep)


def run_with_progress(run: Callable[..., dict[str, Any]], quiet: bool) -> dict[str, Any]:
    """`run(on_start=..., on_run=...)` with a progress bar by runs on a terminal's stderr (a line per
    run off a terminal), each finished run's outcome in its status."""
    from nbcli.cli.console import step_progress

    with ExitStack() as stack:
        update: list[Callable[..., None]] = []

        def on_start(total: int) -> None:
            update.append(stack.enter_context(step_progress("runs", total, every=1, quiet=quiet)))

        def on_run(outcome: dict[str, Any]) -> None:
            if update:
                update[0](status=f"{outcome['run']}: {outcome['action']}")

        return run(on_start=on_start, on_run=on_run)


def render_sweep(report: dict[str, Any]) -> None:
    """results.md as it is written (the paper's layout), then the files and any warning."""
    from pathlib import Path

    from nbcli.cli.console import esc, print_warnings, stdout_console

    console = stdout_console()
    console.print(esc((Path(report["out"]) / report["item"] / "results.md").read_text(encoding="utf-8")),
                  highlight=False)
    ran = [o for o in report["outcomes"] if o["action"] != "reused"]
    console.print(f"{len(report['runs'])} runs ({len(ran)} run now, {len(report['runs']) - len(ran)} reused); "
                  f"written in {esc(report['out'])}: {esc(', '.join(report['files']))}", highlight=False)
    print_warnings(report["warnings"])


def render_items(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    for it in report["items"]:
        console.print(f"[bold]{esc(it['item'])}[/]  {esc(it['title'])}  ({esc(it['where'])})")
        if not it["runnable"]:
            console.print(f"  not runnable yet: {esc(it['unavailable'])}")
            continue
        scales = ", ".join(f"{s['scale']} ({len(s['seeds'])} seed{'s' * (len(s['seeds']) != 1)})" for s in it["scales"])
        console.print(f"  task {esc(it['task'])} · {len(it['arms'])} arms · scales {esc(scales)} · "
                      f"{it['published']} published numbers", highlight=False)
        presets = sorted(set(it["presets"].values()))
        if presets:
            console.print(f"  the paper's settings: --preset {esc(', '.join(presets))}", highlight=False)
        for role in it["data"]:
            source = f" [dim]({esc(role['source'])})[/]" if role["source"] else ""
            if role.get("hub"):
                source += f" [dim]--download: {esc(role['hub'])}, licence {esc(role['licence'])}[/]"
            console.print(f"  --data {esc(role['role'])}=…  {esc(role['help'])}{source}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("reproduce", epilog=EPILOG, cls=NbCommand)(sweep_command(reproduce_arguments, reproduce))
