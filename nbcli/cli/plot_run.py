"""`nb plot-run`: PNG curves of one or more `nb train` runs, overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nbcli.cli.base import NbCommand
from nbcli.cli.options import JsonOption, output_option

EPILOG = """\
[bold]Figures[/bold] (a figure is skipped when no run logged its curves)

  val_loss.png            validation loss per step, the area under it shaded (ALC, paper 000 sec. 4.2); a dotted
                          line where a run's --unigram-reg-lambda regulariser switched off
  divergence.png          KL(p_θ ‖ unigram) and KL(p_θ ‖ uniform) over steps, log step axis (paper 000 fig. 1)
  bias.png                ‖b‖₂ and KL(softmax(b) ‖ unigram) over steps (paper 000 app. B.5)
  attention_guidance.png  L_AG and α_t over steps (paper 001 eqs. 3-4)
  unigram_reg.png         training cross-entropy and KL(ω ‖ p_θ) over steps for runs trained with
                          --unigram-reg-lambda, a dotted line at each run's --unigram-reg-steps (paper 000
                          app. B.3, fig. 9); the PNG's nb.unigram_reg_switch text chunk and --json's
                          unigram_reg_switch / unigram_reg_lambda per run say where

Runs whose directory names differ only by a seed suffix (-s0, -s1, _seed2) share a colour and a legend
entry (the ALC shown is their mean). A non-finite value (the NaN loss nb train logs for a diverged
step) is left out of its curve and of the ALC.

[bold]Examples[/bold]

  nb plot-run runs/unigram-s0 runs/unigram-s1 runs/zero-s0 runs/zero-s1 -o figures/
  nb plot-run runs/* -o figures/ --json
"""


def plot_run(
    runs: Annotated[list[Path], typer.Argument(metavar="DIR...", help="nb train run directories (log.jsonl).",
                                               show_default=False)],
    output: Annotated[Path, output_option("Directory for the PNGs (created if missing; its parent must exist).",
                                          "OUTDIR")],
    as_json: JsonOption = False,
) -> None:
    """Plot nb train runs: validation loss with ALC, divergence from unigram/uniform, output-bias drift, AG loss and alpha, the switch of the unigram regulariser.

    Several runs are overlaid. Each PNG is written atomically and carries provenance (the run directories) in its text chunks.
    """  # noqa: E501 (one line per paragraph: help text reflows)
    from nbcli.cli.console import esc, print_json, stdout_console
    from nbcli.outputs import guard_outputs
    from nbcli.plots import RUN_FIGURES, plot_run_figures
    from nbcli.provenance import tool_version, utc_now
    from nbcli.train.runs import read_run

    logs = [read_run(d) for d in runs]
    guard_outputs([output / f"{name}.png" for name in RUN_FIGURES],
                  [d / name for d in runs for name in ("log.jsonl", "config.json", "summary.json")], folder=output)
    created = not output.exists()
    output.mkdir(exist_ok=True)
    metadata = {"nb.version": tool_version(), "nb.created": utc_now(), "nb.command": "plot-run",
                "nb.runs": ",".join(str(d) for d in runs)}
    try:
        files = plot_run_figures(output, logs, metadata)
    except BaseException:
        if created and not any(output.iterdir()):
            output.rmdir()  # a failed run leaves no output, not even the folder it made
        raise
    report = {"output": str(output), "files": [str(f) for f in files], "runs": [r.as_dict() for r in logs]}
    if as_json:
        print_json(report)
        return
    console = stdout_console()
    for f in files:
        console.print(esc(f), highlight=False)
    if not files:
        console.print("no figures: the runs logged no curves yet", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("plot-run", epilog=EPILOG, cls=NbCommand)(plot_run)
