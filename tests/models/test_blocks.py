"""The shared blocks of both reference models, against independent computations on random inputs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.errors import ConfigError
from nbcli.models.blocks import attention, feed_forward, merge_heads, position_ids, split_heads, write_kv


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None,
                        causal: bool, past: int) -> torch.Tensor:
    """softmax(q k^T / sqrt(dh) + mask) v, one query at a time in float64, heads concatenated: [B, T, H * dh]."""
    B, H, T, dh = q.shape
    out = torch.zeros(B, T, H * dh, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            allowed = [j for j in range(k.size(2)) if (key_mask is None or key_mask[b, j])
                       and (not causal or j <= past + t)]
            for h in range(H):
                scores = torch.tensor([float(q[b, h, t].double() @ k[b, h, j].double()) / math.sqrt(dh)
                                       for j in allowed], dtype=torch.float64)
                p = torch.softmax(scores, dim=0)
                out[b, t, h * dh:(h + 1) * dh] = sum(p[i] * v[b, h, j].double() for i, j in enumerate(allowed))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(0, 4), st.booleans(), st.booleans(),
       st.integers(0, 2 ** 31 - 1))
def test_attention_with_its_cache_write_is_softmax_qk_v_over_every_cached_key(
        B: int, H: int, T: int, past: int, causal: bool, padded: bool, seed: int) -> None:
    """T new queries at positions past .. past + T - 1: their keys/values are written into the cache
    buffers after the `past` held ones, and the result is the attention over all past + T keys
    (padded keys and, causal, later keys excluded)."""
    g = torch.Generator().manual_seed(seed)
    dh, S = 4, past + T
    q, k_new, v_new = (torch.randn(B, H, T, dh, generator=g) for _ in range(3))
    keys, values = torch.randn(B, H, S + 2, dh, generator=g), torch.randn(B, H, S + 2, dh, generator=g)
    held_k, held_v = keys[:, :, :past].clone(), values[:, :, :past].clone()
    key_mask = None
    if padded:
        key_mask = torch.rand(B, S, generator=g) < 0.7
        key_mask[:, 0] = True                       # every query keeps a key to attend to
    got = attention(q, k_new, v_new, key_mask, causal, (keys, values), past)
    assert got.shape == (B, T, H * dh)
    assert torch.equal(keys[:, :, :past], held_k) and torch.equal(keys[:, :, past:S], k_new)
    assert torch.equal(values[:, :, :past], held_v) and torch.equal(values[:, :, past:S], v_new)
    want = reference_attention(q, keys[:, :, :S], values[:, :, :S], key_mask, causal, past)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_attention_without_a_cache_equals_the_cached_path() -> None:
    """No buffers: the same numbers as writing k, v into empty buffers at past 0."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g) for _ in range(3))
    kv = (torch.zeros(2, 3, 8, 4), torch.zeros(2, 3, 8, 4))
    torch.testing.assert_close(attention(q, k, v, None, True), attention(q, k, v, None, True, kv, 0))


def test_write_kv_returns_views_of_the_buffers() -> None:
    keys, values = torch.zeros(1, 2, 6, 3), torch.zeros(1, 2, 6, 3)
    k, v = torch.ones(1, 2, 2, 3), 2 * torch.ones(1, 2, 2, 3)
    all_k, all_v = write_kv((keys, values), k, v, 3)
    assert all_k.shape == (1, 2, 5, 3) and all_k.data_ptr() == keys.data_ptr()
    assert keys[:, :, 3:5].eq(1).all() and keys[:, :, :3].eq(0).all() and values[:, :, 3:5].eq(2).all()


def test_split_and_merge_heads_are_inverse_and_keep_each_head_a_slice() -> None:
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4) and torch.equal(heads[:, 1], x[:, :, 4:8])
    assert torch.equal(merge_heads(heads), x)


def test_feed_forward_is_fc_out_of_act_of_fc_in() -> None:
    fc_in, fc_out = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)
    x = torch.randn(3, 4)
    want = (torch.relu(x @ fc_in.weight.T + fc_in.bias)) @ fc_out.weight.T + fc_out.bias
    torch.testing.assert_close(feed_forward(x, fc_in, fc_out, torch.relu), want)


def test_position_ids_follow_the_past_and_refuse_past_the_table() -> None:
    assert position_ids(3, 2, 8, "seq_len", torch.device("cpu")).tolist() == [3, 4]
    with pytest.raises(ConfigError, match="sequence length 9 exceeds the model's max_positions 8"):
        position_ids(5, 4, 8, "max_positions", torch.device("cpu"))
