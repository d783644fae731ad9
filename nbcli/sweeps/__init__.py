"""`nb reproduce` and `nb sweep`: the papers' tables and figures as data, run as grids of runs.

Modules:

- recipe.py: the recipe file (TOML) and its schema, checked whole before anything runs;
- kinds.py: what one run is (an `nb train` task through `nbcli.tasks.runs`, or an analysis:
  analogy, lm-eval) and the options each takes;
- plan.py: a recipe expanded into runs (arms x seeds), data roles bound, options resolved and hashed;
- execute.py: runs in this process, a local pool or on Dask; run records; resume and reuse;
- scoring.py: each run's evaluation after training and its metric values;
- by_frequency.py: paper 000 fig. 4 as an evaluation (training-target counts, per-bin values per arm);
- aggregate.py: each arm's mean ± SE or σ beside the paper's numbers; CSV and markdown tables;
- figures.py: the runs' curves (nb plot-run) and the results figure, in nb's house style;
- sweep.py: one sweep start to end (plan, run, aggregate, write);
- items.py: the recipes nb ships (recipes/ITEM.toml) and `nb reproduce --list`.
"""
