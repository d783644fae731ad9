"""nbcli.reports.probe_bias: which sections are computed from which roles, and that the numbers are the probes'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from nbcli import probes
from nbcli.reports.probe_bias import ProbeInputs, build_report, report_steps


@pytest.fixture()
def tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    v, d = 2000, 32
    counts = rng.zipf(1.4, size=v).clip(max=10**6)
    counts[:200] = 0
    b_ln = rng.normal(size=d).astype(np.float32)
    w = (rng.normal(size=(v, d)) + np.outer(np.log1p(counts), b_ln) * 0.5).astype(np.float32)
    return {"counts": counts, "w": w, "b_ln": b_ln, "bias": rng.normal(size=v).astype(np.float32)}


def test_full_report_matches_probes(tensors: dict[str, np.ndarray]) -> None:
    t = tensors
    steps: list[str] = []
    inputs = ProbeInputs(counts=t["counts"], output_weight=t["w"], final_ln_bias=t["b_ln"], output_bias=t["bias"])
    report = build_report(inputs, bins=5, progress=steps.append)
    assert len(steps) == report_steps(inputs, partition=True)
    seen = t["counts"] > 0
    scores = t["w"].astype(np.float64) @ t["b_ln"]
    fd = report["frequency_direction"]
    assert fd["present"] and fd["tokens"] == int(seen.sum())
    assert fd["spearman"] == pytest.approx(stats.spearmanr(scores[seen], t["counts"][seen]).statistic, abs=1e-6)
    assert fd["spearman"] > 0.8
    iso = report["isotropy"]
    assert iso["mean_cosine"] == pytest.approx(probes.mean_pairwise_cosine(t["w"]))
    assert iso["mean_cosine_without_bias_direction"] < iso["mean_cosine"]
    assert 0 < iso["partition_ratio"] < 1
    ob = report["output_bias"]
    assert ob["spearman"] == pytest.approx(stats.spearmanr(t["bias"][seen], t["counts"][seen]).statistic, abs=1e-9)
    assert ob["norm"] == pytest.approx(float(np.linalg.norm(t["bias"])), rel=1e-6)
    assert sum(row["tokens"] for row in report["frequency_bins"]) == int(seen.sum())
    assert len(report["frequency_bins"]) == 5


def test_absent_roles_are_reported_not_errors(tensors: dict[str, np.ndarray]) -> None:
    t = tensors
    report = build_report(ProbeInputs(counts=t["counts"], output_weight=t["w"]), partition=False)
    assert report["frequency_direction"]["present"] is False
    assert "final LayerNorm bias" in report["frequency_direction"]["note"]
    assert report["output_bias"] == {**report["output_bias"], "present": False, "note": "no output bias",
                                     "kl_unigram_to_bias": None}
    assert report["isotropy"]["mean_cosine"] is not None
    assert report["isotropy"]["partition_ratio"] is None
    assert report["frequency_bins"] == []


def test_zero_b_ln_defines_no_direction(tensors: dict[str, np.ndarray]) -> None:
    t = tensors
    report = build_report(ProbeInputs(counts=t["counts"], output_weight=t["w"], final_ln_bias=np.zeros(32, np.float32)),
                          partition=False)
    assert report["frequency_direction"]["present"] is False
    assert "all zeros" in report["frequency_direction"]["note"]
    assert report["isotropy"]["mean_cosine_without_bias_direction"] is None


def test_finish_report_is_the_whole_command_report(tmp_path: Path) -> None:
    from nbcli.counts import UnigramCounts, write_counts
    from nbcli.reports.probe_bias import finish_report, load_probe_inputs
    from tests.checkpoint.builders import V, gpt2_tensors, save

    path = save(tmp_path / "m.safetensors", gpt2_tensors())
    counts = np.arange(V, dtype=np.int64) * 3
    write_counts(tmp_path / "c.safetensors", UnigramCounts(counts=counts, metadata={}))
    inputs, header, warnings = load_probe_inputs(path, tmp_path / "c.safetensors")
    kept = dict(header)
    report, arrays = finish_report(inputs, header, warnings, bins=4, smoothing_k=0.5, partition=False)
    assert header == kept  # the caller's header is not consumed
    assert report["checkpoint"] == str(path) and report["architecture"] == "gpt2"
    assert report["warnings"] == warnings and "counts_file" not in report
    assert report["counts"]["path"] == header["counts_file"]["path"]  # the file's identity joins the counts section
    assert report["counts"]["total"] == int(counts.sum()) and report["counts"]["smoothing_k"] == 0.5
    assert len(report["frequency_bins"]) <= 4 and "_arrays" not in report
    assert arrays["scores"].shape == (V,)
    sections = build_report(inputs, bins=4, smoothing_k=0.5, partition=False)
    for key in ("frequency_direction", "isotropy", "output_bias", "frequency_bins"):
        assert report[key] == sections[key], key


@pytest.mark.parametrize("partition, whiten", [(True, False), (False, True), (True, True)])
def test_rows_whose_squares_overflow_float32_are_an_error(tensors: dict[str, np.ndarray], partition: bool,
                                                         whiten: bool) -> None:
    """The moments are float64 now, but the row statistics and logits are float32: a row whose squared
    length overflows float32 is refused as before, not reported as a wrong mean cosine."""
    from nbcli.errors import CheckpointError

    t = tensors
    w = t["w"].copy()
    w[5] = 1e19  # ||w||^2 ~ 3e39 > float32 max; the float64 Gram matrix stays finite
    with pytest.raises(CheckpointError, match="non-finite values .or values whose products overflow float32"):
        build_report(ProbeInputs(counts=t["counts"], output_weight=w), partition=partition, whiten=whiten)
