"""`nb train` data: tokenise the corpus once, count training unigrams on the way, serve fixed blocks.

Documents are those `nb count-unigrams` counts, read by the one reader (`nbcli.corpus.records.
iter_documents`: each file in the format its name says; text: the non-empty lines, a line ending at
LF or CRLF only; JSONL, TSV/CSV, parquet and Arrow: the `text` field or column), and tokenised with
the one tokenizer loader. Each document becomes `ids EOS` (EOS when
the tokenizer has one) and documents are concatenated (GPT-2/RoBERTa "full sentences" packing).
For MLM every block then starts with BOS, as RoBERTa's do (fairseq: blocks of T-1 stream tokens,
`<s>` prepended), so paper 001's [First] heads always look at `<s>`: `BlockStream(prefix=bos)`.
Every round(1/val_fraction)-th document goes to validation.

Unigram counts of the training stream are accumulated batch by batch while tokenising (paper 000
sec. 3: "very little extra computational cost") and count what the objective predicts: for CLM every
stream token, EOS included (as `nb count-unigrams` by default); for MLM only tokens that can be
selected for prediction, i.e. not `never_predicted` ids (BOS, EOS, padding, the tokenizer's special
ids: MLM never masks them, so the output bias should not spend mass on them).

The token streams are held in memory as int32 (4 bytes a token). Training order: non-overlapping
blocks of T tokens, reshuffled each epoch by a generator seeded from (seed, epoch), so the data
position of a run is one integer (sequences consumed) and resuming is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from nbcli.corpus import ReadStats, iter_documents
from nbcli.errors import ConfigError, CorpusError
from nbcli.provenance import sha256_bytes
from nbcli.tokenizers import Tokenizer
from nbcli.tokenizers.words import NamedTexts, files_of
from nbcli.train.runtime import to_device

ENCODE_BATCH = 2048


@dataclass
class TokenData:
    """Tokenised corpus: training and validation streams and the training unigram counts."""

    train: np.ndarray          # int32 [N_train]
    val: np.ndarray            # int32 [N_val]
    counts: np.ndarray         # int64 [V] unigram counts of what the objective predicts (module docstring)
    documents: int
    inputs: list[str]
    fingerprint: str           # sha256 of both streams (resume checks it)
    notes: list[str] = field(default_factory=list)   # what the read replaced or skipped (ReadStats.notes)


def never_predicted(tokenizer: Tokenizer) -> frozenset[int]:
    """Ids MLM never selects for prediction (so never a label): BOS, EOS, padding and the tokenizer's
    special ids. The one definition for masking (`nbcli.models.masking.mlm_mask` via ModelConfig.special_ids)
    and for the MLM unigram counts."""
    extra = {i for i in (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) if i is not None}
    return frozenset(set(tokenizer.special_ids) | extra)


def block_prefix(tokenizer: Tokenizer, objective: str) -> int | None:
    """The id every MLM block starts with: BOS (RoBERTa's `<s>`), else EOS, else none. CLM: none."""
    if objective != "mlm":
        return None
    return tokenizer.bos_id if tokenizer.bos_id is not None else tokenizer.eos_id


def held_out(n: int, val_fraction: float) -> bool:
    """Whether document (or sentence pair) `n` (0-based, in reading order) is held out for validation:
    every round(1/F)-th, at least every 2nd."""
    every = max(2, round(1 / val_fraction))
    return n % every == every - 1


def training_documents(inputs: list[str], val_fraction: float, hold_out: bool = True) -> NamedTexts:
    """The documents `tokenize_corpus` trains on (the held-out ones skipped unless `hold_out` is False:
    a run with --valid trains on all), read by the one corpus reader: what `-t words:min-freq=K`
    counts (nbcli.tokenizers.words). They name their files (`NamedTexts`: a vocabulary they cannot
    make is an error naming the corpus)."""
    from nbcli.corpus.sources import corpus_files

    return NamedTexts((text for n, text in enumerate(iter_documents(inputs))
                       if not (hold_out and held_out(n, val_fraction))), files_of(corpus_files(inputs) or inputs))


def tokenize_corpus(inputs: list[str], tokenizer: Tokenizer, objective: str, val_fraction: float,
                    progress: Callable[[int, int | None], None] | None = None,
                    valid: Sequence[str] = ()) -> TokenData:
    """Tokenise `inputs` once; split documents into train/val (every round(1/val_fraction)-th
    document held out; with `valid` files, all of `inputs` trains and `valid`'s documents validate);
    count training unigrams as we go."""
    V = tokenizer.vocab_size
    eos = tokenizer.eos_id
    skip = np.array(sorted(i for i in never_predicted(tokenizer) if i < V), dtype=np.int64) \
        if objective == "mlm" else np.zeros(0, np.int64)
    train_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    counts = np.zeros(V, dtype=np.int64)
    n_docs = 0

    def flush(batch: list[str], validation: bool) -> None:
        nonlocal n_docs
        for ids in tokenizer.encode_batch(batch):
            doc = np.asarray(ids + ([eos] if eos is not None else []), dtype=np.int32)
            if validation or (not valid and held_out(n_docs, val_fraction)):
                val_parts.append(doc)
            else:
                train_parts.append(doc)
                counts[:] += np.bincount(doc, minlength=V)[:V]
            n_docs += not validation

    stats, valid_stats = ReadStats(), ReadStats()
    for files, read, validation in ((inputs, stats, False), *([(list(valid), valid_stats, True)] if valid else [])):
        batch: list[str] = []
        for text in iter_documents(files, stats=read,
                                   progress=None if progress is None else lambda n: progress(n, None)):
            batch.append(text)
            if len(batch) >= ENCODE_BATCH:
                flush(batch, validation)
                batch = []
        if batch:
            flush(batch, validation)
    train = np.concatenate(train_parts) if train_parts else np.zeros(0, np.int32)
    val = np.concatenate(val_parts) if val_parts else np.zeros(0, np.int32)
    if train.size and (train.min() < 0 or train.max() >= V):
        raise CorpusError(f"tokenizer {tokenizer.name} produced ids outside [0, {V})")
    counts[skip] = 0
    fingerprint = sha256_bytes(train.tobytes() + b"|" + val.tobytes())
    notes = stats.notes(f"--corpus {', '.join(inputs)}") + (valid_stats.notes(f"--valid {', '.join(valid)}")
                                                              if valid else [])
    return TokenData(train=train, val=val, counts=counts, documents=n_docs, inputs=list(inputs),
                     fingerprint=fingerprint, notes=notes)


@dataclass
class BlockBatch:
    inputs: torch.Tensor           # [B, T] long
    labels: torch.Tensor           # [B, T] long (-100 = no loss); for MLM the unmasked ids
    lengths: torch.Tensor | None   # [B] real tokens per row (padding at the end); None = no padding


class BlockStream:
    """Fixed blocks of T tokens from one stream. CLM blocks carry T+1 tokens (inputs and shifted labels).
    With `prefix` (MLM: BOS) each block is `prefix` + the next T-1 stream tokens."""

    def __init__(self, tokens: np.ndarray, seq_len: int, objective: str, pad_id: int, name: str,
                 allow_partial: bool = False, prefix: int | None = None) -> None:
        if prefix is not None and objective == "clm":
            raise ConfigError("a block prefix is for MLM blocks only")
        self.tokens = tokens
        self.T = seq_len
        self.prefix = prefix
        self.body = seq_len - (prefix is not None)          # stream tokens per block
        self.shift = 1 if objective == "clm" else 0
        self.pad_id = pad_id
        span = seq_len + self.shift
        self.n_full = max(0, (len(tokens) - self.shift) // self.body)
        tail = len(tokens) - self.n_full * self.body
        self.partial = allow_partial and tail > self.shift
        if self.n_blocks == 0:
            raise ConfigError(f"{name} split has {len(tokens)} tokens, fewer than one block of {span}: "
                              "use a larger corpus or a smaller --seq-len")

    @property
    def n_blocks(self) -> int:
        return self.n_full + int(self.partial)

    def block(self, b: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(inputs [T], labels [T], length) of block b; the partial last block is padded."""
        start = b * self.body
        chunk = self.tokens[start:start + self.body + self.shift]
        if self.prefix is not None:
            chunk = np.concatenate([np.array([self.prefix], dtype=chunk.dtype), chunk])
        n = len(chunk) - self.shift
        x = np.full(self.T, self.pad_id, dtype=np.int64)
        y = np.full(self.T, -100, dtype=np.int64)
        x[:n] = chunk[:n]
        y[:n] = chunk[self.shift:self.shift + n]
        return x, y, n

    def batch(self, blocks: list[int], device: torch.device) -> BlockBatch:
        xs, ys, ns = zip(*(self.block(b) for b in blocks))
        lengths = torch.tensor(ns)
        return BlockBatch(inputs=to_device(torch.from_numpy(np.stack(xs)), device),
                     labels=to_device(torch.from_numpy(np.stack(ys)), device),
                     lengths=None if bool((lengths == self.T).all()) else to_device(lengths, device))


def epoch_order(n_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of training blocks in `epoch` (depends only on seed and epoch)."""
    return np.random.default_rng([seed, epoch, 0x6E62]).permutation(n_blocks)


class TrainSampler:
    """Global sequence index s -> training block: epoch s // n, position s % n of that epoch's order."""

    def __init__(self, n_blocks: int, seed: int) -> None:
        self.n_blocks = n_blocks
        self.seed = seed
        self._cache: dict[int, np.ndarray] = {}

    def blocks(self, start: int, count: int) -> list[int]:
        out = []
        for s in range(start, start + count):
            epoch, pos = divmod(s, self.n_blocks)
            if epoch not in self._cache:
                self._cache = {epoch: epoch_order(self.n_blocks, self.seed, epoch)}
            out.append(int(self._cache[epoch][pos]))
        return out
