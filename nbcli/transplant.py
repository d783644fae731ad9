"""Embedding transplant across vocabularies (paper 002 sec. 3.3, and Dobler & de Melo 2023 for the rest).

Paper 002 sec. 3.3 builds a model's embedding layer from "vectors ... mapped to sub-word tokens found
in the vocabulary of the pre-trained model and our own transformer". Here a target tokenizer's
embedding matrix [V_t, d] is made from a source checkpoint's input embedding [V_s, d]:

* **Matching** (`piece_key`): a piece is compared by its text and whether it starts a word, across
  the space-marker conventions: SentencePiece / Metaspace `▁the`, byte-level BPE `Ġthe` (bytes
  mapped to characters as GPT-2 does; decoded back to text), WordPiece `the` vs continuation
  `##the`. So SentencePiece `▁the` = byte-level `Ġthe` = WordPiece `the`. Special tokens match by
  role (BOS, EOS, padding, unknown, mask), never by spelling. `--min-count K` with target `--counts`
  copies only pieces seen at least K times (paper 002 sec. 5: the vocabulary keeps tokens above a
  minimum frequency); the others are treated as missing.
* **Missing rows** (`fill_missing`): `xavier` U(±sqrt(6/(V_t + d))) (sec. 3.1; seeded by the seed and
  the target tokenizer, `nbcli.seeds`, so two sides' transplants draw apart); `mean` the mean source
  row; `neighbours` the weighted mean of the source rows of the piece's sub-pieces as the source
  tokenizer cuts its text (Dobler & de Melo 2023 initialise non-overlapping tokens as a
  weighted mean of source embeddings; here the neighbours are the piece's own source sub-pieces,
  weighted by their length in characters -- our choice; a piece the source tokenizer cannot cut into
  known non-special pieces falls back to the mean row).
* **Coverage** (`Coverage`): pieces matched of V_t and, with counts, the share of the target
  corpus's token mass that got a copied row.

Pure functions (lists and tensors in, tensors and dataclasses out); `transplant` reads the source
checkpoint through nbcli/checkpoint/reader.py and `write_transplant` writes the result with provenance.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nbcli.errors import CheckpointError, ConfigError
from nbcli.seeds import stream_seed

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.vocab import ModelVocab
    from nbcli.tokenizers import Tokenizer

Missing = Literal["xavier", "mean", "neighbours"]
MISSING = ("xavier", "mean", "neighbours")
FORMAT = "nb-transplant/1"
TENSOR = "tok_emb.weight"
SOURCE_ROW = "transplant.source_row"   # int64 [V_t]: the copied source row, -1 where initialised
Family = Literal["sentencepiece", "byte-level", "wordpiece", "plain"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE vocabularies are spelled in it)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


_BYTE_CHAR = _bytes_to_unicode()
_CHAR_BYTE = {c: b for b, c in _BYTE_CHAR.items()}


def vocabulary_family(pieces: Sequence[str], kind: str) -> Family:
    """How a vocabulary marks word starts: SentencePiece files and Metaspace vocabularies use `▁`,
    byte-level BPE `Ġ` (with every character in GPT-2's byte alphabet), WordPiece `##` continuations."""
    if kind == "sentencepiece":
        return "sentencepiece"
    marked = sum(p.startswith("\u2581") for p in pieces)
    g = sum(p.startswith("\u0120") for p in pieces)
    hashes = sum(p.startswith("##") and len(p) > 2 for p in pieces)
    if g and g >= marked and all(c in _CHAR_BYTE for p in pieces if p.startswith("\u0120") for c in p):
        return "byte-level"
    if marked and marked >= hashes:
        return "sentencepiece"
    if hashes:
        return "wordpiece"
    return "plain"


def piece_key(piece: str, family: Family) -> tuple[str, bool]:
    """(text, starts a word) of a vocabulary piece under `family`'s conventions (module docstring)."""
    if family == "sentencepiece":
        return (piece[1:], True) if piece.startswith("\u2581") else (piece, False)
    if family == "byte-level":
        try:
            text = bytes(_CHAR_BYTE[c] for c in piece).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            return ("\x00" + piece, False)   # part of a UTF-8 sequence: matches only the same byte-level spelling
        return (text[1:], True) if text.startswith(" ") else (text, False)
    if family == "wordpiece":
        return (piece[2:], False) if piece.startswith("##") and len(piece) > 2 else (piece, True)
    return (piece, False)


def role_ids(tok: Tokenizer) -> dict[str, int]:
    roles = {name: i for name, i in (("bos", tok.bos_id), ("eos", tok.eos_id), ("pad", tok.pad_id),
                                     ("unk", tok.unk_id)) if i is not None}
    for i in sorted(tok.special_ids):
        if tok.piece(i) in ("<mask>", "[MASK]"):
            roles["mask"] = i
    return roles


def match_pieces(source: Tokenizer, target: Tokenizer) -> np.ndarray:
    """int64 [V_t]: for each target id the source id with the same (text, word start), special tokens
    by role; -1 where the source has none. Ties (two source pieces with one key) take the lower id."""
    src_pieces, tgt_pieces = source.pieces(), target.pieces()
    src_family = vocabulary_family(src_pieces, source.kind)
    tgt_family = vocabulary_family(tgt_pieces, target.kind)
    src_special = set(source.special_ids) | set(role_ids(source).values())
    tgt_special = set(target.special_ids) | set(role_ids(target).values())
    index: dict[tuple[str, bool], int] = {}
    for i, p in enumerate(src_pieces):
        if i not in src_special and p:
            index.setdefault(piece_key(p, src_family), i)
    out = np.full(len(tgt_pieces), -1, dtype=np.int64)
    for i, p in enumerate(tgt_pieces):
        if i not in tgt_special and p:
            out[i] = index.get(piece_key(p, tgt_family), -1)
    src_roles = role_ids(source)
    for role, i in role_ids(target).items():
        if role in src_roles:
            out[i] = src_roles[role]
    return out


def piece_text(piece: str, family: Family) -> str:
    """The text a piece stands for, with a leading space when it starts a word."""
    text, starts = piece_key(piece, family)
    return (" " + text) if starts else text


def neighbour_rows(target: Tokenizer, source: Tokenizer, ids: Sequence[int]) -> list[list[tuple[int, float]]]:
    """For each target id: the (source id, weight) pairs of its text as the source tokenizer cuts it,
    weight = the sub-piece's length in characters (>= 1); special and unknown sub-pieces dropped."""
    family = vocabulary_family(target.pieces(), target.kind)
    src_family = vocabulary_family(source.pieces(), source.kind)
    skip = set(source.special_ids) | {i for i in (source.unk_id, source.bos_id, source.eos_id) if i is not None}
    texts = [piece_text(target.piece(i), family) for i in ids]
    encoded = source.encode_batch(texts) if texts else []
    out = []
    for sub in encoded:
        pairs = [(j, float(max(1, len(piece_key(source.piece(j), src_family)[0])))) for j in sub if j not in skip]
        out.append(pairs)
    return out


def weighted_mean_rows(rows: torch.Tensor, pairs: Sequence[tuple[int, float]]) -> torch.Tensor | None:
    """sum_j w_j rows[j] / sum_j w_j (float32), or None for an empty list."""
    import torch

    if not pairs:
        return None
    idx = torch.tensor([j for j, _ in pairs], dtype=torch.long)
    w = torch.tensor([w for _, w in pairs], dtype=torch.float64)
    return ((rows[idx].to(torch.float64) * w[:, None]).sum(0) / w.sum()).to(torch.float32)


def xavier_rows(n: int, d: int, vocab: int, seed: int) -> torch.Tensor:
    """n rows of Xavier uniform U(±sqrt(6/(V+d))) for a V x d matrix (paper 002 sec. 3.1), seeded."""
    import torch

    bound = math.sqrt(6.0 / (vocab + d))
    g = torch.Generator().manual_seed(int(seed))
    return (torch.rand(n, d, generator=g, dtype=torch.float64) * 2 - 1).to(torch.float32) * bound


def fill_missing(out: torch.Tensor, miss: Sequence[int], missing: Missing, mean_row: torch.Tensor, seed: int,
                 neighbour_means: Callable[[list[int]], list[torch.Tensor | None]] | None = None) -> int:
    """Initialise the rows `miss` of `out` [V, d] in place as --missing says (module docstring): xavier
    U(+-sqrt(6/(V+d))) seeded, `mean_row`, or each row's `neighbour_means` (None: `mean_row`, counted).
    The one implementation of --missing (transplant-embeddings, nb train --embedding-init pretrained:VECTORS).
    Returns how many neighbour rows fell back to the mean row."""
    import torch

    if missing not in MISSING:
        raise ConfigError(f"--missing must be one of {', '.join(MISSING)}, got {missing!r}")
    if not miss:
        return 0
    V, d = out.shape
    if missing == "xavier":
        out[torch.tensor(list(miss))] = xavier_rows(len(miss), d, V, seed)
        return 0
    if missing == "mean":
        out[torch.tensor(list(miss))] = mean_row
        return 0
    if neighbour_means is None:
        raise ConfigError("--missing neighbours averages a piece's source sub-pieces (transplant-embeddings); "
                          "rows without a source tokenizer take xavier or mean")
    fallbacks = 0
    for i, row in zip(miss, neighbour_means(list(miss))):
        if row is None:
            fallbacks += 1
            row = mean_row
        out[i] = row
    return fallbacks


@dataclass
class Coverage:
    """How much of the target vocabulary got a copied row."""

    target_pieces: int
    matched: int
    matched_fraction: float
    initialised: int
    neighbour_fallbacks: int          # `neighbours` rows that fell back to the mean row
    dropped_below_min_count: int      # matched pieces not copied because count < --min-count
    mass_matched: float | None        # share of the target counts' token mass with a copied row
    counts_total: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def transplant_rows(source_rows: torch.Tensor, source: Tokenizer, target: Tokenizer, missing: Missing,
                    seed: int = 0, counts: np.ndarray | None = None, min_count: int = 0,
                    ) -> tuple[torch.Tensor, np.ndarray, Coverage]:
    """The target embedding [V_t, d] (float32), the copied source row per target id (-1: initialised)
    and the coverage report. `counts` [V_t] are target-corpus unigram counts (nb counts format).
    --missing xavier rows come from the stream of (seed, the target tokenizer's sha256) (`nbcli.seeds`)."""
    import torch

    if missing not in MISSING:
        raise ConfigError(f"--missing must be one of {', '.join(MISSING)}, got {missing!r}")
    if source_rows.ndim != 2 or source_rows.shape[0] < source.vocab_size:
        raise CheckpointError(f"source embedding has shape {list(source_rows.shape)}, fewer rows than the source "
                              f"tokenizer's {source.vocab_size} pieces (wrong --source-tokenizer?)")
    if counts is not None and counts.shape[0] < target.vocab_size:
        raise ConfigError(f"--counts has {counts.shape[0]} entries for the target tokenizer's {target.vocab_size} "
                          "pieces (counts of another tokenizer?)")
    rows = source_rows.to(torch.float32)
    V, d = target.vocab_size, rows.shape[1]
    match = match_pieces(source, target)
    dropped = 0
    if counts is not None and min_count > 0:
        low = (match >= 0) & (counts[:V] < min_count)
        low[list(i for i in role_ids(target).values())] = False        # specials stay copied
        dropped = int(low.sum())
        match[low] = -1
    out = torch.empty(V, d, dtype=torch.float32)
    hit = match >= 0
    hit_ids = torch.from_numpy(np.nonzero(hit)[0])
    out[hit_ids] = rows[torch.from_numpy(match[hit])]
    miss = np.nonzero(~hit)[0].tolist()
    mean_row = rows[:source.vocab_size].to(torch.float64).mean(0).to(torch.float32)
    # its own stream per target vocabulary (nbcli.seeds): two sides' transplants with one --seed draw apart
    fill_seed = stream_seed(seed, "transplant_embedding", target.sha256, "missing")
    fallbacks = fill_missing(out, miss, missing, mean_row, fill_seed, lambda ids: [
        weighted_mean_rows(rows, pairs) for pairs in neighbour_rows(target, source, ids)])
    mass = total = None
    if counts is not None:
        c = counts[:V].astype(np.float64)
        total = int(c.sum())
        mass = float(c[hit].sum() / total) if total else None
    coverage = Coverage(target_pieces=V, matched=int(hit.sum()), matched_fraction=float(hit.mean()) if V else 0.0,
                        initialised=len(miss), neighbour_fallbacks=fallbacks, dropped_below_min_count=dropped,
                        mass_matched=mass, counts_total=total)
    return out, match, coverage


def source_embedding(path: Path) -> tuple[torch.Tensor, str, ModelVocab]:
    """(rows, tensor name, the checkpoint's vocabulary for nb's one policy) of a checkpoint's input
    embedding (its only matrix, else the `input_embedding` role of the detected architecture)."""
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.checkpoint.roles import resolve_roles
    from nbcli.checkpoint.vocab import model_vocab

    with open_checkpoint(path) as ckpt:
        matrices = [n for n in ckpt.names() if len(ckpt.shape(n)) == 2]
        name = matrices[0] if len(matrices) == 1 else resolve_roles(ckpt).require(
            "input_embedding", "transplant-embeddings")
        rows = ckpt.get_float(name)
        return rows, name, model_vocab(ckpt, int(rows.shape[0]))


def write_transplant(output: Path, emb: torch.Tensor, match: np.ndarray, provenance: dict[str, Any],
                     target: Tokenizer | None = None) -> None:
    """OUT.safetensors: `tok_emb.weight` [V_t, d] (the file's only matrix, so `nb train --embedding-init
    pretrained:OUT` takes it) and `transplant.source_row` [V_t]; metadata nb.format, nb.provenance and
    the target tokenizer whose ids index the rows (nb.tokenizer_sha256, nb.tokenizer_fingerprint)."""
    import torch

    from nbcli.checkpoint.writer import save_tensors
    from nbcli.tokenizers.identity import identity_metadata

    save_tensors(output, {TENSOR: emb.contiguous(), SOURCE_ROW: torch.from_numpy(match.astype(np.int64))},
                 {"nb.format": FORMAT, "nb.provenance": json.dumps(provenance, sort_keys=True),
                  **(identity_metadata(target) if target is not None else {})})


@dataclass
class TransplantResult:
    output: Path
    source_tensor: str
    shape: list[int]
    coverage: Coverage
    standardised: dict[str, Any] | None
    provenance: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "tensor": TENSOR, "source_tensor": self.source_tensor,
                "shape": self.shape, "coverage": self.coverage.as_dict(), "standardised": self.standardised,
                "provenance": self.provenance, "warnings": self.warnings}


