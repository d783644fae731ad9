"""Attention guidance (paper 001): pattern matrices vs app. A.2, the O(T) loss vs the explicit map."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis.patterns import (allowed_keys, assign_heads, one_hot_targets, parse_patterns, pattern_matrix,
                                     period_piece_ids)
from nbcli.errors import ConfigError
from nbcli.train.guidance import Guidance, ag_alpha, auto_alpha, explicit_ag_loss, one_hot_ag_loss, parse_alpha


def a2_next(n: int) -> np.ndarray:
    """App. A.2 written out with 1-based p, q: 1 if q = p+1; 1/n on row p = n; else 0."""
    P = np.zeros((n, n))
    for p in range(1, n + 1):
        for q in range(1, n + 1):
            if p == n:
                P[p - 1, q - 1] = 1 / n
            elif q == p + 1:
                P[p - 1, q - 1] = 1
    return P


def a2_prev(n: int) -> np.ndarray:
    P = np.zeros((n, n))
    for p in range(1, n + 1):
        for q in range(1, n + 1):
            if p == 1:
                P[p - 1, q - 1] = 1 / n
            elif q == p - 1:
                P[p - 1, q - 1] = 1
    return P


def a2_first(n: int) -> np.ndarray:
    P = np.zeros((n, n))
    P[:, 0] = 1
    return P


@pytest.mark.parametrize("name,reference", [("next", a2_next), ("prev", a2_prev), ("first", a2_first)])
@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_static_patterns_equal_appendix_a2(name: str, reference, n: int) -> None:
    ids = torch.zeros(1, n, dtype=torch.long)
    P = pattern_matrix(name, ids, torch.tensor([n]), causal=False)
    np.testing.assert_allclose(P[0].numpy(), reference(n), atol=0)


def test_delim_and_period_patterns() -> None:
    # "<s> Welcome to EMNLP . </s>" (paper 001 fig. 2) with ids bos=1, eos=2, period=7
    ids = torch.tensor([[1, 10, 11, 12, 7, 2]])
    P = pattern_matrix("delim", ids, torch.tensor([6]), causal=False, delim_ids=(1, 2))
    expected = np.zeros((6, 6))
    expected[:, [0, 5]] = 0.5
    np.testing.assert_allclose(P[0].numpy(), expected)
    P = pattern_matrix("period", ids, torch.tensor([6]), causal=False, period_ids=(7,))
    expected = np.zeros((6, 6))
    expected[:, 4] = 1
    np.testing.assert_allclose(P[0].numpy(), expected)
    # no period anywhere: rows are uniform (our documented choice)
    P = pattern_matrix("period", ids, torch.tensor([6]), causal=False, period_ids=(99,))
    np.testing.assert_allclose(P[0].numpy(), np.full((6, 6), 1 / 6))


def test_causal_patterns_see_only_the_past_and_padding_rows_are_empty() -> None:
    ids = torch.tensor([[1, 7, 5, 7, 0, 0]])
    P = pattern_matrix("period", ids, torch.tensor([4]), causal=True, period_ids=(7,))
    expected = np.zeros((6, 6))
    expected[0, 0] = 1.0                      # no period yet: uniform over the one visible key
    expected[1, 1] = expected[2, 1] = 1.0
    expected[3, [1, 3]] = 0.5
    np.testing.assert_allclose(P[0].numpy(), expected)
    P = pattern_matrix("prev", ids, torch.tensor([4]), causal=True)
    assert P[0, 0, 0] == 1 and P[0, 3, 2] == 1 and P[0, 4:].abs().sum() == 0
    assert torch.allclose(P.sum(-1)[0, :4], torch.ones(4))
    with pytest.raises(ConfigError, match="causal"):
        one_hot_targets("next", torch.tensor([4]), 6, causal=True)


def _random_qk(B: int, G: int, T: int, dh: int, seed: int, scale: float = 1.5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, G, T, dh, generator=g, dtype=torch.float64) * scale).float()
    k = (torch.randn(B, G, T, dh, generator=g, dtype=torch.float64) * scale).float()
    return q, k


@given(seed=st.integers(0, 10_000), T=st.integers(1, 24), block=st.integers(1, 9),
       name=st.sampled_from(["next", "prev", "first"]), causal=st.booleans())
def test_one_hot_loss_equals_explicit_map_mse(seed: int, T: int, block: int, name: str, causal: bool) -> None:
    if causal and name == "next":
        return
    rng = np.random.default_rng(seed)
    B = 3
    lengths = torch.tensor(rng.integers(1, T + 1, size=B))
    q, k = _random_qk(B, 2, T, 8, seed)
    ids = torch.zeros(B, T, dtype=torch.long)
    P = pattern_matrix(name, ids, lengths, causal)
    explicit = explicit_ag_loss(q, k, P, lengths, causal)
    fast = one_hot_ag_loss(q, k, one_hot_targets(name, lengths, T, causal), lengths, causal, block=block)
    assert abs(float(fast) - float(explicit)) <= 1e-5 * max(1.0, abs(float(explicit)))


def test_one_hot_loss_gradients_match_explicit() -> None:
    B, G, T = 2, 2, 20
    lengths = torch.tensor([20, 13])
    q, k = _random_qk(B, G, T, 8, 3)
    q.requires_grad_(True)
    k.requires_grad_(True)
    P = pattern_matrix("prev", torch.zeros(B, T, dtype=torch.long), lengths, causal=False)
    g_explicit = torch.autograd.grad(explicit_ag_loss(q, k, P, lengths, False), (q, k))
    fast = one_hot_ag_loss(q, k, one_hot_targets("prev", lengths, T, False), lengths, False, block=6)
    g_fast = torch.autograd.grad(fast, (q, k))
    for a, b in zip(g_explicit, g_fast):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def _forced_qk(P: torch.Tensor, dh: int, c: float = 60.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k whose attention equals P row by row: k_j = c e_j, q_i = c * indicator(P_i > 0), and
    q_i = 0 for rows that are uniform over all visible keys (then every score ties)."""
    B, T, _ = P.shape
    k = torch.zeros(B, 1, T, dh)
    k[:, 0, torch.arange(T), torch.arange(T)] = c
    support = (P > 0).float()
    q = (support * c)[:, None]                                                       # [B, 1, T, T]
    q = torch.nn.functional.pad(q, (0, dh - T))
    return q, k


