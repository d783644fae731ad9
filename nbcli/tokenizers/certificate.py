"""The per-word certificate of SentencePiece unigram models: pure functions, arrays in,
arrays out.

A unigram model segments a line by Viterbi over the lattice of its normalised text
("▁" + chunks joined by "▁", see `nbcli.tokenizers.unigram`). Every lattice path has a boundary
before each "▁" (no piece holds "▁" after its first character, unknown nodes cover one character),
so in exact arithmetic the line's best path is the concatenation of each chunk's best path alone.
SentencePiece (`Model::EncodeOptimized`, unigram_model.cc) computes it in floats: for each
character position k, `best_path_ends_at[k].best_path_score` is a float32, and each candidate
`score + best_path_score_till_here` (double or float) is compared with that stored float32 with
`>`. A chunk starts from P, the float32 value the line reached before it, and the rounding inside
the chunk depends on |P|: a chunk alone (P = 0) can segment differently (3 lines in 200k,
benchmarks/unigram_chunk_check.py). The certificate says when it cannot.

Proof. Fix a chunk of L normalised characters (its "▁" included) and P. No lattice edge leaves
the chunk, so the DP inside it depends only on P and the chunk. Let E[k] be the exact DP from P
(E[start] = P, E[k] = max over edges (j, k) of E[j] + s) and V[k] the computed one. Suppose every
value the DP handles has magnitude <= B, and let u = ulp32(B) (the float32 spacing at B). At each
k the stored values only increase (a new candidate c replaces s_old only if c > s_old, and
fl32(c) >= s_old since s_old is a float32), so the final V[k] is within u/2 of the largest
candidate, itself within max_j |V[j] - E[j]| of E[k]; candidates computed in float add at most
u/2 more. By induction |V[k] - E[k]| <= (k - start) u <= (L - 1) u before the chunk's last
position. Let p* be the exact best path and `margin` = score(p*) - (best score of any other path of
the chunk). At a position k on p*, reached by edge (j*, k) of p*, any other edge (j', k) ends a
path (best path to j', the edge, p* after k) that is not p*, so E[j'] + s' <= E[k] - margin, while
E[j*] + s* = E[k]. The computed candidates then differ by at least margin - 2(L - 1) u - u (float
candidates), and the edge of p* wins the comparison against a stored float32 (a rounding of u/2
either way) whenever margin > (2L + 1) u. So backtracking inside the chunk follows p*, and the
line's ids are the chunks' ids alone, when every chunk has margin > (2L + 2) u (`THRESHOLD_ULPS`
below, with room for the float64 arithmetic of the margins themselves, which errs by ~2^-52 B).

The bound B for a line: with chunks' exact best scores S_i (all certified, so the exact line DP at
each chunk boundary is the sum of the S_i before it), every exact value inside chunk j is
sum_{i<j} S_i plus the score of a partial path of at most L_j edges, each of magnitude <= `S`
(the model's score bound: the largest |piece score| and |unknown score|). So
M = sum_i |S_i| + max_j L_j * S bounds the exact values; the computed ones stray from them by at
most (line characters) * ulp32(2M) <= M while the line has at most 2^22 characters, so B = 2M.
"""

from __future__ import annotations

import numpy as np

THRESHOLD_ULPS = 2  # margin > (2L + THRESHOLD_ULPS) ulp32(2M) (the proof needs 2L + 1)
MAX_LINE_CHARS = 1 << 22  # longer lines are never certified (the magnitude bound needs it)


def ulp32(x: np.ndarray) -> np.ndarray:
    """An upper bound of the float32 spacing (unit in the last place) of every value of magnitude
    <= x: 2^(e - 24) where x = m 2^e, 0.5 <= m < 1 (float64 in, float64 out)."""
    _, exponent = np.frexp(np.maximum(np.asarray(x, dtype=np.float64), np.finfo(np.float32).tiny))
    return np.ldexp(1.0, exponent - 24)


def certified_lines(margin: np.ndarray, best: np.ndarray, chars: np.ndarray, line_heads: np.ndarray,
                    score_bound: float) -> np.ndarray:
    """Which lines follow their chunks' cached segmentations (see the module docstring).

    `margin`, `best` (|exact best score|), `chars` (normalised characters) are per chunk, chunks of a
    line consecutive; `line_heads` the index of each line's first chunk (every line has one).
    Returns one bool per line."""
    if line_heads.size == 0:
        return np.zeros(0, dtype=bool)
    chars64 = chars.astype(np.float64)
    magnitude = (np.add.reduceat(best.astype(np.float64), line_heads)
                 + np.maximum.reduceat(chars64, line_heads) * score_bound)
    unit = ulp32(2.0 * magnitude)
    line_of = np.repeat(np.arange(line_heads.shape[0]), np.diff(np.append(line_heads, margin.shape[0])))
    passes = margin > (2.0 * chars64 + THRESHOLD_ULPS) * unit[line_of]
    short = np.add.reduceat(chars.astype(np.int64), line_heads) <= MAX_LINE_CHARS
    return np.logical_and.reduceat(passes, line_heads) & short


def lattice_margins(word_chars: np.ndarray, word: np.ndarray, start: np.ndarray, end: np.ndarray,
                    score: np.ndarray, on_path: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact (float64) score of a given path of each word's lattice, and its margin over every
    other path.

    Words have `word_chars` characters; edges go from `start` to `end` (positions
    within their word) with `score`; `on_path` marks the given path's edges. Any path other than
    the given one holds an edge off it, and the best path through edge (i, j) scores
    fwd[i] + s + bwd[j], so the best other path scores the largest of these over edges off the
    path: margin = path score - that (+inf when there is none; <= 0 when the given path is not
    the best). Returns (path score, margin) per word."""
    n_words = word_chars.shape[0]
    base = np.zeros(n_words + 1, dtype=np.int64)
    np.cumsum(word_chars + 1, out=base[1:])
    g_start, g_end = base[word] + start, base[word] + end
    fwd = np.full(base[-1], -np.inf)
    fwd[base[:-1]] = 0.0
    bwd = np.full(base[-1], -np.inf)
    bwd[base[1:] - 1] = 0.0
    score = score.astype(np.float64)
    # Forward: edges by start (fwd[i] is final once the edges ending at i, all starting before, are
    # done); backward: by distance of their end from the word's end.
    for rank, g_from, g_to, table in ((start, g_start, g_end, fwd), (word_chars[word] - end, g_end, g_start, bwd)):
        order = np.argsort(rank.astype(np.int16) if rank.size and rank.max() < 2**15 else rank, kind="stable")
        ranks = rank[order]
        bounds = np.searchsorted(ranks, np.arange(int(ranks[-1]) + 2 if ranks.size else 1))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if lo < hi:
                at = order[lo:hi]
                np.maximum.at(table, g_to[at], table[g_from[at]] + score[at])
    path = np.zeros(n_words)
    np.add.at(path, word[on_path], score[on_path])
    through = np.where(on_path, -np.inf, fwd[g_start] + score + bwd[g_end])
    other = np.full(n_words, -np.inf)
    np.maximum.at(other, word, through)
    with np.errstate(invalid="ignore"):
        margin = np.where(other == -np.inf, np.inf, path - other)
    return path, margin
