"""The papers' tables and figures as functions (`nb reproduce`, `nb sweep`): a packaged recipe or a
user's own, run as arms x seeds into one folder, aggregated beside the published numbers
(docs/reproduce.md)."""

from __future__ import annotations

from collections.abc import Sequence

from nbcli.api.inputs import local_path
from nbcli.api.reports import PathLike, Report
from nbcli.arguments import public


@public
def reproduce(item: str, out: PathLike, *, data: Sequence[str] = (), scale: str | None = None,
              arms: Sequence[str] | None = None, sets: Sequence[str] = (), seeds: Sequence[int] | None = None,
              jobs: int = 1, threads: int = 1, dask: str | None = None, resources: Sequence[str] = (),
              figures: bool = True, download: bool = False) -> Report:
    """`nb reproduce ITEM`: the recipe nb ships for a paper's table or figure (`reproduce_items()`),
    its runs for the `arms` patterns (None: all) at `scale` (smoke | cpu | paper; None: paper) into
    `out`, `data` as "ROLE=PATH" strings, `sets` as "OPTION=VALUE" over every run's options, `seeds`
    instead of the scale's; `jobs`
    runs at a time here (`threads` torch threads each), or each on the Dask scheduler at `dask`
    asking for `resources` ("GPU=1"). `download`: a data role not in `data` takes the recipe's Hub
    source (its dataset split fetched into the local cache before any run). Finished runs in `out` are
    reused, stopped ones resumed. The report is results.json's content with the files written and what
    each run did."""
    from nbcli.sweeps.items import item_recipe
    from nbcli.sweeps.sweep import run_sweep

    return Report(run_sweep(item_recipe(item), local_path(out), data=data, scale=scale, arms=arms, sets=sets,
                            seeds=seeds, jobs=jobs, threads=threads, dask=dask, resources=resources, figures=figures,
                            download=download))


@public
def sweep(recipe: PathLike, out: PathLike, *, data: Sequence[str] = (), scale: str | None = None,
          arms: Sequence[str] | None = None, sets: Sequence[str] = (), seeds: Sequence[int] | None = None,
          jobs: int = 1, threads: int = 1, dask: str | None = None, resources: Sequence[str] = (),
          figures: bool = True, download: bool = False) -> Report:
    """`nb sweep RECIPE`: `reproduce` with a recipe file of your own (its options are the task's
    options, so any option can be an arm; `download` as `reproduce`'s, for roles with a `hub` source;
    docs/reproduce.md)."""
    from nbcli.sweeps.recipe import load_recipe
    from nbcli.sweeps.sweep import run_sweep

    return Report(run_sweep(load_recipe(local_path(recipe)), local_path(out), data=data, scale=scale, arms=arms,
                            sets=sets, seeds=seeds, jobs=jobs, threads=threads, dask=dask, resources=resources,
                            figures=figures, download=download))


@public
def reproduce_items() -> Report:
    """`nb reproduce --list`: every item nb ships, whether it runs (and why not), the data it needs by
    role, its scales, arms and where its settings differ from the paper's."""
    from nbcli.sweeps.items import list_items

    return Report({"items": list_items()})