@pytest.mark.parametrize("name", ["next", "prev", "first", "delim", "period"])
def test_loss_of_a_head_forced_to_its_pattern_is_zero(name: str) -> None:
    T, dh = 8, 16
    ids = torch.tensor([[1, 5, 7, 6, 7, 2, 0, 0], [1, 5, 6, 5, 6, 5, 6, 2]])
    lengths = torch.tensor([6, 8])
    P = pattern_matrix(name, ids, lengths, causal=False, delim_ids=(1, 2), period_ids=(7,))
    q, k = _forced_qk(P, dh)
    uniform_rows = (P == allowed_keys(lengths, T, False).float() / lengths[:, None, None]).all(-1)
    q = q.masked_fill(uniform_rows[:, None, :, None], 0.0)
    guidance = Guidance(heads={0: name}, delim_ids=(1, 2), period_ids=(7,))
    loss = guidance.loss([(q, k)], ids, lengths, causal=False)
    assert float(loss) < 1e-6
    # and a head forced to another pattern is far from it
    other = Guidance(heads={0: "first" if name != "first" else "prev"}, reduction="frobenius")
    assert float(other.loss([(q, k)], ids, lengths, causal=False)) > 0.1


def test_padding_never_contributes() -> None:
    T = 10
    lengths = torch.tensor([10, 6, 3])
    ids = torch.randint(3, 9, (3, T))
    ids[:, 0] = 1
    q, k = _random_qk(3, 3, T, 8, 11)
    guidance = Guidance(heads={0: "prev", 1: "first", 2: "period"}, period_ids=(7,))
    loss = guidance.loss([(q, k)], ids, lengths, causal=False)
    # garbage in the padded positions (queries, keys and ids) changes nothing
    q2, k2, ids2 = q.clone(), k.clone(), ids.clone()
    for b, n in enumerate(lengths.tolist()):
        q2[b, :, n:] = torch.randn_like(q2[b, :, n:]) * 50
        k2[b, :, n:] = torch.randn_like(k2[b, :, n:]) * 50
        ids2[b, n:] = 7
    assert torch.allclose(loss, guidance.loss([(q2, k2)], ids2, lengths, causal=False), atol=1e-6)
    # frobenius: the batch loss is the mean of each sequence's loss computed alone, unpadded; mse: the
    # same sums over B x T^2 entries of the padded maps (padding entries count as zero error)
    frob = Guidance(heads=guidance.heads, period_ids=(7,), reduction="frobenius")
    alone = [frob.loss([(q[b:b + 1, :, :n], k[b:b + 1, :, :n])], ids[b:b + 1, :n], torch.tensor([n]), False)
             for b, n in enumerate(lengths.tolist())]
    assert torch.allclose(frob.loss([(q, k)], ids, lengths, causal=False), torch.stack(alone).mean(), atol=1e-5)
    alone_mse = [guidance.loss([(q[b:b + 1, :, :n], k[b:b + 1, :, :n])], ids[b:b + 1, :n], torch.tensor([n]),
                               False) * n * n for b, n in enumerate(lengths.tolist())]
    assert torch.allclose(loss, torch.stack(alone_mse).sum() / (3 * T * T), atol=1e-6)


