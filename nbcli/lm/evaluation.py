"""`nb eval`: a checkpoint scored on a held-out corpus under every arm (lambda / tau), with the KL
columns of paper 003 table 1 and, on request, the per-token figures (paper 003 fig. 1, paper 000
fig. 4). The scoring itself is nbcli.lm.perplexity; the figures nbcli.lm.frequency_report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.analysis.frequency_effects import TokenStats
from nbcli.corpus import ReadStats, read_documents
from nbcli.lm.perplexity import Progress, Scored, evaluate, kl_reference, tokenize_documents

if TYPE_CHECKING:
    import torch

    from nbcli.lm.arms import ProgressBar
    from nbcli.lm.frequency_report import TokenFigures
    from nbcli.lm.runner import Runner


def evaluate_arms(runner: Runner, scored: Scored, arms: Sequence[Any], base: Any, *, batch_size: int = 8,
                  stride: int | None = None, unigram_log: torch.Tensor | None = None,
                  log_prior: torch.Tensor | None = None, progress: Progress | None = None,
                  figures: TokenFigures | None = None,
                  ) -> tuple[list[dict[str, Any]], list[str], TokenStats | None]:
    """One `evaluate` per arm (nbcli.lm.arms.Arm) with its surgery applied in memory; rows, warnings,
    and with `figures` the first arm's `TokenStats`."""
    from nbcli.lm.arms import each_arm
    from nbcli.lm.frequency_report import token_shifts

    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    stats = None
    for arm, adjust in each_arm(runner, arms, base, log_prior, warnings):
        first = not rows and figures is not None and figures.wanted
        result = evaluate(runner, scored, batch_size=batch_size, stride=stride, unigram_log=unigram_log,
                          adjust=adjust, progress=progress, token_stats=first,
                          token_shifts=token_shifts(runner, figures) if first and figures else None)
        stats = result.token_stats if first else stats
        rows.append({**arm.as_dict(), **result.as_dict()})
    return rows, warnings, stats


def eval_report(checkpoint: Path, corpus: Sequence[str], tokenizer: Path, lambdas: str | None = None, *,
                remove_direction: bool = False, counts: Path | None = None, smoothing_k: float = 1.0,
                stride: int | None = None, batch_size: int = 8, arch: str = "auto",
                mapping: dict[str, str] | None = None, device: str = "auto", dtype: str = "auto", tf32: bool = True,
                progress_bar: ProgressBar | None = None, figures: TokenFigures | None = None,
                allow_vocab_mismatch: bool = False) -> dict[str, Any]:
    """The whole `nb eval` report (what `--json` prints): load the model and tokenizer
    (`open_study`), score `corpus` under every arm (`lambdas`: "1,0.5,0"), and the KL columns
    against `counts` or the scored tokens' own add-k unigram (paper 003 table 1). With `figures`,
    the first arm's `bias_effect` (paper 003 fig. 1) and `by_frequency` (paper 000 fig. 4)
    sections, and their PNGs. The model is released before returning; `progress_bar` is given the
    number of tokens to score. Tokenizer and counts are checked against the model by nb's one policy
    (nbcli.checkpoint.vocab; `allow_vocab_mismatch` relaxes its identity rule only). `dtype` and
    `tf32`: the forward passes' precision (nbcli.precision: bf16 autocast, TF32 on CUDA)."""
    from nbcli.lm.arms import counts_log_prior, no_progress, open_study
    from nbcli.lm.frequency_report import draw_figures, frequency_counts, guard_figures, token_figure_sections

    figures = figures if figures is not None and figures.wanted else None
    if figures is not None and figures.plots():
        guard_figures(figures, checkpoint, corpus, tokenizer, counts)
    study = open_study(checkpoint, tokenizer, lambdas, remove_direction=remove_direction, counts=counts,
                       smoothing_k=smoothing_k, arch=arch, mapping=mapping, device=device, dtype=dtype, tf32=tf32,
                       allow_vocab_mismatch=allow_vocab_mismatch)
    try:
        runner = study.runner
        read = ReadStats()
        scored = tokenize_documents(read_documents(corpus, stats=read), study.tokenizer, runner.vocab_size)
        unigram = kl_reference(scored, runner.vocab_size, smoothing_k, study.log_prior)
        training = None
        if figures is not None and figures.by_frequency is not None:
            assert study.vocab is not None
            prior, fitted = counts_log_prior(figures.by_frequency, study.vocab, smoothing_k,
                                             allow_mismatch=allow_vocab_mismatch)
            training, training_log = fitted.info, prior.double().numpy()
            study.warnings.extend(w for w in fitted.warnings if w not in study.warnings)
        with (progress_bar or no_progress)(scored.targets * len(study.arms)) as progress:
            rows, warnings, stats = evaluate_arms(runner, scored, study.arms, study.base, batch_size=batch_size,
                                                  stride=stride, unigram_log=unigram, progress=progress,
                                                  figures=figures)
    finally:
        study.runner.close()
    report = {**study.provenance(), "corpus": list(corpus), "documents": scored.documents,
              "first_token": f"predicted from {scored.first_from}", "eos_scored": scored.eos_id is not None,
              "unigram": study.counts_info or {"source": "held-out corpus", "smoothing": f"add-k:{smoothing_k:g}"},
              "rows": rows, "warnings": [*read.notes(", ".join(corpus)), *study.warnings, *warnings]}
    if figures is not None and stats is not None:
        freq = frequency_counts(study.counts, runner.vocab_size, scored)
        sections, arrays = token_figure_sections(stats, figures, freq,
                                                 training_log if figures.by_frequency is not None else None)
        if "bias_effect" in sections:
            sections["bias_effect"]["arm"] = rows[0]["arm"]
            sections["bias_effect"]["frequency"] = study.counts_info or {"source": "held-out corpus"}
        if "by_frequency" in sections:
            sections["by_frequency"]["arm"] = rows[0]["arm"]
            sections["by_frequency"]["training_counts"] = training
        report.update(sections)
        draw_figures(figures, report, arrays)
    return report