def transplant(source_ckpt: Path, source_tokenizer: Path, target_tokenizer: Path, output: Path, *,
               missing: Missing = "xavier", counts_path: Path | None = None, min_count: int = 0,
               standardise: str | None = None, seed: int = 0, allow_vocab_mismatch: bool = False) -> TransplantResult:
    """`nb transplant-embeddings`: read, match, fill, optionally standardise (surgery.standardise_to,
    paper 002 eq. 1 / eq. 4), write atomically. Inputs are only read. The counts are checked against
    the target tokenizer and the source tokenizer against the source checkpoint by nb's one policy
    (nbcli.checkpoint.vocab; `allow_vocab_mismatch` relaxes its identity rule only)."""
    from nbcli.checkpoint.vocab import ModelVocab, check_vocab, fit_counts, tokenizer_vocabulary, with_tokenizer
    from nbcli.errors import TokenizerError
    from nbcli.checkpoint.reader import checkpoint_file
    from nbcli.outputs import guard_outputs
    from nbcli.provenance import sha256_file, tool_version, utc_now
    from nbcli.resolve import hub_records
    from nbcli.surgery import parse_standardise, standardise_to
    from nbcli.tokenizers import load_tokenizer, tokenizer_files

    if min_count < 0:
        raise ConfigError(f"--min-count must be >= 0, got {min_count}")
    if min_count > 0 and counts_path is None:
        raise ConfigError("--min-count needs --counts (target-corpus counts from nb count-unigrams)")
    spec = parse_standardise(standardise) if standardise else None
    source_ckpt = checkpoint_file(source_ckpt)  # a repo id names its snapshot's file (nbcli.resolve)
    match_file = spec.match_file if spec is not None else None
    guard_outputs([output], [source_ckpt, *tokenizer_files(source_tokenizer), *tokenizer_files(target_tokenizer),
                   counts_path, match_file])
    source = load_tokenizer(source_tokenizer)
    target = load_tokenizer(target_tokenizer)
    counts, warnings = None, []
    if counts_path is not None:
        target_vocab = with_tokenizer(ModelVocab(target.vocab_size, label=f"--target-tokenizer {target_tokenizer}"),
                                      target, f"--target-tokenizer {target_tokenizer}")
        fitted = fit_counts(counts_path, target_vocab, allow_mismatch=allow_vocab_mismatch)
        counts, warnings = fitted.counts, fitted.warnings
    rows, name, source_vocab = source_embedding(Path(source_ckpt))
    warnings += check_vocab(tokenizer_vocabulary(source, f"--source-tokenizer {source_tokenizer}"), source_vocab,
                            allow_mismatch=allow_vocab_mismatch, error=TokenizerError).warnings
    emb, match, coverage = transplant_rows(rows, source, target, missing, seed, counts, min_count)
    standardised = None
    if spec is not None:
        emb = standardise_to(emb, spec)
        standardised = spec.describe()
    provenance = {
        "tool": "nb transplant-embeddings", "version": tool_version(), "created": utc_now(),
        "source_checkpoint": {"path": str(source_ckpt), "sha256": sha256_file(source_ckpt), "tensor": name},
        "source_tokenizer": {"path": str(source_tokenizer), "sha256": source.sha256, "fingerprint": source.fingerprint},
        "target_tokenizer": {"path": str(target_tokenizer), "sha256": target.sha256, "fingerprint": target.fingerprint},
        "counts": None if counts_path is None else {"path": str(counts_path), "sha256": sha256_file(counts_path)},
        "options": {"missing": missing, "min_count": min_count, "standardise": standardise, "seed": seed},
        "coverage": coverage.as_dict(),
        "hub": hub_records([source_ckpt, source.path, target.path]),  # repo id + commit of Hub inputs
    }
    write_transplant(output, emb, match, provenance, target)
    return TransplantResult(output=output, source_tensor=name, shape=list(emb.shape), coverage=coverage,
                            standardised=standardised, provenance=provenance, warnings=warnings)
