"""Token classification (NER; paper 001 table 4, Oromo NER): tagged sentences, word-piece
alignment, loss and entity metrics.

Sentences are read by THE reader, `nbcli.corpus.records.iter_sentences` (`read_sentences`), from

- token-per-line CoNLL text (token ... tag, blank line between sentences, BIO/IOB2 tags; CoNLL-2003,
  WNUT, CoNLL-U, GermEval-2014): a file that is not (a line with another column count than the
  file's first token line, a JSON line, a line with one column) is an error naming FILE:LINE.
  `token_field`/`tag_field` may be 0-based column numbers ("1", "3": CoNLL-U's FORM and UPOS);
  default column 0 (refused when it numbers the tokens) and the last column;
- JSONL, parquet, Arrow and `datasets` folders as the Hugging Face token-classification data sets
  ship (`tokens` and `ner_tags`, or the fields named): integer tags are named by the data's
  ClassLabel feature, else by --label-names, else they name themselves 0 .. the largest (and the
  run warns: `tasks.data.unnamed_tags`).

Alignment (`align_words`): each word is split into word pieces; the first piece of a word carries
the word's tag, its other pieces and the special tokens carry -100 (no loss, no prediction), as
transformers' token-classification examples do. A word the tokenizer gives no piece is an error.
Sentences longer than `max_len` pieces are cut and the words cut off are predicted "O".
Predictions are read back at the first piece of every word (`word_tags`).

Metrics (seqeval, on every sentence of the file): entity precision, recall and F1 (seqeval's
default, conlleval-compatible chunking of BIO/IOB2 tags), and token accuracy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from nbcli.corpus.records import Column, ReadStats
from nbcli.corpus.sentences import TAG_FIELD, Sentence, iter_sentences
from nbcli.errors import CorpusError
from nbcli.models.heads import EncoderFamily, Head, TokenHead
from nbcli.tasks.labels import LabelSet
from nbcli.tokenizers import Tokenizer

__all__ = ["TAG_FIELD", "align_words", "encode_sentences", "head_class", "is_column",
           "read_sentences", "tagging_loss", "tagging_metrics", "word_tags"]

_COLUMN = re.compile(r"-?[0-9]+")


def is_column(field: str) -> bool:
    """A field option that is a CoNLL column number ("1", "-1"), not a record field's name."""
    return _COLUMN.fullmatch(field) is not None


def _field(field: str | None) -> Column | None:
    return None if field is None else int(field) if is_column(field) else field


def read_sentences(inputs: Sequence[str], *, token_field: str | None = None, tag_field: str | None = None,
                   tag_names: Sequence[str] | None = None, labelled: bool = True,
                   stats: ReadStats | None = None) -> list[Sentence]:
    """Every sentence of `inputs`, in order (module doc; `iter_sentences`): the fields are names, or
    CoNLL column numbers as strings; `tag_names`: what integer tags without a ClassLabel index.
    CorpusError for a file without sentences."""
    sentences = list(iter_sentences(inputs, token_field=_field(token_field), tag_field=_field(tag_field),
                                    tag_names=tag_names, labelled=labelled, stats=stats))
    if not sentences:
        raise CorpusError(f"{', '.join(inputs)}: no sentences (an empty file)")
    return sentences


def word_pieces(tokenizer: Tokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """(ids, word index per id, -1 for special tokens) of a pre-split sentence, special tokens
    included: a tokenizer.json encodes the words as transformers' fast tokenizer does with
    is_split_into_words=True; another tokenizer encodes each word and adds [bos] ... [eos]."""
    impl = tokenizer.impl
    if tokenizer.kind == "tokenizer.json":
        enc = impl.encode(list(words), is_pretokenized=True,
                          add_special_tokens=getattr(impl, "post_processor", None) is not None)
        return list(enc.ids), [-1 if w is None else w for w in enc.word_ids]
    ids: list[int] = [tokenizer.bos_id] if tokenizer.bos_id is not None else []
    owners = [-1] * len(ids)
    for index, word in enumerate(words):
        pieces = tokenizer.encode(word)
        ids += pieces
        owners += [index] * len(pieces)
    if tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
        owners.append(-1)
    return ids, owners


def align_words(owners: Sequence[int], word_labels: Sequence[int]) -> list[int]:
    """Per piece: the label of its word at the word's first piece, -100 elsewhere (module doc)."""
    out, previous = [], -1
    for owner in owners:
        out.append(word_labels[owner] if owner >= 0 and owner != previous else -100)
        if owner >= 0:
            previous = owner
    return out


def encode_sentences(tokenizer: Tokenizer, sentences: Sequence[Sentence], labels: LabelSet | None, max_len: int,
                     ) -> list[tuple[list[int], list[int], list[int]]]:
    """(ids, type ids, piece labels) per sentence, cut at `max_len` pieces; piece labels are 0 at
    first pieces when `labels` is None (prediction: they only mark where words start)."""
    out = []
    for sent in sentences:
        ids, owners = word_pieces(tokenizer, sent.tokens)
        missing = sorted(set(range(len(sent.tokens))) - set(owners))
        if missing:
            raise CorpusError(f"{sent.origin}: word {sent.tokens[missing[0]]!r} has no word piece in the tokenizer")
        tags = [labels.index(tag, sent.origin, "tag") for tag in sent.tags] if labels is not None \
            else [0] * len(sent.tokens)
        piece_labels = align_words(owners, tags)
        if len(ids) > max_len:
            ids, piece_labels = ids[:max_len - 1] + ids[-1:], piece_labels[:max_len - 1] + [-100]
        out.append((ids, [0] * len(ids), piece_labels))
    return out


def word_tags(logits: torch.Tensor, piece_labels: Sequence[int], words: int) -> list[int]:
    """The predicted tag id of each word: argmax of logits [T, L] at first pieces (piece_labels
    != -100), in order; words cut off by max_len get -1 (reported as "O")."""
    first = [t for t, label in enumerate(piece_labels) if label != -100]
    pred = logits[first].argmax(dim=-1).tolist() if first else []
    return pred + [-1] * (words - len(pred))


def head_class(row: EncoderFamily) -> type[Head]:
    """The head a tagger puts on an encoder of any family: one linear layer per position
    (transformers' ForTokenClassification; `nbcli.models.heads.TokenHead`)."""
    return TokenHead


def tagging_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits [B, T, L] at labelled pieces (labels [B, T], -100 ignored)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=-100,
                           reduction=reduction)


def tagging_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Entity precision, recall, F1 and token accuracy (seqeval) of tag sequences, by name."""
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

    g, p = [list(s) for s in gold], [list(s) for s in pred]
    return {"accuracy": float(accuracy_score(g, p)), "f1": float(f1_score(g, p, zero_division=0)),
            "precision": float(precision_score(g, p, zero_division=0)),
            "recall": float(recall_score(g, p, zero_division=0)), "sentences": len(g)}
