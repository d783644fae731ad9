"""nb's reference encoder-decoder: the Transformer of Vaswani et al. (2017), one readable file in the
spirit of nanoGPT's model.py (a sibling of `nbcli.models.lm`: attention, its KV-cache write, the FFN and
the positions are the shared `nbcli.models.blocks`, the float32 output layer `nbcli.models.output`'s,
its matmul padded on CUDA to a multiple of `vocab_multiple` rows as the LM's, `output_multiple`, except
in an incremental decoding step).

The papers' translation models (paper 000 app. A: fairseq's Transformer; paper 002 app. A.1) read

    encoder   h^0 = drop(s E_src[x] + P)            h^l = EncoderLayer(h^{l-1})      l = 1 .. L_enc
    decoder   g^0 = drop(s E_tgt[y_<t] + P)         g^l = DecoderLayer(g^{l-1}, h^L)  l = 1 .. L_dec
    output    logits_t = W g_t + b                  p(y_t | y_<t, x) = softmax(logits_t)   (float32)

    s = sqrt(d) (`scale_embedding`, Vaswani sec. 3.4; paper 002 sec. 6 / app. A.1), P the position
    table: sinusoidal (Vaswani sec. 3.5), learned, or none (paper 002 table 3 switches it off).

A layer is a chain of residual sublayers. Post-LN (`norm="post"`, Vaswani, fairseq's default, Marian)

    x <- LN(x + drop(F(x)))                          pre-LN (`norm="pre"`):  x <- x + drop(F(LN(x)))

(pre-LN adds one final LN after each stack), with F in turn: self-attention, (decoder only)
attention over the encoder output, and the feed-forward network FFN(x) = fc2(act(fc1(x))).
Attention is softmax(Q K^T / sqrt(dh) + mask) V with separate q/k/v/out projections, every head
through `F.scaled_dot_product_attention` (`nbcli.models.blocks.attention`, the LM's): padded
source keys get no attention (encoder self-attention and cross-attention), decoder query t sees
target keys <= t. Paper 000 puts frequency in the output layer: b is `final_logits_bias`
(optional: `output_bias=False` removes it), W is the target embedding (`share_embeddings` "all" or
"decoder", fairseq's --share-all-embeddings / --share-decoder-input-output-embed) or its own
`lm_head.weight` ("none").

Sinusoids: P[p, i] = sin(p / 10000^(2i/d)) and P[p, d/2 + i] = cos(p / 10000^(2i/d)), i < d/2,
positions from 0 -- Vaswani's frequencies with the sines in the first half and the cosines in the
second, as Marian (transformers' MarianSinusoidalPositionalEmbedding, computed in float64 as it
does). Paper 002 eq. 2 interleaves them (even j sin, odd j cos): the same table up to a fixed
permutation of coordinates (`nbcli.ops.sinusoidal_positions`, the one formula, reordered by
`nbcli.models.blocks.sinusoid_table`), equivalent for a model trained from scratch; fairseq spaces the
frequencies 10000^(-i/(d/2-1)) and starts at padding_idx + 1. nb takes Marian's layout so that an exported model (`nbcli.export`)
computes the same logits.

Tensor names are Marian's without its `model.` prefix (encoder.layers.N.self_attn.q_proj.weight,
self_attn_layer_norm, fc1, fc2, final_layer_norm, decoder.layers.N.encoder_attn.*, shared.weight,
lm_head.weight, final_logits_bias), so the export is a plain rename; pre-LN's final norms are
fairseq's encoder.layer_norm / decoder.layer_norm.

Incremental decoding: the encoder runs once; `cross_kv` projects its output to each decoder layer's
keys/values once; `decode(kv=..., past=...)` feeds only the new target tokens and writes their
self-attention keys/values into the caller's buffers (`nbcli.decoding.kv_cache.KVCache`, as for the LM).
Attention guidance (paper 001 table 7: encoder and decoder self-attention; cross-attention is
never guided): `guided` / `guided_decoder` name the heads whose (q, k) come back per layer.

Shapes: B batch, S source length, T target length, d model width, H heads, dh = d / H, V vocabulary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from nbcli.errors import ConfigError
from nbcli.models.blocks import KV, attention, feed_forward, position_ids, sinusoid_table, split_heads
from nbcli.models.init import init_matrix, seq2seq_linear_init
from nbcli.models.output import VOCAB_MULTIPLE, output_logits, output_multiple

Norm = Literal["post", "pre"]
Positions = Literal["sinusoidal", "learned", "none"]
Share = Literal["all", "decoder", "none"]
Activation = Literal["relu", "gelu"]
InitScheme = Literal["fairseq", "xavier", "gpt2"]
QK = tuple[torch.Tensor, torch.Tensor]

OBJECTIVE = "seq2seq"   # nb.config's "objective": tells a translation checkpoint from an LM's


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Architecture and token conventions of the encoder-decoder (JSON in checkpoint metadata `nb.config`).

    Conventions (docs/training.md): the source is `ids EOS`; the decoder reads `decoder_start_id ids`
    and predicts `ids EOS`; `pad_id` fills batches (never attended to, never a label)."""

    src_vocab_size: int
    tgt_vocab_size: int
    eos_id: int                 # target EOS: generation stops there
    decoder_start_id: int       # the decoder's first input (target BOS, else EOS as fairseq)
    pad_id: int = 0
    src_eos_id: int | None = None   # appended to every source sentence (None: nothing appended)
    max_positions: int = 1024   # rows of the position table (the longest source or target)
    encoder_layers: int = 2
    decoder_layers: int = 2
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 512
    dropout: float = 0.0
    activation: Activation = "relu"
    norm: Norm = "post"
    positions: Positions = "sinusoidal"
    scale_embedding: bool = True
    share_embeddings: Share = "decoder"
    output_bias: bool = True
    layer_norm_eps: float = 1e-5
    objective: str = OBJECTIVE
    init: InitScheme = "fairseq"   # fairseq | xavier (paper 002) | gpt2 (`Seq2SeqTransformer.reset_parameters`)

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size"):
            if getattr(self, name) < 2:
                raise ConfigError(f"{name} must be >= 2, got {getattr(self, name)}")
        for name in ("max_positions", "encoder_layers", "decoder_layers", "n_head", "d_model", "d_ff"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        choices = (("activation", ("relu", "gelu")), ("norm", ("post", "pre")),
                   ("positions", ("sinusoidal", "learned", "none")), ("share_embeddings", ("all", "decoder", "none")),
                   ("objective", (OBJECTIVE,)), ("init", ("fairseq", "xavier", "gpt2")))
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.share_embeddings == "all" and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(f"shared source/target embeddings need one vocabulary, got {self.src_vocab_size} "
                              f"source and {self.tgt_vocab_size} target tokens (use one joint tokenizer, or "
                              "--share-embeddings decoder)")
        for name in ("eos_id", "decoder_start_id", "pad_id"):
            if not 0 <= getattr(self, name) < self.tgt_vocab_size:
                raise ConfigError(f"{name} {getattr(self, name)} is outside the target vocabulary "
                                  f"[0, {self.tgt_vocab_size})")
        if self.pad_id >= self.src_vocab_size:
            raise ConfigError(f"pad_id {self.pad_id} is outside the source vocabulary [0, {self.src_vocab_size})")
        if self.src_eos_id is not None and not 0 <= self.src_eos_id < self.src_vocab_size:
            raise ConfigError(f"src_eos_id {self.src_eos_id} is outside the source vocabulary")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Seq2SeqConfig":
        return cls(**json.loads(text))


class Attention(nn.Module):
    """Multi-head attention softmax(Q K^T / sqrt(dh) + mask) V (Vaswani eq. 1) with separate q/k/v/out
    projections (fairseq's / Marian's names)."""

    def __init__(self, cfg: Seq2SeqConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d] -> [B, H, T, dh]."""
        return split_heads(x, self.n_head)

    def project_kv(self, memory: torch.Tensor) -> KV:
        """Keys and values [B, H, S, dh] of the sequence attended to."""
        return self.split(self.k_proj(memory)), self.split(self.v_proj(memory))

    def self_attention(self, x: torch.Tensor, key_mask: torch.Tensor | None, causal: bool,
                       guided: list[int] | None, kv: KV | None = None, past: int = 0,
                       ) -> tuple[torch.Tensor, QK | None]:
        """x [B, T, d] attends to itself (and to `past` cached positions in kv's buffers
        [B, H, >= past + T, dh], into which this step's keys/values are written)."""
        q, (k, v) = self.split(self.q_proj(x)), self.project_kv(x)
        qk = (q[:, guided], k[:, guided]) if guided else None                   # [B, G, T, dh] each
        return self.out_proj(attention(q, k, v, key_mask, causal, kv, past)), qk

    def cross_attention(self, x: torch.Tensor, memory_kv: KV, src_mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, T, d] attends to the encoder output's keys/values [B, H, S, dh]; padded source keys
        (src_mask [B, S] False) get none."""
        return self.out_proj(attention(self.split(self.q_proj(x)), *memory_kv, src_mask, False))


class Layer(nn.Module):
    """What encoder and decoder layers share: the residual wiring `residual(x, norm, f)`, LN(x + drop(f(x)))
    post-LN or x + drop(f(LN(x))) pre-LN, and the feed-forward network FFN(x) = fc2(act(fc1(x))),
    act = ReLU (Vaswani, fairseq) or GELU."""

    def __init__(self, cfg: Seq2SeqConfig) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.drop = nn.Dropout(cfg.dropout)
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.act: Callable[[torch.Tensor], torch.Tensor] = F.relu if cfg.activation == "relu" else F.gelu

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return feed_forward(x, self.fc1, self.fc2, self.act)

    def residual(self, x: torch.Tensor, norm: nn.LayerNorm, f: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.pre:
            return x + self.drop(f(norm(x)))
        return norm(x + self.drop(f(x)))


class EncoderLayer(Layer):
    """x <- Res(x, self-attention); x <- Res(x, FFN)."""

    def __init__(self, cfg: Seq2SeqConfig) -> None:
        super().__init__(cfg)
        self.self_attn = Attention(cfg)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None, guided: list[int] | None,
                ) -> tuple[torch.Tensor, QK | None]:
        qks: list[QK | None] = []

        def attn(h: torch.Tensor) -> torch.Tensor:
            y, qk = self.self_attn.self_attention(h, src_mask, False, guided)
            qks.append(qk)
            return y

        x = self.residual(x, self.self_attn_layer_norm, attn)
        return self.residual(x, self.final_layer_norm, self.ffn), qks[0]


class DecoderLayer(Layer):
    """x <- Res(x, causal self-attention); x <- Res(x, attention over the encoder output); x <- Res(x, FFN)."""

    def __init__(self, cfg: Seq2SeqConfig) -> None:
        super().__init__(cfg)
        self.self_attn = Attention(cfg)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.encoder_attn = Attention(cfg)
        self.encoder_attn_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, memory_kv: KV, src_mask: torch.Tensor | None, tgt_mask: torch.Tensor | None,
                guided: list[int] | None, kv: KV | None = None, past: int = 0) -> tuple[torch.Tensor, QK | None]:
        qks: list[QK | None] = []

        def attn(h: torch.Tensor) -> torch.Tensor:
            y, qk = self.self_attn.self_attention(h, tgt_mask, True, guided, kv, past)
            qks.append(qk)
            return y

        x = self.residual(x, self.self_attn_layer_norm, attn)
        x = self.residual(x, self.encoder_attn_layer_norm, lambda h: self.encoder_attn.cross_attention(h, memory_kv,
                                                                                                       src_mask))
        return self.residual(x, self.final_layer_norm, self.ffn), qks[0]


class Stack(nn.Module):
    """Token embedding (scaled by s), position table, dropout, the layers and (pre-LN) a final LN."""

    def __init__(self, cfg: Seq2SeqConfig, embed_tokens: nn.Embedding, layers: list[nn.Module]) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        if cfg.positions == "learned":
            self.embed_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        else:
            self.embed_positions = None
        if cfg.positions == "sinusoidal":   # not a parameter, not saved: a function of the config
            self.register_buffer("sinusoids", sinusoid_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(layers)
        self.layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm == "pre" else None

    def embed(self, ids: torch.Tensor, past: int = 0) -> torch.Tensor:
        """drop(s E[ids] + P[past .. past + T - 1]) [B, T, d]."""
        T = ids.size(1)
        pos = position_ids(past, T, self.cfg.max_positions, "max_positions", ids.device)
        x = self.embed_tokens(ids) * self.embed_scale
        if self.embed_positions is not None:
            x = x + self.embed_positions(pos)
        elif self.cfg.positions == "sinusoidal":
            x = x + self.sinusoids[past:past + T].to(x.dtype)
        return self.drop(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.layer_norm is None else self.layer_norm(x)


class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder. `forward(src, tgt)` returns logits [B, T, V] and the guided heads' (q, k)."""

    def __init__(self, cfg: Seq2SeqConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        # Registered first, so named_parameters() (which lists a shared tensor once) calls it `shared`.
        self.shared = nn.Embedding(cfg.tgt_vocab_size, d) if cfg.share_embeddings == "all" else None
        src_emb = self.shared if self.shared is not None else nn.Embedding(cfg.src_vocab_size, d)
        tgt_emb = self.shared if self.shared is not None else nn.Embedding(cfg.tgt_vocab_size, d)
        self.encoder = Stack(cfg, src_emb, [EncoderLayer(cfg) for _ in range(cfg.encoder_layers)])
        self.decoder = Stack(cfg, tgt_emb, [DecoderLayer(cfg) for _ in range(cfg.decoder_layers)])
        # Output layer: logits = g W^T + b; W is the target embedding unless share_embeddings is "none".
        self.lm_head_weight = (nn.Parameter(torch.empty(cfg.tgt_vocab_size, d))
                               if cfg.share_embeddings == "none" else None)
        self.final_logits_bias = nn.Parameter(torch.zeros(cfg.tgt_vocab_size)) if cfg.output_bias else None
        # On CUDA the output matmul pads V to this multiple (`nbcli.models.output.output_multiple`, as the LM's);
        # 1 turns that off. The logits keep their V columns either way.
        self.vocab_multiple = VOCAB_MULTIPLE
        self.reset_parameters()

    # -- initialisation (by `cfg.init`; fairseq's transformer by default, where noted) --------------
    def reset_parameters(self) -> None:
        """Biases 0, LayerNorm gains 1 and b = 0 in every scheme; modules visited parent first (a
        fixed order for a seed).

            fairseq  embeddings (and a separate W, and learned positions) N(0, d^-1/2) (fairseq's `Embedding`;
                     paper 000 sec. 4.1 draws W so); q/k/v weights Xavier uniform with gain 1/sqrt(2), out_proj
                     Xavier uniform (fairseq's MultiheadAttention). Not fairseq's: q/k/v biases 0 (fairseq:
                     nn.Linear's default U(+-1/sqrt(d))) and FFN fc1/fc2 Xavier uniform with biases 0
                     (fairseq's old `Linear` helper; today's fairseq: nn.Linear's default).
            xavier   paper 002 secs. 5-6, "all non-embedding parameters are initialized with Xavier": every
                     weight matrix Xavier uniform, W included; q, k, v at the bound of PyTorch's
                     nn.MultiheadAttention, whose in_proj_weight holds all three ([3d, d]:
                     sqrt(6 / 4d)); embeddings N(0, d^-1/2) (--embedding-init sets them)
            gpt2     every weight N(0, 0.02), the projections into the residual stream (out_proj, fc2)
                     N(0, 0.02 / sqrt(2L)), L the layers of their stack; embeddings and W N(0, 0.02)"""
        cfg, scheme = self.cfg, self.cfg.init
        std = 0.02 if scheme == "gpt2" else cfg.d_model ** -0.5
        qkv = {m for module in self.modules() if isinstance(module, Attention)
               for m in (module.q_proj, module.k_proj, module.v_proj)}
        residual = {m: math.sqrt(2 * len(stack.layers)) for stack in (self.encoder, self.decoder)
                    for layer in stack.layers
                    for m in [layer.fc2, *(a.out_proj for a in layer.modules() if isinstance(a, Attention))]}
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std)
            elif isinstance(module, nn.Linear):
                seq2seq_linear_init(module.weight, scheme, module in qkv, residual.get(module, 1.0))
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if self.lm_head_weight is not None:
            init_matrix(self.lm_head_weight, scheme, std, std)
        if self.final_logits_bias is not None:
            nn.init.zeros_(self.final_logits_bias)

    @property
    def output_weight(self) -> torch.Tensor:
        """W [V_tgt, d] of the output layer (paper 000 sec. 3)."""
        return self.decoder.embed_tokens.weight if self.lm_head_weight is None else self.lm_head_weight

    def embeddings(self) -> list[nn.Embedding]:
        """The distinct token embeddings (one when shared; source then target otherwise)."""
        out: list[nn.Embedding] = []
        for emb in (self.encoder.embed_tokens, self.decoder.embed_tokens):
            if all(emb is not e for e in out):
                out.append(emb)
        return out

    # -- the three passes ----------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None, guided: list[int] | None = None,
               ) -> tuple[torch.Tensor, list[QK]]:
        """src [B, S] ids, src_mask [B, S] True on real tokens (None: no padding) -> memory [B, S, d]
        and the guided heads' (q, k) per layer."""
        x = self.encoder.embed(src)
        qks = []
        for layer in self.encoder.layers:
            x, qk = layer(x, src_mask, guided)
            if qk is not None:
                qks.append(qk)
        return self.encoder.finish(x), qks

    def cross_kv(self, memory: torch.Tensor) -> list[KV]:
        """Each decoder layer's keys/values of the encoder output [B, H, S, dh]: computed once per
        source batch, reused at every decoding step."""
        return [layer.encoder_attn.project_kv(memory) for layer in self.decoder.layers]

    def decode(self, tgt: torch.Tensor, memory_kv: list[KV], src_mask: torch.Tensor | None = None,
               tgt_mask: torch.Tensor | None = None, guided: list[int] | None = None,
               kv: list[KV] | None = None, past: int = 0) -> tuple[torch.Tensor, list[QK]]:
        """Logits [B, T, V] for decoder inputs tgt [B, T] at positions past .. past + T - 1 (tgt_mask
        [B, past + T] True on real tokens; None: no padding). kv: per layer the self-attention
        key/value buffers holding the `past` earlier positions (see module docstring)."""
        x = self.decoder.embed(tgt, past)
        qks = []
        for i, layer in enumerate(self.decoder.layers):
            x, qk = layer(x, memory_kv[i], src_mask, tgt_mask, guided, None if kv is None else kv[i], past)
            if qk is not None:
                qks.append(qk)
        h = self.decoder.finish(x)                                                 # [B, T, d]
        # padded for the teacher-forced pass (B x T rows); not per incremental decoding step, whose few rows
        # gain nothing from an aligned GEMM and would pay a padded copy of W each step (as the LM's runner)
        multiple = output_multiple(h, self.vocab_multiple) if kv is None else 1
        return output_logits(h, self.output_weight, self.final_logits_bias, multiple), qks   # float32 [B, T, V]

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None, guided: list[int] | None = None,
                guided_decoder: list[int] | None = None) -> tuple[torch.Tensor, tuple[list[QK], list[QK]]]:
        """Teacher-forced logits [B, T, V] for source src [B, S] and decoder inputs tgt [B, T]; the
        guided heads' (q, k): (encoder layers, decoder layers)."""
        memory, enc_qks = self.encode(src, src_mask, guided)
        logits, dec_qks = self.decode(tgt, self.cross_kv(memory), src_mask, tgt_mask, guided_decoder)
        return logits, (enc_qks, dec_qks)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, src_len: int, tgt_len: int) -> float:
        """Training FLOPs per target token: 6N plus the attention scores, 12 d (L_enc S + L_dec (T + S))
        (PaLM appendix B's estimate, source and target each counted; position tables excluded)."""
        n = self.num_parameters() - sum(s.embed_positions.weight.numel() for s in (self.encoder, self.decoder)
                                        if s.embed_positions is not None)
        cfg = self.cfg
        return 6 * n + 12 * cfg.d_model * (cfg.encoder_layers * src_len + cfg.decoder_layers * (tgt_len + src_len))

    # -- nb's checkpoint layout ------------------------------------------------------------------
    def nb_state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors under nb's names: Marian's without `model.` (a shared embedding once, as shared.weight;
        lm_head.weight and final_logits_bias only when present; the sinusoids are not saved)."""
        names = {"lm_head_weight": "lm_head.weight"}
        return {names.get(n, n): p for n, p in self.named_parameters()}

    def load_nb_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        ours = dict(self.named_parameters())
        renamed = {{"lm_head.weight": "lm_head_weight"}.get(k, k): v for k, v in tensors.items()}
        missing, unexpected = sorted(set(ours) - set(renamed)), sorted(set(renamed) - set(ours))
        if missing or unexpected:
            raise ConfigError(f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        with torch.no_grad():
            for name, value in renamed.items():
                if tuple(value.shape) != tuple(ours[name].shape):
                    raise ConfigError(f"checkpoint tensor {name!r} has shape {list(value.shape)}, the model "
                                      f"expects {list(ours[name].shape)}")
                ours[name].copy_(value)
