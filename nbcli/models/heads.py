"""Classification and tagging heads on any encoder: nb's own MLM Transformer (`nbcli.models.lm`) or a
transformers encoder (BERT, RoBERTa, DistilBERT, MiniLM, ...) loaded with `AutoModel`.

Papers 001 (tables 1, 2, 4: GLUE, sentiment, NER) and 002 (table 1: SST-2, MNLI from scratch) judge
a pretrained encoder by what a head on it does downstream. Shapes: B batch, T tokens, d width, L labels.

    pool(h, key_mask, "first")  h[:, 0]                          the first token (<s> / [CLS])
    pool(h, key_mask, "mean")   sum_t m_t h_t / sum_t m_t        the mean over real tokens (m: key mask)

An encoder family is one row of FAMILIES (`EncoderFamily`): its sentence head, whether transformers'
AutoModel takes `add_pooling_layer`, whether it reads token type ids, the config keys of its heads'
dropout and the transformers class its export is named after. For a transformers encoder the head has
the parameters, names and order of operations of that family's `AutoModelFor{Sequence,Token}Classification`,
so that the step-0 logits are transformers' own for the same weights and `nb export` is a rename:

    bert        dropout(pooler(h))           -> classifier       pooler: tanh(W h[:, 0] + b), the encoder's own
    roberta     dropout -> dense -> tanh -> dropout -> out_proj on h[:, 0]     (names classifier.dense/out_proj)
    distilbert  pre_classifier -> ReLU -> dropout -> classifier on h[:, 0]
    nb          dropout(pool(h)) -> classifier                   (pooling "first" or "mean")
    TokenHead   dropout(h) -> classifier, for every position     (all families: ...ForTokenClassification)

Which head a task puts on the encoder is the task module's choice (`nbcli.tasks.classification.head_class`,
`nbcli.tasks.tagging.head_class`); every head is built as `Head(d, num_labels, dropout, pooling)`.
Dropout is the encoder config's (`head_dropout`: the row's keys for the head's `role`, the first one
set; DistilBERT's `seq_classif_dropout` / `dropout`), nb's `--dropout` for nb's encoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from nbcli.errors import ConfigError

__all__ = ["BertSequenceHead", "Classifier", "DistilBertSequenceHead", "EncoderFamily", "EncoderSpec", "FAMILIES",
           "Head", "PooledSequenceHead", "Pooling", "RobertaSequenceHead", "TokenHead", "family", "head_dropout",
           "init_head", "pool"]

Pooling = Literal["first", "mean"]


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


class Head(nn.Module):
    """What every head shares: built as Head(d, num_labels, dropout, pooling), called as
    head(h [B, T, d], key_mask, pooled) -> logits. Class attributes: `role` (which dropout keys of
    the family's row apply), `reads_pooler` (the encoder's pooler output: BERT's sentence head),
    `export_prefix` (+ a parameter name = its transformers name), `export_kind` (the transformers
    class suffix) and `export_config` (what the exported config.json adds)."""

    role: ClassVar[str] = "sequence"
    reads_pooler: ClassVar[bool] = False
    export_prefix: ClassVar[str] = ""
    export_kind: ClassVar[str] = "ForSequenceClassification"
    export_config: ClassVar[Mapping[str, Any]] = {"problem_type": "single_label_classification"}
    first_token_only: ClassVar[bool] = True

    def __init__(self, dropout: float, pooling: Pooling) -> None:
        super().__init__()
        if self.first_token_only and pooling != "first":
            raise ConfigError(f"--pooling {pooling}: a {type(self).__name__} reads the first token, as transformers' "
                              "does")
        self.dropout = nn.Dropout(dropout)


class BertSequenceHead(Head):
    """BertForSequenceClassification: classifier(dropout(pooler output))."""

    reads_pooler = True

    def __init__(self, d: int, num_labels: int, dropout: float, pooling: Pooling = "first") -> None:
        super().__init__(dropout, pooling)
        self.classifier = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        if pooled is None:
            raise ConfigError("a BERT sentence head needs the encoder's pooler output")
        return self.classifier(self.dropout(pooled))


class RobertaSequenceHead(Head):
    """RobertaClassificationHead: out_proj(dropout(tanh(dense(dropout(h[:, 0])))))."""

    export_prefix = "classifier."

    def __init__(self, d: int, num_labels: int, dropout: float, pooling: Pooling = "first") -> None:
        super().__init__(dropout, pooling)
        self.dense = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        x = torch.tanh(self.dense(self.dropout(h[:, 0])))
        return self.out_proj(self.dropout(x))


class DistilBertSequenceHead(Head):
    """DistilBertForSequenceClassification: classifier(dropout(relu(pre_classifier(h[:, 0]))))."""

    def __init__(self, d: int, num_labels: int, dropout: float, pooling: Pooling = "first") -> None:
        super().__init__(dropout, pooling)
        self.pre_classifier = nn.Linear(d, d)
        self.classifier = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        return self.classifier(self.dropout(torch.relu(self.pre_classifier(h[:, 0]))))


class PooledSequenceHead(Head):
    """nb's encoder: classifier(dropout(pool(h))), pooling first or mean."""

    first_token_only = False

    def __init__(self, d: int, num_labels: int, dropout: float, pooling: Pooling = "first") -> None:
        super().__init__(dropout, pooling)
        self.pooling = pooling
        self.classifier = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        return self.classifier(self.dropout(pool(h, key_mask, self.pooling)))


class TokenHead(Head):
    """A tagger's head, [B, T, d] -> logits [B, T, L]: dropout, then one linear layer per position
    (transformers' ForTokenClassification for BERT, RoBERTa and DistilBERT alike)."""

    role = "token"
    export_kind = "ForTokenClassification"
    export_config: ClassVar[Mapping[str, Any]] = {}
    first_token_only = False

    def __init__(self, d: int, num_labels: int, dropout: float, pooling: Pooling = "first") -> None:
        super().__init__(dropout, pooling)
        self.classifier = nn.Linear(d, num_labels)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None, pooled: torch.Tensor | None = None) -> torch.Tensor:
        return self.classifier(self.dropout(h))


