"""Fixed, seeded inputs for every figure of nbcli.plots and nbcli.reports.plot_run: what the figure tests
draw (each format, the image comparison) without a model. Each `draw_NAME(path, options)` draws one
figure; FIGURES maps the names to them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from nbcli import plots
from nbcli.analysis.bins import frequency_bins
from nbcli.figure_style import FigureOptions

META = {"nb.version": "test", "nb.command": "test"}
V = 2000


def _counts(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.floor(1e5 / np.arange(1, V + 1) ** 1.1 * rng.lognormal(0, 0.3, V)).astype(np.int64)
    counts[rng.choice(V, 50, replace=False)] = 0
    return counts


def draw_frequency_direction(path: Path, options: FigureOptions | None = None) -> None:
    counts = _counts()
    rng = np.random.default_rng(1)
    scores = 0.4 * np.log1p(counts) + rng.normal(0, 0.5, V)
    bins = frequency_bins(scores, counts, 8)
    plots.plot_frequency_direction(path, counts, scores, bins, rho=0.81, title="tiny-gpt2: corpus frequency",
                                   metadata=META, options=options)


def draw_cosine_histogram(path: Path, options: FigureOptions | None = None) -> None:
    rng = np.random.default_rng(2)
    before, after = rng.normal(0.3, 0.1, 4000), rng.normal(0.05, 0.1, 4000)
    plots.plot_cosine_histogram(path, before, after, mean_before=0.3, mean_after=0.05, title="tiny-gpt2: cosines",
                                metadata=META, options=options)


def zipfian_section() -> dict[str, Any]:
    raw = {"sym1_unigram": 0.42, "sym2_unigram": 0.71, "sym1_uniform": 0.5, "sym2_uniform": 0.8,
           "mean_cosine_uniform": 0.31, "mean_cosine_unigram": 0.45, "partition_ratio_uniform": 0.62,
           "partition_ratio_unigram": 0.55}
    whitened = {"sym1_unigram": 0.97, "sym2_unigram": 0.99, "sym1_uniform": 0.9, "sym2_uniform": 0.95,
                "mean_cosine_uniform": 0.02, "mean_cosine_unigram": 0.001, "partition_ratio_uniform": 0.9,
                "partition_ratio_unigram": 0.97}
    return {"direction": "b_LN", "raw": raw, "whitened": whitened,
            "frequency_direction": {"share_before": 0.31, "share_after": 0.35, "removed": -0.102,
                                    "spearman_before": 0.8, "spearman_after": 0.1}}


def draw_zipfian(path: Path, options: FigureOptions | None = None) -> None:
    counts = _counts()
    rng = np.random.default_rng(3)
    before = 0.4 * np.log1p(counts) + rng.normal(0, 0.5, V)
    after = rng.normal(0, 1, V)
    plots.plot_zipfian(path, counts, before, after, zipfian_section(), title="tiny-gpt2: Zipfian whitening",
                       metadata=META, options=options)


def bias_effect_inputs() -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from nbcli.analysis.frequency_effects import bias_effect

    counts = _counts()
    rng = np.random.default_rng(4)
    logits = 0.8 * np.log1p(counts) + rng.normal(0, 1, V)
    p_with = np.exp(logits) / np.exp(logits).sum()
    flat = logits - 0.6 * np.log1p(counts)
    p_without = np.exp(flat) / np.exp(flat).sum()
    section = {"positions": "all", "space": "prob", **bias_effect(p_with, p_without, counts, 8)}
    return {"counts": counts, "with": p_with, "without": p_without}, section


def draw_bias_effect(path: Path, options: FigureOptions | None = None) -> None:
    arrays, section = bias_effect_inputs()
    plots.plot_bias_effect(path, arrays, section, title="tiny-gpt2 on heldout.txt: b_LN removed",
                           metadata=META, options=options)


def by_frequency_section(seed: int, shift: float) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    bins = []
    for i, lo in enumerate(np.linspace(-12, -3, 9)):
        tokens = int(rng.integers(1, 400)) if i else 1  # a one-token bin: no standard error, no bar
        mean = lo * 0.6 + shift + rng.normal(0, 0.2)
        bins.append({"log_unigram_lo": float(lo), "log_unigram_hi": float(lo + 1.0), "tokens": tokens,
                     "mean_log_prob": float(mean), "sem": None if tokens == 1 else float(1 / np.sqrt(tokens)),
                     "mean_log_prob_without_bias": float(mean - 2 - lo * 0.2),
                     "sem_without_bias": None if tokens == 1 else float(1.2 / np.sqrt(tokens))})
    return {"output_bias_dropped": True, "tokens": sum(b["tokens"] for b in bins), "bins": bins}


def draw_by_frequency(path: Path, options: FigureOptions | None = None) -> None:
    series = [("bias init 0", by_frequency_section(5, 0.0)), ("bias init unigram", by_frequency_section(6, 0.8))]
    plots.plot_by_frequency(path, series, title="log-probability by frequency on test.txt", metadata=META,
                            options=options)


def embedding_rows() -> list[dict[str, Any]]:
    rows = []
    for label, scale in (("input embedding", 0.5), ("xavier", 0.03), ("pretrained-xavier", 0.05)):
        row = {"label": label, "min": -4 * scale, "max": 3 * scale, "mean": 0.01 * scale, "std": scale}
        rows.append({**row, "scaled": {k: v * 8 for k, v in row.items() if k != "label"}})
    return rows


def draw_embedding_stats(path: Path, options: FigureOptions | None = None) -> None:
    plots.plot_embedding_stats(path, embedding_rows(), title="tiny: embedding statistics", metadata=META,
                               options=options)


def diversity_rows() -> list[dict[str, Any]]:
    return [{"arm": f"lambda {lam:g}", "lambda": lam, "logit_adjust": None, "perplexity": 30 + 20 * (1 - lam),
             "diversity": 0.5 + 0.2 * (1 - lam)} for lam in (0.0, 0.5, 1.0)] + [
        {"arm": "logit adjust 0.5", "lambda": None, "logit_adjust": 0.5, "perplexity": 41.0, "diversity": 0.66}]


def draw_diversity(path: Path, options: FigureOptions | None = None) -> None:
    plots.plot_diversity_vs_perplexity(path, diversity_rows(), title="tiny: diversity vs perplexity",
                                       metadata=META, options=options)


def attention_report() -> dict[str, Any]:
    from nbcli.analysis.attention import closest_pattern, map_distances, sentence_patterns

    import torch

    ids = [1, 5, 6, 7, 8, 2]
    patterns = sentence_patterns(ids, False, [1, 2], [8])
    tokens = ["<s>", "▁Welcome", "▁to", "▁EM", "NLP.", "</s>"]
    gen = torch.Generator().manual_seed(7)
    checkpoints = [{"request": "0%", "step": 0, "path": "run/step-0.safetensors", "note": None},
                   {"request": "1%", "step": 0, "path": "run/step-0.safetensors", "note": None},
                   {"request": "100%", "step": 100, "path": "run/step-100.safetensors", "note": None}]
    heads = [{"layer": 1, "head": 0, "assigned": "next"}, {"layer": 1, "head": 1, "assigned": "prev"}]
    maps = []
    for head in heads:
        for path, sharp in (("run/step-0.safetensors", 0.0), ("run/step-100.safetensors", 4.0)):
            target = patterns[head["assigned"]]
            H = torch.softmax(torch.randn(len(ids), len(ids), generator=gen) + sharp * target, dim=-1)
            distances = {name: map_distances(H, P) for name, P in patterns.items()}
            maps.append({**{k: head[k] for k in ("layer", "head", "assigned")}, "step": 0 if sharp == 0 else 100,
                         "checkpoint": path, "distances": distances, "closest": closest_pattern(distances, "l1"),
                         "matrix": H.tolist()})
    return {"tokens": tokens, "checkpoints": checkpoints, "heads": heads,
            "patterns": {k: v.tolist() for k, v in patterns.items()}, "maps": maps}


def draw_attention_maps(path: Path, options: FigureOptions | None = None) -> None:
    plots.plot_attention_maps(path, attention_report(), title="run: attention maps, layer 1", metadata=META,
                              options=options)


class _Run(SimpleNamespace):
    def has(self, key: str) -> bool:
        return key in self.series

    def alc(self, key: str = "val_loss", until: int | None = None) -> float:
        return 4.2

    def unigram_reg_switch(self) -> None:
        return None


def runs(seeds: int = 1) -> list[Any]:
    """Two arms (unigram, zero) of `seeds` runs each, evaluated every 50 steps."""
    out = []
    steps = np.arange(0, 501, 50)
    for group, shift in (("unigram", 0.0), ("zero", 0.6)):
        for seed in range(seeds):
            jitter = 0.05 * seed
            series = {"val_loss": (steps, 7 * np.exp(-steps / 150) + 3 + shift + jitter),
                      "kl_unigram": (steps, np.exp(-steps / 100) * (1 + shift) + 0.3 + jitter),
                      "kl_uniform": (steps, 2 + steps / 500 + jitter),
                      "bias_norm": (steps, 40 + steps / 100), "bias_kl_unigram": (steps, 0.1 + steps / 5000)}
            out.append(_Run(group=group, path=f"runs/{group}-s{seed}", series=series))
    return out


def draw_run_figures(directory: Path, fmt: str = "png", options: FigureOptions | None = None,
                     seeds: int = 1) -> list[Path]:
    from nbcli.reports.plot_run import plot_run_figures

    return plot_run_figures(directory, runs(seeds), META, None, fmt, options)


FIGURES: dict[str, Callable[..., None]] = {
    "frequency_direction": draw_frequency_direction, "cosine_histogram": draw_cosine_histogram,
    "zipfian": draw_zipfian, "bias_effect": draw_bias_effect, "by_frequency": draw_by_frequency,
    "embedding_stats": draw_embedding_stats, "diversity": draw_diversity, "attention_maps": draw_attention_maps,
}
