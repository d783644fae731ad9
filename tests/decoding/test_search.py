"""Greedy and beam search (nbcli.decoding): beam 1 is greedy, beam search finds a planted best sequence
greedy misses, it equals an exhaustive search when the beam holds every sequence, and a sentence's
output does not depend on its batch."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.decoding.search import beam_search, greedy_search, length_limits, normalised, search
from nbcli.decoding.seq2seq import Seq2SeqStepper, translate_ids
from nbcli.errors import ConfigError
from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from nbcli.padding import pad_rows

EOS, START = 0, 9


class TableStepper:
    """A toy model: log p(next | prefix) from a function of the prefix, for `rows` rows per sentence."""

    def __init__(self, logp, n: int, rows: int) -> None:  # noqa: ANN001
        self.logp = logp
        self.rows = rows
        self.prefixes: list[list[int]] = [[] for _ in range(n * rows)]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        for prefix, t in zip(self.prefixes, tokens.tolist()):
            if t != START:
                prefix.append(t)
        return torch.stack([self.logp(tuple(p)) for p in self.prefixes])

    def select(self, rows: torch.Tensor, within: bool = False) -> None:
        if within:   # the searches' promise: every row stays in its sentence's block of `rows` rows
            assert all(i // self.rows == j // self.rows for j, i in enumerate(rows.tolist()))
        self.prefixes = [list(self.prefixes[i]) for i in rows.tolist()]


def planted(prefix: tuple[int, ...]) -> torch.Tensor:
    """Vocabulary {EOS=0, a=1, b=2}. Greedy takes a (0.6) and then can only end badly (a a ... at 0.5 or
    a EOS at 0.1); b (0.4) is followed by EOS at 0.95: the best sequence is b EOS (0.38 vs at most 0.3)."""
    if prefix == ():
        p = [0.0, 0.6, 0.4]
    elif prefix[0] == 1:
        p = [0.1, 0.5, 0.4]
    else:
        p = [0.95, 0.025, 0.025]
    return torch.tensor(p).clamp_min(1e-12).log()


def test_beam_finds_the_planted_best_sequence_greedy_misses() -> None:
    greedy = greedy_search(TableStepper(planted, 1, 1), START, EOS, [6])[0]
    assert greedy.tokens[0] == 1                                         # greedy commits to a
    beam = beam_search(TableStepper(planted, 1, 2), START, EOS, [6], beam=2, lenpen=0.0)[0]
    assert beam.tokens == [2] and beam.finished
    assert beam.logprob == pytest.approx(math.log(0.4) + math.log(0.95), rel=1e-5)
    assert beam.logprob > greedy.logprob


def random_tree(seed: int, V: int):  # noqa: ANN201
    """A random model over prefixes (deterministic in the prefix): any next-token distribution."""
    def logp(prefix: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((seed, prefix)) & 0xFFFF_FFFF)
        return torch.log_softmax(torch.randn(V, generator=g) * 2, -1)
    return logp


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), V=st.integers(2, 3), limit=st.integers(1, 3),
       lenpen=st.sampled_from([0.0, 0.6, 1.0, 2.0]))
def test_a_beam_holding_every_sequence_equals_exhaustive_search(seed: int, V: int, limit: int, lenpen: float) -> None:
    """With K at least the number of sequences, beam search scores every one: its answer is the argmax of
    logprob / length^lenpen over all sequences that end in EOS, or stop at the limit, computed by enumeration."""
    logp = random_tree(seed, V)
    best, best_score = None, -math.inf
    for n in range(1, limit + 1):
        for seq in itertools.product(range(V), repeat=n):
            if EOS in seq[:-1] or (n < limit and seq[-1] != EOS):
                continue                                      # EOS ends a sequence; only the limit ends one without
            lp = sum(float(logp(seq[:i])[seq[i]]) for i in range(n))
            score = lp / n ** lenpen
            if score > best_score + 1e-9:
                best, best_score = seq, score
    K = sum(V ** n for n in range(1, limit + 1))
    found = beam_search(TableStepper(logp, 1, K), START, EOS, [limit], beam=K, lenpen=lenpen)[0]
    tokens = tuple(found.tokens) + ((EOS,) if found.finished else ())
    assert found.score == pytest.approx(best_score, rel=1e-5, abs=1e-6)
    assert tokens == best


def tiny_model(seed: int) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(src_vocab_size=30, tgt_vocab_size=30, eos_id=2, decoder_start_id=1, pad_id=0, src_eos_id=2,
                        d_model=16, n_head=2, d_ff=32, share_embeddings="all")
    m = Seq2SeqTransformer(cfg).eval()
    with torch.no_grad():
        m.final_logits_bias.normal_(0, 1.0)
        m.final_logits_bias[2] += 2.0       # EOS likely enough that sentences end before the limit
    return m


SOURCES = [[5, 6, 7, 2], [8, 2], [9, 10, 11, 12, 13, 2], [14, 15, 2]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_is_greedy(seed: int) -> None:
    m = tiny_model(seed)
    padded = pad_rows(SOURCES, 0)
    src, mask = padded.ids, padded.mask_if_padded
    limits = [12] * len(SOURCES)
    greedy = greedy_search(Seq2SeqStepper(m, src, mask, 1), 1, 2, limits)
    beam = beam_search(Seq2SeqStepper(m, src, mask, 1), 1, 2, limits, beam=1, lenpen=1.0)
    assert [h.tokens for h in beam] == [h.tokens for h in greedy]
    assert [h.finished for h in beam] == [h.finished for h in greedy]


@pytest.mark.parametrize("beam", [1, 4])
def test_a_sentence_does_not_depend_on_its_batch(beam: int) -> None:
    m = tiny_model(4)
    together = translate_ids(m, SOURCES, beam=beam)
    alone = [translate_ids(m, [s], beam=beam)[0] for s in SOURCES]
    assert [h.tokens for h in together] == [h.tokens for h in alone]
    for a, b in zip(together, alone):
        assert a.score == pytest.approx(b.score, abs=1e-4)


def test_greedy_tokens_are_the_argmax_of_the_full_forward_pass() -> None:
    m = tiny_model(5)
    for source, hyp in zip(SOURCES, translate_ids(m, SOURCES, beam=1)):
        tgt = torch.tensor([[1, *hyp.tokens]])
        logits, _ = m(torch.tensor([source]), tgt)
        expected = logits[0].argmax(-1).tolist()
        ending = [2] if hyp.finished else []
        assert expected[:len(hyp.tokens) + len(ending)] == hyp.tokens + ending


def test_beam_scores_are_length_normalised_logprobs_of_the_model() -> None:
    m = tiny_model(6)
    for source, hyp in zip(SOURCES, translate_ids(m, SOURCES, beam=3, lenpen=0.7)):
        ids = hyp.tokens + ([2] if hyp.finished else [])
        with torch.no_grad():
            logits, _ = m(torch.tensor([source]), torch.tensor([[1, *ids[:-1]]]))
        lp = float(torch.log_softmax(logits[0], -1).gather(1, torch.tensor(ids)[:, None]).sum())
        assert hyp.logprob == pytest.approx(lp, abs=1e-4)
        assert hyp.score == pytest.approx(normalised(lp, len(ids), 0.7), abs=1e-4)


def test_length_limits_and_checks() -> None:
    assert length_limits([4, 10], 1.2, 10, 100) == [14, 22]
    assert length_limits([4], 0.0, 0, 100) == [1] and length_limits([400], 2.0, 0, 64) == [64]
    hyps = search(TableStepper(lambda p: torch.tensor([-9.0, -0.1, -3.0]), 1, 1), START, EOS, [3])
    assert hyps[0].tokens == [1, 1, 1] and not hyps[0].finished
    with pytest.raises(ConfigError, match="--beam"):
        search(TableStepper(planted, 1, 1), START, EOS, [3], beam=0)
    with pytest.raises(ConfigError, match="--lenpen"):
        search(TableStepper(planted, 1, 2), START, EOS, [3], beam=2, lenpen=float("nan"))