def test_head_assignment_follows_section_4_5() -> None:
    assert assign_heads(8, 0.5, None, causal=False) == {0: "next", 1: "prev", 2: "first", 3: "first"}
    assert assign_heads(4, 0.5, None, causal=True) == {0: "prev", 1: "first"}
    assert assign_heads(4, 0.0, None, causal=False) == {}
    assert assign_heads(4, 1.0, ("delim", "period"), causal=True) == {0: "delim", 1: "period", 2: "period",
                                                                     3: "period"}
    with pytest.raises(ConfigError, match="impossible in a causal model"):
        assign_heads(4, 0.5, ("next",), causal=True)
    with pytest.raises(ConfigError, match="rounds to 0"):
        assign_heads(4, 0.1, None, causal=False)
    with pytest.raises(ConfigError, match="lists 3 patterns"):
        assign_heads(4, 0.5, ("next", "prev", "first"), causal=False)
    with pytest.raises(ConfigError, match="unknown pattern"):
        parse_patterns("next,diagonal")


def test_alpha_decays_linearly_to_zero() -> None:
    assert ag_alpha(0, 100.0, 50) == 100.0
    assert math.isclose(ag_alpha(25, 100.0, 50), 50.0)
    assert ag_alpha(50, 100.0, 50) == 0.0 and ag_alpha(80, 100.0, 50) == 0.0


def test_alpha_hold_then_linear_decay_as_the_release() -> None:
    """The release's linear_schedule_for_scale: 1 before the hold ends, then (total - step) / (total - hold)."""
    def release(cur: int, tot: int, stagnant: int) -> float:
        return 1.0 if cur < stagnant else max(0.0, (tot - cur) / max(1, tot - stagnant))

    for step in range(0, 120, 7):
        assert math.isclose(ag_alpha(step, 10.0, 100, hold_steps=40), 10.0 * release(step, 100, 40))
        assert math.isclose(ag_alpha(step, 10.0, 100, hold_steps=0), 10.0 * release(step, 100, 0))


def test_auto_alpha_and_parse() -> None:
    assert auto_alpha(6.0, 0.03) == pytest.approx(200.0)
    with pytest.raises(ConfigError, match="auto"):
        auto_alpha(6.0, 0.0)
    assert parse_alpha("auto") is None and parse_alpha("AUTO") is None
    assert parse_alpha("100") == 100.0 and parse_alpha(2.5) == 2.5
    for bad in ("-1", "nan", "ten", "inf"):
        with pytest.raises(ConfigError, match="--ag-alpha"):
            parse_alpha(bad)


def _softmax_maps(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)


