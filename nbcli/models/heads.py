"""Classification and tagging heads on any encoder: nb's own MLM Transformer (`nbcli.model`) or a
transformers encoder (BERT, RoBERTa, DistilBERT, MiniLM, ...) loaded with `AutoModel`.

Papers 001 (tables 1, 2, 4: GLUE, sentiment, NER) and 002 (table 1: SST-2, MNLI from scratch) judge
a pretrained encoder by what a head on it does downstream. Shapes: B batch, T tokens, d width, L labels.

    pool(h, key_mask, "first")  h[:, 0]                          the first token (<s> / [CLS])
    pool(h, key_mask, "mean")   sum_t m_t h_t / sum_t m_t        the mean over real tokens (m: key mask)

Heads (`head_for`): for a transformers encoder the head has the parameters, names and order of
operations of that architecture's `AutoModelFor{Sequence,Token}Classification`, so that the step-0
logits are transformers' own for the same weights and `nb export` is a rename:

    bert        dropout(pooler(h))           -> classifier       pooler: tanh(W h[:, 0] + b), the encoder's own
    roberta     dropout -> dense -> tanh -> dropout -> out_proj on h[:, 0]     (names classifier.dense/out_proj)
    distilbert  pre_classifier -> ReLU -> dropout -> classifier on h[:, 0]
    nb          dropout(pool(h)) -> classifier                   (pooling "first" or "mean")
    tokens      dropout(h) -> classifier, for every position     (all families: ...ForTokenClassification)

Dropout is the encoder config's classifier dropout (`classifier_dropout`, else `hidden_dropout_prob`;
DistilBERT's `seq_classif_dropout` / `dropout`), nb's `--dropout` for nb's encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from nbcli import ops
from nbcli.errors import ConfigError

__all__ = ["Classifier", "EncoderSpec", "HEAD_STYLES", "Pooling", "SequenceHead", "TokenHead", "head_dropout",
           "head_for", "init_head", "pool", "positions_table", "set_positions"]

Pooling = Literal["first", "mean"]
HeadStyle = Literal["bert", "roberta", "distilbert", "nb"]
HEAD_STYLES: tuple[str, ...] = ("bert", "roberta", "distilbert", "nb")


def pool(h: torch.Tensor, key_mask: torch.Tensor | None, mode: Pooling) -> torch.Tensor:
    """h [B, T, d] -> [B, d]: the first token's state ("first"), or the mean of the real tokens'
    states ("mean", key_mask [B, T] True on real tokens; None: every token is real)."""
    if mode == "first":
        return h[:, 0]
    if mode != "mean":
        raise ConfigError(f"pooling must be first or mean, got {mode!r}")
    if key_mask is None:
        return h.mean(dim=1)
    m = key_mask.to(h.dtype)[..., None]                                        # [B, T, 1]
    return (h * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


class SequenceHead(nn.Module):
    """A sentence (pair) classifier's head, [B, T, d] -> logits [B, L] (module doc for each style).
    `export_prefix` + a parameter name is its name in transformers' ForSequenceClassification."""

    def __init__(self, style: HeadStyle, d: int, num_labels: int, dropout: float, pooling: Pooling = "first") -> None:
        super().__init__()
        if style not in HEAD_STYLES:
            raise ConfigError(f"no classification head for {style!r} (known: {', '.join(HEAD_STYLES)})")
        if style != "nb" and pooling != "first":
            raise ConfigError(f"--pooling {pooling}: a {style} head reads the first token, as transformers' does")
        self.style, self.pooling = style, pooling
        self.dropout = nn.Dropout(dropout)
        self.export_prefix = "classifier." if style == "roberta" else ""
        if style == "roberta":
            self.dense = nn.Linear(d, d)
            self.out_proj = nn.Linear(d, num_labels)
        else:
            if style == "distilbert":
                self.pre_classifier = nn.Linear(d, d)
            self.classifier = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """h [B, T, d] the encoder's last states; `pooled` [B, d] BERT's pooler output."""
        if self.style == "bert":
            if pooled is None:
                raise ConfigError("a bert head needs the encoder's pooler output")
            return self.classifier(self.dropout(pooled))
        if self.style == "roberta":
            x = torch.tanh(self.dense(self.dropout(h[:, 0])))
            return self.out_proj(self.dropout(x))
        if self.style == "distilbert":
            x = torch.relu(self.pre_classifier(h[:, 0]))
            return self.classifier(self.dropout(x))
        return self.classifier(self.dropout(pool(h, key_mask, self.pooling)))


