"""Word vectors against a tokenizer's vocabulary: which ids are whole words (`piece_words`), an embedding
matrix initialised from a word-vector file (`vector_embedding`: `nb train --embedding-init
pretrained:VECTORS`, paper 002 sec. 3.2 and app. A.2 steps 1-2), and a checkpoint's input embedding
read as word vectors (`checkpoint_vectors`: `nb analogy CKPT -t TOK`).

**Whole words** (`piece_words`): the word an id stands for, or None.

* a word-level tokenizer (`tokenizers`' WordLevel model, e.g. `-t words:min-freq=K`): every piece;
* SentencePiece and Metaspace `▁word`, byte-level BPE `Ġword` (GPT-2's byte alphabet decoded): the
  pieces that start a word, without the marker (pieces inside a word are not words);
* WordPiece: the pieces without the `##` continuation prefix;
* another vocabulary without word-start marks: every piece.

Special tokens (BOS, EOS, padding, unknown, mask and the tokenizer's special ids) are never words, and
neither is a piece that is empty or holds whitespace once its marker is removed. Where two ids spell
the same word the lower id keeps it. The rules are those of `nb transplant-embeddings`
(`nbcli.transplant.piece_key`). A word-start piece that is also the first part of longer words (`▁play`
of `▁play ing`) is taken as the word it spells.

**Case rule** (`vector_embedding`): an id's word takes the vector of the same string; failing that, the
vector of its lower-cased form (`str.lower()`; GloVe 6B is lower-cased, so `Berlin` takes `berlin`'s
row). The coverage counts both. With `-t words:...,lower` every word is lower-case already.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcli.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from nbcli.tokenizers import Tokenizer
    from nbcli.transplant import Missing
    from nbcli.vectors.reader import WordVectors


def _is_word_level(tok: Tokenizer) -> bool:
    model = getattr(tok.impl, "model", None)
    return tok.kind == "tokenizer.json" and type(model).__name__ == "WordLevel"


def piece_words(tok: Tokenizer) -> list[str | None]:
    """The whole word each id of `tok` stands for, None where it is none (module docstring)."""
    from nbcli.transplant import piece_key, role_ids, vocabulary_family

    pieces = tok.pieces()
    special = set(tok.special_ids) | set(role_ids(tok).values())
    family = "plain" if _is_word_level(tok) else vocabulary_family(pieces, tok.kind)
    seen: set[str] = set()
    words: list[str | None] = []
    for i, piece in enumerate(pieces):
        word: str | None = None
        if i not in special and piece:
            text, starts = piece_key(piece, family)
            if (starts or family == "plain") and text and not any(c.isspace() for c in text):
                word = text
        if word is not None and word in seen:
            word = None
        if word is not None:
            seen.add(word)
        words.append(word)
    return words


def match_rows(words: list[str | None], index: dict[str, int]) -> tuple[np.ndarray, int]:
    """int64 [V]: the vector row of each id's word by the case rule (-1: none), and how many matched
    only through the lower-cased form."""
    rows = np.full(len(words), -1, dtype=np.int64)
    lowered = 0
    for i, word in enumerate(words):
        if word is None:
            continue
        j = index.get(word)
        if j is None and word.lower() != word:
            j = index.get(word.lower())
            lowered += j is not None
        if j is not None:
            rows[i] = j
    return rows, lowered


def vector_embedding(path: str | os.PathLike[str], tok: Tokenizer, d_model: int, missing: Missing = "xavier",
                     seed: int = 0, unicode_errors: Any = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The [V, d] float32 embedding of `tok`'s vocabulary from the word-vector file `path` (read streamed by
    the one reader, keeping only the vocabulary's words and their lower-cased forms) and its coverage
    report. Rows without a vector (special tokens included) are initialised as `missing` says
    (`nbcli.transplant.fill_missing`; `mean`: the mean of the vectors kept). ConfigError when the
    vectors' dimension is not `d_model` or no word of the vocabulary has a vector. `unicode_errors`: the
    reader's rule for words that are not UTF-8 (`nbcli.vectors.reader`; None: refused in text files)."""
    import torch

    from nbcli.transplant import MISSING, fill_missing
    from nbcli.vectors.reader import read_vectors

    if missing not in MISSING:
        raise ConfigError(f"--missing must be one of {', '.join(MISSING)}, got {missing!r}")
    words = piece_words(tok)
    wanted = {w for w in words if w is not None} | {w.lower() for w in words if w is not None}
    if not wanted:
        raise ConfigError(f"--embedding-init pretrained:{path}: the tokenizer {tok.name} has no whole-word piece "
                          "to match the vectors by")
    wv = read_vectors(path, vocabulary=wanted, unicode_errors=unicode_errors)
    if wv.dim != d_model:
        raise ConfigError(f"--embedding-init pretrained:{wv.path}: the vectors have dimension {wv.dim} but the "
                          f"model's d_model is {d_model} (set --d-model {wv.dim})")
    rows, lowered = match_rows(words, wv.index)
    vectors = torch.from_numpy(wv.vectors)
    out = torch.empty(len(words), d_model, dtype=torch.float32)
    hit = rows >= 0
    out[torch.from_numpy(np.nonzero(hit)[0])] = vectors[torch.from_numpy(rows[hit])]
    miss = np.nonzero(~hit)[0].tolist()
    fill_missing(out, miss, missing, vectors.to(torch.float64).mean(0).to(torch.float32), seed)
    n_words = sum(w is not None for w in words)
    matched = int(hit.sum())
    return out, {"vectors": wv.summary(), "vocabulary": len(words), "words": n_words, "matched": matched,
                 "matched_lowercased": lowered, "matched_fraction": matched / n_words if n_words else 0.0,
                 "initialised": len(miss), "missing": missing}


