"""`nb plot-run`: curves of one or more `nb train` runs, overlaid (PNG, PDF or SVG)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (CsvOption, DpiOption, FigsizeOption, FigureFormatOption, JsonOption, TitleOption,
                               TsvOption, output_option, table_option)
from nbcli.cli.render import NUM, TEXT, Col, key, num, print_rows

EPILOG = """\
[bold]Figures[/bold] (a figure is skipped when no run logged its curves; .png here, or --figure-format pdf|svg;
evaluation curves carry a marker at each evaluated step)

  val_loss.png            validation loss per step, the area under it shaded (ALC, paper 000 sec. 4.2); a dotted
                          line where a run's --unigram-reg-lambda regulariser switched off
  val_bleu.png            validation BLEU per step (translation runs), ALC in the legend (paper 000 figs. 2-3)
  val_accuracy.png        validation accuracy per step (classifier and tagger runs: the first --valid set), each
                          arm's mean ± σ over seeds (--accuracy-spread se: ± SE), best accuracy and its epoch
                          in the legend (paper 002 table 1)
  divergence.png          KL(p_θ ‖ unigram) and KL(p_θ ‖ uniform) over steps, log step axis, ± standard error
                          over an arm's seeds (paper 000 fig. 1)
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
SE of best validation BLEU, ALC of validation BLEU, best validation loss and ALC of validation loss; for
classifier runs the best validation accuracy (summary.json's: the first --valid set's highest) and its epoch
as mean ± σ (ddof 1; paper 002 table 1 reports σ over seeds; --accuracy-spread se for the SE). --json's
`groups` carry mean, se, sd and n of every metric some run logged (a translation run's table has no accuracy
columns, a classifier's no BLEU).

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
    output: Annotated[Path, output_option("Directory for the figures (created if missing, with its missing parents).",
                                          "OUTDIR")],
    group_seeds: Annotated[bool, typer.Option(
        "--group-seeds/--no-group-seeds", help="Draw the runs of an arm (configs equal but for the seed) as their "
        "mean ± standard error; --no-group-seeds: every run on its own.")] = True,
    alc_steps: Annotated[int, typer.Option(
        "--alc-steps", metavar="N", min=0, help="ALC over the first N updates (paper 000 sec. 4.2: 20000); "
        "0: the whole curve.")] = 20000,
    accuracy_spread: Annotated[Literal["sd", "se"], typer.Option(
        "--accuracy-spread", help="Spread of classifier runs' val_accuracy over an arm's seeds, in its figure and "
        "the table: sd (σ, ddof 1; paper 002 table 1) or se (standard error, as the loss and BLEU curves).")] = "sd",
    figure_format: FigureFormatOption = "png",
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    table: Annotated[Optional[str], table_option("groups (the arms' table), runs")] = None,
    as_json: JsonOption = False,
) -> None:
    """Plot nb train runs: validation loss and BLEU with ALC (seeds of an arm as mean ± standard error), divergence from unigram/uniform, output-bias drift, AG loss and alpha, the switch of the unigram regulariser.

    Several runs are overlaid. Each figure is written atomically and carries provenance (the run directories) in its metadata.
    """  # noqa: E501 (one line per paragraph: help text reflows)
    from nbcli.cli.console import check_table_targets, print_report
    from nbcli.figure_style import figure_options
    from nbcli.reports.plot_run import plot_runs

    looks = figure_options(dpi, figsize, title)
    check_table_targets(as_json, csv, tsv, [d / "log.jsonl" for d in runs])
    report = plot_runs(runs, output, group_seeds=group_seeds, alc_steps=alc_steps or None, fmt=figure_format,
                       options=looks, accuracy_spread=accuracy_spread)
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table=table or "groups")


def _show_mean_se(cell: dict[str, Any], spread: str = "se") -> str:
    """`mean ± se` (or ± sd; the mean alone for one run, `-` for none), each number in the one format."""
    if cell["mean"] is None:
        return "-"
    return num(cell["mean"]) + (f" ± {num(cell[spread])}" if cell.get(spread) is not None else "")


#: The arms' table: (header, arm_table metric); accuracy and its epoch are ± --accuracy-spread.
GROUP_METRICS = (("best val BLEU", "best_val_bleu"), ("ALC val BLEU", "alc_val_bleu"), ("best val loss", "best_val_loss"),
                 ("ALC val loss", "alc_val_loss"), ("best val accuracy", "best_val_accuracy"), ("its epoch", "best_epoch"))
SPREAD_METRICS = ("best_val_accuracy", "best_epoch")


def group_columns(accuracy_spread: str, groups: list[dict[str, Any]]) -> tuple[Col, ...]:
    """The arms' table: a column for each metric some run logged (arm_table leaves out the others), loss
    and BLEU as mean ± SE, classifiers' accuracy and its epoch ± `accuracy_spread`."""
    def show_accuracy(cell: dict[str, Any]) -> str:
        return _show_mean_se(cell, accuracy_spread)

    return (Col("arm", TEXT, lambda row: row["group"]), Col("runs", NUM, lambda row: len(row["runs"])),
            *(Col(header, NUM, key(name), show_accuracy if name in SPREAD_METRICS else _show_mean_se)
              for header, name in GROUP_METRICS if any(name in row for row in groups)))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    for f in report["files"]:
        console.print(esc(f), highlight=False)
    if not report["files"]:
        console.print("no figures: the runs logged no curves yet", highlight=False)
    window = f"first {num(report['alc_steps'])} updates" if report["alc_steps"] else "whole curves"
    spread = report.get("accuracy_spread", "sd")
    groups = report["groups"]
    if any(len(row["runs"]) > 1 for row in groups):
        classifiers = any(row.get("best_val_accuracy", {}).get("n") for row in groups)
        note = "; accuracy and its epoch ± σ" if classifiers and spread == "sd" else ""
        title = f"arms: mean ± standard error over their runs (ALC over the {window}){note}"
    else:
        title = f"arms: one run each, no spread (ALC over the {window})"
    print_rows(title, group_columns(spread, groups), groups, "no run")


def register(app: typer.Typer) -> None:
    app.command("plot-run", epilog=EPILOG, cls=NbCommand)(plot_run)
