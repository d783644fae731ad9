"""Analyses behind the papers' figures and tables (and the frequency-weighted measures after them):
arrays in, JSON-ready sections out. The formulas they use live in `nbcli.ops` and `nbcli.probes`;
the figures are drawn by `nbcli.plots`."""
