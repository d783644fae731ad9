"""Report builders: one module per command that gathers a checkpoint's, a run's or several runs'
numbers from the rooms below (checkpoints and runs, models, the analysis formulas) into the documented
JSON report and its figures. Nothing below imports them; the faces (nbcli.cli, nbcli.api) call them.

    probe_bias.py      nb probe-bias: which probes a checkpoint allows, computed into its report
    plot_run.py        nb plot-run: runs grouped into arms, their curves and ALC tables drawn
    attention_maps.py  nb attention-maps: a run's heads against paper 001's patterns, step by step
"""