class TokenHead(nn.Module):
    """A tagger's head, [B, T, d] -> logits [B, T, L]: dropout, then one linear layer per position
    (transformers' ForTokenClassification for BERT, RoBERTa and DistilBERT alike)."""

    export_prefix = ""

    def __init__(self, d: int, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        return self.classifier(self.dropout(h))


def head_dropout(config: dict[str, Any], style: HeadStyle, task: str) -> float:
    """The dropout transformers' head of `style` uses, read from the encoder's config.json."""
    if style == "distilbert":
        return float(config.get("seq_classif_dropout" if task == "classification" else "dropout", 0.1))
    value = config.get("classifier_dropout")
    return float(config.get("hidden_dropout_prob", 0.1) if value is None else value)


def head_for(task: str, style: HeadStyle, d: int, num_labels: int, dropout: float,
             pooling: Pooling = "first") -> nn.Module:
    """The head of `task` ("classification" | "tagging") for an encoder of `style`."""
    if task == "tagging":
        return TokenHead(d, num_labels, dropout)
    if task == "classification":
        return SequenceHead(style, d, num_labels, dropout, pooling)
    raise ConfigError(f"no head for task {task!r} (classification or tagging)")


# ---------------------------------------------------------------------------------------------
# Positions for nb's encoder trained from scratch (paper 002: learned | sinusoidal | none)


def positions_table(T: int, d: int) -> torch.Tensor:
    """Vaswani et al. (2017) sec. 3.5: PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(same), [T, d]
    (the one formula: `nbcli.ops.sinusoidal_positions`, positions 0..T-1)."""
    return ops.sinusoidal_positions(torch.arange(T), d)


def set_positions(pos_emb: nn.Embedding, kind: str) -> None:
    """nb's encoder with `--positions`: learned (trained, as initialised), sinusoidal (the fixed
    table of `positions_table`, frozen) or none (zeros, frozen: the sum x = E[idx] + 0)."""
    if kind == "learned":
        return
    if kind not in ("sinusoidal", "none"):
        raise ConfigError(f"--positions must be learned, sinusoidal or none, got {kind!r}")
    with torch.no_grad():
        T, d = pos_emb.weight.shape
        pos_emb.weight.copy_(positions_table(T, d) if kind == "sinusoidal" else torch.zeros(T, d))
    pos_emb.weight.requires_grad_(False)


# ---------------------------------------------------------------------------------------------
# Encoder + head


@dataclass(frozen=True)
class EncoderSpec:
    """Which encoder a classifier has: `kind` "nb" (nbcli.model's MLM Transformer) or "hf"
    (transformers AutoModel from `path`); `style` its head family; `config` the model's config
    (nb: ModelConfig as a dict; hf: config.json)."""

    kind: Literal["nb", "hf"]
    style: HeadStyle
    config: dict[str, Any]
    path: Path | None = None


class Classifier(nn.Module):
    """An encoder with a head: forward(ids [B, T], key_mask [B, T], token_type_ids) -> logits
    ([B, L] classification, [B, T, L] tagging), float32."""

    def __init__(self, encoder: nn.Module, head: nn.Module, spec: EncoderSpec) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.spec = spec

    def states(self, ids: torch.Tensor, key_mask: torch.Tensor | None,
               token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The encoder's last hidden states [B, T, d] and, for BERT, its pooler output [B, d]."""
        if self.spec.kind == "nb":
            return self.encoder.encode(ids, key_mask)[0], None
        kwargs: dict[str, Any] = {"attention_mask": None if key_mask is None else key_mask.long()}
        if token_type_ids is not None and self.spec.style == "bert":
            kwargs["token_type_ids"] = token_type_ids
        out = self.encoder(input_ids=ids, **kwargs)
        return out.last_hidden_state, getattr(out, "pooler_output", None)

    def forward(self, ids: torch.Tensor, key_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        h, pooled = self.states(ids, key_mask, token_type_ids)
        return self.head(h, key_mask, pooled).float()

    def nb_state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors nb saves (step-N.safetensors; the update loop's `train.state.save_model`)."""
        return self.state_dict()

    def load_nb_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        """Load `nb_state_dict`'s tensors (--resume)."""
        self.load_state_dict(tensors)

    def export_tensors(self) -> dict[str, torch.Tensor]:
        """A transformers encoder's tensors under `AutoModelFor{Sequence,Token}Classification`'s
        names: the encoder's under its base_model_prefix, the head's under `export_prefix`."""
        if self.spec.kind != "hf":
            raise ConfigError("only a fine-tuned transformers encoder exports to a transformers folder")
        prefix = self.encoder.base_model_prefix
        out = {f"{prefix}.{k}": v for k, v in self.encoder.state_dict().items()}
        out.update({f"{self.head.export_prefix}{k}": v for k, v in self.head.state_dict().items()})
        return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


def init_head(head: nn.Module, std: float) -> None:
    """transformers' initialisation of a head: weights N(0, std) (`initializer_range`), biases 0."""
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, std)
            nn.init.zeros_(module.bias)

