"""Paper 000 fig. 4 for translation models (nbcli.translation_frequency, `nb eval --task translation
--by-frequency`): the per-position log-probabilities against an independent softmax, and the whole
report against the model run pair by pair, unbatched, and counts made by the test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.translation_frequency import reference_log_probs, sum_by_token
from tests.cli.helpers import assert_one_line_error, invoke


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 5), st.integers(2, 9), st.integers(0, 2**31 - 1), st.booleans())
def test_log_probs_match_an_independent_softmax(batch: int, length: int, vocab: int, seed: int, with_bias: bool) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 3, (batch, length, vocab))
    labels = rng.integers(0, vocab, (batch, length))
    labels[rng.random((batch, length)) < 0.3] = -100
    bias = rng.normal(0, 2, vocab) if with_bias else None
    ids, with_b, without = reference_log_probs(torch.tensor(logits, dtype=torch.float32), torch.tensor(labels),
                                               None if bias is None else torch.tensor(bias, dtype=torch.float32))
    keep = labels != -100
    rows = logits[keep].astype(np.float32).astype(np.float64)
    expected_ids = labels[keep]

    def log_p(z: np.ndarray) -> np.ndarray:
        z = z - z.max(1, keepdims=True)
        return (z - np.log(np.exp(z).sum(1, keepdims=True)))[np.arange(len(z)), expected_ids]

    np.testing.assert_array_equal(ids.numpy(), expected_ids)
    np.testing.assert_allclose(with_b.numpy(), log_p(rows), atol=1e-9)
    if bias is None:
        assert without is None
    else:
        np.testing.assert_allclose(without.numpy(), log_p(rows - bias.astype(np.float32)), atol=1e-9)


def test_sum_by_token() -> None:
    np.testing.assert_array_equal(sum_by_token(np.array([2, 0, 2]), np.array([1.0, 2.0, 3.5]), 4), [2.0, 0, 4.5, 0])


@pytest.fixture(scope="module")
def target_counts(tmp_path_factory: pytest.TempPathFactory, parallel_corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("mt-counts") / "en.safetensors"
    result = invoke("count-unigrams", parallel_corpus / "train.en", "-t", parallel_corpus / "joint.model", "-o", out)
    assert result.exit_code == 0, result.output
    return out


def _unbatched(run: Path, parallel_corpus: Path) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Each reference token's log-probabilities, one pair at a time (no padding), with and without b."""
    from nbcli.translate import load_translation_model, source_ids

    tm = load_translation_model(run, device="cpu")
    cfg = tm.cfg
    sources = (parallel_corpus / "valid.de").read_text(encoding="utf-8").splitlines()
    targets = (parallel_corpus / "valid.en").read_text(encoding="utf-8").splitlines()
    with_b: dict[int, list[float]] = {}
    without: dict[int, list[float]] = {}
    with torch.inference_mode():
        for src, tgt in zip(source_ids(tm, sources), tm.target_tokenizer.encode_batch(targets)):
            logits, _ = tm.model(torch.tensor([src]), torch.tensor([[cfg.decoder_start_id, *tgt]]))
            z = logits[0].double()
            for t, label in enumerate([*tgt, cfg.eos_id]):
                with_b.setdefault(label, []).append(float(torch.log_softmax(z[t], -1)[label]))
                bias = tm.model.final_logits_bias.double()
                without.setdefault(label, []).append(float(torch.log_softmax(z[t] - bias, -1)[label]))
    return with_b, without


def test_report_equals_the_model_run_pair_by_pair(tmp_path: Path, translation_run: Path, parallel_corpus: Path,
                                                  target_counts: Path) -> None:
    from nbcli.counts import read_counts
    from nbcli.ops import unigram_log_prior

    plot = tmp_path / "fig4.png"
    result = invoke("eval", "--task", "translation", translation_run, "--corpus", parallel_corpus / "valid",
                    "--by-frequency", target_counts, "--bins", "4", "--by-frequency-plot", plot, "--json")
    assert result.exit_code == 0, result.output
    section = json.loads(result.stdout)["by_frequency"]
    with_b, without = _unbatched(translation_run, parallel_corpus)
    assert section["reference_tokens"] == sum(map(len, with_b.values())) and section["skipped_long_pairs"] == 0
    assert section["tokens"] == len(with_b) and section["output_bias_dropped"] is True
    counts = read_counts(target_counts).counts
    log_u = unigram_log_prior(counts, 500, 1.0).double().numpy()   # the model's target rows: the joint vocabulary
    x = np.array([log_u[t] for t in with_b])
    edges = np.linspace(x.min(), x.max(), 5)
    for b, row in enumerate(section["bins"]):
        inside = [t for t, xi in zip(with_b, x) if edges[b] <= xi < edges[b + 1] or (b == 3 and xi == edges[4])]
        assert row["tokens"] == len(inside)
        if inside:
            assert row["mean_log_prob"] == pytest.approx(np.mean([np.mean(with_b[t]) for t in inside]), abs=1e-6)
            assert row["mean_log_prob_without_bias"] == pytest.approx(np.mean([np.mean(without[t]) for t in inside]),
                                                                      abs=1e-6)
    assert plot.read_bytes().startswith(b"\x89PNG") and section["plot"] == str(plot)
    table = invoke("eval", "--task", "translation", translation_run, "--corpus", parallel_corpus / "valid",
                   "--by-frequency", target_counts, "--bins", "4")
    assert table.exit_code == 0 and "bins of log-unigram probability" in table.stdout


def test_bad_combinations_are_one_line(tmp_path: Path, translation_run: Path, parallel_corpus: Path,
                                       target_counts: Path) -> None:
    base = ["eval", "--task", "translation", "--corpus", parallel_corpus / "valid"]
    hyps = tmp_path / "h.txt"
    hyps.write_text("x\n" * 40)
    result = invoke(*base, "--hyps", hyps, "--by-frequency", target_counts)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, "--by-frequency", "RUN_OR_CKPT")
    result = invoke(*base, translation_run, "--by-frequency-plot", tmp_path / "f.png")
    assert result.exit_code == 1 and not (tmp_path / "f.png").exists()
    assert_one_line_error(result.stderr, "needs --by-frequency")
    result = invoke(*base, translation_run, "--by-frequency", target_counts, "--by-frequency-plot", target_counts)
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, str(target_counts))


def test_counts_of_another_tokenizer_fail_before_anything_is_decoded(tmp_path: Path, translation_run: Path,
                                                                    parallel_corpus: Path, hf_bytelevel_json: Path,
                                                                    monkeypatch) -> None:  # noqa: ANN001
    """A counts file made with another tokenizer is refused in one line naming it, before the test
    corpus is decoded (a beam search over the whole test set would come first otherwise)."""
    import nbcli.translate

    counts = tmp_path / "other.safetensors"
    made = invoke("count-unigrams", parallel_corpus / "train.en", "-t", hf_bytelevel_json, "-o", counts)
    assert made.exit_code == 0, made.output

    def no_decoding(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("decoded before the counts were checked")

    monkeypatch.setattr(nbcli.translate, "translate_texts", no_decoding)
    result = invoke("eval", "--task", "translation", translation_run, "--corpus", parallel_corpus / "valid",
                    "--by-frequency", counts)
    assert result.exit_code == 1, result.output
    assert_one_line_error(result.stderr, str(counts))
