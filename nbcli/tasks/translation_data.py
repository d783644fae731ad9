"""Translation data for `nb train --task translation`: sentence pairs read by the one reader
(`nbcli.corpus.records.iter_pairs`: aligned PREFIX.src/PREFIX.tgt files, TSV, JSONL translation
objects, parquet/Arrow), tokenised once, split, counted, and served as padded batches.

Conventions (the model's, `nbcli.models.seq2seq`): the source is `ids EOS` (the source tokenizer's
EOS, when it has one); the decoder reads `start ids` and predicts `ids EOS`, start being the target
tokenizer's BOS, else its EOS (fairseq starts the decoder from EOS). So a side of n tokens takes
n + 1 positions; a pair whose source or target needs more than --max-len (--seq-len) positions is
skipped and counted (`skipped_long`), as fairseq's --skip-invalid-size-inputs-valid-test does. A pair
with an empty side is an error naming FILE:LINE (a corpus with misaligned or missing lines).

Validation: the --valid inputs, else every round(1/--val-fraction)-th pair (the LM's rule for documents).
Counts (paper 000 sec. 3: "computed on respective training sets after tokenisation"): the target
side's training tokens, one EOS per sentence included -- what the decoder predicts -- over the target
vocabulary; --bias-init unigram is their smoothed log-unigram.

Token ids are held flat (int32) with offsets, so a corpus of millions of pairs costs its tokens, not
millions of Python lists. Training order: pairs reshuffled each epoch by a generator seeded from
(seed, epoch) (`nbcli.train.data.TrainSampler`), so a run's data position is one integer and resuming
is exact; a batch is padded to its longest source and target.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from nbcli.corpus.records import Pair, ReadStats, aligned_files, iter_pairs
from nbcli.errors import ConfigError, CorpusError
from nbcli.padding import pad_rows
from nbcli.provenance import sha256_bytes
from nbcli.tokenizers import Tokenizer
from nbcli.train.data import held_out
from nbcli.train.runtime import to_device

ENCODE_BATCH = 2048


@dataclass(frozen=True)
class Conventions:
    """The ids a translation model is trained and decoded with (docs/training.md)."""

    src_eos_id: int | None      # appended to every source
    eos_id: int                 # ends every target
    decoder_start_id: int       # the decoder's first input
    pad_id: int                 # fills batches; never attended to, never a label


def conventions(source: Tokenizer, target: Tokenizer) -> Conventions:
    """Source EOS; target EOS (required: decoding stops there); decoder start = target BOS, else EOS;
    padding = the target tokenizer's pad id, else its EOS (any id works: padding is masked), kept
    inside the source vocabulary too."""
    if target.eos_id is None:
        raise ConfigError(f"{target.path}: the target tokenizer has no EOS id; a translation model needs one to "
                          "end its sentences")
    start = target.bos_id if target.bos_id is not None else target.eos_id
    pad = target.pad_id if target.pad_id is not None else target.eos_id
    if pad >= source.vocab_size:
        pad = 0
    return Conventions(src_eos_id=source.eos_id, eos_id=target.eos_id, decoder_start_id=start, pad_id=pad)


@dataclass
class Sentences:
    """Token ids of many sentences, flat: sentence i is tokens[offsets[i]:offsets[i + 1]]."""

    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_parts(cls, parts: list[np.ndarray]) -> "Sentences":
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        tokens = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
        return cls(tokens, offsets)


@dataclass
class PairData:
    """Tokenised pairs: sources (`ids EOS`) and targets (`ids`, no BOS/EOS) of training and validation,
    the validation references as text, the target-side training counts, and what was skipped."""

    train_src: Sentences
    train_tgt: Sentences
    val_src: Sentences
    val_tgt: Sentences
    val_refs: list[str]
    counts: np.ndarray              # int64 [V_tgt]: target training tokens + one EOS a sentence
    src_counts: np.ndarray          # int64 [V_src]: source training tokens, EOS included (--embedding-whiten)
    documents: int                  # pairs read (training + validation, skipped included)
    skipped_long: int
    inputs: list[str]
    fingerprint: str
    notes: list[str] = field(default_factory=list)   # what the read replaced or skipped (ReadStats.notes)


class _Split:
    """Pairs collected for one split: encoded in batches, long pairs skipped."""

    def __init__(self, source: Tokenizer, target: Tokenizer, conv: Conventions, max_len: int, count: bool) -> None:
        self.source, self.target, self.conv, self.max_len = source, target, conv, max_len
        self.counts = np.zeros(target.vocab_size, np.int64) if count else None
        self.src_counts = np.zeros(source.vocab_size, np.int64) if count else None
        self.src: list[np.ndarray] = []
        self.tgt: list[np.ndarray] = []
        self.refs: list[str] = []
        self.skipped = 0
        self.pending: list[Pair] = []

    def add(self, pair: Pair) -> None:
        for side, text in (("source", pair.source), ("target", pair.target)):
            if not text.strip():
                raise CorpusError(f"{pair.origin}: empty {side} sentence (a pair needs both sides)")
        self.pending.append(pair)
        if len(self.pending) >= ENCODE_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        srcs = self.source.encode_batch([p.source for p in self.pending])
        tgts = self.target.encode_batch([p.target for p in self.pending])
        eos = [self.conv.src_eos_id] if self.conv.src_eos_id is not None else []
        V = self.target.vocab_size
        for pair, s, t in zip(self.pending, srcs, tgts):
            s = s + eos
            if len(s) > self.max_len or len(t) + 1 > self.max_len:
                self.skipped += 1
                continue
            self.src.append(np.asarray(s, np.int32))
            self.tgt.append(np.asarray(t, np.int32))
            self.refs.append(pair.target)
            if self.counts is not None and self.src_counts is not None:   # the decoder predicts `ids EOS`
                self.counts += np.bincount(np.asarray(t + [self.conv.eos_id], np.int64), minlength=V)[:V]
                self.src_counts += np.bincount(np.asarray(s, np.int64), minlength=len(self.src_counts))[
                    :len(self.src_counts)]
        self.pending = []


def tokenize_pairs(corpus: Sequence[str], valid: Sequence[str] | None, source: Tokenizer, target: Tokenizer,
                   src_lang: str, tgt_lang: str, max_len: int, val_fraction: float,
                   progress: Callable[[int], None] | None = None, columns: str | None = None) -> PairData:
    """Read, check and tokenise the pairs of `corpus` (and `valid`, else every k-th pair; module docstring).
    `columns`: which column of a .tsv/.csv without a header naming the languages is the source
    (`nbcli.corpus.records.iter_pairs`; None: the first)."""
    conv = conventions(source, target)
    train = _Split(source, target, conv, max_len, True)
    val = _Split(source, target, conv, max_len, False)
    stats, valid_stats = ReadStats(), ReadStats()
    n = 0
    for pair in iter_pairs(list(corpus), src_lang, tgt_lang, stats=stats, progress=progress, columns=columns):
        (val if valid is None and held_out(n, val_fraction) else train).add(pair)
        n += 1
    if valid is not None:
        for pair in iter_pairs(list(valid), src_lang, tgt_lang, stats=valid_stats, progress=progress,
                               columns=columns):
            val.add(pair)
            n += 1
    train.flush()
    val.flush()
    if not train.src:
        raise CorpusError(f"--corpus {', '.join(corpus)}: no training pair of at most {max_len} tokens a side "
                          f"({n} pairs read, {train.skipped} longer)")
    if not val.src:
        raise CorpusError(f"{'--valid ' + ', '.join(valid) if valid else '--corpus ' + ', '.join(corpus)}: no "
                          f"validation pair of at most {max_len} tokens a side (use --valid, a larger corpus or "
                          "a larger --max-len)")
    splits = [Sentences.from_parts(parts) for parts in (train.src, train.tgt, val.src, val.tgt)]
    for s, (tok, side) in zip(splits, [(source, "source"), (target, "target")] * 2):
        if s.tokens.size and (s.tokens.min() < 0 or s.tokens.max() >= tok.vocab_size):
            raise CorpusError(f"{side} tokenizer {tok.name} produced ids outside [0, {tok.vocab_size})")
    digest = sha256_bytes(b"|".join(part for s in splits for part in (s.tokens.tobytes(), s.offsets.tobytes())))
    assert train.counts is not None and train.src_counts is not None
    return PairData(*splits, val_refs=val.refs, counts=train.counts, src_counts=train.src_counts, documents=n, skipped_long=train.skipped + val.skipped,
                    inputs=[*corpus, *(valid or [])], fingerprint=digest,
                    notes=[*stats.notes(f"--corpus {', '.join(corpus)}"),
                           *valid_stats.notes(f"--valid {', '.join(valid or [])}")])


def training_sentences(corpus: Sequence[str], src_lang: str, tgt_lang: str, val_fraction: float, held_out_pairs: bool,
                       sides: tuple[str, ...], columns: str | None = None) -> Iterable[str]:
    """The `sides` ("source", "target") of the training pairs `tokenize_pairs` keeps from `corpus` (every
    k-th held out when `held_out_pairs`, i.e. no --valid): what `-t words:min-freq=K` counts."""
    from nbcli.tokenizers.words import NamedTexts, files_of

    def texts() -> Iterator[str]:
        for n, pair in enumerate(iter_pairs(list(corpus), src_lang, tgt_lang, columns=columns)):
            if not (held_out_pairs and held_out(n, val_fraction)):
                for side in sides:
                    yield pair.source if side == "source" else pair.target

    return NamedTexts(texts(), files_of(input_files(corpus, src_lang, tgt_lang)))


def input_files(inputs: Iterable[str], src_lang: str, tgt_lang: str) -> list[str]:
    """The files a list of --corpus/--valid inputs names: a PREFIX's two aligned files, other inputs as given."""
    files: list[str] = []
    for item in inputs:
        aligned = aligned_files(item, src_lang, tgt_lang)
        files.extend(aligned if aligned is not None else [item])
    return files


