"""SentencePiece unigram models with the default settings: chunks between ASCII spaces, each with
its certificate (`nbcli.tokenizers.certificate`).

With `split_by_whitespace`, `add_dummy_prefix`, `remove_extra_whitespaces` and no piece holding "▁"
after its first character (checked at load), the normalised line is "▁" + its space-delimited
chunks joined by "▁" (`SentencePieceWords`' proof), and every lattice path has a boundary before
each "▁": in exact arithmetic a line's ids are its chunks' ids alone. SentencePiece's Viterbi runs
in float32, so counting trusts a chunk's cached ids inside a line only where the chunk's margin over
its second-best segmentation beats the rounding the line can bring (`nbcli.tokenizers.certificate`,
with the proof); other lines are encoded whole. The chunks are `SentencePieceWords`' byte spans
(never cut inside: the ASCII-pair cuts are a BPE rule).

`certify` encodes new chunks alone and builds each one's lattice as `Model::EncodeOptimized` does
(unigram_model.cc): an edge for every NORMAL piece found at each character position (the trie holds
NORMAL, USER_DEFINED and UNUSED pieces; UNUSED ones are skipped), and a one-character unknown edge
(score min_score - 10) where no one-character piece starts. Pieces are found for a whole batch with
numpy: a polynomial hash of each substring grown one character at a time while it is a prefix of some
piece (by hash; a collision only keeps a candidate alive), every hash hit checked character by
character against the piece. A chunk whose ids hold unknown or byte pieces, or whose lattice holds a
user-defined piece (SentencePiece scores those by length), is never certified.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nbcli.tokenizers.certificate import lattice_margins
from nbcli.tokenizers.segment import flat_ids
from nbcli.tokenizers.sentencepiece import SentencePieceWords, read_model_settings

NORMAL, USER_DEFINED = 1, 4
MAX_CERTIFIED_CHARS = 128  # longer chunks are never certified (their lines are encoded whole)
# Odd multipliers of the substring hash (wraps modulo 2^64): a hash hit is always checked against the
# piece, but two pieces must not share a hash (a lookup finds one of them).
_BASES = tuple(np.uint64(b) for b in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))
UNK_PENALTY = np.float32(10.0)  # kUnkPenalty
_FILTER_MASK = np.uint64((1 << 22) - 1)  # hash filters of 4M entries: prefixes and pieces
_FILTER_SIZE = 1 << 22


class PieceLattice:
    """The pieces of a unigram model as arrays, to build chunks' lattices in batches."""

    def __init__(self, settings: Any, scores: np.ndarray) -> None:
        kinds = np.asarray(settings.piece_types)
        lattice = np.flatnonzero((kinds == NORMAL) | (kinds == USER_DEFINED))
        texts = [settings.pieces[i] for i in lattice.tolist()]
        self.width = max(map(len, texts))
        self.lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        self.chars = np.zeros((len(texts), self.width), dtype=np.uint32)
        flat = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
        rows = np.repeat(np.arange(len(texts)), self.lengths)
        cols = np.arange(flat.shape[0]) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        self.chars[rows, cols] = flat
        self.ids = lattice
        self.char_lengths = np.zeros(len(settings.pieces), dtype=np.int64)  # by id: characters of the piece
        self.char_lengths[lattice] = self.lengths
        self.scores = scores[lattice].astype(np.float64)
        self.user = kinds[lattice] == USER_DEFINED
        normal = scores[kinds == NORMAL]
        self.unk_score = float(np.float32(normal.min()) - UNK_PENALTY) if normal.size else -UNK_PENALTY
        self.score_bound = float(max(abs(self.unk_score), float(np.abs(normal).max()) if normal.size else 0.0))
        for base in _BASES:  # the first multiplier under which no two pieces share a hash
            powers = np.ones(self.width, dtype=np.uint64)
            with np.errstate(over="ignore"):
                for k in range(1, self.width):
                    powers[k] = powers[k - 1] * base
                prefix = np.cumsum(((self.chars.astype(np.uint64) + np.uint64(1)) * powers[None, :]), axis=1,
                                   dtype=np.uint64)
            full = prefix[np.arange(len(texts)), self.lengths - 1]
            if np.unique(full).shape[0] == full.shape[0]:
                break
        else:
            raise ValueError("pieces share a hash under every multiplier")  # never seen: nothing is certified
        self.powers = powers
        self.order = np.argsort(full, kind="stable")
        self.hashes = full[self.order]
        inside = np.arange(self.width)[None, :] < self.lengths[:, None]
        self.prefixes = np.zeros(_FILTER_SIZE, dtype=bool)  # by hash & mask: maybe a prefix of a piece
        self.prefixes[(prefix[inside] & _FILTER_MASK).astype(np.int64)] = True
        self.maybe_piece = np.zeros(_FILTER_SIZE, dtype=bool)  # by hash & mask: maybe a whole piece
        self.maybe_piece[(full & _FILTER_MASK).astype(np.int64)] = True

    def edges(self, codes: np.ndarray, word_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edges of the lattices of words laid out back to back as code points `codes` (position p's
        word ends at `word_end[p]`): (start position, length, index into the pieces)."""
        alive = np.arange(codes.shape[0])
        hashes = np.zeros(codes.shape[0], dtype=np.uint64)
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for length in range(1, self.width + 1):
            keep = alive + length <= word_end[alive]
            alive, hashes = alive[keep], hashes[keep]
            if not alive.size:
                break
            with np.errstate(over="ignore"):
                hashes = hashes + (codes[alive + length - 1].astype(np.uint64) + np.uint64(1)) * self.powers[length - 1]
            low = (hashes & _FILTER_MASK).astype(np.int64)
            maybe = np.flatnonzero(self.maybe_piece[low])
            at = np.minimum(np.searchsorted(self.hashes, hashes[maybe]), self.hashes.shape[0] - 1)
            hit = maybe[self.hashes[at] == hashes[maybe]]
            if hit.size:
                piece = self.order[at[self.hashes[at] == hashes[maybe]]]
                same = self.lengths[piece] == length
                starts = alive[hit]
                for k in range(length):
                    same &= codes[starts + k] == self.chars[piece, k]
                found.append((starts[same], np.full(int(same.sum()), length), piece[same]))
            keep = self.prefixes[low]  # a false positive only keeps a candidate alive
            alive, hashes = alive[keep], hashes[keep]
        if not found:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return tuple(np.concatenate(parts) for parts in zip(*found))  # type: ignore[return-value]


class SentencePieceUnigram(SentencePieceWords):
    """Unigram models: `SentencePieceWords`' chunks, counted line by line under the certificate
    (see the module docstring)."""

    name = "sp-unigram-certified"

    def __init__(self, sp: Any, data: bytes, reason: str) -> None:
        super().__init__(sp, data, reason)
        self._lattice: PieceLattice | None = None
        self._texts: list[str] | None = None
        self._plain: np.ndarray | None = None

    def cut_table(self) -> Any:
        return None  # no cuts inside chunks: the ASCII-pair rule is BPE's

    def prepare(self) -> None:
        super().prepare()
        self.lattice()

    def lattice(self) -> PieceLattice | None:
        """The pieces as arrays (built once); None where they cannot be hashed apart (then no chunk
        is certified and every line is encoded whole)."""
        if self._texts is None:
            settings = read_model_settings(self._data)
            sp = self._sp
            scores = np.asarray([sp.get_score(i) for i in range(sp.get_piece_size())], dtype=np.float32)
            try:
                self._lattice = PieceLattice(settings, scores)
            except ValueError:
                self._lattice = None
            self._texts = list(settings.pieces)
            self._plain = np.asarray(settings.piece_types) == NORMAL  # ids a certified path may hold
        return self._lattice

    @property
    def score_bound(self) -> float:
        """The largest |score| of a lattice edge of a certified chunk (pieces and unknowns)."""
        lattice = self.lattice()
        return 0.0 if lattice is None else lattice.score_bound

    def certify(self, chunks: list[str]) -> tuple[list[list[int]], np.ndarray, np.ndarray, np.ndarray]:
        """Each chunk's ids alone, margin (-inf: never certified), |exact best score| and
        normalised characters (see `nbcli.tokenizers.certificate.lattice_margins`)."""
        lattice = self.lattice()
        assert self._texts is not None and self._plain is not None
        encoded = self._sp.encode(chunks, num_threads=1)
        n = len(chunks)
        if lattice is None:
            return encoded, np.full(n, -np.inf), np.zeros(n), np.zeros(n, dtype=np.int64)
        texts, plain = self._texts, self._plain
        flat, lengths = flat_ids(encoded)
        owner = np.repeat(np.arange(n), lengths)
        clean = np.ones(n, dtype=bool)
        clean[owner[~plain[flat]]] = False
        normalized = ["".join([texts[i] for i in ids]) for ids in encoded]
        chars = np.fromiter(map(len, normalized), dtype=np.int64, count=n)
        clean &= chars <= MAX_CERTIFIED_CHARS
        margin = np.full(n, -np.inf)
        best = np.zeros(n)
        todo = np.flatnonzero(clean & (chars > 0))
        margin[clean & (chars == 0)] = np.inf  # nothing to segment
        if todo.size:
            sub_chars = chars[todo]
            codes = np.frombuffer("".join([normalized[i] for i in todo.tolist()]).encode("utf-32-le"),
                                  dtype=np.uint32)
            base = np.cumsum(sub_chars) - sub_chars
            word_of = np.repeat(np.arange(todo.size), sub_chars)
            start, length, piece = lattice.edges(codes, (base + sub_chars)[word_of])
            # One-character unknown edges where no one-character piece starts.
            single = np.zeros(codes.shape[0], dtype=bool)
            single[start[length == 1]] = True
            unk = np.flatnonzero(~single)
            word = np.concatenate([word_of[start], word_of[unk]])
            local = np.concatenate([start, unk]) - base[word]
            end = local + np.concatenate([length, np.ones(unk.size, dtype=np.int64)])
            score = np.concatenate([lattice.scores[piece], np.full(unk.size, lattice.unk_score)])
            user = np.zeros(todo.size, dtype=bool)
            user[word_of[start[lattice.user[piece]]]] = True
            # The given path: each id's piece, at the running character offset (words back to back);
            # at most one of its pieces starts at a position, and one lattice edge per (start, length).
            chosen = (clean & (chars > 0))[owner]
            ids_flat = flat[chosen]
            id_owner = (np.cumsum(clean & (chars > 0)) - 1)[owner[chosen]]
            piece_len = lattice.char_lengths[ids_flat]
            path_len_at = np.zeros(codes.shape[0] + 1, dtype=np.int64)
            path_len_at[np.cumsum(piece_len) - piece_len] = piece_len
            on_path = path_len_at[base[word] + local] == end - local
            path, sub_margin = lattice_margins(sub_chars, word, local, end, score, on_path)
            found = np.bincount(word[on_path], minlength=todo.size)
            complete = (found == np.bincount(id_owner, minlength=todo.size)) & ~user
            margin[todo] = np.where(complete, sub_margin, -np.inf)
            best[todo] = np.abs(path)
        return encoded, margin, best, chars
