"""`nb plot-run`: PNG curves of one or more `nb train` runs, overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JsonOption, output_option

EPILOG = """\
[bold]Figures[/bold] (a figure is skipped when no run logged its curves)

  val_loss.png            validation loss per step, the area under it shaded (ALC, paper 000 sec. 4.2); a dotted
                          line where a run's --unigram-reg-lambda regulariser switched off
  val_bleu.png            validation BLEU per step (translation runs), ALC in the legend (paper 000 figs. 2-3)
  divergence.png          KL(p_θ ‖ unigram) and KL(p_θ ‖ uniform) over steps, log step axis (paper 000 fig. 1)
  bias.png                ‖b‖₂ and KL(softmax(b) ‖ unigram) over steps (paper 000 app. B.5)
  attention_guidance.png  L_AG and α_t over steps (paper 001 eqs. 3-4)
  unigram_reg.png         training cross-entropy and KL(ω ‖ p_θ) over steps for runs trained with
                          --unigram-reg-lambda, a dotted line at each run's --unigram-reg-steps (paper 000
                          app. B.3, fig. 9); the PNG's nb.unigram_reg_switch text chunk and --json's
                          unigram_reg_switch / unigram_reg_lambda per run say where

[bold]Seeds[/bold] Runs whose config.json differ only in the seed (and device, compile, save_every), trained on
the same data, are one arm: one colour, one legend entry, their mean curve with a ± standard-error band
(ddof 1, at the steps all of them evaluated), the ALC as mean ± SE over the runs (paper 000 figs. 2-3
use 5 seeds). Runs without a config.json are grouped by directory name less a seed suffix (-s0, _seed2).
--no-group-seeds draws every run on its own. The table (and --json's `groups`) gives each arm's mean ±
SE of best validation BLEU, ALC of validation BLEU, best validation loss and ALC of validation loss.

ALC: the area under the curve over the first --alc-steps updates (20000, the paper's), by the
trapezoidal rule, divided by the span covered (docs/training.md#translation-metrics). A non-finite
value (the NaN loss nb train logs for a diverged step) is left out of its curve and of the ALC.

[bold]Examples[/bold]

  nb plot-run runs/unigram-s0 runs/unigram-s1 runs/zero-s0 runs/zero-s1 -o figures/
  nb plot-run runs/* -o figures/ --json
  nb plot-run runs/* -o figures/ --no-group-seeds --alc-steps 0   # every run alone, ALC of whole curves
"""


def plot_run(
    runs: Annotated[list[Path], typer.Argument(metavar="DIR...", help="nb train run directories (log.jsonl).",
                                               show_default=False)],
    output: Annotated[Path, output_option("Directory for the PNGs (created if missing; its parent must exist).",
                                          "OUTDIR")],
    group_seeds: Annotated[bool, typer.Option(
        "--group-seeds/--no-group-seeds", help="Draw the runs of an arm (configs equal but for the seed) as their "
        "mean ± standard error; --no-group-seeds: every run on its own.")] = True,
    alc_steps: Annotated[int, typer.Option(
        "--alc-steps", metavar="N", min=0, help="ALC over the first N updates (paper 000 sec. 4.2: 20000); "
        "0: the whole curve.")] = 20000,
    as_json: JsonOption = False,
) -> None:
    """Plot nb train runs: validation loss and BLEU with ALC (seeds of an arm as mean ± standard error), divergence from unigram/uniform, output-bias drift, AG loss and alpha, the switch of the unigram regulariser.

    Several runs are overlaid. Each PNG is written atomically and carries provenance (the run directories) in its text chunks.
    """  # noqa: E501 (one line per paragraph: help text reflows)
    from nbcli.cli.console import print_report
    from nbcli.run_plots import plot_runs

    report = plot_runs(runs, output, group_seeds=group_seeds, alc_steps=alc_steps or None)
    print_report(report, as_json, _render)


def _render(report: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    for f in report["files"]:
        console.print(esc(f), highlight=False)
    if not report["files"]:
        console.print("no figures: the runs logged no curves yet", highlight=False)
    window = f"first {report['alc_steps']:,} updates" if report["alc_steps"] else "whole curves"
    table = Table(title=f"arms: mean ± standard error over their runs (ALC over the {window})", title_justify="left",
                  box=box.SIMPLE_HEAD)
    width = min(max((len(row["group"]) for row in report["groups"]), default=3), 30)
    table.add_column("arm", min_width=width, overflow="fold")
    for column in ("runs", "best val BLEU", "ALC val BLEU", "best val loss", "ALC val loss"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in report["groups"]:
        table.add_row(esc(row["group"]), str(len(row["runs"])), *(_mean_se(row[k], 2 if "bleu" in k else 3) for k in (
            "best_val_bleu", "alc_val_bleu", "best_val_loss", "alc_val_loss")))
    console.print(table)


def _mean_se(cell: dict[str, Any], digits: int) -> str:
    if cell["mean"] is None:
        return "-"
    return f"{cell['mean']:.{digits}f}" + (f" ± {cell['se']:.{digits}f}" if cell["se"] is not None else "")


def register(app: typer.Typer) -> None:
    app.command("plot-run", epilog=EPILOG, cls=NbCommand)(plot_run)
