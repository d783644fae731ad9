"""Reading run directories without torch: seeds of one configuration grouped into arms, and each
arm's mean ± standard error table (paper 000 figs. 2-3), on synthetic run folders."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbcli.analysis.curves import area_under_curve
from nbcli.counts import UnigramCounts, write_counts
from nbcli.analysis.runs import arm_table, read_run, read_runs


def make_run(directory: Path, config: dict[str, Any] | None, *, bleu: list[tuple[int, float]] = (),
             loss: list[tuple[int, float]] = (), summary: dict[str, Any] | None = None,
             tokens: int | None = None) -> Path:
    """A run folder as nb train leaves it: log.jsonl (eval fields on eval steps), config.json,
    summary.json and counts.safetensors (its metadata identifies the training data)."""
    directory.mkdir(parents=True)
    steps = sorted({s for s, _ in [*bleu, *loss]})
    records = []
    for step in steps:
        record: dict[str, Any] = {"step": step, "loss": 5.0}
        record.update({"val_bleu": v for s, v in bleu if s == step})
        record.update({"val_loss": v for s, v in loss if s == step})
        records.append(json.dumps(record))
    (directory / "log.jsonl").write_text("\n".join(records) + "\n")
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config))
    if summary is not None:
        (directory / "summary.json").write_text(json.dumps(summary))
    if tokens is not None:
        write_counts(directory / "counts.safetensors", UnigramCounts(
            counts=np.ones(8, dtype=np.int64), metadata={"nb.format": "unigram-counts/1", "nb.total_tokens": str(tokens),
                                                         "nb.tokenizer_sha256": "ab" * 32}))
    return directory


BASE = {"task": "translation", "bias_init": "unigram", "lr": 5e-4, "steps": 30000, "device": "cpu"}


def test_seeds_of_one_config_are_one_arm(tmp_path: Path) -> None:
    """Grouped by config (not by name): equal but for the seed and the device; a different lr or
    another corpus (counts metadata) is another arm; the label is the common name less the seed."""
    runs = [make_run(tmp_path / f"uni-s{seed}", {**BASE, "seed": seed, "device": device}, loss=[(0, 1.0)],
                     tokens=1000)
            for seed, device in ((0, "cpu"), (1, "cuda"), (2, "cpu"))]
    runs.append(make_run(tmp_path / "uni-lr-s0", {**BASE, "seed": 0, "lr": 1e-3}, loss=[(0, 1.0)], tokens=1000))
    runs.append(make_run(tmp_path / "other" / "uni-s0", {**BASE, "seed": 0}, loss=[(0, 1.0)], tokens=2000))
    runs.append(make_run(tmp_path / "zero-a", {**BASE, "bias_init": "zero", "seed": 3}, loss=[(0, 1.0)], tokens=1000))
    runs.append(make_run(tmp_path / "zero-b", {**BASE, "bias_init": "zero", "seed": 4}, loss=[(0, 1.0)], tokens=1000))
    logs = read_runs(runs)
    assert [r.group for r in logs] == ["uni", "uni", "uni", "uni-lr", "uni #2", "zero", "zero"]
    assert [r.seed for r in logs] == [0, 1, 2, 0, 0, 3, 4]
    alone = read_runs(runs, group_seeds=False)
    assert [r.group for r in alone] == ["uni-s0", "uni-s1", "uni-s2", "uni-lr-s0", "uni-s0 #2", "zero-a", "zero-b"]


def test_runs_without_config_are_grouped_by_name(tmp_path: Path) -> None:
    runs = [make_run(tmp_path / name, None, loss=[(0, 1.0)]) for name in ("a-s0", "a_seed1", "b-s0")]
    assert [r.group for r in read_runs(runs)] == ["a", "a", "b"]
    assert read_run(runs[0]).seed is None


def test_arm_table_is_mean_and_standard_error_over_seeds(tmp_path: Path) -> None:
    """best_val_bleu from summary.json where a run has it (the kept checkpoint), else the logged
    maximum; ALCs over the first 20k updates; standard errors with ddof 1, computed here by hand."""
    rng = np.random.default_rng(0)
    steps = [0, 5000, 10000, 15000, 20000, 25000]
    curves, runs, best = [], [], []
    for seed in range(5):
        bleu = [(s, float(v)) for s, v in zip(steps, np.sort(rng.uniform(0, 30, len(steps))))]
        loss = [(s, float(v)) for s, v in zip(steps, -np.sort(-rng.uniform(2, 6, len(steps))))]
        summary = {"best_val_bleu": 31.5 + seed} if seed % 2 == 0 else None
        runs.append(make_run(tmp_path / f"u-s{seed}", {**BASE, "seed": seed}, bleu=bleu, loss=loss, summary=summary))
        curves.append((bleu, loss))
        best.append(31.5 + seed if summary else max(v for _, v in bleu))
    runs.append(make_run(tmp_path / "z-s0", {**BASE, "bias_init": "zero", "seed": 0}, loss=[(0, 4.0), (10, 2.0)]))
    table = arm_table(read_runs(runs), until=20000)
    assert [row["group"] for row in table] == ["u", "z"]
    row = table[0]
    assert row["seeds"] == [0, 1, 2, 3, 4] and len(row["runs"]) == 5

    def mean_se(values: list[float]) -> tuple[float, float]:
        m = sum(values) / len(values)
        return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))

    expected = {"best_val_bleu": mean_se(best),
                "alc_val_bleu": mean_se([area_under_curve(b, until=20000) for b, _ in curves]),
                "best_val_loss": mean_se([min(v for _, v in lo) for _, lo in curves]),
                "alc_val_loss": mean_se([area_under_curve(lo, until=20000) for _, lo in curves])}
    for metric, (mean, se) in expected.items():
        assert row[metric]["n"] == 5
        assert row[metric]["mean"] == pytest.approx(mean) and row[metric]["se"] == pytest.approx(se), metric
    zero = table[1]
    assert zero["best_val_bleu"] == {"mean": None, "se": None, "sd": None, "n": 0}
    assert zero["alc_val_loss"] == {"mean": pytest.approx(3.0), "se": None, "sd": None, "n": 1}


def test_arms_of_one_name_are_told_apart_by_the_options_that_differ(tmp_path: Path) -> None:
    """Two recipes' "unigram" arms, one with W rescaled and one without: labelled by the config value that
    tells them apart, not "unigram #2"."""
    runs = [make_run(tmp_path / "a" / f"unigram-s{s}", {**BASE, "seed": s, "rescale_w": "fro"}, loss=[(0, 1.0)])
            for s in (0, 1)]
    runs += [make_run(tmp_path / "b" / f"unigram-s{s}", {**BASE, "seed": s, "rescale_w": None}, loss=[(0, 1.0)])
             for s in (0, 1)]
    assert [r.group for r in read_runs(runs)] == ["unigram (rescale_w=fro)"] * 2 + ["unigram (rescale_w=None)"] * 2