@dataclass
class TranslationBatch:
    """A padded batch: sources [B, S], decoder inputs and labels [B, T] (-100 on padding); masks True on
    real tokens (None when no row is padded); lengths of each row's source and decoder input; `tokens`:
    the labelled target tokens, counted on the host as the batch is built (no device sync to count them)."""

    src: torch.Tensor
    src_mask: torch.Tensor | None
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_mask: torch.Tensor | None
    tgt_lengths: torch.Tensor
    labels: torch.Tensor
    tokens: int


def collate(src: Sentences, tgt: Sentences, indices: Sequence[int], conv: Conventions,
            device: torch.device) -> TranslationBatch:
    """The batch of pairs `indices`: source `ids EOS`, decoder input `start ids`, labels `ids EOS`."""
    start = np.array([conv.decoder_start_id], np.int32)
    end = np.array([conv.eos_id], np.int32)
    s = pad_rows([src[i] for i in indices], conv.pad_id)
    t = pad_rows([np.concatenate([start, tgt[i]]) for i in indices], conv.pad_id)
    labels = pad_rows([np.concatenate([tgt[i], end]) for i in indices], -100).ids
    s_mask, t_mask = s.mask_if_padded, t.mask_if_padded
    return TranslationBatch(src=to_device(s.ids, device), src_mask=None if s_mask is None else to_device(s_mask, device),
                            src_lengths=to_device(s.lengths, device), tgt_in=to_device(t.ids, device),
                            tgt_mask=None if t_mask is None else to_device(t_mask, device),
                            tgt_lengths=to_device(t.lengths, device), labels=to_device(labels, device),
                            tokens=int(t.lengths.sum()))