@dataclass(frozen=True)
class EncoderFamily:
    """One encoder family (module doc): its sentence head, whether AutoModel takes `add_pooling_layer`,
    whether its encoder reads token type ids, its heads' dropout keys by head role (the first key set
    in config.json wins; none: the run's --dropout) and the transformers class name its export takes
    (None: not exportable)."""

    name: str
    sequence_head: type[Head]
    pooling_flag: bool
    token_type_ids: bool
    dropout_keys: Mapping[str, tuple[str, ...]]
    export_class: str | None


_HIDDEN = ("classifier_dropout", "hidden_dropout_prob")
FAMILIES: dict[str, EncoderFamily] = {f.name: f for f in (
    EncoderFamily("bert", BertSequenceHead, True, True, {"sequence": _HIDDEN, "token": _HIDDEN}, "Bert"),
    EncoderFamily("roberta", RobertaSequenceHead, True, False, {"sequence": _HIDDEN, "token": _HIDDEN}, "Roberta"),
    EncoderFamily("distilbert", DistilBertSequenceHead, False, False,
                  {"sequence": ("seq_classif_dropout",), "token": ("dropout",)}, "DistilBert"),
    EncoderFamily("nb", PooledSequenceHead, False, False, {}, None),
)}


def family(name: str) -> EncoderFamily:
    """The row of FAMILIES named `name`; ConfigError naming the known ones otherwise."""
    if name not in FAMILIES:
        raise ConfigError(f"no classifier head for the encoder family {name!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[name]


def head_dropout(config: Mapping[str, Any], row: EncoderFamily, head: type[Head]) -> float:
    """The dropout transformers' `head` of the family `row` uses, read from the encoder's config.json
    (the first of the row's keys for the head's role that is set; 0.1 when none is)."""
    for key in row.dropout_keys.get(head.role, ()):
        if config.get(key) is not None:
            return float(config[key])
    return 0.1


# ---------------------------------------------------------------------------------------------
# Encoder + head


@dataclass(frozen=True)
class EncoderSpec:
    """Which encoder a classifier has: `kind` "nb" (nbcli.models.lm's MLM Transformer) or "hf"
    (transformers AutoModel from `path`); `style` its family (a FAMILIES key; the checkpoint
    metadata's name for it); `config` the model's config (nb: ModelConfig as a dict; hf: config.json)."""

    kind: Literal["nb", "hf"]
    style: str
    config: dict[str, Any]
    path: Path | None = None

    @property
    def family(self) -> EncoderFamily:
        return family(self.style)


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
        if token_type_ids is not None and self.spec.family.token_type_ids:
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
        if self.spec.family.export_class is None:
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