def restricted(wv: WordVectors, keep: Collection[str] | None, limit: int | None) -> WordVectors:
    """`wv` with only the words in `keep` (None: all), then the first `limit` of them (as the reader's
    `vocabulary` and `limit` do for a file)."""
    from dataclasses import replace

    if keep is None and limit is None:
        return wv
    wanted = None if keep is None else set(keep)
    rows = [i for i, w in enumerate(wv.words) if wanted is None or w in wanted][:limit]
    if not rows:
        raise ConfigError(f"{wv.path}: no word kept (--vocabulary, --limit)")
    words = [wv.words[i] for i in rows]
    return replace(wv, words=words, vectors=wv.vectors[rows], index={w: k for k, w in enumerate(words)})


def checkpoint_vectors(model: Path | str, tokenizer: Path | str | None = None) -> WordVectors:
    """A checkpoint's input embedding (its only matrix, else its `input_embedding` role: the transplant
    reader) as word vectors: the rows of its whole-word ids (`piece_words`), in id order, under
    `tokenizer` (default: the one beside the model, `nbcli.tokenizers.model_tokenizer`). A run
    directory stands for its checkpoint (`nbcli.checkpoint.runs.run_checkpoint`: its best, else its
    last step)."""
    from nbcli.checkpoint.runs import is_run_directory, run_checkpoint
    from nbcli.checkpoint.vocab import check_vocab, tokenizer_vocabulary
    from nbcli.tokenizers import load_tokenizer, model_tokenizer
    from nbcli.transplant import source_embedding
    from nbcli.vectors.reader import WordVectors

    path = Path(model)
    if is_run_directory(path):
        path = run_checkpoint(path)
    rows, name, vocab = source_embedding(path)   # first: a file that is no checkpoint is named as such
    tok = load_tokenizer(tokenizer if tokenizer is not None else model_tokenizer(path))
    check_vocab(tokenizer_vocabulary(tok, f"--tokenizer {tok.path}"), vocab, error=ConfigError)
    words = piece_words(tok)
    ids = [i for i, w in enumerate(words) if w is not None and i < rows.shape[0]]
    if not ids:
        raise ConfigError(f"{path}: the tokenizer {tok.name} has no whole-word piece")
    kept = [words[i] for i in ids]
    matrix = rows[ids].float().numpy()
    return WordVectors(kept, np.ascontiguousarray(matrix), f"{path}:{name}", "checkpoint", None, None, len(words),
                       index={w: k for k, w in enumerate(kept)})  # type: ignore[misc]
