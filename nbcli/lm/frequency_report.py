"""`nb eval`'s per-token figures: paper 003 fig. 1 (`bias_effect`: each token's predicted
probability with and without b_LN against its corpus frequency) and paper 000 fig. 4
(`by_frequency`: each ground-truth token's average log-probability against its log-unigram in the
training counts), from the `TokenStats` of one eval pass; their PNGs; and `by_frequency_overlay`,
which puts several checkpoints' `by_frequency` sections (their `nb eval --json` reports) on one
figure (`nb plot-by-frequency`). The math is nbcli.analysis.frequency_effects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcli import jsonsafe
from nbcli.errors import CheckpointError, ConfigError, InputError
from nbcli.figure_style import FigureOptions

if TYPE_CHECKING:
    import torch

    from nbcli.analysis.frequency_effects import TokenStats
    from nbcli.lm.perplexity import Scored
    from nbcli.lm.runner import Runner


@dataclass(frozen=True)
class TokenFigures:
    """What `nb eval` adds per token (nbcli.analysis.frequency_effects): paper 003 fig. 1's change
    when b_LN is removed (`bias_effect`, averaged over `positions` in `space`), paper 000 fig. 4's
    average log-probability against `by_frequency` (a training counts file), in `bins` equal-width
    bins, with a figure each where a path is given (.pdf, .svg or .png), drawn with `looks` (--dpi,
    --figsize, --title)."""

    bias_effect: bool = False
    positions: str = "all"
    space: str = "prob"
    by_frequency: Path | None = None
    bins: int = 10
    bias_effect_plot: Path | None = None
    by_frequency_plot: Path | None = None
    looks: FigureOptions = FigureOptions()

    def __post_init__(self) -> None:
        from nbcli.analysis.frequency_effects import POSITIONS, SPACES
        from nbcli.figure_style import figure_format

        if self.positions not in POSITIONS:
            raise ConfigError(f"--bias-effect-positions {self.positions!r}: expected one of {', '.join(POSITIONS)}")
        if self.space not in SPACES:
            raise ConfigError(f"--bias-effect-space {self.space!r}: expected one of {', '.join(SPACES)}")
        if self.bins < 1:
            raise ConfigError(f"--bins {self.bins}: must be at least 1")
        for option, path in (("--bias-effect-plot", self.bias_effect_plot),
                             ("--by-frequency-plot", self.by_frequency_plot)):
            if path is not None:
                figure_format(path, option)
        if self.by_frequency_plot is not None and self.by_frequency is None:
            raise ConfigError(f"--by-frequency-plot {self.by_frequency_plot}: needs --by-frequency COUNTS (the training counts)")

    @property
    def wanted(self) -> bool:
        return self.bias_effect or self.by_frequency is not None

    def plots(self) -> list[Path]:
        return [p for p in (self.bias_effect_plot, self.by_frequency_plot) if p is not None]


def token_shifts(runner: Runner, figures: TokenFigures) -> dict[str, torch.Tensor]:
    """The logit shifts the figures remove: W b_LN (paper 003) and the output bias b (paper 000)."""
    shifts: dict[str, torch.Tensor] = {}
    if figures.bias_effect:
        shift = runner.ln_bias_logit_shift()
        if shift is None:
            raise CheckpointError(f"{runner.path}: --bias-effect needs a final LayerNorm bias b_LN, and this "
                                  f"{runner.architecture} model has none (RMSNorm or a bias-free LayerNorm)")
        shifts["ln_bias"] = shift
    bias = runner.roles.get("output_bias")
    if figures.by_frequency is not None and bias is not None:
        shifts["output_bias"] = runner.live(bias).float().to(runner.device)
    return shifts


def token_figure_sections(stats: TokenStats, figures: TokenFigures, counts: np.ndarray,
                          training_log_unigram: np.ndarray | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `bias_effect` and `by_frequency` report sections, and the per-token arrays the PNGs draw."""
    from nbcli.analysis import frequency_effects as fx

    sections: dict[str, Any] = {}
    arrays: dict[str, Any] = {}
    if figures.bias_effect:
        p_with = fx.per_token_probability(stats, figures.positions, figures.space)  # type: ignore[arg-type]
        p_wo = fx.per_token_probability(stats.without["ln_bias"], figures.positions, figures.space)  # type: ignore[arg-type]
        sections["bias_effect"] = {"positions": figures.positions, "space": figures.space,
                                   **fx.bias_effect(p_with, p_wo, counts, figures.bins)}
        arrays["bias_effect"] = {"counts": counts, "with": p_with, "without": p_wo}
    if training_log_unigram is not None:
        def mean_log(s: TokenStats) -> np.ndarray:
            return np.log(fx.per_token_probability(s, "target", "log"))

        wo = stats.without.get("output_bias")
        ys = mean_log(stats)
        ys_wo = mean_log(wo) if wo is not None else None
        sections["by_frequency"] = {"output_bias_dropped": wo is not None,
                                    **fx.by_frequency(ys, training_log_unigram, figures.bins, ys_wo)}
        arrays["by_frequency"] = {"log_unigram": training_log_unigram, "with": ys, "without": ys_wo}
    return sections, arrays


