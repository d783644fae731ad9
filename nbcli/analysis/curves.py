"""Learning curves: the area under a validation curve (ALC, paper 000 sec. 4.2) and the mean ±
standard error over the seeds of one arm (paper 000 figs. 2-3: 5 seeds per arm). Pure functions of
numbers; reading run directories is `nbcli.analysis.runs`, drawing them `nbcli.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Paper 000 sec. 4.2 (fig. 3): the ALC of validation BLEU over the first 20k training updates.
ALC_UPDATES = 20_000


def area_under_curve(points: Sequence[tuple[float, float]], until: float | None = None) -> float | None:
    """ALC: the area under the learning curve (step, value) by the composite trapezoidal rule,
    renormalised by the span of the interval (paper 000 sec. 4.2 and its footnote 9), so that it is
    the curve's mean value over that interval: a constant curve c has ALC c.

    `until`: only the first `until` updates count (the paper: 20k). Where the curve was evaluated
    past `until` but not at it, its value at `until` is interpolated linearly between the two
    evaluations around it (the trapezoid's own assumption), so the interval ends exactly at `until`.

    nb's choices where the paper's curves do not meet ours: the interval starts at the first
    evaluated step (no value is assumed before it, e.g. BLEU 0 at step 0), and a curve that stops
    before `until` is integrated up to its last evaluation; either way the area is divided by the
    span actually covered, so the ALC stays a mean BLEU (or loss), comparable between runs that
    were evaluated on the same steps. A single evaluation in the interval is its own ALC; none is
    None. Points are taken in step order; they must be finite (`nbcli.analysis.runs` drops the NaN
    loss of a diverged step before this).
    """
    pts = sorted((float(s), float(v)) for s, v in points)
    if until is not None:
        inside = [p for p in pts if p[0] <= until]
        after = next((p for p in pts if p[0] > until), None)
        if inside and after is not None and inside[-1][0] < until:
            (s0, v0), (s1, v1) = inside[-1], after
            inside.append((float(until), v0 + (v1 - v0) * (until - s0) / (s1 - s0)))
        pts = inside
    if not pts:
        return None
    xs = np.array([p[0] for p in pts], dtype=np.float64)
    ys = np.array([p[1] for p in pts], dtype=np.float64)
    span = xs[-1] - xs[0]
    if span == 0:
        return float(ys.mean())
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2) / span)


def mean_standard_error(values: Sequence[float], spread: str = "se") -> tuple[float | None, float | None]:
    """(mean, standard error of the mean) of per-seed values, the bars of paper 000 figs. 2-3:
    SE = s / sqrt(n) with the sample standard deviation s (ddof 1). (None, None) for no value;
    the SE is None for one value (no spread can be estimated from a single seed). `spread` "sd":
    s itself (σ over seeds, paper 002 table 1's accuracies) instead of the SE."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size == 0:
        return None, None
    mean = float(x.mean())
    if x.size == 1:
        return mean, None
    return mean, float(x.std(ddof=1) / (math.sqrt(x.size) if spread == "se" else 1.0))


def mean_curve(curves: Sequence[tuple[np.ndarray, np.ndarray]], spread: str = "se",
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean ± standard error (ddof 1) curve of several runs (steps, values): at the steps every
    run evaluated (runs of one arm share their evaluation schedule; a step some seed lacks, e.g.
    past the end of a shorter run, is left out rather than averaged over fewer seeds). Returns
    (steps, mean, se); se is NaN everywhere for a single run. `spread` "sd": the sample standard
    deviation σ (ddof 1) over the runs instead of the SE (paper 002 table 1)."""
    if not curves:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    common = set(np.asarray(curves[0][0]).tolist())
    for steps, _ in curves[1:]:
        common &= set(np.asarray(steps).tolist())
    steps = np.array(sorted(common), dtype=np.int64)
    table = np.empty((len(curves), steps.size), dtype=np.float64)
    for i, (s, v) in enumerate(curves):
        at = {int(step): float(value) for step, value in zip(np.asarray(s).tolist(), np.asarray(v).tolist())}
        table[i] = [at[int(step)] for step in steps]
    mean = table.mean(axis=0) if steps.size else np.zeros(0)
    if len(curves) < 2:
        return steps, mean, np.full(steps.size, np.nan)
    return steps, mean, table.std(axis=0, ddof=1) / (math.sqrt(len(curves)) if spread == "se" else 1.0)
