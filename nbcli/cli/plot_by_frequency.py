"""`nb plot-by-frequency`: paper 000 fig. 4 for several checkpoints on one figure, from their `nb eval
--by-frequency COUNTS --json` reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (CsvOption, DpiOption, FigsizeOption, JsonOption, TitleOption, TsvOption, output_option,
                               table_option)
from nbcli.cli.render import KEY, NUM, TEXT, Col, num, print_rows

EPILOG = """\
Each REPORT is what `nb eval CHECKPOINT --corpus TEST --by-frequency TRAIN_COUNTS --json` printed for
one checkpoint; this command only reads them (no model is loaded), so checkpoints evaluated
separately, on other machines or at other times, go on one figure. Use the same test corpus,
training counts and --bins for every report: the bins are each report's own.

The upper panel uses every parameter; the lower panel, drawn when a report has it, drops the
output bias from the final projection (paper 000 fig. 4b). Tokens per bin are written beside the
first series' points.

[bold]Examples[/]

  nb eval runs/unigram/step-2000.safetensors --corpus test.txt --by-frequency train.counts --json > u.json
  nb eval runs/zero/step-2000.safetensors --corpus test.txt --by-frequency train.counts --json > z.json
  nb plot-by-frequency u.json z.json --label "bias init unigram" --label "bias init 0" -o fig4.pdf
"""


def plot_by_frequency(
    reports: Annotated[list[Path], typer.Argument(metavar="REPORT...", show_default=False,
                                                  help="nb eval --by-frequency --json reports, one per checkpoint.")],
    output: Annotated[Optional[Path], output_option(
        "The figure to write: .pdf, .svg or .png (optional: without it only the table).", "FIG")] = None,
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="Legend label per REPORT, in order (repeat; default: the model: a repo id, a model "
        "folder's name, run/step-N).")] = None,
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    table: Annotated[Optional[str], table_option("series.bins (every bin of every report), series")] = None,
    as_json: JsonOption = False,
) -> None:
    """Overlay paper 000 fig. 4 (average log-probability of each ground-truth token vs its log-unigram probability, binned) for several checkpoints."""  # noqa: E501
    from nbcli.cli.console import check_table_targets, print_report
    from nbcli.figure_style import figure_options
    from nbcli.lm.frequency_report import by_frequency_overlay

    check_table_targets(as_json, csv, tsv, reports)
    report = by_frequency_overlay(reports, label, output, figure_options(dpi, figsize, title))
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table=table or "series.bins")


COLUMNS = (Col("checkpoint", TEXT, lambda r: r[0]["label"]),
           Col("log unigram", KEY, lambda r: (r[1]["log_unigram_lo"], r[1]["log_unigram_hi"]),
               lambda v: f"{num(v[0])} to {num(v[1])}"),
           Col("tokens", NUM, lambda r: r[1]["tokens"]), Col("mean log p", NUM, lambda r: r[1]["mean_log_prob"]),
           Col("± s.e.", NUM, lambda r: r[1]["sem"]),
           Col("w/o bias", NUM, lambda r: r[1].get("mean_log_prob_without_bias")),
           Col("± s.e. w/o bias", NUM, lambda r: r[1].get("sem_without_bias")))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    rows = [(series, b) for series in report["series"] for b in series["bins"]]
    print_rows("paper 000 fig. 4: mean log p of the ground-truth token (± s.e.) by log-unigram bin", COLUMNS, rows,
               "the reports have no bins", sections=lambda r: r[1] is r[0]["bins"][-1])
    if report.get("plot"):
        stdout_console().print(f"wrote {esc(report['plot'])}")


def register(app: typer.Typer) -> None:
    app.command("plot-by-frequency", epilog=EPILOG, cls=NbCommand)(plot_by_frequency)
