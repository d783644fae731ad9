"""What works on any `nb train` run: export to a transformers folder, plot runs (seeds grouped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from nbcli.api.inputs import local_path
from nbcli.api.reports import PathLike, Report
from nbcli.arguments import public


@public
def export_checkpoint(checkpoint: PathLike, out: PathLike, *, beam: int | None = None,
                      lenpen: float | None = None) -> Report:
    """A translation run or checkpoint as a transformers model folder, Marian layout, or a classifier / tagger
    run as its encoder family's For{Sequence,Token}Classification folder: the run's task's export
    (`nb export`, `nbcli.tasks.runs.export_run`)."""
    from nbcli.tasks.runs import export_run

    return Report(export_run(local_path(checkpoint), local_path(out), beam=beam, lenpen=lenpen))


@public
def plot_runs(runs: Sequence[PathLike], output: PathLike, *, group_seeds: bool = True,
              alc_steps: int | None = 20000, accuracy_spread: Literal["sd", "se"] = "sd") -> Report:
    """`nb plot-run`: the PNG curves of `nb train` runs in `output`, the seeds of an arm (configs
    equal but for the seed) as mean ± standard error, with each arm's table (`groups`: mean ± SE of
    best validation BLEU and loss and their ALCs over the first `alc_steps` updates, paper 000 sec. 4.2;
    classifier runs' best validation accuracy and its epoch, ± σ over seeds as paper 002 table 1, or
    the SE with `accuracy_spread` "se")."""
    from nbcli.reports.plot_run import plot_runs as plot

    return Report(plot([local_path(r) for r in runs], local_path(output), group_seeds=group_seeds, alc_steps=alc_steps,
                       accuracy_spread=accuracy_spread))

