"""The blocks nb's two reference models share (`nbcli.models.lm`, `nbcli.models.seq2seq`), each written once.

    attention   y = softmax(Q K^T / sqrt(dh) + mask) V, heads merged      (Vaswani eq. 1; paper 001 eq. 1)
                every head through `F.scaled_dot_product_attention` (flash / memory-efficient kernels on
                CUDA); `attention_mask` builds the padding/causal mask only when one is needed
    KV cache    incremental decoding feeds only the new tokens: their keys/values are written into the
                caller's per-layer buffers after the `past` cached positions, and attention runs over
                all past + T (`write_kv`; the buffers are `nbcli.decoding.kv_cache.KVCache`'s)
    maps        the explicit softmax(Q K^T / sqrt(dh) + mask) that SDPA applies (paper 001 figs. 1, 2)
    FFN         fc_out(act(fc_in(x)))                                       (Vaswani eq. 2)
    positions   the ids past .. past + T - 1 of T new tokens, checked against the position table;
                the sinusoid table (Vaswani sec. 3.5) in Marian's layout

Shapes: B batch, T queries, S = past + T keys, d model width, H heads, dh = d / H head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nbcli import ops
from nbcli.errors import ConfigError

KV = tuple[torch.Tensor, torch.Tensor]


def attention_mask(key_mask: torch.Tensor | None, B: int, T: int, past: int, causal: bool,
                   device: torch.device) -> tuple[torch.Tensor | None, bool]:
    """(attn_mask, is_causal) for SDPA with T queries at positions past .. past + T - 1 over S = past + T
    keys. key_mask [B, S] is True on real tokens: padded keys get no attention. A causal query t sees
    keys <= past + t. Without padding no mask is built (SDPA then picks its fastest kernel): plain
    causal when there is no past, none for one query (a decoding step sees every cached key)."""
    if key_mask is None and past == 0:
        return None, causal
    if key_mask is None and (T == 1 or not causal):
        return None, False
    S = past + T
    allowed = (torch.ones(B, S, dtype=torch.bool, device=device) if key_mask is None
               else key_mask)[:, None, None, :]                                  # [B, 1, 1, S]
    if causal:
        allowed = allowed & torch.ones(T, S, dtype=torch.bool, device=device).tril(past)  # [B, 1, T, S]
    return allowed, False


def attention_allowed(key_mask: torch.Tensor | None, B: int, T: int, causal: bool, device: torch.device) -> torch.Tensor:
    """[B, 1, T, T] bool: query t may attend key j (a real key, and j <= t when causal): the mask
    `attention_mask` hands SDPA, written out for T queries with no past."""
    mask, is_causal = attention_mask(key_mask, B, T, 0, causal, device)
    if mask is None:
        mask = torch.ones(T, T, dtype=torch.bool, device=device)
        mask = (mask.tril() if is_causal else mask).expand(B, 1, T, T)
    return mask.expand(B, 1, T, T)


def attention_probabilities(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(dh) + mask) [B, H, T, S] in float32 (paper 001 eq. 1): the map SDPA applies
    to V, made explicit; q [B, H, T, dh], k [B, H, S, dh], allowed [B, 1, T, S] (False entries get 0)."""
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.size(-1))
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, T, d] -> [B, H, T, dh]."""
    B, T, d = x.shape
    return x.view(B, T, n_head, d // n_head).transpose(1, 2)


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """[B, H, T, dh] -> [B, T, H * dh] (contiguous)."""
    B, H, T, dh = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, H * dh)


def write_kv(kv: KV, k: torch.Tensor, v: torch.Tensor, past: int) -> KV:
    """The KV-cache write: this step's keys/values k, v [B, H, T, dh] go into the layer's buffers
    kv = (keys, values) [B, H, >= past + T, dh] after the `past` cached positions; returns the keys and
    values of all past + T positions (views of the buffers)."""
    keys, values = kv
    T = k.size(2)
    keys[:, :, past:past + T] = k
    values[:, :, past:past + T] = v
    return keys[:, :, :past + T], values[:, :, :past + T]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None, causal: bool,
              kv: KV | None = None, past: int = 0, dropout: float = 0.0) -> torch.Tensor:
    """softmax(q k^T / sqrt(dh) + mask) v with heads merged: [B, T, d] for queries q [B, H, T, dh] at
    positions past .. past + T - 1 and keys/values k, v [B, H, S, dh]. kv: the layer's cache buffers, into
    which k and v (this step's T positions) are written first (`write_kv`), attention then running over
    all past + T keys. key_mask [B, S] True on real keys (None: no padding); `dropout` on the
    probabilities (training only: the caller passes 0.0 in eval mode)."""
    if kv is not None:
        k, v = write_kv(kv, k, v, past)                                          # [B, H, past + T, dh]
    B, _, T, _ = q.shape
    mask, is_causal = attention_mask(key_mask, B, T, past, causal, q.device)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout)
    return merge_heads(y)                                                        # [B, T, d]


def feed_forward(x: torch.Tensor, fc_in: Callable[[torch.Tensor], torch.Tensor],
                 fc_out: Callable[[torch.Tensor], torch.Tensor],
                 act: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The position-wise feed-forward network FFN(x) = fc_out(act(fc_in(x))) (Vaswani eq. 2; GPT-2's MLP
    with act = GELU)."""
    return fc_out(act(fc_in(x)))


def position_ids(past: int, T: int, limit: int, name: str, device: torch.device) -> torch.Tensor:
    """The positions past .. past + T - 1 [T] of T new tokens after `past` earlier ones; ConfigError when
    past + T exceeds the `limit` rows of the model's position table (its config field `name`)."""
    if past + T > limit:
        raise ConfigError(f"sequence length {past + T} exceeds the model's {name} {limit}")
    return torch.arange(past, past + T, device=device)


def sinusoid_table(n_positions: int, d: int) -> torch.Tensor:
    """P [n_positions, d] float32: P[p, i] = sin(p / 10000^(2i/d)), P[p, d/2 + i] = cos(same), i < d/2
    (Vaswani et al. 2017 sec. 3.5): the one formula, `nbcli.ops.sinusoidal_positions` (which interleaves
    sin and cos, as paper 002 eq. 2), its coordinates reordered sines first as Marian (bit for bit:
    transformers' MarianSinusoidalPositionalEmbedding, tested)."""
    P = ops.sinusoidal_positions(torch.arange(n_positions), d)
    return torch.cat([P[:, 0::2], P[:, 1::2]], dim=1)
