"""nb's reference Transformer: one readable file in the spirit of nanoGPT's model.py.

By default a pre-LN Transformer (GPT-2 block layout) with learned position embeddings and two heads:

    x^0 = drop(s E[x_t] + P[t])                        E = tok_emb, P = pos_emb, s = 1 (sqrt(d): scale_embedding)
    x  <- x + drop(proj(Attn(LN1(x))))                 Attn = softmax(Q K^T / sqrt(dh) + mask) V, per head
    x  <- x + drop(proj(gelu(fc(LN2(x)))))             l = 1 .. L
    h   = LN_f(x^L)

The choices paper 002 varies (app. A.1: x sqrt(D) + sinusoids, eq. 2-3; secs. 5-6: Xavier on every
non-embedding parameter; PyTorch's nn.Transformer: post-LN) are fields of ModelConfig:

    norm             pre (above) | post: x <- LN1(x + drop(proj(Attn(x)))); x <- LN2(x + drop(MLP(x)));
                     LN_f closes the stack either way (as nn.Transformer's encoder_norm)
    positions        learned | sinusoidal (Vaswani sec. 3.5 in paper 002 eq. 2's interleaved layout,
                     frozen) | none (zeros, frozen)
    scale_embedding  E[x] times sqrt(d) before the positions (Vaswani sec. 3.4; paper 002 eq. 2)
    init             gpt2 | xavier | fairseq (`reset_parameters`; the matrices' draws: `nbcli.models.init`)
    clm  decoder-only causal LM      logits_t = W h_t + b            predicts x_{t+1}
    mlm  RoBERTa-style masked LM     logits_t = W LN(gelu(D h_t)) + b predicts the masked x_t
                                                                     (inputs: `nbcli.models.masking`)

The output layer runs in float32 whatever the precision of the rest (bf16 autocast, bf16 weights):
`nbcli.models.output.output_logits`.

Frequency lives in the output layer (papers 000 and 003): `head.bias` b is optional
(`output_bias=False` removes the parameter, paper 000's "no bias" arm), and W is either its own
matrix `head.weight` or tied to the input embedding `tok_emb.weight`.

Attention reads qkv -> SDPA -> output projection through the blocks both reference models share
(`nbcli.models.blocks.attention`: every head through `F.scaled_dot_product_attention`, a mask built
only when one is needed). The model keeps no state between calls: for incremental decoding the caller
passes per-layer key/value buffers, into which each layer writes the new positions' keys and values
(`nbcli.models.blocks.write_kv`; `nbcli.decoding.kv_cache.KVCache` owns and grows them). `attention_maps` hands
back the explicit softmax(QK^T/sqrt(dh) + mask) of chosen layers (paper 001 figs. 1, 2), recomputed
beside the SDPA pass. Attention guidance (paper 001) needs the maps of a few guided heads only: the
model hands back their queries and keys, and `nbcli.train.guidance` computes the loss from them
(a block of query rows at a time under activation checkpointing, one-hot and dense patterns alike,
so no [B, G, T, T] map is held). Tensor names are nb's checkpoint layout (architecture `nb`, see README).

Shapes: B batch, T sequence length, d model width, H heads, dh = d / H head width, V vocabulary.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from nbcli import ops
from nbcli.errors import ConfigError
from nbcli.models.blocks import (
    KV,
    attention,
    attention_allowed,
    attention_probabilities,
    feed_forward,
    position_ids,
    split_heads,
)
from nbcli.models.init import init_linear, init_matrix
from nbcli.models.output import LOSS_CHUNK_ELEMENTS, VOCAB_MULTIPLE, chunked_lm_loss, output_logits, output_multiple

Objective = Literal["clm", "mlm"]
Norm = Literal["pre", "post"]
Positions = Literal["learned", "sinusoidal", "none"]
InitScheme = Literal["gpt2", "xavier", "fairseq"]
NORMS: tuple[str, ...] = ("pre", "post")
POSITIONS: tuple[str, ...] = ("learned", "sinusoidal", "none")
INIT_SCHEMES: tuple[str, ...] = ("gpt2", "xavier", "fairseq")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the reference Transformer (stored as JSON in checkpoint metadata `nb.config`)."""

    vocab_size: int
    seq_len: int = 128          # maximum T (rows of pos_emb)
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 0               # 0 means 4 * d_model
    dropout: float = 0.0
    objective: Objective = "clm"
    tie_embeddings: bool = True
    output_bias: bool = True    # False: no `head.bias` parameter at all (--bias-init none)
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02
    mask_id: int | None = None  # MLM: the id that replaces 80% of selected tokens
    special_ids: tuple[int, ...] = field(default_factory=tuple)  # MLM: never selected for masking
    norm: Norm = "pre"          # layer-norm placement (module doc)
    positions: Positions = "learned"
    scale_embedding: bool = False
    init: InitScheme = "gpt2"

    def __post_init__(self) -> None:
        if self.vocab_size < 2:
            raise ConfigError(f"vocab_size must be >= 2, got {self.vocab_size}")
        for name in ("seq_len", "n_layer", "n_head", "d_model"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.objective not in ("clm", "mlm"):
            raise ConfigError(f"objective must be clm or mlm, got {self.objective!r}")
        if self.objective == "mlm" and self.mask_id is None:
            raise ConfigError("the mlm objective needs a mask_id")
        if self.mask_id is not None and not 0 <= self.mask_id < self.vocab_size:
            raise ConfigError(f"mask_id {self.mask_id} is outside the vocabulary [0, {self.vocab_size})")
        for name, allowed in (("norm", NORMS), ("positions", POSITIONS), ("init", INIT_SCHEMES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")

    @property
    def ff_width(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def causal(self) -> bool:
        return self.objective == "clm"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        data = json.loads(text)
        data["special_ids"] = tuple(data.get("special_ids", ()))
        return cls(**data)


def training_flops_per_token(matmul_params: int, n_layer: int, seq_len: int, d_model: int,
                             guided_heads: int = 0, head_dim: int = 0) -> float:
    """Training FLOPs per token, the MFU numerator (PaLM appendix B; nanoGPT's estimate_mfu):
    6 N for the N weights that multiply (forward 2N, backward 4N; embedding lookups are no FLOPs),
    + 12 L T d for attention's scores and weighted values over T keys, + 6 L G T dh for attention
    guidance (paper 001 eq. 2), which forms q k^T of its G guided heads per layer once more, forward
    and backward (the checkpointed re-forward is not counted: MFU counts no rematerialisation)."""
    return 6 * matmul_params + 12 * n_layer * seq_len * d_model + 6 * n_layer * guided_heads * seq_len * head_dim


class SelfAttention(nn.Module):
    """Multi-head self-attention: H(s) = softmax(Q K^T / sqrt(dh)) V  (paper 001 eq. 1)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.causal = cfg.causal
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None, guided: list[int] | None,
                kv: KV | None = None, past: int = 0,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """x [B, T, d] -> ([B, T, d], the guided heads' (q, k) or None). kv: this layer's key/value
        buffers [B, H, >= past + T, dh] holding the `past` earlier positions (the KV cache); this
        step's keys and values are written after them and attention runs over all past + T."""
        q, k, v = self.heads(x)                                                  # 3 x [B, H, T, dh]
        qk = (q[:, guided], k[:, guided]) if guided else None                    # [B, G, T, dh] each
        y = attention(q, k, v, key_mask, self.causal, kv, past, self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y)), qk

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> q, k, v [B, H, T, dh]."""
        q, k, v = self.qkv(x).split(x.size(-1), dim=2)                          # 3 x [B, T, d]
        return split_heads(q, self.n_head), split_heads(k, self.n_head), split_heads(v, self.n_head)

    def probabilities(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """The attention maps [B, H, T, T] (float32) this layer applies to x [B, T, d] (no past)."""
        B, T, _ = x.shape
        q, k, _v = self.heads(x)
        return attention_probabilities(q, k, attention_allowed(key_mask, B, T, self.causal, x.device))


class MLP(nn.Module):
    """Position-wise feed-forward: drop(proj(gelu(fc(x)))) (`feed_forward`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.ff_width)
        self.proj = nn.Linear(cfg.ff_width, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(feed_forward(x, self.fc, self.proj, F.gelu))


class Block(nn.Module):
    """Pre-LN: x <- x + attn(LN1(x)); x <- x + mlp(LN2(x)). Post-LN: x <- LN1(x + attn(x)); x <- LN2(x + mlp(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.post = cfg.norm == "post"
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None, guided: list[int] | None,
                kv: tuple[torch.Tensor, torch.Tensor] | None = None, past: int = 0,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        if self.post:
            a, qk = self.attn(x, key_mask, guided, kv, past)
            x = self.ln1(x + a)
            return self.ln2(x + self.mlp(x)), qk
        a, qk = self.attn(self.ln1(x), key_mask, guided, kv, past)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, qk


def positions_table(T: int, d: int) -> torch.Tensor:
    """Vaswani et al. (2017) sec. 3.5 in paper 002 eq. 2's layout: PE[t, 2i] = sin(t / 10000^(2i/d)),
    PE[t, 2i+1] = cos(same), [T, d] (the one formula: `nbcli.ops.sinusoidal_positions`, positions 0..T-1)."""
    return ops.sinusoidal_positions(torch.arange(T), d)


def fixed_positions(pos_emb: nn.Embedding, kind: str) -> None:
    """`positions`: learned (trained, as initialised), sinusoidal (`positions_table`, frozen) or none
    (zeros, frozen: the sum x = s E[idx] + 0)."""
    if kind == "learned":
        return
    with torch.no_grad():
        T, d = pos_emb.weight.shape
        pos_emb.weight.copy_(positions_table(T, d) if kind == "sinusoidal" else torch.zeros(T, d))
    pos_emb.weight.requires_grad_(False)


class MLMHead(nn.Module):
    """RoBERTa's LM-head transform before the output projection: LN(gelu(dense(h)))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.ln(F.gelu(self.dense(h)))


class Transformer(nn.Module):
    """The reference model. `forward(idx)` returns logits [B, T, V] (float32, `output_logits`) and the
    guided heads' (q, k)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)                 # [V, d]
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)                    # [T, d]
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlm = MLMHead(cfg) if cfg.objective == "mlm" else None
        # Output layer: logits = h W^T + b. W is tok_emb.weight when tied (no head.weight tensor).
        self.head_weight = None if cfg.tie_embeddings else nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.head_bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.output_bias else None
        # On CUDA the output matmul pads V to this multiple (`output_logits`); 1 turns that off. The loss
        # summed in the forward holds this many float32 logits at once (`chunked_lm_loss`).
        self.vocab_multiple = VOCAB_MULTIPLE
        self.loss_chunk_elements = LOSS_CHUNK_ELEMENTS
        self.reset_parameters()
        fixed_positions(self.pos_emb, cfg.positions)

    # -- initialisation ----------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """By `cfg.init`; biases 0 and LayerNorm gains 1 in every scheme. Modules are visited parent
        first, so the draws come in `named_parameters()` order.

            gpt2     weights N(0, init_std); the projections that write into the residual stream (attention
                     and MLP output) N(0, init_std / sqrt(2L)); embeddings and a separate W N(0, init_std)
            xavier   every weight matrix but the embeddings Xavier uniform, a separate W included (paper 002
                     secs. 5-6; the fused qkv as PyTorch's nn.MultiheadAttention's in_proj_weight, one
                     [3d, d] matrix); embeddings N(0, init_std)
            fairseq  embeddings and a separate W N(0, d^-1/2); q, k and v Xavier uniform with gain
                     1/sqrt(2), each its own [d, d] (fairseq's MultiheadAttention), the other weights
                     Xavier uniform (the translation model's, `nbcli.models.seq2seq`)"""
        scheme, std = self.cfg.init, self.cfg.init_std
        residual = {m for block in self.blocks for m in (block.attn.proj, block.mlp.proj)}
        qkv = {block.attn.qkv for block in self.blocks}
        embedding_std = self.cfg.d_model ** -0.5 if scheme == "fairseq" else std
        for module in self.modules():
            if module is self:                                   # the output layer's own W and b
                if self.head_weight is not None:
                    init_matrix(self.head_weight, scheme, std, embedding_std)
                if self.head_bias is not None:
                    nn.init.zeros_(self.head_bias)
            elif isinstance(module, nn.Linear):
                scale = math.sqrt(2 * self.cfg.n_layer) if module in residual else 1.0
                init_linear(module.weight, scheme, std / scale, module in qkv)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, embedding_std)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @property
    def output_weight(self) -> torch.Tensor:
        """W [V, d] of the output layer (paper 000 sec. 3)."""
        return self.tok_emb.weight if self.head_weight is None else self.head_weight

    def forward(self, idx: torch.Tensor, key_mask: torch.Tensor | None = None,
                guided: list[int] | None = None, kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
                past: int = 0, labels: torch.Tensor | None = None, label_smoothing: float = 0.0,
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """idx [B, T] token ids; key_mask [B, T] True on real tokens (None: no padding; with kv
        [B, past + T]); guided: head indices whose (q, k) [B, G, T, dh] are returned per layer (paper
        001 sec. 3.2). Incremental decoding: kv holds per layer the key/value buffers [B, H, >= past + T,
        dh] of the `past` earlier positions (`nbcli.decoding.kv_cache.KVCache`); idx holds
        only the new tokens, at positions past .. past + T - 1, whose keys/values are written into kv.
        With `labels` [B, T] (training) the first result is instead the summed cross-entropy of the
        labelled positions (`chunked_lm_loss`: no [B, T, V] float32 logits held)."""
        h, qks = self.encode(idx, key_mask, guided, kv, past)                   # [B, T, d]
        if self.mlm is not None:
            h = self.mlm(h)                                                      # [B, T, d]
        multiple = output_multiple(h, self.vocab_multiple)
        if labels is not None:
            return chunked_lm_loss(h, self.output_weight, self.head_bias, labels, label_smoothing,
                                   self.loss_chunk_elements, multiple), qks
        logits = output_logits(h, self.output_weight, self.head_bias, multiple)  # [B, T, V] float32
        return logits, qks

    def encode(self, idx: torch.Tensor, key_mask: torch.Tensor | None = None,
               guided: list[int] | None = None, kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
               past: int = 0) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The final states ln_f(x_L) [B, T, d] (before any output head) and the guided heads' (q, k):
        what `forward` projects to the vocabulary, and what a classifier's head reads
        (`nbcli.models.heads`). Arguments as `forward`."""
        B, T = idx.shape
        if kv is not None and not self.cfg.causal:
            raise ConfigError("a key/value cache needs a causal (clm) model")
        pos = position_ids(past, T, self.cfg.seq_len, "seq_len", idx.device)
        tokens = self.tok_emb(idx)
        if self.cfg.scale_embedding:
            tokens = tokens * math.sqrt(self.cfg.d_model)                        # paper 002 eq. 2
        x = self.drop(tokens + self.pos_emb(pos))                                # [B, T, d]
        qks = []
        for layer, block in enumerate(self.blocks):
            x, qk = block(x, key_mask, guided, None if kv is None else kv[layer], past)
            if qk is not None:
                qks.append(qk)
        return self.ln_f(x), qks

    def attention_maps(self, idx: torch.Tensor, layers: list[int], key_mask: torch.Tensor | None = None,
                       ) -> dict[int, torch.Tensor]:
        """{layer: its attention probabilities [B, H, T, T] float32} for token ids idx [B, T] (paper 001
        figs. 1, 2). The forward pass is the ordinary one (SDPA, no gradient); a hook on each chosen
        layer's attention recomputes its map explicitly from the same input, so training never pays for it."""
        maps: dict[int, torch.Tensor] = {}
        hooks = []
        training = self.training
        for layer in layers:
            attn = self.blocks[layer].attn

            def keep(module: nn.Module, args: tuple, layer: int = layer, attn: SelfAttention = attn) -> None:
                maps[layer] = attn.probabilities(args[0], args[1])

            hooks.append(attn.register_forward_pre_hook(keep))
        try:
            self.eval()                                                          # no dropout on the maps
            with torch.no_grad():
                self(idx, key_mask)
        finally:
            self.train(training)
            for hook in hooks:
                hook.remove()
        return maps

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, guided_heads: int = 0) -> float:
        """Training FLOPs per token (`training_flops_per_token`) with `guided_heads` heads per layer under
        attention guidance. The weights that multiply: every parameter but the position table and, when
        untied, the input embedding table (a lookup; tied, its one copy is the output layer's W)."""
        lookups = self.pos_emb.weight.numel() + (self.tok_emb.weight.numel() if self.head_weight is not None else 0)
        cfg = self.cfg
        return training_flops_per_token(self.num_parameters() - lookups, cfg.n_layer, cfg.seq_len, cfg.d_model,
                                        guided_heads, cfg.d_model // cfg.n_head)

    # -- nb's checkpoint layout ------------------------------------------------------------------
    def nb_state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors under nb's names (architecture `nb`): head.weight / head.bias only when present."""
        out = {}
        for name, p in self.state_dict().items():
            if name == "head_weight":
                name = "head.weight"
            elif name == "head_bias":
                name = "head.bias"
            out[name] = p
        return out

    def load_nb_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        renamed = {{"head.weight": "head_weight", "head.bias": "head_bias"}.get(k, k): v for k, v in tensors.items()}
        missing, unexpected = self.load_state_dict(renamed, strict=False)
        if missing or unexpected:
            raise ConfigError(f"checkpoint does not match the model: missing {sorted(missing)[:5]}, "
                              f"unexpected {sorted(unexpected)[:5]}")

