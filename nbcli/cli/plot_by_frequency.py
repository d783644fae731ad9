"""`nb plot-by-frequency`: paper 000 fig. 4 for several checkpoints on one figure, from their `nb eval
--by-frequency COUNTS --json` reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JsonOption, output_option

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
  nb plot-by-frequency u.json z.json --label "bias init unigram" --label "bias init 0" -o fig4.png
"""


def plot_by_frequency(
    reports: Annotated[list[Path], typer.Argument(metavar="REPORT...", show_default=False,
                                                  help="nb eval --by-frequency --json reports, one per checkpoint.")],
    output: Annotated[Optional[Path], output_option("The PNG to write (optional: without it only the table).",
                                                    "FILE.png")] = None,
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="Legend label per REPORT, in order (repeat; default: the checkpoint's file name).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Overlay paper 000 fig. 4 (average log-probability of each ground-truth token vs its log-unigram probability, binned) for several checkpoints."""  # noqa: E501
    from nbcli.cli.console import print_report
    from nbcli.lm.frequency_report import by_frequency_overlay

    report = by_frequency_overlay(reports, label, output)
    print_report(report, as_json, _render)


def _render(report: dict[str, Any]) -> None:
    from rich.table import Table

    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    table = Table(title="paper 000 fig. 4: mean log p of the ground-truth token (± s.e.) by log-unigram bin",
                  title_justify="left")
    table.add_column("checkpoint", no_wrap=True)
    for column in ("log unigram", "tokens", "mean log p", "± s.e.", "w/o bias"):
        table.add_column(column, justify="right", no_wrap=True)
    for series in report["series"]:
        for b in series["bins"]:
            wo = b.get("mean_log_prob_without_bias")
            table.add_row(esc(series["label"]), f"{b['log_unigram_lo']:.2f}-{b['log_unigram_hi']:.2f}", str(b["tokens"]),
                          "-" if b["mean_log_prob"] is None else f"{b['mean_log_prob']:.3f}",
                          "-" if b["sem"] is None else f"{b['sem']:.3f}", "-" if wo is None else f"{wo:.3f}")
    console.print(table)
    if report.get("plot"):
        console.print(f"wrote {esc(report['plot'])}")


def register(app: typer.Typer) -> None:
    app.command("plot-by-frequency", epilog=EPILOG, cls=NbCommand)(plot_by_frequency)