def frequency_counts(counts: np.ndarray | None, vocab_size: int, scored: Scored) -> np.ndarray:
    """Corpus frequency per token for paper 003 fig. 1: the --counts file's (checked against the
    model and padded to its rows when the study opened, nbcli.checkpoint.vocab), else the scored targets."""
    return scored.target_counts(vocab_size) if counts is None else counts


def guard_figures(figures: TokenFigures, checkpoint: Path, corpus: Sequence[str], tokenizer: Path | None,
                 counts: Path | None) -> None:
    """The figures' checks before any work: matplotlib present, a known format, no figure onto an input."""
    from nbcli.checkpoint.reader import checkpoint_inputs
    from nbcli.plots import check_figure_outputs

    option = "--bias-effect-plot" if figures.bias_effect_plot is not None else "--by-frequency-plot"
    held = not isinstance(checkpoint, (str, PathLike))  # a model in memory has no files to protect
    check_figure_outputs(option, figures.plots(), [*([] if held else checkpoint_inputs(checkpoint)), tokenizer, counts,
                                                   figures.by_frequency, *(c for c in corpus if c != "-")])


def draw_figures(figures: TokenFigures, report: dict[str, Any], arrays: dict[str, Any]) -> None:
    """The figures asked for, titled by the model and the held-out corpus, committed together."""
    from nbcli import plots
    from nbcli.atomic import OutputSet
    from nbcli.figure_style import corpus_label, model_label, provenance

    meta = provenance("eval", checkpoint=report["model"]["path"], corpus=",".join(report.get("corpus", [])),
                      counts=(report.get("counts") or {}).get("path"))
    name = model_label(report["model"]["path"])
    on = f" on {corpus_label(report.get('corpus'))}" if report.get("corpus") else ""
    with OutputSet() as outputs:
        if figures.bias_effect_plot is not None and "bias_effect" in arrays:
            plots.plot_bias_effect(figures.bias_effect_plot, arrays["bias_effect"], report["bias_effect"],
                                   title=f"{name}{on}: predicted probability with and without b_LN",
                                   metadata=meta, outputs=outputs, options=figures.looks)
            report["bias_effect"]["plot"] = str(figures.bias_effect_plot)
        if figures.by_frequency_plot is not None and "by_frequency" in report:
            plots.plot_by_frequency(figures.by_frequency_plot, [(name, report["by_frequency"])],
                                    title=f"{name}{on}: log-probability of the ground-truth token by frequency",
                                    metadata=meta, outputs=outputs, options=figures.looks)
            report["by_frequency"]["plot"] = str(figures.by_frequency_plot)


def by_frequency_overlay(reports: Sequence[Path], labels: Sequence[str] | None = None,
                         plot: Path | None = None, looks: FigureOptions | None = None) -> dict[str, Any]:
    """Paper 000 fig. 4 for several checkpoints on one figure: the `by_frequency` sections of `nb eval
    --by-frequency C --json` reports (one per checkpoint, e.g. bias-init unigram vs zero), labelled by
    `labels` (default: each report's model, `model_label`), drawn into `plot` when given (.pdf,
    .svg, .png) with `looks` (--dpi, --figsize, --title)."""
    from nbcli.figure_style import model_label
    from nbcli.provenance import tool_version, utc_now

    if labels is not None and len(labels) != len(reports):
        raise ConfigError(f"--label given {len(labels)} times for {len(reports)} reports")
    if plot is not None:
        from nbcli.plots import check_figure_outputs

        check_figure_outputs("-o", [plot], list(reports))
    series = []
    for i, path in enumerate(reports):
        try:
            report = jsonsafe.parse(Path(path).read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError, jsonsafe.JsonProblem) as err:
            raise InputError(f"{path}: not an nb eval --json report ({type(err).__name__})") from None
        section = report.get("by_frequency") if isinstance(report, dict) else None
        if not isinstance(section, dict) or not isinstance(section.get("bins"), list):
            raise InputError(f"{path}: no by_frequency section (make it with nb eval --by-frequency COUNTS --json)")
        for row in section["bins"]:
            if not isinstance(row, dict) or not all(k in row for k in ("log_unigram_lo", "log_unigram_hi", "tokens",
                                                                       "mean_log_prob", "sem")):
                raise InputError(f"{path}: by_frequency.bins: a bin lacks log_unigram_lo/hi, tokens, mean_log_prob, sem")
        model = report.get("model") if isinstance(report.get("model"), dict) else {}
        label = labels[i] if labels is not None else model_label(str(model.get("path", path)))
        series.append({"label": label, "report": str(path), "checkpoint": model.get("path"),
                       "corpus": report.get("corpus") if isinstance(report.get("corpus"), list) else None,
                       **section})
    out: dict[str, Any] = {"nb_version": tool_version(), "created": utc_now(), "series": series}
    if plot is not None:
        from nbcli import plots
        from nbcli.figure_style import corpus_label, provenance

        corpora = {corpus_label(s["corpus"]) for s in series if s["corpus"]}
        on = f" on {corpora.pop()}" if len(corpora) == 1 else ""
        plots.plot_by_frequency(plot, [(s["label"], s) for s in series],
                                title=f"log-probability of the ground-truth token by frequency{on}",
                                metadata=provenance("plot-by-frequency", reports=",".join(map(str, reports))),
                                options=looks)
        out["plot"] = str(plot)
    return out
