"""Sentence (pair) classification: what an example is, its batch, its loss and its metrics
(papers 001 tables 1, 2: MNLI, QNLI, QQP, Filipino sentiment; 002 table 1: SST-2, MNLI).

Examples are read by THE reader, `nbcli.corpus.records.iter_examples` (GLUE TSV with a header, CSV,
JSONL, parquet/Arrow): `text_field` (default `text`, else `sentence` when the file has no `text`),
an optional `pair_field`, `label_field` (default `label`). Labels keep their names (`tasks.labels`).

Encoding (`TextEncoder`): a tokenizer.json with a post-processor (BERT's [CLS] a [SEP] b [SEP],
RoBERTa's <s> a </s></s> b </s>) encodes as transformers' fast tokenizer does, with its token type
ids; any other tokenizer (nb's SentencePiece runs) gives [bos] a [eos] (b [eos]), type ids 0 / 1.
Texts longer than `max_len` lose tokens from the longer of the two texts first ("longest_first").

Metrics (scikit-learn, on every example of the file): accuracy; F1 (a run of two labels: binary F1
of the label with id 1, as GLUE reports it for QQP and MRPC; more: the macro average, scikit-learn's
default: over the labels that occur in the file's gold labels or in the predictions, not the run's
labels the file never mentions); Matthews correlation (CoLA).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from nbcli.corpus.records import Example, ReadStats, iter_examples
from nbcli.errors import ConfigError, CorpusError
from nbcli.models.heads import EncoderFamily, Head
from nbcli.tasks.labels import LabelSet
from nbcli.tokenizers import Tokenizer

__all__ = ["TextEncoder", "classification_loss", "classification_metrics", "encode_examples", "head_class",
           "read_examples"]


def read_examples(inputs: Sequence[str], *, text_field: str | None = None, pair_field: str | None = None,
                  label_field: str | None = "label", stats: ReadStats | None = None) -> list[Example]:
    """Every example of `inputs` in order (module doc); CorpusError for an empty file. Without
    `text_field`, `text` is read, and `sentence` where the file has no `text` column. `stats`: what
    the read that succeeded replaced (invalid UTF-8)."""
    if text_field is None:
        try:
            return read_examples(inputs, text_field="text", pair_field=pair_field, label_field=label_field, stats=stats)
        except CorpusError as err:
            if "'text'" not in str(err):
                raise
            try:
                return read_examples(inputs, text_field="sentence", pair_field=pair_field, label_field=label_field,
                                     stats=stats)
            except CorpusError as second:
                raise (err if "'sentence'" in str(second) else second) from None
    mine = ReadStats()   # counted into `stats` only once the whole read succeeds
    examples = list(iter_examples(inputs, text_field=text_field, pair_field=pair_field, label_field=label_field,
                                  stats=mine))
    if not examples:
        raise CorpusError(f"{', '.join(inputs)}: no examples (an empty file)")
    if stats is not None:
        stats.add(mine)
    return examples


@dataclass
class TextEncoder:
    """Token ids and type ids of one text or pair (module doc), at most `max_len` tokens."""

    tokenizer: Tokenizer
    max_len: int

    def __post_init__(self) -> None:
        if self.max_len < 4:
            raise ConfigError(f"--max-len must be >= 4, got {self.max_len}")
        impl = self.tokenizer.impl
        self.native = self.tokenizer.kind == "tokenizer.json" and getattr(impl, "post_processor", None) is not None
        if self.native:
            impl.enable_truncation(self.max_len, strategy="longest_first")

    def encode(self, text: str, pair: str | None = None) -> tuple[list[int], list[int]]:
        if self.native:
            enc = self.tokenizer.impl.encode(text, pair, add_special_tokens=True)
            return list(enc.ids), list(enc.type_ids)
        tok = self.tokenizer
        a = tok.encode(text)
        b = tok.encode(pair) if pair is not None else None
        start = [tok.bos_id] if tok.bos_id is not None else []
        end = [tok.eos_id] if tok.eos_id is not None else []
        room = self.max_len - len(start) - len(end) * (2 if b is not None else 1)
        while len(a) + (len(b) if b is not None else 0) > room:
            if b is not None and len(b) > len(a):
                b = b[:-1]
            else:
                a = a[:-1]
        first = start + a + end
        if b is None:
            return first, [0] * len(first)
        second = b + end
        return first + second, [0] * len(first) + [1] * len(second)


def encode_examples(encoder: TextEncoder, examples: Sequence[Example], labels: LabelSet | None,
                    ) -> list[tuple[list[int], list[int], int]]:
    """(ids, type ids, label id) per example; label -1 when `labels` is None (prediction)."""
    out = []
    for ex in examples:
        ids, types = encoder.encode(ex.text, ex.pair)
        out.append((ids, types, labels.index(ex.label, ex.origin) if labels is not None else -1))
    return out


def head_class(row: EncoderFamily) -> type[Head]:
    """The head a sentence (pair) classifier puts on an encoder of the family `row`: the family's
    sentence head (transformers' ForSequenceClassification; nb's pooled head, `nbcli.models.heads`)."""
    return row.sequence_head


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits [B, L] against label ids [B]."""
    return F.cross_entropy(logits.float(), labels, reduction=reduction)


def classification_metrics(gold: Sequence[int], pred: Sequence[int], num_labels: int) -> dict[str, Any]:
    """accuracy, f1 (binary for two labels, else macro over the labels present in `gold` or `pred`,
    scikit-learn's default; module doc) and matthews (scikit-learn)."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    if num_labels == 2:
        f1 = f1_score(gold, pred, average="binary", pos_label=1, zero_division=0)
    else:
        f1 = f1_score(gold, pred, average="macro", zero_division=0)
    return {"accuracy": float(accuracy_score(gold, pred)), "f1": float(f1),
            "f1_average": "binary" if num_labels == 2 else "macro",
            "matthews": float(matthews_corrcoef(gold, pred)), "examples": len(gold)}
