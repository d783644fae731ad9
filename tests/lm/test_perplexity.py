from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nbcli.lm.perplexity import Scored, evaluate, tokenize_documents, windows
from nbcli.lm.runner import load_runner


def _scored(seqs: list[list[int]]) -> Scored:
    return Scored([np.asarray(s, dtype=np.int64) for s in seqs], words=sum(len(s) for s in seqs),
                  documents=len(seqs), eos_id=None, first_from="test")


@given(st.integers(2, 300), st.integers(2, 64), st.data())
def test_windows_score_every_target_once_with_enough_context(length: int, context: int, data: st.DataObject) -> None:
    stride = data.draw(st.integers(1, context))
    seen = []
    for i, (start, end, first) in enumerate(windows(length, context, stride)):
        assert end - start <= context and start < first <= end
        seen.extend(range(first, end))
        if i > 0:
            assert all(t - start >= min(context - stride, t) for t in range(first, end))
    assert seen == list(range(1, length))


def test_perplexity_equals_a_hand_summed_forward(nb_lm: Path) -> None:
    runner = load_runner(nb_lm)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, runner.vocab_size, n).tolist() for n in (5, 17, 40, 150)]  # 150 > context 64
    got = evaluate(runner, _scored(seqs), batch_size=3, stride=24)
    torch.set_grad_enabled(False)
    nll, count, p_sum = 0.0, 0, torch.zeros(runner.vocab_size, dtype=torch.float64)
    for seq in seqs:
        for start, end, first in windows(len(seq), 64, 24):
            logits = runner.module(torch.tensor([seq[start:end]]))[0][0].double()
            for t in range(first, end):
                logp = torch.log_softmax(logits[t - start - 1], -1)
                nll -= float(logp[seq[t]])
                p_sum += logp.exp()
                count += 1
    assert got.tokens == count == sum(len(s) - 1 for s in seqs)
    assert got.loss == pytest.approx(nll / count, abs=1e-4)
    counts = np.bincount(np.concatenate([s[1:] for s in seqs]), minlength=runner.vocab_size)
    log_q = torch.from_numpy(np.log(counts + 1.0) - math.log(counts.sum() + runner.vocab_size))
    assert got.kl_unigram == pytest.approx(float((p_sum / count * ((p_sum / count).log() - log_q)).sum()), abs=1e-4)
    torch.set_grad_enabled(True)


def test_perplexity_equals_transformers_own_loss(hf_lm: Path) -> None:
    from transformers import AutoModelForCausalLM

    runner = load_runner(hf_lm)
    seq = np.random.default_rng(1).integers(0, runner.vocab_size, 50).tolist()
    got = evaluate(runner, _scored([seq, seq[:20]]), batch_size=2)
    model = AutoModelForCausalLM.from_pretrained(str(hf_lm)).eval()
    with torch.no_grad():
        a = model(torch.tensor([seq]), labels=torch.tensor([seq])).loss.item()
        b = model(torch.tensor([seq[:20]]), labels=torch.tensor([seq[:20]])).loss.item()
    assert got.loss == pytest.approx((a * 49 + b * 19) / 68, abs=1e-4)


def test_kl_without_ln_bias_equals_the_lambda_zero_model(nb_lm: Path) -> None:
    from nbcli.surgery import SurgeryOptions

    runner = load_runner(nb_lm)
    scored = _scored([np.random.default_rng(2).integers(0, runner.vocab_size, 30).tolist()])
    full = evaluate(runner, scored)
    runner.set_surgery(SurgeryOptions(scale_ln_bias=0.0))
    zero = evaluate(runner, scored)
    assert full.kl_unigram_without_ln_bias == pytest.approx(zero.kl_unigram, abs=1e-6)
    assert full.kl_unigram != pytest.approx(zero.kl_unigram, abs=1e-3)


def test_documents_are_scored_as_count_unigrams_counts_them(nb_lm: Path, sp_model: Path) -> None:
    from nbcli.tokenizers import load_tokenizer

    tok = load_tokenizer(sp_model)
    docs = ["The model is a bias.", "Frequency token."]
    scored = tokenize_documents(docs, tok, 500)
    assert scored.first_from == "eos" and scored.words == 5 + 1 + 2 + 1
    assert [s.tolist() for s in scored.sequences] == [[tok.eos_id, *tok.encode(d), tok.eos_id] for d in docs]
    assert scored.target_counts(500)[tok.eos_id] == 2


def test_token_stats_equal_hand_summed_forwards_with_and_without_each_shift(nb_lm: Path) -> None:
    """TokenStats (paper 003 fig. 1, paper 000 fig. 4) against a position-by-position forward in
    float64, with logits - W b_LN and logits - b computed independently from the module's tensors."""
    runner = load_runner(nb_lm)
    rng = np.random.default_rng(5)
    V = runner.vocab_size
    seqs = [rng.integers(0, V, n).tolist() for n in (6, 30, 90)]
    model = runner.module
    shifts = {"ln_bias": (model.output_weight.double() @ model.ln_f.bias.double()).detach(),
              "output_bias": model.head_bias.double().detach()}
    got = evaluate(runner, _scored(seqs), batch_size=2, stride=20, token_stats=True,
                   token_shifts={k: v.float() for k, v in shifts.items()}).token_stats
    assert got is not None
    want = {name: {"p": np.zeros(V), "lp": np.zeros(V), "n": np.zeros(V), "tp": np.zeros(V), "tlp": np.zeros(V)}
            for name in ("full", *shifts)}
    with torch.no_grad():
        for seq in seqs:
            for start, end, first in windows(len(seq), 64, 20):
                logits = model(torch.tensor([seq[start:end]]))[0][0].double()
                for t in range(first, end):
                    for name in want:
                        row = logits[t - start - 1] - (shifts[name] if name in shifts else 0)
                        logp = torch.log_softmax(row, -1).numpy()
                        w, y = want[name], seq[t]
                        w["p"] += np.exp(logp)
                        w["lp"] += logp
                        w["n"][y] += 1
                        w["tp"][y] += math.exp(logp[y])
                        w["tlp"][y] += logp[y]
    for name, stats in (("full", got), *got.without.items()):
        w = want[name]
        assert stats.positions == sum(len(s) - 1 for s in seqs)
        np.testing.assert_allclose(stats.prob_sum, w["p"], atol=1e-4)
        np.testing.assert_allclose(stats.log_prob_sum, w["lp"], rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(stats.target_count, w["n"])
        np.testing.assert_allclose(stats.target_prob_sum, w["tp"], atol=1e-4)
        np.testing.assert_allclose(stats.target_log_prob_sum, w["tlp"], rtol=1e-4, atol=1e-3)
    assert set(got.without) == {"ln_bias", "output_bias"}
