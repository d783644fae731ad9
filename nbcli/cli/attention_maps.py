"""`nb attention-maps`: paper 001 figs. 1, 2, 4 (attention maps of chosen heads at chosen checkpoints)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import (
    CsvOption, DpiOption, FigsizeOption, JsonOption, ThreadsOption, TitleOption, TokenizerOption, TsvOption, on_threads,
    table_option,
)
from nbcli.cli.render import KEY, NUM, Col, key, num, print_rows

EPILOG = """\
[bold]What is drawn[/] (paper 001 figs. 1, 2, 4): one row per head (by default the heads the run's
attention guidance trained, of the last layer; every head of the last layer for a run without guidance;
--heads for others), one column per checkpoint (requests that find the same saved step share one), then
the head's target pattern (the one the run's attention guidance assigned it, read from the checkpoint's
nb.train_config; the closest pattern when the head was not guided); a last row shows every pattern for
the same tokens. Rows of a map are queries, columns keys. [Next] is left out for clm models (a causal
mask cannot attend ahead).

[bold]Checkpoints[/]: --at takes percentages of the run's planned training steps (each picks the
nearest saved step-N.safetensors, and a note says when that is not the step asked for: nb train saves
step 0 (the initial model), every --save-every N steps and the last) or exact saved steps;
--checkpoint FILE (repeatable) names files instead.

[bold]Distances[/] of a head's map H to a pattern P, averaged over the T query rows:
  l1   sum_j |H_ij - P_ij|            kl   KL(P_i || H_i), H floored at 1e-12 (nats)
  mse  (1/T) sum_j (H_ij - P_ij)^2, i.e. the AG loss of one head in --ag-reduction mse units
--metric picks the one that names the closest pattern; --json holds all three and every matrix.

[bold]Examples[/]

  nb attention-maps runs/ag -t spm.model --sentence "Welcome to EMNLP." -o fig1.pdf
  nb attention-maps runs/ag -t spm.model --sentence "The cat sat." --heads 0.0,0.1,1.* --at 10%,100%
  nb attention-maps runs/base -t spm.model --sentence "A b c." --checkpoint step-200.safetensors --json
"""


@on_threads
def attention_maps(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", show_default=False,
                                            help="An nb train run directory (its step-N.safetensors).")],
    sentence: Annotated[str, typer.Option("--sentence", "-s", metavar="TEXT", show_default=False,
                                          help="The sentence whose attention is drawn.")],
    tokenizer: TokenizerOption,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", metavar="FIG",
        help="Draw the grid into FIG: .pdf, .svg or .png (needs matplotlib: pip install 'nbcli[plot]').")] = None,
    steps: Annotated[Optional[str], typer.Option(
        "--at", metavar="LIST", help="Checkpoints as percentages of the run's steps and/or exact steps "
        "[default: 0%,1%,100%].")] = None,
    checkpoint: Annotated[Optional[list[Path]], typer.Option(
        "--checkpoint", metavar="FILE", help="A checkpoint to draw (repeatable; instead of --at; a bare "
        "name is looked up in RUN_DIR).")] = None,
    heads: Annotated[Optional[str], typer.Option(
        "--heads", metavar="L.H,...", help="Heads (0-based layer.head; L.* for a whole layer), all, or "
        "assigned (the run's guided heads in every layer) [default: the last layer's guided heads when the run "
        "used attention guidance, else every head of the last layer].")] = None,
    delimiters: Annotated[bool, typer.Option(
        "--delimiters/--no-delimiters", help="Put the tokenizer's BOS (else EOS) before the sentence and EOS "
        "after it, as paper 001 fig. 2 does (\"<s> Welcome to EMNLP. </s>\").")] = True,
    metric: Annotated[Literal["l1", "kl", "mse"], typer.Option(
        "--metric", help="The distance that names each map's closest pattern.")] = "l1",
    dpi: DpiOption = 200,
    figsize: FigsizeOption = None,
    title: TitleOption = None,
    csv: CsvOption = None,
    tsv: TsvOption = None,
    table: Annotated[Optional[str], table_option("maps (distances; the matrices are in --json), heads, checkpoints")] = None,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Draw attention maps of chosen heads for one sentence at chosen checkpoints of a run (0 %, 1 %, 100 % of training by default) next to paper 001's [Next]/[Prev]/[First]/[Delim]/[Period] patterns, with each map's distance to each pattern."""  # noqa: E501
    from nbcli.reports.attention_maps import attention_maps_report
    from nbcli.cli.console import check_table_targets, print_report
    from nbcli.outputs import model_inputs
    from nbcli.figure_style import figure_options

    looks = figure_options(dpi, figsize, title)
    check_table_targets(as_json, csv, tsv, [*model_inputs(run_dir), tokenizer])
    if output is not None:
        _check_output(output, run_dir)
    report = attention_maps_report(run_dir, sentence, tokenizer, steps=steps, checkpoints=checkpoint or [],
                                   heads=heads, delimiters=delimiters, metric=metric, plot=output, looks=looks)
    print_report(report, as_json, _render, csv=csv, tsv=tsv, table=table or "maps")


def _check_output(output: Path, run_dir: Path) -> None:
    from nbcli.plots import check_figure_outputs

    read = list(run_dir.glob("*.safetensors")) if run_dir.is_dir() else []
    check_figure_outputs("--output", [output], [run_dir, *read])


def map_columns(patterns: list[str], metric: str) -> tuple[Col, ...]:
    """The distance table's columns: the head, the step, its AG pattern, each pattern's distance, the closest."""
    return (Col("head", KEY, lambda r: f"{r['layer']}.{r['head']}"), Col("step", NUM, key("step")),
            Col("AG", KEY, lambda r: r["assigned"] or "-"),
            *(Col(n, NUM, lambda r, n=n: r["distances"][n][metric]) for n in patterns),
            Col("closest", KEY, key("closest")))


def _render(report: dict[str, Any]) -> None:
    from nbcli.cli.console import esc, stdout_console

    console = stdout_console()
    console.print(f"[bold]{esc(report['run'])}[/] ({esc(report['objective'])}): {num(len(report['tokens']))} tokens "
                  + esc(" ".join(report["tokens"])))
    if report["ag_heads"]:
        console.print("attention guidance: " + ", ".join(f"head {h} {p}" for h, p in report["ag_heads"].items())
                      + " (every layer)")
    for note in report["notes"]:
        console.print(f"note: {esc(note)}")
    metric = report["metric"]
    print_rows(f"{metric} distance of each map to each pattern (smaller is closer)",
               map_columns(list(report["patterns"]), metric), report["maps"], "no map")
    if report.get("plot"):
        console.print(f"wrote {esc(report['plot'])}")


def register(app: typer.Typer) -> None:
    app.command("attention-maps", epilog=EPILOG, cls=NbCommand)(attention_maps)