@given(seed=st.integers(0, 10_000), T=st.integers(2, 12), layers=st.integers(1, 3))
def test_mse_reduction_equals_the_releases_nn_mseloss(seed: int, T: int, layers: int) -> None:
    """Independent computation: explicit softmax maps, app. A.2 patterns written out above, and one
    torch.nn.MSELoss() per (layer, pattern group), summed (AttentionGuidance trainer_ag.compute_ag_loss)."""
    B, H, dh = 2, 5, 8
    heads = {0: "next", 1: "prev", 2: "first", 4: "first"}       # head 3 unguided; [First] a group of 2
    qks = [_random_qk(B, len(heads), T, dh, seed + 17 * layer) for layer in range(layers)]
    ids = torch.zeros(B, T, dtype=torch.long)
    full = torch.full((B,), T)
    ours = Guidance(heads=heads).loss(qks, ids, full, causal=False)
    mse = torch.nn.MSELoss()
    refs = {"next": a2_next(T), "prev": a2_prev(T), "first": a2_first(T)}
    expected = 0.0
    for q, k in qks:
        maps = _softmax_maps(q, k)                                  # [B, 4 guided slots, T, T]
        for name, slots in (("next", [0]), ("prev", [1]), ("first", [2, 3])):
            target = torch.tensor(refs[name]).expand(B, len(slots), T, T)
            expected += float(mse(maps[:, slots], target))
    assert float(ours) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    # frobenius: eq. 2 summed over guided heads and layers (eq. 3), averaged over the batch
    frob = Guidance(heads=heads, reduction="frobenius").loss(qks, ids, full, causal=False)
    literal = 0.0
    for q, k in qks:
        maps = _softmax_maps(q, k)
        for slot, name in enumerate(("next", "prev", "first", "first")):
            literal += float(((maps[:, slot] - torch.tensor(refs[name])) ** 2).sum()) / B
    assert float(frob) == pytest.approx(literal, rel=1e-5)


def test_period_pieces() -> None:
    assert period_piece_ids(["<s>", ".", "\u2581.", "..", "a.", "\u0120."]) == (1, 2, 5)


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 10_000), T=st.integers(1, 24), block=st.integers(1, 9),
       name=st.sampled_from(["delim", "period"]), causal=st.booleans())
def test_blockwise_dense_rows_equal_the_explicit_map(seed: int, T: int, block: int, name: str, causal: bool) -> None:
    """[Delim]/[Period] a block of rows at a time (issue 34: no [B, G, T, T] map held) give the row errors
    and gradients of the explicit map H = softmax(q k^T / sqrt(dh)) against P (eq. 2)."""
    from nbcli.train.guidance import dense_row_errors, explicit_row_errors, guided_maps

    rng = np.random.default_rng(seed)
    B = 3
    lengths = torch.tensor(rng.integers(1, T + 1, size=B))
    ids = torch.tensor(rng.integers(0, 5, size=(B, T)))
    P = pattern_matrix(name, ids, lengths, causal, delim_ids=(0,), period_ids=(1, 2))
    q, k = _random_qk(B, 2, T, 8, seed)
    q.requires_grad_(True)
    k.requires_grad_(True)
    explicit = explicit_row_errors(guided_maps(q, k, lengths, causal), P, lengths)
    blockwise = dense_row_errors(q, k, P, lengths, causal, block=block)
    torch.testing.assert_close(blockwise, explicit, atol=1e-6, rtol=1e-5)
    weights = torch.tensor(rng.standard_normal(explicit.shape), dtype=explicit.dtype)
    for a, b in zip(torch.autograd.grad((explicit * weights).sum(), (q, k)),
                    torch.autograd.grad((blockwise * weights).sum(), (q, k))):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_one_hot_blocks_copy_no_index_to_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row positions are one arange sliced per block: no `torch.tensor(start, device=...)` per block
    (on CUDA each was a host-to-device copy, ~96 per micro-step at gpt2-124m; issue 34)."""
    made: list[object] = []
    real = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **kw: made.append(a) or real(*a, **kw))
    q, k = _random_qk(2, 2, 20, 8, 1)
    lengths = torch.full((2,), 20)
    one_hot_ag_loss(q, k, one_hot_targets("prev", lengths, 20, True), lengths, True, block=4)
    assert made == []
